// Comparing two traces (cuprof/analysis.hpp, "Diff").
#include <cuprof/analysis.hpp>

#include "text_format.hpp"
#include <cuprof/base/text.hpp>
#include <cuprof/model/api_vocabulary.hpp>
#include <cuprof/model/event.hpp>
#include <cuprof/output/key_averages.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace cuprof {

namespace detail {

std::size_t steps_in(const trace& t) {
  std::size_t n = 0;
  for (const cpu_span& s : t.spans) n += s.is_step ? 1 : 0;
  return n;
}

namespace {

void field(std::vector<std::string>& out, const char* what, const std::string& a, const std::string& b) {
  if (a != b) out.push_back(std::string(what) + " " + (a.empty() ? "-" : a) + " -> " + (b.empty() ? "-" : b));
}

std::vector<std::string> differences(const kernel_name_info& a, const kernel_name_info& b) {
  std::vector<std::string> d;
  field(d, "library", a.library, b.library);
  field(d, "arch", a.arch, b.arch);
  field(d, "dtype", a.dtype(), b.dtype());
  field(d, "accumulate", a.accumulate, b.accumulate);
  field(d, "output", a.output, b.output);
  field(d, "instruction", a.instruction, b.instruction);
  field(d, "tile", a.tile(), b.tile());
  field(d, "stages", a.stages ? std::to_string(a.stages) : "", b.stages ? std::to_string(b.stages) : "");
  field(d, "cluster", a.cluster, b.cluster);
  field(d, "schedule", a.schedule, b.schedule);
  field(d, "epilogue", a.epilogue, b.epilogue);
  field(d, "split-K", a.split_k, b.split_k);
  field(d, "layout", a.layout, b.layout);
  field(d, "alignment", a.alignment ? std::to_string(a.alignment) : "", b.alignment ? std::to_string(b.alignment) : "");
  field(d, "ops", a.op, b.op);
  return d;
}

}  // namespace

}  // namespace detail

std::size_t trace_diff::count(change_status s, bool gemms_only) const {
  std::size_t n = 0;
  for (const gpu_work_change& c : gpu)
    if (c.status == s && (!gemms_only || c.decoded.is_gemm())) ++n;
  return n;
}

