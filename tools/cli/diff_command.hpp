// `cuprof diff A B`: what changed between two traces, and a CI gate on the
// time per step.
#pragma once

#include "common.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

namespace cuprof::cli {

inline const char* diff_about =
    "usage: cuprof diff A B [--rows N] [--fail-above PCT [--metric gpu|cpu]]\n"
    "                       [--format text|csv|json]\n"
    "\n"
    "Compares two traces (say eager vs compiled, unfused vs fused): which GPU kernels\n"
    "are the same (same name: the same math), removed or added, each kernel's time per\n"
    "call A -> B, what changed in a GEMM's name (tile, layout, dtype...), GPU time, CPU\n"
    "time and sync time (in synchronize calls: the CPU waiting, not counted as CPU time),\n"
    "CUDA API calls, and CPU scopes/ops present in only one. One of A and B may be -,\n"
    "standard input.\n"
    "\n";

inline const command_options diff_command_options = {
    {"rows", "N", "at most N rows per list (default 30)"},
    {"fail-above", "PCT",
     "a CI gate: exit 3 when B's GPU time per step grew by more than PCT percent over A's, naming the kernels that grew most; "
     "exit 0 otherwise. Per step: divided by the ProfilerStep#N count of each trace when both have steps, else the totals. The "
     "gate fails closed: exit 2 when either trace lacks what the metric needs (GPU time, CPU time) or says CUDA tracing was off "
     "(for cpu: in one of them only), with a line saying why."},
    {"metric", "M",
     "gpu (default: Self CUDA time) or cpu (Self CPU time without synchronize calls; names the scopes, ops and calls that grew "
     "most)"},
    {"format", "F", "text (default), csv (the GPU work list) or json (everything)"},
};

// --fail-above's percentage: a number from 0 up, "5" or "5%".
inline double percent_value(std::string text) {
  if (!text.empty() && text.back() == '%') text.pop_back();
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || text.find_first_not_of("0123456789.") != std::string::npos || *end != '\0' || v > 1e6)
    throw usage_error("--fail-above wants a percentage from 0 up (5 or 5%), not '" + text + "'", "diff");
  return v;
}

