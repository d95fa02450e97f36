// `cuprof insights TRACE|DIR`: findings ranked by what they could save, for
// one trace or the ranks of a job.
#pragma once

#include "common.hpp"

#include <string>
#include <vector>

namespace cuprof::cli {

inline const char* insights_about =
    "usage: cuprof insights TRACE [--kernels N] [--format text|csv|json]\n"
    "\n"
    "Reads the trace the way the PyTorch profiling articles teach, and reports:\n"
    "  - a summary: the three findings that could save the most\n"
    "  - the verdict: overhead-bound, compute-bound or mixed, from three signals (Self\n"
    "    CPU vs Self CUDA, GPU idle share of the window, launch-to-start), with its rule\n"
    "  - findings ranked by estimated saving, each with what it costs (a share of GPU\n"
    "    time, CPU time or the window) and how the saving was estimated: chains of\n"
    "    elementwise kernels worth fusing, memsets/memcpys right before GEMMs, kernels\n"
    "    whose time varies step to step, a cold first step where CPU time matters,\n"
    "    the GPU waiting for launches, occupancy queries, dominant synchronizations,\n"
    "    cudaMalloc/cudaFree in the steady loop, copies from pageable memory, and with\n"
    "    memory recorded: memory not freed by the end (per scope) and the peak,\n"
    "    CUPTI overhead, dropped records\n"
    "  - the GPU kernels by time, with what their names say\n"
    "Each finding gives its numbers and where it is (step, scope, lane, ts in the file's us).\n"
    "TRACE - reads standard input.\n"
    "\n"
    "DIR (or several traces): one trace per rank of a multi-GPU job (distributedInfo's rank;\n"
    "files that are no trace skipped, a line each). Per rank: time in NCCL collectives by kind,\n"
    "the communication no compute kernel hides (exposed) and HTA's comm/comp overlap; the\n"
    "straggler: the rank that reaches the matched collectives last (the k-th of a kind on each\n"
    "rank is one collective), its lateness per step and the others' waiting; each host's clock\n"
    "offset from the collectives' end times, with its precision, subtracted before matching.\n"
    "\n";

inline const command_options insights_command_options = {
    {"kernels", "N", "list at most N kernel names (default 15)"},
    {"format", "F",
     "text (default), csv (the verdict, then the findings) or json (verdict, totals, findings, kernels; times in us)"},
};

inline int insights_command(const invocation& c) {
  const auto& [args, out, err, plan, term] = c;
  const parsed p = parse(args, 2, insights_command_options, "insights");
  if (p.positional.empty()) throw usage_error("missing the TRACE file (or a directory of rank traces)", "insights");
  const output_format format = format_of(p, "insights");
  std::size_t kernel_rows = 15;
  if (const std::string* k = option(p, "kernels")) {
    const long v = rows_value(*k, "insights");
    kernel_rows = v < 0 ? std::size_t(-1) : std::size_t(v);
  }
  std::vector<loaded_trace> traces = load_traces(p.positional, term, err, "insights");
  if (traces.size() > 1) {
    rank_insights_output(traces, analyze_ranks(traces), format, out);
    return exit_ok;
  }
  const loaded_trace lt = std::move(traces.front());
  insights_options o;
  o.base_ns = lt.base_ns;
  const insights in = analyze(lt.t, o);
  if (format == output_format::text) {
    out += "cuprof insights: " + describe(lt) + "\n\n";
    out += format_insights(in, kernel_rows);
    return exit_ok;
  }
  record_table findings;
  findings.columns = {"kind", "headline", "details", "where", "cause", "cost_us", "cost_of", "cost_pct", "saving_us", "estimate"};
  if (format == output_format::csv)  // the verdict is the CSV's first line item: its signals as details, its rule as estimate
    findings.rows.push_back({str("verdict"), str(verdict_name(in.verdict)), str(in.verdict_signals), str(""),
                             str(in.verdict_reason), real(NAN), str(""), real(NAN), real(NAN), str(in.verdict_rule)});
  for (const finding& f : in.findings)
    findings.rows.push_back({str(f.kind), str(f.headline), str(joined(f.details)), str(f.where), str(f.cause), us(f.cost_ns),
                             str(cost_base_name(f.cost_of)), real(f.cost_share * 100.0), us(f.saving_ns), str(f.estimate)});
  if (format == output_format::csv) {
    out += to_csv(findings);
    return exit_ok;
  }
  std::vector<const kernel_summary*> ks;
  for (const kernel_summary& k : in.kernels) ks.push_back(&k);
  std::stable_sort(ks.begin(), ks.end(),
                   [](const kernel_summary* a, const kernel_summary* b) { return a->duration.total_ns > b->duration.total_ns; });
  if (ks.size() > kernel_rows) ks.resize(kernel_rows);
  record_table kernels;
  kernels.columns = {"name",
                     "calls",
                     "total_us",
                     "median_us",
                     "max_us",
                     "launch_to_start_median_us",
                     "what_it_says",
                     "achieved_flops_per_s",
                     "achieved_bytes_per_s",
                     "pct_of_peak",
                     "peak_basis",
                     "peak_note"};
  for (const kernel_summary* k : ks) {
    const activity_throughput& r = k->throughput;
    const bool known = r.amount > 0, flops = r.what == activity_throughput::measure::flops;
    kernels.rows.push_back({str(k->name), num(k->duration.count), us(k->duration.total_ns), us(k->duration.median_ns),
                            us(k->duration.max_ns), k->launch_to_start.count ? us(k->launch_to_start.median_ns) : real(NAN),
                            str(k->decoded.recognised() ? k->decoded.summary() : ""), real(known && flops ? r.per_second() : NAN),
                            real(known && !flops ? r.per_second() : NAN), real(known ? r.percent_of_peak() : NAN),
                            str(known ? r.peak.basis : ""), str(known ? above_peak_note(r) : "")});
  }
  json_writer j;
  write_source(j, lt);
  j.field("verdict", str(verdict_name(in.verdict)))
      .field("reason", str(in.verdict_reason))
      .field("rule", str(in.verdict_rule))
      .field("signals", str(in.verdict_signals))
      .field("cpu_only", flag(in.cpu_only))
      .field("window_us", us(in.window_end_ns - in.window_start_ns))
      .field("gpu_busy_us", us(in.gpu_busy_ns))
      .field("gpu_idle_pct", real(in.gpu_idle_share * 100.0))
      .field("launch_to_start_median_us", in.launch_to_start.count ? us(in.launch_to_start.median_ns) : real(NAN))
      .field("launch_call_median_us", in.launch_to_start.count ? us(in.launch_call_median_ns) : real(NAN));
  write_totals(j, in.totals());
  j.field("summary", in.summary).field("findings", findings).field("kernels", kernels);
  out += j.text();
  return exit_ok;
}

}  // namespace cuprof::cli