trace_diff diff_traces(const trace& a, const trace& b) {
  using namespace detail;
  trace_diff d;
  const event_averages ka = key_averages(a), kb = key_averages(b);
  d.totals_a = ka.totals();
  d.totals_b = kb.totals();
  d.steps_a = steps_in(a);
  d.steps_b = steps_in(b);

  std::vector<gpu_work_change> same, removed, added;
  for (const event_average& r : ka.rows()) {
    if (r.kind != row_kind::gpu_work) continue;
    gpu_work_change c;
    c.name = r.key;
    c.calls_a = r.count;
    c.total_a_ns = r.self_cuda_ns;
    c.decoded = decode_kernel_name(r.key);
    if (const event_average* o = kb.find(r.key, row_kind::gpu_work)) {
      c.calls_b = o->count;
      c.total_b_ns = o->self_cuda_ns;
      same.push_back(std::move(c));
    } else {
      c.status = change_status::removed;
      removed.push_back(std::move(c));
    }
  }
  for (const event_average& r : kb.rows()) {
    if (r.kind != row_kind::gpu_work || ka.find(r.key, row_kind::gpu_work)) continue;
    gpu_work_change c;
    c.name = r.key;
    c.status = change_status::added;
    c.calls_b = r.count;
    c.total_b_ns = r.self_cuda_ns;
    c.decoded = decode_kernel_name(r.key);
    added.push_back(std::move(c));
  }
  const auto by_a = [](const gpu_work_change& x, const gpu_work_change& y) { return x.total_a_ns > y.total_a_ns; };
  std::stable_sort(same.begin(), same.end(), by_a);
  std::stable_sort(removed.begin(), removed.end(), by_a);
  std::stable_sort(added.begin(), added.end(),
                   [](const gpu_work_change& x, const gpu_work_change& y) { return x.total_b_ns > y.total_b_ns; });
  for (auto* v : {&same, &removed, &added})
    for (gpu_work_change& c : *v) d.gpu.push_back(std::move(c));

  // A removed and an added kernel of the same library and kind: a different branch of the dispatcher.
  for (const gpu_work_change& r : d.gpu) {
    if (r.status != change_status::removed || !r.decoded.recognised() || r.decoded.library.empty()) continue;
    for (const gpu_work_change& n : d.gpu) {
      if (n.status != change_status::added || n.decoded.library != r.decoded.library || n.decoded.category != r.decoded.category)
        continue;
      kernel_swap s;
      s.from = r.name;
      s.to = n.name;
      s.differences = differences(r.decoded, n.decoded);
      d.swaps.push_back(std::move(s));
    }
  }

  // By name in first-occurrence order, A's first; then by the larger time.
  const auto changes = [&](auto selects, std::uint64_t event_average::*time) {
    std::map<std::string, count_change> by_name;
    std::vector<std::string> order;
    for (const event_averages* k : {&ka, &kb}) {
      for (const event_average& r : k->rows()) {
        if (!selects(r)) continue;
        auto [it, inserted] = by_name.try_emplace(r.key);
        if (inserted) order.push_back(r.key);
        count_change& c = it->second;
        c.name = r.key;
        (k == &ka ? c.calls_a : c.calls_b) += r.count;
        (k == &ka ? c.total_a_ns : c.total_b_ns) += r.*time;
      }
    }
    std::vector<count_change> v;
    for (const std::string& n : order) v.push_back(by_name[n]);
    std::stable_sort(v.begin(), v.end(), [](const count_change& x, const count_change& y) {
      return std::max(x.total_a_ns, x.total_b_ns) > std::max(y.total_a_ns, y.total_b_ns);
    });
    return v;
  };
  d.api = changes([](const event_average& r) { return r.kind == row_kind::cuda_api; }, &event_average::cpu_total_ns);
  d.cpu = changes(
      [](const event_average& r) {
        return r.kind == row_kind::cpu_scope || (r.kind == row_kind::cuda_api && !is_cpu_blocking_synchronization(r.key));
      },
      &event_average::self_cpu_ns);
  for (const event_average& r : ka.rows())
    if (r.kind == row_kind::cpu_scope && !kb.find(r.key, row_kind::cpu_scope)) d.scopes_only_a.push_back(r.key);
  for (const event_average& r : kb.rows())
    if (r.kind == row_kind::cpu_scope && !ka.find(r.key, row_kind::cpu_scope)) d.scopes_only_b.push_back(r.key);
  return d;
}

