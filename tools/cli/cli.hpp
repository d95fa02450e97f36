// The `cuprof` command: table, insights and diff for cuprof and torch.profiler
// traces. Everything but main() lives here so the test suite can run it in
// process. Exit status: 0 success, 1 unreadable or malformed input, 2 bad
// usage (or `diff --fail-above` given traces it cannot compare), 3 `diff
// --fail-above`: B grew by more than allowed.
#pragma once

#include <cuprof/base/config.hpp>
#include <cuprof/base/env.hpp>
#include <cuprof/analysis.hpp>
#include <cuprof/base/error.hpp>
#include <cuprof/cuprof.hpp>
#include <cuprof/output/folded_stacks.hpp>
#include <cuprof/runtime/windows/capture_range.hpp>
#include <cuprof/runtime/windows/slow_steps.hpp>

#include "ranks.hpp"
#include "report.hpp"
#include "run_command.hpp"
#include "terminal.hpp"
#include "trigger_command.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace cuprof::cli {

constexpr int exit_ok = 0;
constexpr int exit_input = 1;
constexpr int exit_usage = 2;
constexpr int exit_cannot_compare = 2;  // diff --fail-above: a trace lacks what the metric compares
constexpr int exit_grew = 3;

// What main() knows of where the output goes. The tests' in-process runs,
// like pipes and files, have no terminal: their output is the same on every machine.
struct terminal {
  std::size_t stdout_columns = 0;  // stdout's width when it is a terminal: tables fit it (0: torch's width)
  int progress_fd = -1;            // stderr when it is a terminal: the progress of reads over a second
  int live_fd = -1;                // stdout, for a command that waits (trigger): its lines as they come; -1: into out
};

inline const char* main_help =
    "usage: cuprof <command> [options]\n"
    "\n"
    "Reads Chrome traces written by cuprof or by torch.profiler (.json or .json.gz;\n"
    "- reads standard input).\n"
    "\n"
    "commands:\n"
    "  table TRACE [--sort KEY] [--rows N] [--group-by args] [--stats] [--kernels] [--wide]\n"
    "                      the key_averages().table() of the trace, in torch's layout\n"
    "  insights TRACE|DIR  findings ranked by what they could save: the verdict (overhead-\n"
    "                      or compute-bound), fusable elementwise chains, copies before\n"
    "                      GEMMs, step-to-step variation, cold start, launches, syncs,\n"
    "                      allocations in the loop, pageable copies, memory not freed\n"
    "                      (DIR, or several traces: one per rank; the straggler, exposed\n"
    "                      communication, clock offsets between hosts)\n"
    "  stacks TRACE [--metric M]\n"
    "                      the CUDA calls' stacks (with_stack) in flamegraph.pl's folded format\n"
    "  diff A B [--fail-above PCT [--metric gpu|cpu]]\n"
    "                      same/removed/added kernels, per-kernel time change, CPU and sync\n"
    "                      time change; a CI gate on GPU or CPU time per step\n"
    "  run [OPTIONS] -- PROGRAM [ARGS...]\n"
    "                      trace an unmodified CUDA program (trace and table at its exit)\n"
    "  trigger PID [--duration S | --steps N] [--output PATH]\n"
    "                      a trace window now from a process running under cuprof run or\n"
    "                      CUPROF_TRACE; trigger --list: the processes that accept one\n"
    "  help [COMMAND]      this text, or a command's\n"
    "\n"
    "options: --help on every command; --format text|csv|json for table, insights, diff;\n"
    "--version\n"
    "exit status: 0 ok, 1 unreadable or malformed trace, 2 bad usage or traces\n"
    "diff --fail-above cannot compare, 3 diff --fail-above: B grew by more than PCT\n";

inline const char* table_help =
    "usage: cuprof table TRACE [--sort KEY] [--rows N] [--group-by args] [--stats] [--kernels] [--wide]\n"
    "                          [--metrics] [--format text|csv|json]\n"
    "\n"
    "Prints the trace's table as torch.profiler's key_averages().table() prints it:\n"
    "scopes and ops, CUDA runtime/driver calls, kernels/memcpys/memsets, and each\n"
    "scope's extent on the GPU, with Self/total CPU and CUDA time and # of Calls.\n"
    "TRACE - reads standard input.\n"
    "\n"
    "A directory (or several traces) of one trace per rank: a row per rank instead, with its\n"
    "GPU time, compute, time in NCCL collectives, the part no compute hides (exposed), HTA's\n"
    "comm/comp overlap, the time it waited for the last rank, and its collectives by kind.\n"
    "\n"
    "  --sort KEY   cpu_time, cuda_time, cpu_time_total, cuda_time_total,\n"
    "               self_cpu_time_total, self_cuda_time_total (device_ spellings too),\n"
    "               count, or none (first-occurrence order); where the trace has memory\n"
    "               figures (profile_memory), torch's self_cuda_memory_usage,\n"
    "               cuda_memory_usage, self_cpu_memory_usage and cpu_memory_usage.\n"
    "               Default: cuda_time_total, or cpu_time_total without GPU time.\n"
    "  --rows N     at most N rows (default 100, torch's); -1 or all: every row\n"
    "  --group-by G name (default: torch's rows) or args: a row per scope name and arguments\n"
    "               (CUPROF_SCOPE's args; a torch op's input shapes, with record_shapes=True),\n"
    "               shown in an Args column\n"
    "  --group-by-stack N\n"
    "               a row per CUDA call or GPU work name and the first N frames of its call\n"
    "               stack (traces recorded with_stack), shown in a Source Location column\n"
    "  --stats      add per-call CPU and CUDA min, median, p95 and max columns\n"
    "  --kernels    add a column with what each kernel's name says (GEMM tile, dtype, layout...)\n"
    "  --metrics    add the GPU hardware metrics' averages over each row's GPU work (SM, DRAM\n"
    "               and tensor pipe throughput, achieved occupancy, in % of peak), where the\n"
    "               trace has them (sampled while it was recorded)\n"
    "  --wide       on a terminal, do not narrow the Name column to the window's width\n"
    "  --format F   text (default), csv (the rows) or json (rows and totals; times in us)\n";