inline int diff_command(const invocation& c) {
  const auto& [args, out, err, plan, term] = c;
  const parsed p = parse(args, 2, diff_command_options, "diff");
  if (p.positional.size() != 2)
    throw usage_error(p.positional.size() < 2 ? "diff needs two trace files, A and B" : "diff takes two trace files", "diff");
  if (p.positional[0] == "-" && p.positional[1] == "-")
    throw usage_error("standard input (-) can be only one of A and B", "diff");
  const output_format format = format_of(p, "diff");
  std::size_t rows = 30;
  if (const std::string* r = option(p, "rows")) {
    const long v = rows_value(*r, "diff");
    rows = v < 0 ? std::size_t(-1) : std::size_t(v);
  }
  const std::string* fail_above = option(p, "fail-above");
  const std::string* metric_name = option(p, "metric");
  if (metric_name && !fail_above) throw usage_error("--metric chooses what --fail-above compares: give both", "diff");
  if (metric_name && *metric_name != "gpu" && *metric_name != "cpu")
    throw usage_error("--metric takes gpu or cpu, not '" + *metric_name + "'", "diff");
  const double threshold = fail_above ? percent_value(*fail_above) : 0.0;
  const diff_metric metric = metric_name && *metric_name == "cpu" ? diff_metric::cpu : diff_metric::gpu;

  const loaded_trace a = load(p.positional[0], term, "diff");
  const loaded_trace b = load(p.positional[1], term, "diff");
  const trace_diff d = diff_traces(a.t, b.t);
  if (fail_above) {
    // A CI gate fails closed: a trace without what it compares would pass as -100%.
    if (const std::string why = gate_blocker(a.t, b.t, d, metric); !why.empty()) {
      err += std::string("cuprof: --fail-above cannot compare ") + (metric == diff_metric::gpu ? "GPU" : "CPU") +
             " time: " + detail::terminal_safe(why) + "\n";
      return exit_cannot_compare;
    }
  }
  std::optional<diff_gate> gate;
  if (fail_above) gate = check_growth(d, metric, threshold);
  if (gate && gate->failed) {
    char line[160];
    std::snprintf(line, sizeof line, "cuprof: %s%s grew by more than --fail-above %g%% from A to B (%s)\n",
                  metric == diff_metric::gpu ? "GPU time" : "CPU time", d.per_step() ? " per step" : "", threshold,
                  detail::signed_percent_text(gate->a_ns, gate->b_ns).c_str());
    err += line;
  }
  const int rc = gate && gate->failed ? exit_grew : exit_ok;
  if (format == output_format::text) {
    out += "A: " + describe(a) + "\nB: " + describe(b) + "\n\n";
    out += format_diff(d, rows);
    if (gate) out += format_gate(d, *gate);
    return rc;
  }

  record_table gpu;
  gpu.columns = {"status",     "name",     "calls_a",  "calls_b",        "total_a_us",
                 "total_b_us", "avg_a_us", "avg_b_us", "avg_change_pct", "what_it_says"};
  for (std::size_t i = 0; i < d.gpu.size() && i < rows; ++i) {
    const gpu_work_change& c = d.gpu[i];
    const bool same = c.status == change_status::same;
    gpu.rows.push_back({str(same                                 ? "same"
                            : c.status == change_status::removed ? "removed"
                                                                 : "added"),
                        str(c.name), num(c.calls_a), num(c.calls_b), us(c.total_a_ns), us(c.total_b_ns),
                        real(c.avg_a_ns() / 1000.0), real(c.avg_b_ns() / 1000.0),
                        real(same && c.avg_a_ns() > 0 ? (c.avg_b_ns() - c.avg_a_ns()) * 100.0 / c.avg_a_ns() : NAN),
                        str(c.decoded.recognised() ? c.decoded.summary() : "")});
  }
  if (format == output_format::csv) {
    out += to_csv(gpu);
    return rc;
  }
  json_writer j;
  for (const auto& [key, lt, totals] : {std::tuple{"a", &a, &d.totals_a}, std::tuple{"b", &b, &d.totals_b}}) {
    j.open(key);
    write_source(j, *lt);
    write_totals(j, *totals);
    j.close();
  }
  j.field("per_step", flag(d.per_step())).field("gpu", gpu);
  record_table swaps;
  swaps.columns = {"from", "to", "differences"};
  for (const kernel_swap& s : d.swaps) swaps.rows.push_back({str(s.from), str(s.to), str(joined(s.differences))});
  record_table api;
  api.columns = {"name", "calls_a", "calls_b", "total_a_us", "total_b_us"};
  for (std::size_t i = 0; i < d.api.size() && i < rows; ++i) {
    const count_change& c = d.api[i];
    api.rows.push_back({str(c.name), num(c.calls_a), num(c.calls_b), us(c.total_a_ns), us(c.total_b_ns)});
  }
  j.field("swaps", swaps).field("api", api).field("scopes_only_a", d.scopes_only_a).field("scopes_only_b", d.scopes_only_b);
  if (gate) {
    record_table grew;
    grew.columns = {"name", "a_us", "b_us"};
    for (const growth& g : gate->grew_most) grew.rows.push_back({str(g.name), real(g.a_ns / 1000.0), real(g.b_ns / 1000.0)});
    j.open("gate")
        .field("metric", str(metric == diff_metric::gpu ? "gpu" : "cpu"))
        .field("threshold_pct", real(threshold))
        .field("a_us", real(gate->a_ns / 1000.0))
        .field("b_us", real(gate->b_ns / 1000.0))
        .field("growth_pct", real(gate->growth_pct()))
        .field("failed", flag(gate->failed))
        .field("grew_most", grew)
        .close();
  }
  out += j.text();
  return rc;
}

}  // namespace cuprof::cli