std::string format_diff(const trace_diff& d, std::size_t max_rows) {
  using namespace detail;
  std::string out;
  char line[256];
  const std::size_t same = d.count(change_status::same), removed = d.count(change_status::removed),
                    added = d.count(change_status::added);
  out += "GPU work: " + std::to_string(same) + " same, " + std::to_string(removed) + " only in A (removed), " +
         std::to_string(added) + " only in B (added)\n";
  std::size_t shown = 0;
  for (const gpu_work_change& c : d.gpu) {
    if (shown++ >= max_rows) {
      out += "  ... " + std::to_string(d.gpu.size() - max_rows) + " more\n";
      break;
    }
    constexpr std::size_t name_column = 68;
    if (c.status == change_status::same) {
      std::snprintf(line, sizeof line, "  same     %4llu -> %llu calls, %s -> %s per call (%s)",
                    static_cast<unsigned long long>(c.calls_a), static_cast<unsigned long long>(c.calls_b),
                    us_text(c.avg_a_ns()).c_str(), us_text(c.avg_b_ns()).c_str(),
                    signed_percent_text(c.avg_a_ns(), c.avg_b_ns()).c_str());
    } else {
      const bool was = c.status == change_status::removed;
      std::snprintf(line, sizeof line, "  %-8s %4llu calls, %s total, %s per call", was ? "removed" : "added",
                    static_cast<unsigned long long>(was ? c.calls_a : c.calls_b),
                    us_text(double(was ? c.total_a_ns : c.total_b_ns)).c_str(),
                    us_text(was ? c.avg_a_ns() : c.avg_b_ns()).c_str());
    }
    std::string text = line;
    text.append(text.size() < name_column ? name_column - text.size() : 2, ' ');
    out += text + detail::display_name(c.name, 100) + "\n";
    if (c.decoded.recognised() && c.decoded.category != kernel_category::other)
      out += std::string(name_column, ' ') + "= " + detail::terminal_safe(c.decoded.summary()) + "\n";
  }
  for (const kernel_swap& s : d.swaps) {
    out += "  changed kernel: " + detail::display_name(s.from, 70) + " -> " + detail::display_name(s.to, 70) + "\n";
    std::string diffs;
    for (const std::string& x : s.differences) diffs += (diffs.empty() ? "" : "; ") + detail::terminal_safe(x);
    out += "    " + (diffs.empty() ? std::string("same decoded fields, different name") : diffs) + "\n";
  }

  out += "\n";
  const auto total_line = [&](const std::string& what, std::uint64_t a, std::uint64_t b) {
    out +=
        what + ": " + us_text(double(a)) + " -> " + us_text(double(b)) + " (" + signed_percent_text(double(a), double(b)) + ")";
    if (d.per_step()) out += "; per step " + us_text(d.per_step_a(a)) + " -> " + us_text(d.per_step_b(b));
    out += "\n";
  };
  const time_totals &ta = d.totals_a, &tb = d.totals_b;
  total_line("GPU time (Self CUDA time total)", ta.self_cuda_ns, tb.self_cuda_ns);
  total_line("CPU time (Self CPU time total without synchronize calls)", ta.cpu_ns(), tb.cpu_ns());
  total_line("Sync time (in synchronize calls: the CPU waiting for the GPU)", ta.sync_ns, tb.sync_ns);
  if (d.per_step()) out += "(" + std::to_string(d.steps_a) + " and " + std::to_string(d.steps_b) + " steps)\n";
  if (!d.api.empty()) {
    std::uint64_t ca = 0, cb = 0, ta = 0, tb = 0;
    for (const count_change& c : d.api) ca += c.calls_a, cb += c.calls_b, ta += c.total_a_ns, tb += c.total_b_ns;
    out += "CUDA API calls: " + std::to_string(ca) + " -> " + std::to_string(cb) + ", " + us_text(double(ta)) + " -> " +
           us_text(double(tb)) + " on the CPU\n";
    shown = 0;
    for (const count_change& c : d.api) {
      if (shown++ >= max_rows) break;
      std::snprintf(line, sizeof line, "  %4llu -> %llu calls, %s -> %s", static_cast<unsigned long long>(c.calls_a),
                    static_cast<unsigned long long>(c.calls_b), us_text(double(c.total_a_ns)).c_str(),
                    us_text(double(c.total_b_ns)).c_str());
      std::string text = line;
      text.append(text.size() < 44 ? 44 - text.size() : 2, ' ');
      out += text + detail::terminal_safe(c.name) + "\n";
    }
  }
  const auto list = [&](const std::vector<std::string>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size() && i < max_rows; ++i) s += (i ? ", " : "") + detail::display_name(v[i], 60);
    if (v.size() > max_rows) s += ", ...";
    return s;
  };
  if (!d.scopes_only_a.empty()) out += "CPU scopes/ops only in A: " + list(d.scopes_only_a) + "\n";
  if (!d.scopes_only_b.empty()) out += "CPU scopes/ops only in B: " + list(d.scopes_only_b) + "\n";

  // The reading of it.
  out += "\nSummary: ";
  const std::size_t gemms_same = d.count(change_status::same, true), gemms_removed = d.count(change_status::removed, true),
                    gemms_added = d.count(change_status::added, true);
  std::string s;
  if (gemms_same && !gemms_removed && !gemms_added)
    s += "the GEMMs are unchanged (" + std::to_string(gemms_same) + " GEMM kernel name" + (gemms_same == 1 ? "" : "s") +
         " in both: the GPU does the same matrix math)";
  else if (gemms_removed || gemms_added)
    s += std::to_string(gemms_removed) + " GEMM kernel" + (gemms_removed == 1 ? "" : "s") + " only in A and " +
         std::to_string(gemms_added) + " only in B: the dispatcher picked different GEMMs (shape, dtype or layout changed)";
  const std::size_t other_removed = removed - gemms_removed, other_added = added - gemms_added;
  if (other_removed || other_added) {
    if (!s.empty()) s += "; ";
    s += std::to_string(other_removed) + " other kernel" + (other_removed == 1 ? "" : "s") + " removed and " +
         std::to_string(other_added) + " added";
    if (other_removed > other_added) s += " (fewer launches: fusion)";
  }
  if (s.empty()) s = same ? "the same GPU work in both" : "no GPU work to compare";
  s += ". GPU time " + signed_percent_text(double(ta.self_cuda_ns), double(tb.self_cuda_ns)) + ", CPU time " +
       signed_percent_text(double(ta.cpu_ns()), double(tb.cpu_ns())) + ", sync time " +
       signed_percent_text(double(ta.sync_ns), double(tb.sync_ns)) + ".";
  out += s + "\n";
  return out;
}