inline const char* insights_help =
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
    "\n"
    "  --kernels N  list at most N kernel names (default 15)\n"
    "  --format F   text (default), csv (the verdict, then the findings) or json (verdict,\n"
    "               totals, findings, kernels; times in us)\n";

inline const char* diff_help =
    "usage: cuprof diff A B [--rows N] [--fail-above PCT [--metric gpu|cpu]]\n"
    "                       [--format text|csv|json]\n"
    "\n"
    "Compares two traces (say eager vs compiled, unfused vs fused): which GPU kernels\n"
    "are the same (same name: the same math), removed or added, each kernel's time per\n"
    "call A -> B, what changed in a GEMM's name (tile, layout, dtype...), GPU time, CPU\n"
    "time and sync time (in synchronize calls: the CPU waiting, not counted as CPU time),\n"
    "CUDA API calls, and CPU scopes/ops present in only one. One of A and B may be -,\n"
    "standard input.\n"
    "\n"
    "  --rows N          at most N rows per list (default 30)\n"
    "  --fail-above PCT  a CI gate: exit 3 when B's GPU time per step grew by more than\n"
    "                    PCT percent over A's, naming the kernels that grew most; exit 0\n"
    "                    otherwise. Per step: divided by the ProfilerStep#N count of each\n"
    "                    trace when both have steps, else the totals. The gate fails\n"
    "                    closed: exit 2 when either trace lacks what the metric needs\n"
    "                    (GPU time, CPU time) or says CUDA tracing was off (for cpu:\n"
    "                    in one of them only), with a line saying why.\n"
    "  --metric M        gpu (default: Self CUDA time) or cpu (Self CPU time without\n"
    "                    synchronize calls; names the scopes, ops and calls that grew most)\n"
    "  --format F        text (default), csv (the GPU work list) or json (everything)\n";

inline const char* stacks_help =
    "usage: cuprof stacks TRACE [--metric M]\n"
    "\n"
    "Prints the native call stacks of the trace's CUDA calls (recorded with with_stack,\n"
    "CUPROF_STACKS=1 or cuprof run --stacks) in the folded format of flamegraph.pl and\n"
    "speedscope, as torch's export_stacks writes it: a line per stack, frames root first\n"
    "joined by ';', then a value in microseconds. TRACE - reads standard input.\n"
    "\n"
    "  --metric M   self_cuda_time_total (default; self_device_time_total too): the GPU\n"
    "               time of the work launched from each stack; self_cpu_time_total: the\n"
    "               CUDA calls' own CPU time\n";

inline const char* help_of(const std::string& command) {
  if (command == "table") return table_help;
  if (command == "stacks") return stacks_help;
  if (command == "insights") return insights_help;
  if (command == "diff") return diff_help;
  if (command == "run") return run_help;
  if (command == "trigger") return trigger_help;
  return nullptr;
}

// --help or -h anywhere among a command's own arguments (before "--", after
// which words are a program's, or files named so) wins over everything else
// on the line, so that it works whatever else was typed.
inline bool asks_for_help(const std::vector<std::string>& args) {
  for (std::size_t i = 2; i < args.size() && args[i] != "--"; ++i)
    if (args[i] == "--help" || args[i] == "-h") return true;
  return false;
}

struct usage_error : std::exception {
  std::string message, command;
  usage_error(std::string m, std::string c) : message(std::move(m)), command(std::move(c)) {}
  const char* what() const noexcept override { return message.c_str(); }
};

struct parsed {
  std::vector<std::string> positional;
  std::vector<std::pair<std::string, std::string>> options;  // name (without --), value ("" for flags)
};

