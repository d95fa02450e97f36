// Insights as text: the report `cuprof insights` prints, the summary lines,
// and the names of verdicts and cost bases. Headlines, details and places
// quote names from the trace: printed terminal-safe.
#include "../text_format.hpp"
#include "context.hpp"

#include <cuprof/base/text.hpp>

#include <algorithm>
#include <cstdio>

namespace cuprof {

const char* verdict_name(bound_verdict v) {
  switch (v) {
    case bound_verdict::overhead_bound: return "overhead-bound";
    case bound_verdict::compute_bound: return "compute-bound";
    case bound_verdict::mixed: return "mixed";
    default: return "no GPU work";
  }
}

const char* cost_base_name(cost_base b) {
  switch (b) {
    case cost_base::gpu_time: return "GPU time";
    case cost_base::cpu_time: return "CPU time";
    case cost_base::window: return "the window";
    default: return "";
  }
}

std::string detail::insight_rules::summary_line(const finding& f) {
  return "[" + f.kind + "] " + f.headline + "; " + percent_text(f.cost_share) + " of " + cost_base_name(f.cost_of) +
         ", could save ~" + us_text(f.saving_ns) + " (" + f.estimate + ")";
}

std::string detail::insight_rules::summary_block(const std::vector<std::string>& summary) {
  if (summary.empty()) return {};
  std::string out = "Summary (the largest estimated savings)\n";
  for (std::size_t i = 0; i < summary.size(); ++i) out += "  " + std::to_string(i + 1) + ". " + terminal_safe(summary[i]) + "\n";
  return out + "\n";
}

std::string throughput_text(const activity_throughput& r) {
  const bool flops = r.what == activity_throughput::measure::flops;
  std::string text = detail::format_rate(r.per_second(), flops ? "FLOP/s" : "B/s") + " achieved";
  if (r.peak.value > 0) {
    text += ", " + detail::fixed_text(r.percent_of_peak(), 1) + "% of the peak (" + r.peak.basis + ")";
    const std::string note = above_peak_note(r);
    return note.empty() ? text : text + "; " + note;
  }
  return text + "; " + r.peak.basis;
}

std::string format_insights(const insights& in, std::size_t kernel_rows) {
  using namespace detail;
  using insight_rules::ts_text;
  std::string out = insight_rules::summary_block(in.summary);
  out += "Verdict: ";
  out += verdict_name(in.verdict);
  out += "\n";
  if (!in.verdict_signals.empty()) out += "  signals: " + terminal_safe(in.verdict_signals) + "\n";
  if (!in.verdict_rule.empty()) out += "  rule: " + in.verdict_rule + "\n";
  out += "  " + terminal_safe(in.verdict_reason) + "\n";
  if (in.window_end_ns > in.window_start_ns)
    out += "  active window " + ts_text(in, in.window_start_ns) + " .. " + ts_text(in, in.window_end_ns) + " (" +
           us_text(in.window_ns()) + "), GPU busy " + us_text(in.gpu_busy_ns) + "; Self CPU time total " +
           us_text(in.self_cpu_ns) + ", Self CUDA time total " + us_text(in.self_cuda_ns) + "\n";
  out += "\nFindings";
  if (in.findings.empty()) out += ": none\n";
  else out += ", by estimated saving\n";
  for (std::size_t i = 0; i < in.findings.size(); ++i) {
    const finding& f = in.findings[i];
    out += "  " + std::to_string(i + 1) + ". [" + f.kind + "] " + terminal_safe(f.headline) + "\n";
    if (f.cost_of != cost_base::none)
      out += "       costs " + us_text(f.cost_ns) + " (" + percent_text(f.cost_share) + " of " + cost_base_name(f.cost_of) +
             "); could save " + (f.saving_ns ? "~" + us_text(f.saving_ns) : std::string("nothing")) + ": " + f.estimate + "\n";
    for (const std::string& d : f.details) out += "       " + terminal_safe(d) + "\n";
    if (!f.where.empty()) out += "       where: " + terminal_safe(f.where) + "\n";
  }
  if (!in.kernels.empty()) {
    std::vector<const kernel_summary*> ks;
    for (const kernel_summary& k : in.kernels) ks.push_back(&k);
    std::stable_sort(ks.begin(), ks.end(), [](const kernel_summary* a, const kernel_summary* b) {
      return a->duration.total_ns > b->duration.total_ns;
    });
    out += "\nGPU work by name\n";
    char line[200];
    std::snprintf(line, sizeof line, "  %12s %6s %12s %12s %12s  %s\n", "total", "calls", "median", "max", "launch>start",
                  "name (and what it says)");
    out += line;
    for (std::size_t i = 0; i < ks.size() && i < kernel_rows; ++i) {
      const kernel_summary& k = *ks[i];
      std::snprintf(line, sizeof line, "  %12s %6llu %12s %12s %12s  ", us_text(k.duration.total_ns).c_str(),
                    static_cast<unsigned long long>(k.duration.count), us_text(k.duration.median_ns).c_str(),
                    us_text(k.duration.max_ns).c_str(),
                    k.launch_to_start.count ? us_text(k.launch_to_start.median_ns).c_str() : "-");
      out += line + display_name(k.name, 100) + "\n";
      if (k.decoded.recognised()) out += std::string(62, ' ') + "= " + terminal_safe(k.decoded.summary()) + "\n";
      if (k.throughput.amount > 0) out += std::string(62, ' ') + "= " + throughput_text(k.throughput) + "\n";
      if (k.counters.samples > 0)
        out += std::string(62, ' ') + "= " + insight_rules::counters_text(k.counters, insight_rules::counter_bound::none, true) +
               "\n";
    }
    if (ks.size() > kernel_rows) out += "  ... " + std::to_string(ks.size() - kernel_rows) + " more\n";
  }
  return out;
}

}  // namespace cuprof