diff_gate check_growth(const trace_diff& d, diff_metric metric, double threshold_pct, std::size_t max_items) {
  diff_gate g;
  g.metric = metric;
  g.threshold_pct = threshold_pct;
  const bool gpu = metric == diff_metric::gpu;
  g.a_ns = d.per_step_a(gpu ? d.totals_a.self_cuda_ns : d.totals_a.cpu_ns());
  g.b_ns = d.per_step_b(gpu ? d.totals_b.self_cuda_ns : d.totals_b.cpu_ns());
  g.failed = g.growth_pct() > threshold_pct;
  const auto consider = [&](const std::string& name, std::uint64_t a, std::uint64_t b) {
    const double pa = d.per_step_a(a), pb = d.per_step_b(b);
    if (pb > pa) g.grew_most.push_back({name, pa, pb});
  };
  if (gpu) {
    for (const gpu_work_change& c : d.gpu) consider(c.name, c.total_a_ns, c.total_b_ns);
  } else {
    for (const count_change& c : d.cpu) consider(c.name, c.total_a_ns, c.total_b_ns);
  }
  std::stable_sort(g.grew_most.begin(), g.grew_most.end(),
                   [](const growth& x, const growth& y) { return x.b_ns - x.a_ns > y.b_ns - y.a_ns; });
  if (g.grew_most.size() > max_items) g.grew_most.resize(max_items);
  return g;
}

std::string gate_blocker(const trace& a, const trace& b, const trace_diff& d, diff_metric metric) {
  const struct {
    const char* name;
    const trace& t;
    const time_totals& totals;
  } sides[] = {{"A", a, d.totals_a}, {"B", b, d.totals_b}};
  const auto off = [](const char* name, const trace& t) {
    return std::string(name) + " says CUDA tracing was off (" + t.meta.cuda_status + ")";
  };
  for (const auto& side : sides) {
    if (metric == diff_metric::gpu && !side.t.meta.cuda_status.empty()) return off(side.name, side.t);
    if (metric == diff_metric::gpu && side.totals.self_cuda_ns == 0)
      return std::string(side.name) + " has no GPU time (no kernels, copies or memsets recorded)";
    if (metric == diff_metric::cpu && side.totals.cpu_ns() == 0)
      return std::string(side.name) + " has no CPU time (no scopes, ops or CUDA calls recorded)";
  }
  if (metric == diff_metric::cpu && a.meta.cuda_status.empty() != b.meta.cuda_status.empty()) {
    const bool a_off = !a.meta.cuda_status.empty();
    return off(a_off ? "A" : "B", a_off ? a : b) + " and " + (a_off ? "B" : "A") +
           "'s was on: time in synchronize calls is CPU time in one only";
  }
  return {};
}

std::string format_gate(const trace_diff& d, const diff_gate& g) {
  using namespace detail;
  const std::string what = g.metric == diff_metric::gpu ? "GPU time" : "CPU time";
  const std::string per = d.per_step() ? " per step" : " (totals: not both traces have steps)";
  char threshold[32];
  std::snprintf(threshold, sizeof threshold, "%g%%", g.threshold_pct);
  std::string out = "\nGate: " + what + per + " " + us_text(g.a_ns) + " -> " + us_text(g.b_ns) + " (" +
                    signed_percent_text(g.a_ns, g.b_ns) +
                    "): " + (g.failed ? "FAILED, it grew by more than " : "passed, within ") + threshold + "\n";
  if (g.grew_most.empty()) return out;
  out += std::string("  grew most (") + (g.metric == diff_metric::gpu ? "GPU work" : "CPU scopes, ops and CUDA calls") + "):\n";
  for (const growth& x : g.grew_most) {
    std::string text = "  +" + us_text(x.b_ns - x.a_ns) + " (" + us_text(x.a_ns) + " -> " + us_text(x.b_ns) + ")";
    text.append(text.size() < 44 ? 44 - text.size() : 2, ' ');
    out += text + display_name(x.name, 100) + "\n";
  }
  return out;
}

}  // namespace cuprof