// `valued` lists the options that take a value (as "--name VALUE" or "--name=VALUE").
inline parsed parse(const std::vector<std::string>& args, std::size_t from, const std::vector<std::string>& valued,
                    const std::vector<std::string>& flags, const std::string& command) {
  parsed p;
  bool options_done = false;
  for (std::size_t i = from; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (options_done || a.size() < 2 || a[0] != '-' || a == "-") {
      p.positional.push_back(a);
      continue;
    }
    if (a == "--") {
      options_done = true;
      continue;
    }
    std::string name = a.substr(a[1] == '-' ? 2 : 1), value;
    const std::size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (std::find(valued.begin(), valued.end(), name) != valued.end()) {
      if (!inline_value) {
        if (i + 1 >= args.size()) throw usage_error("option --" + name + " needs a value", command);
        value = args[++i];
      }
      p.options.emplace_back(name, value);
    } else if (std::find(flags.begin(), flags.end(), name) != flags.end() && !inline_value) {
      p.options.emplace_back(name, "");
    } else {
      throw usage_error("unknown option '" + a + "'", command);
    }
  }
  return p;
}

inline const std::string* option(const parsed& p, const std::string& name) {
  const std::string* v = nullptr;
  for (const auto& o : p.options)
    if (o.first == name) v = &o.second;  // the last one wins
  return v;
}

inline long rows_value(const std::string& text, const std::string& command) {
  if (text == "all") return -1;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || *end != '\0' || v < -1 || v > 100000000)
    throw usage_error("--rows wants a number of rows (-1 or all for every row), not '" + text + "'", command);
  return v;
}

inline output_format format_of(const parsed& p, const std::string& command) {
  const std::string* f = option(p, "format");
  if (!f || *f == "text") return output_format::text;
  if (*f == "csv") return output_format::csv;
  if (*f == "json") return output_format::json;
  throw usage_error("--format takes text, csv or json, not '" + *f + "'", command);
}

// A trace named on the command line; "-" is standard input (JSON or gzip, as a file).
inline loaded_trace load(const std::string& path, const terminal& term, const std::string& command) {
  const bool standard_input = path == "-";
  if (standard_input && ::isatty(STDIN_FILENO))
    throw usage_error("- reads the trace from standard input, which is a terminal: pipe a trace in", command);
  std::optional<progress_line> progress;
  if (term.progress_fd >= 0) progress.emplace(term.progress_fd, standard_input ? "standard input" : path);
  const read_progress hook = progress ? progress->hook() : read_progress{};
  return standard_input ? read_trace_stream(stdin, "<stdin>", hook) : read_trace_file(path, hook);
}

// The traces named on the command line, directories replaced by their traces
// (expand_inputs). A file found in a directory that is no trace is skipped
// with a line on `err`; a directory without a trace is an error.
inline std::vector<loaded_trace> load_traces(const std::vector<std::string>& positional, const terminal& term, std::string& err,
                                             const std::string& command) {
  if (std::count(positional.begin(), positional.end(), "-") > 1)
    throw usage_error("standard input (-) can be given once", command);
  const trace_inputs in = expand_inputs(positional, err);
  std::vector<loaded_trace> traces;
  for (std::size_t i = 0; i < in.paths.size(); ++i) {
    if (!in.from_directory[i]) {
      traces.push_back(load(in.paths[i], term, command));
      continue;
    }
    try {
      traces.push_back(load(in.paths[i], term, command));
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {  // cuprof::error's message names the file
      err += "cuprof: skipped: " + detail::terminal_safe(detail::message_of(e)) + "\n";
    }
  }
  // Values no metric can take were left out of every average and verdict (gpu_metric_series::add): said, counted.
  for (const loaded_trace& lt : traces) {
    std::uint64_t out_of_range = 0;
    for (const detail::gpu_metric_series& s : lt.t.gpu_metrics) out_of_range += s.out_of_range;
    if (out_of_range)
      err += "cuprof: " + detail::terminal_safe(lt.source) + ": " + std::to_string(out_of_range) + " GPU metric value" +
             (out_of_range == 1 ? "" : "s") +
             " no metric can take (a percentage outside 0-105, a negative value, not a number) left out\n";
  }
  if (traces.empty()) {
    std::string dirs;
    for (const std::string& p : positional) dirs += (dirs.empty() ? "" : ", ") + p;
    throw error(dirs + ": no trace in the directory (a .json or .json.gz Chrome trace, one per rank)");
  }
  return traces;
}

inline std::string describe(const loaded_trace& lt) {
  const std::size_t steps = detail::steps_in(lt.t);
  std::string s = detail::terminal_safe(lt.source) + " (" + trace_format_name(lt.format) + ", " +
                  std::to_string(lt.t.spans.size()) + " scopes/ops, " + std::to_string(lt.t.api_calls.size()) + " CUDA calls, " +
                  std::to_string(lt.t.gpu.size()) + " GPU records";
  if (steps) s += ", " + std::to_string(steps) + " steps";
  return s + ")";
}

// What every JSON report says of a trace it read, and the time totals, alike
// in table, insights and diff.
inline void write_source(json_writer& j, const loaded_trace& lt) {
  j.field("source", str(lt.source))
      .field("format", str(trace_format_name(lt.format)))
      .field("steps", num(detail::steps_in(lt.t)));
}

inline void write_totals(json_writer& j, const time_totals& t) {
  j.open("totals")
      .field("self_cpu_us", us(t.self_cpu_ns))
      .field("cpu_us", us(t.cpu_ns()))
      .field("sync_us", us(t.sync_ns))
      .field("self_cuda_us", us(t.self_cuda_ns))
      .close();
}

inline const char* row_kind_name(row_kind k) {
  switch (k) {
    case row_kind::cpu_scope: return "cpu_scope";
    case row_kind::cuda_api: return "cuda_api";
    case row_kind::gpu_work: return "gpu_work";
    default: return "gpu_annotation";
  }
}

// The table's rows and columns, as table() prints them (percentages null where it prints NaN).
inline record_table table_records(const event_averages& avg, const table_options& o) {
  record_table t;
  t.columns = {"name",          "kind",       "calls",        "self_cpu_us",   "self_cpu_pct",  "cpu_total_us",
               "cpu_total_pct", "cpu_avg_us", "self_cuda_us", "self_cuda_pct", "cuda_total_us", "cuda_avg_us"};
  if (o.stats)
    for (const char* c : {"cpu_min_us", "cpu_median_us", "cpu_p95_us", "cpu_max_us", "cuda_min_us", "cuda_median_us",
                          "cuda_p95_us", "cuda_max_us"})
      t.columns.emplace_back(c);
  const bool has_args = std::any_of(avg.rows().begin(), avg.rows().end(), [](const event_average& r) { return !r.args.empty(); });
  if (has_args) t.columns.insert(t.columns.begin() + 3, "args");
  if (avg.has_memory())  // torch's memory columns, in bytes
    for (const char* c : {"cpu_memory_bytes", "self_cpu_memory_bytes", "cuda_memory_bytes", "self_cuda_memory_bytes"})
      t.columns.emplace_back(c);
  // GPU metrics: each label's kernel average (null where the row has none), and the kernels sampled.
  const bool metrics = o.metrics && !avg.metric_labels().empty();
  if (metrics) {
    t.columns.insert(t.columns.end(), avg.metric_labels().begin(), avg.metric_labels().end());
    t.columns.emplace_back("sampled");
  }
  if (o.describe_kernel) t.columns.emplace_back("kernel");
  const double total_cpu = double(avg.self_cpu_time_total_ns()), total_cuda = double(avg.self_cuda_time_total_ns());
  const auto pct = [](double part, double total) { return real(total ? part * 100.0 / total : NAN); };
  for (const event_average* r : avg.sorted_rows(o.sort_by, o.row_limit)) {
    std::vector<cell> row = {str(r->key),
                             str(row_kind_name(r->kind)),
                             num(r->count),
                             us(r->self_cpu_ns),
                             pct(double(r->self_cpu_ns), total_cpu),
                             us(r->cpu_total_ns),
                             pct(double(r->cpu_total_ns), total_cpu),
                             real(r->cpu_time_avg_ns() / 1000.0),
                             us(r->self_cuda_ns),
                             pct(double(r->self_cuda_ns), total_cuda),
                             us(r->cuda_total_ns),
                             real(r->cuda_time_avg_ns() / 1000.0)};
    if (has_args) row.insert(row.begin() + 3, str(r->args));
    if (o.stats) {
      const auto add = [&](const distribution& d, bool any) {
        for (std::uint64_t v : {d.min_ns, d.median_ns, d.p95_ns, d.max_ns}) row.push_back(any ? us(v) : real(NAN));
      };
      add(r->cpu_distribution(), r->cpu_total_ns > 0);
      add(r->cuda_distribution(), r->cuda_total_ns > 0);
    }
    if (avg.has_memory())
      for (std::int64_t v : {r->cpu_memory, r->self_cpu_memory, r->cuda_memory, r->self_cuda_memory})
        row.push_back(signed_num(v));
    if (metrics) {
      for (std::size_t m = 0; m < avg.metric_labels().size(); ++m)
        row.push_back(real(m < r->metrics.size() ? r->metrics[m] : NAN));
      row.push_back(r->metrics.empty() ? real(NAN) : num(r->sampled));
    }
    if (o.describe_kernel) row.push_back(str(r->kind == row_kind::gpu_work ? o.describe_kernel(r->key) : ""));
    t.rows.push_back(std::move(row));
  }
  return t;
}

inline int table_command(const std::vector<std::string>& args, std::string& out, std::string& err, const terminal& term) {
  const parsed p = parse(args, 2, {"sort", "sort_by", "rows", "row_limit", "format", "group-by", "group-by-stack"},
                         {"stats", "kernels", "metrics", "wide"}, "table");
  if (p.positional.empty()) throw usage_error("missing the TRACE file (or a directory of rank traces)", "table");
  const output_format format = format_of(p, "table");
  table_options o;
  o.row_limit = 100;
  const std::string* sort = option(p, "sort");
  if (!sort) sort = option(p, "sort_by");
  const std::string* rows = option(p, "rows");
  if (!rows) rows = option(p, "row_limit");
  if (rows) o.row_limit = int(rows_value(*rows, "table"));
  if (sort && *sort != "none") {
    try {
      (void)detail::find_sort_key(*sort);
    } catch (const error& e) {
      throw usage_error(detail::message_of(e), "table");
    }
  }
  group_by grouping = group_by::name;
  if (const std::string* g = option(p, "group-by")) {
    if (*g == "args") grouping = group_by::args;
    else if (*g != "name") throw usage_error("--group-by takes name or args, not '" + *g + "'", "table");
  }
  int stack_frames = 0;
  if (const std::string* n = option(p, "group-by-stack")) {
    if (n->empty() || n->size() > 4 || n->find_first_not_of("0123456789") != std::string::npos)
      throw usage_error("--group-by-stack wants a number of frames, not '" + *n + "'", "table");
    stack_frames = std::stoi(*n);
  }
  o.stats = option(p, "stats") != nullptr;
  o.metrics = option(p, "metrics") != nullptr;
  if (option(p, "kernels")) o.describe_kernel = compact_kernel_name;
  if (!option(p, "wide")) o.line_width = term.stdout_columns;
  std::vector<loaded_trace> traces = load_traces(p.positional, term, err, "table");
  if (traces.size() > 1) {
    rank_table_output(traces, analyze_ranks(traces), format, out);
    return exit_ok;
  }
  const loaded_trace lt = std::move(traces.front());
  const event_averages avg = key_averages(lt.t, grouping, stack_frames);
  if (stack_frames > 0 && lt.t.stacks.empty())
    err += "cuprof: " + detail::terminal_safe(lt.source) + ": no call stacks in the trace (record it with with_stack)\n";
  if (o.metrics && lt.t.gpu_metrics.empty())
    err += "cuprof: " + detail::terminal_safe(lt.source) +
           ": no GPU hardware metrics in the trace (recorded without metric sampling): no metric columns\n";
  if (sort) o.sort_by = *sort == "none" ? std::string() : *sort;
  else o.sort_by = avg.self_cuda_time_total_ns() > 0 ? "cuda_time_total" : "cpu_time_total";
  if (avg.rows().empty())
    err += "cuprof: " + detail::terminal_safe(lt.source) + ": no scopes, CUDA calls or GPU work in the trace\n";
  if (format == output_format::text) {
    out += avg.table(o);
    if (is_cpu_only(lt.t)) out += std::string("Note: ") + cpu_only_note + "\n";
  } else if (format == output_format::csv) {
    out += to_csv(table_records(avg, o));
  } else {
    json_writer j;
    write_source(j, lt);
    j.field("sort", str(o.sort_by));
    write_totals(j, avg.totals());
    j.field("rows", table_records(avg, o));
    out += j.text();
  }
  return exit_ok;
}

inline int stacks_command(const std::vector<std::string>& args, std::string& out, std::string& err, const terminal& term) {
  const parsed p = parse(args, 2, {"metric"}, {}, "stacks");
  if (p.positional.size() != 1)
    throw usage_error(p.positional.empty() ? "missing the TRACE file" : "stacks takes one TRACE file", "stacks");
  stack_metric metric = stack_metric::self_cuda_time_total;
  if (const std::string* m = option(p, "metric")) {
    try {
      metric = detail::parse_stack_metric(*m);
    } catch (const error& e) {
      throw usage_error(detail::message_of(e), "stacks");
    }
  }
  const loaded_trace lt = load(p.positional[0], term, "stacks");
  if (lt.t.stacks.empty())
    err += "cuprof: " + detail::terminal_safe(lt.source) + ": no call stacks in the trace (record it with with_stack)\n";
  out += folded_stacks(lt.t, metric);
  return exit_ok;
}

inline std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : "; ") + x;
  return s;
}

inline int insights_command(const std::vector<std::string>& args, std::string& out, std::string& err, const terminal& term) {
  const parsed p = parse(args, 2, {"kernels", "format"}, {}, "insights");
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

// --fail-above's percentage: a number from 0 up, "5" or "5%".
inline double percent_value(std::string text) {
  if (!text.empty() && text.back() == '%') text.pop_back();
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || text.find_first_not_of("0123456789.") != std::string::npos || *end != '\0' || v > 1e6)
    throw usage_error("--fail-above wants a percentage from 0 up (5 or 5%), not '" + text + "'", "diff");
  return v;
}

inline int diff_command(const std::vector<std::string>& args, std::string& out, std::string& err, const terminal& term) {
  const parsed p = parse(args, 2, {"rows", "format", "fail-above", "metric"}, {}, "diff");
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

inline int run_command(const std::vector<std::string>& args, std::string& out, launch_plan& plan) {
  std::size_t i = 2;
  std::string output = "cuprof_%h_%p.pt.trace.json", inject, activities, delay, duration, detail_level, start_step, steps,
              step_range, capture_range, capture_end, slow_steps, gpu_metrics, metrics_interval;
  bool table = true, nvtx = true, dry_run = false, memory = false, stacks = false, trace_launcher = false;
  const auto value = [&](const std::string& name) -> std::string {
    if (i + 1 >= args.size()) throw usage_error("option " + name + " needs a value", "run");
    return args[++i];
  };
  for (; i < args.size() && args[i] != "--"; ++i) {
    const std::string& a = args[i];
    if (a == "--output") output = value(a);
    else if (a == "--inject") inject = value(a);
    else if (a == "--activities") activities = value(a);
    else if (a == "--delay") delay = value(a);
    else if (a == "--duration") duration = value(a);
    else if (a == "--detail") detail_level = value(a);
    else if (a == "--start-step") start_step = value(a);
    else if (a == "--steps") steps = value(a);
    else if (a == "--step-range") step_range = value(a);
    else if (a == "--capture-range") capture_range = value(a);
    else if (a == "--capture-range-end") capture_end = value(a);
    else if (a == "--slow-steps") slow_steps = value(a);
    else if (a == "--memory") memory = true;
    else if (a == "--gpu-metrics") gpu_metrics = "1";
    else if (a.rfind("--gpu-metrics=", 0) == 0) gpu_metrics = a.substr(14);
    else if (a == "--gpu-metrics-interval") metrics_interval = value(a);
    else if (a == "--stacks") stacks = true;
    else if (a == "--trace-launcher") trace_launcher = true;
    else if (a == "--no-table") table = false;
    else if (a == "--no-nvtx") nvtx = false;
    else if (a == "--dry-run") dry_run = true;
    else throw usage_error("unknown option '" + a + "' (the program goes after --)", "run");
  }
  if (i + 1 >= args.size()) throw usage_error("missing the program to run after --", "run");
  if (!activities.empty() && activities != "cpu" && activities != "cuda" && activities != "cpu,cuda")
    throw usage_error("--activities takes cpu, cuda or cpu,cuda", "run");
  for (const auto& [name, seconds] : {std::pair<const char*, const std::string*>{"--delay", &delay}, {"--duration", &duration}})
    if (!seconds->empty() && !detail::parse_seconds(seconds->c_str()))
      throw usage_error(
          std::string(name) + " takes a number of seconds from 0 to 1e7, not '" + detail::terminal_safe(*seconds) + "'", "run");
  for (const auto& [name, number] :
       {std::pair<const char*, const std::string*>{"--start-step", &start_step}, {"--steps", &steps}})
    if (!number->empty() && !detail::parse_env_int(number->c_str()))
      throw usage_error(std::string(name) + " takes a whole number from 0 to 2^30, not '" + detail::terminal_safe(*number) + "'",
                        "run");
  if (!steps.empty() && start_step.empty()) throw usage_error("--steps needs --start-step (the step the window opens at)", "run");
  if (!start_step.empty() && !delay.empty())
    throw usage_error("--start-step and --delay both choose when the window opens", "run");
  if (!step_range.empty() && start_step.empty() && slow_steps.empty() && capture_range.empty())
    throw usage_error("--step-range needs --start-step, --slow-steps or --capture-range (what steps choose windows for)", "run");
  if (!slow_steps.empty()) {
    std::string why;
    if (!detail::parse_slow_steps(slow_steps.c_str(), why))
      throw usage_error("--slow-steps '" + detail::terminal_safe(slow_steps) + "': " + why, "run");
    if (!start_step.empty() || !delay.empty())
      throw usage_error(
          std::string("--slow-steps and ") + (start_step.empty() ? "--delay" : "--start-step") + " both choose the windows",
          "run");
  }
  if (!capture_range.empty() || !capture_end.empty()) {
    std::string problem;
    detail::read_capture_range(capture_range.c_str(), capture_end.c_str(), problem);
    if (!problem.empty()) {
      // The environment's words, in the options' names.
      for (const auto& [from, to] : {std::pair<std::string, std::string>{"CUPROF_CAPTURE_RANGE_END", "--capture-range-end"},
                                     {"CUPROF_CAPTURE_RANGE", "--capture-range"}})
        for (std::size_t at = problem.find(from); at != std::string::npos; at = problem.find(from, at + to.size()))
          problem.replace(at, from.size(), to);
      throw usage_error(problem.substr(0, problem.find(';')), "run");
    }
    if (!delay.empty() || !duration.empty() || !start_step.empty() || !slow_steps.empty())
      throw usage_error(
          "--capture-range chooses the windows: it does not go with --delay, --duration, --start-step or --slow-steps", "run");
  }
  if (!detail_level.empty() && !detail::parse_lean_trace(detail_level.c_str()))
    throw usage_error("--detail takes kineto or lean, not '" + detail::terminal_safe(detail_level) + "'", "run");
  const std::string library = find_injection_library(inject);
  if (library.empty()) throw error("cannot find libcuprof_inject.so (give it with --inject PATH or CUPROF_INJECT_LIBRARY)");
  if (const std::string why = not_an_injection_library(library); !why.empty())
    throw error("cannot inject '" + detail::terminal_safe(library) + "': " + why);
  plan = {};
  plan.environment.emplace_back("CUDA_INJECTION64_PATH", library);
  // Preloaded too, so that a program that never initialises CUDA (or runs
  // where there is no driver) still gets its trace and a line saying why.
  const char* preload = std::getenv("LD_PRELOAD");
  plan.environment.emplace_back("LD_PRELOAD", preload && *preload ? library + ":" + preload : library);
  // exec keeps the pid: the program owns the trace name, processes it starts get their own.
  plan.environment.emplace_back("CUPROF_ROOT_PID", std::to_string(::getpid()));
  plan.environment.emplace_back("CUPROF_TRACE", output);
  if (!activities.empty()) plan.environment.emplace_back("CUPROF_ACTIVITIES", activities);
  if (!delay.empty()) plan.environment.emplace_back("CUPROF_DELAY", delay);
  if (!duration.empty()) plan.environment.emplace_back("CUPROF_DURATION", duration);
  if (!start_step.empty()) plan.environment.emplace_back("CUPROF_START_STEP", start_step);
  if (!steps.empty()) plan.environment.emplace_back("CUPROF_STEPS", steps);
  if (!step_range.empty()) plan.environment.emplace_back("CUPROF_STEP_RANGE", step_range);
  if (!capture_range.empty()) plan.environment.emplace_back("CUPROF_CAPTURE_RANGE", capture_range);
  if (!capture_end.empty()) plan.environment.emplace_back("CUPROF_CAPTURE_RANGE_END", capture_end);
  if (!slow_steps.empty()) plan.environment.emplace_back("CUPROF_SLOW_STEPS", slow_steps);
  if (!detail_level.empty()) plan.environment.emplace_back("CUPROF_TRACE_DETAIL", detail_level);
  if (!table) plan.environment.emplace_back("CUPROF_TABLE", "0");
  if (memory) plan.environment.emplace_back("CUPROF_MEMORY", "1");
  if (!metrics_interval.empty() && gpu_metrics.empty()) throw usage_error("--gpu-metrics-interval needs --gpu-metrics", "run");
  if (!gpu_metrics.empty()) {
    std::vector<std::string> problems;
    const detail::gpu_metrics_setting g = detail::read_gpu_metrics(gpu_metrics.c_str(), metrics_interval.c_str(), problems);
    if (!problems.empty() || !g.on)
      throw usage_error("--gpu-metrics: " + (problems.empty() ? "nothing to sample" : problems[0]), "run");
    plan.environment.emplace_back("CUPROF_GPU_METRICS", gpu_metrics);
    if (!metrics_interval.empty()) plan.environment.emplace_back("CUPROF_GPU_METRICS_INTERVAL", metrics_interval);
  }
  if (stacks) plan.environment.emplace_back("CUPROF_STACKS", "1");
  if (trace_launcher) plan.environment.emplace_back("CUPROF_TRACE_LAUNCHER", "1");
  // NVTX reads this once, at the program's first NVTX call: it must be set
  // before the program starts. The injection library hands NVTX to the
  // libcupti cuprof traces with, also when the program brings its own copy
  // (PyTorch wheels do): a path to a libcupti file could be a second instance.
  if (nvtx && !std::getenv("NVTX_INJECTION64_PATH")) plan.environment.emplace_back("NVTX_INJECTION64_PATH", library);
  plan.command.assign(args.begin() + std::ptrdiff_t(i) + 1, args.end());
  if (dry_run) {
    for (const auto& [name, v] : plan.environment) out += name + "=" + v + "\n";
    for (const std::string& word : plan.command) out += word + (&word == &plan.command.back() ? "\n" : " ");
    plan = {};
  }
  return exit_ok;
}

inline int trigger_command(const std::vector<std::string>& args, std::string& out, std::string& err, const terminal& term) {
  const parsed p = parse(args, 2, {"duration", "steps", "output", "timeout"}, {"list", "cancel"}, "trigger");
  const std::string *duration = option(p, "duration"), *steps = option(p, "steps"), *output = option(p, "output"),
                    *timeout = option(p, "timeout");
  if (option(p, "list")) {
    if (!p.positional.empty() || p.options.size() > 1) throw usage_error("--list takes nothing else", "trigger");
    return list_endpoints(out, err);
  }
  const bool cancel = option(p, "cancel") != nullptr;
  if (cancel && p.options.size() > 1) throw usage_error("--cancel takes the PID alone", "trigger");
  if (p.positional.size() != 1)
    throw usage_error(p.positional.empty() ? "missing the PID to trigger (or --list)" : "trigger takes one PID", "trigger");
  const std::string& pid_text = p.positional[0];
  const std::optional<int> pid = detail::parse_env_int(pid_text.c_str());
  if (!pid || *pid == 0 || pid_text.find_first_not_of("0123456789") != std::string::npos)
    throw usage_error("the PID is a process id, not '" + pid_text + "'", "trigger");
  if (cancel) return cancel_window(*pid, out, err);
  if (duration && steps) throw usage_error("--duration and --steps both say how long the window lasts: give one", "trigger");
  detail::trigger_request request;
  request.duration_s = detail::trigger_default_seconds;
  if (duration) {
    // Sent in whole milliseconds, where 0 means the default: at least 1 ms.
    const std::optional<double> s = option_seconds(*duration);
    if (!s || *s < 0.001 || *s * 1000 > double(detail::trigger_max_ms))
      throw usage_error("--duration takes a number of seconds from 0.001 to " + std::to_string(detail::trigger_max_ms / 1000) +
                            " (a day), not '" + *duration + "'",
                        "trigger");
    request.duration_s = *s;
  }
  if (steps) {
    const std::optional<int> n = detail::parse_env_int(steps->c_str());
    if (!n || *n == 0) throw usage_error("--steps takes a whole number from 1 to 2^30, not '" + *steps + "'", "trigger");
    request.duration_s = 0;
    request.steps = *n;
  }
  std::optional<double> wait_s;
  if (timeout && !(wait_s = option_seconds(*timeout)))
    throw usage_error("--timeout takes a number of seconds above 0 up to 1e7, not '" + *timeout + "'", "trigger");
  if (output) {
    if (output->empty() || detail::has_control_character(*output))
      throw usage_error("--output takes a path without control characters", "trigger");
    request.output = *output;
    if (request.output[0] != '/') {  // the process has its own working directory
      char cwd[4096];
      if (!::getcwd(cwd, sizeof cwd)) throw error(std::string("cannot resolve the relative --output: ") + std::strerror(errno));
      request.output = std::string(cwd) + "/" + request.output;
    }
    if (request.output.size() + 100 > detail::trigger_line_max)
      throw usage_error("--output is too long for a request line (" + std::to_string(detail::trigger_line_max) + " bytes)",
                        "trigger");
  }
  return trigger_window(*pid, request, wait_s, out, err, term.live_fd);
}

// Runs the command line `args` (args[0] is the program name). Appends what it
// prints to `out` (stdout) and `err` (stderr); returns the exit status. Never
// throws. `cuprof run` fills `plan` for the caller to exec.
inline int run(const std::vector<std::string>& args, std::string& out, std::string& err, launch_plan& plan,
               const terminal& term = {}) {
  std::string command;
  try {
    if (args.size() < 2) {
      err += main_help;
      return exit_usage;
    }
    command = args[1];
    if (command == "--help" || command == "-h") {
      out += main_help;
      return exit_ok;
    }
    if (command == "--version" || command == "version") {
      out += "cuprof " CUPROF_VERSION_STRING "\n";
      return exit_ok;
    }
    if (command == "help") {
      const std::string which = args.size() > 2 ? args[2] : "";
      if (which.empty() || which == "help" || which == "--help" || which == "-h") {
        out += main_help;
        return exit_ok;
      }
      if (const char* text = help_of(which)) {
        out += text;
        return exit_ok;
      }
      out += main_help;
      err += "cuprof: unknown command '" + detail::terminal_safe(which) + "'\n";
      return exit_usage;
    }
    if (const char* text = help_of(command); text && asks_for_help(args)) {
      out += text;
      return exit_ok;
    }
    if (command == "table") return table_command(args, out, err, term);
    if (command == "insights") return insights_command(args, out, err, term);
    if (command == "stacks") return stacks_command(args, out, err, term);
    if (command == "diff") return diff_command(args, out, err, term);
    if (command == "run") return run_command(args, out, plan);
    if (command == "trigger") return trigger_command(args, out, err, term);
    command.clear();
    throw usage_error("unknown command '" + args[1] + "'", "");
  } catch (const usage_error& e) {
    // Messages quote what was typed and what traces hold: one line, no escape sequence acting.
    err += "cuprof: " + detail::terminal_safe(e.message) + "\n";
    err += e.command.empty() ? "Try 'cuprof --help'.\n" : "Try 'cuprof " + e.command + " --help'.\n";
    return exit_usage;
  } catch (const std::bad_alloc&) {
    err += "cuprof: out of memory reading the trace\n";
    return exit_input;
  } catch (const std::exception& e) {  // cuprof::error's message has the prefix already: one a line
    err += "cuprof: " + detail::terminal_safe(detail::message_of(e)) + "\n";
    return exit_input;
  }
}

// The same, for commands that never exec (all but run).
inline int run(const std::vector<std::string>& args, std::string& out, std::string& err, const terminal& term = {}) {
  launch_plan unused;
  return run(args, out, err, unused, term);
}

}  // namespace cuprof::cli
