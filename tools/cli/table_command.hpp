// `cuprof table TRACE`: torch's key_averages().table() of a trace (or a row
// per rank of a job), as text, CSV or JSON.
#pragma once

#include <cuprof/cuprof.hpp>

#include "common.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace cuprof::cli {

inline const char* table_about =
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
    "\n";

inline const command_options table_command_options = {
    {"sort", "KEY",
     "cpu_time, cuda_time, cpu_time_total, cuda_time_total, self_cpu_time_total, self_cuda_time_total (device_ spellings too), "
     "count, or none (first-occurrence order); where the trace has memory figures (profile_memory), torch's "
     "self_cuda_memory_usage, cuda_memory_usage, self_cpu_memory_usage and cpu_memory_usage. Default: cuda_time_total, or "
     "cpu_time_total without GPU time."},
    {"sort_by", "KEY", ""},  // torch's names for --sort and --rows
    {"rows", "N", "at most N rows (default 100, torch's); -1 or all: every row"},
    {"row_limit", "N", ""},
    {"group-by", "G",
     "name (default: torch's rows) or args: a row per scope name and arguments (CUPROF_SCOPE's args; a torch op's input shapes, "
     "with record_shapes=True), shown in an Args column"},
    {"group-by-stack", "N",
     "a row per CUDA call or GPU work name and the first N frames of its call stack (traces recorded with_stack), shown in a "
     "Source Location column"},
    {"stats", "", "add per-call CPU and CUDA min, median, p95 and max columns"},
    {"kernels", "", "add a column with what each kernel's name says (GEMM tile, dtype, layout...)"},
    {"metrics", "",
     "add the GPU hardware metrics' averages over each row's GPU work (SM, DRAM and tensor pipe throughput, achieved occupancy, "
     "in % of peak), where the trace has them (sampled while it was recorded)"},
    {"wide", "", "on a terminal, do not narrow the Name column to the window's width"},
    {"format", "F", "text (default), csv (the rows) or json (rows and totals; times in us)"},
};

// The table's rows as records: the columns table() prints, in the records' order (event_averages::columns).
inline record_table table_records(const event_averages& avg, const table_options& o) {
  const std::vector<const event_average*> rows = avg.sorted_rows(o.sort_by, o.row_limit);
  std::vector<table_column> columns = avg.columns(o, rows);
  columns.erase(std::remove_if(columns.begin(), columns.end(), [](const table_column& c) { return !c.in_records; }),
                columns.end());
  std::stable_sort(columns.begin(), columns.end(),
                   [](const table_column& a, const table_column& b) { return a.record_rank < b.record_rank; });
  record_table t;
  for (const table_column& c : columns) t.columns.push_back(c.record);
  for (const event_average* r : rows) {
    std::vector<cell> row;
    for (const table_column& c : columns) {
      const column_value v = c.value(*r);
      switch (v.type) {
        case column_value::kind::string: row.push_back(str(v.text)); break;
        case column_value::kind::time_ns: row.push_back(us(std::uint64_t(v.number))); break;
        case column_value::kind::integer: row.push_back(signed_num(v.number)); break;
        case column_value::kind::real: row.push_back(real(v.figure)); break;
      }
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

inline int table_command(const invocation& c) {
  const auto& [args, out, err, plan, term] = c;
  const parsed p = parse(args, 2, table_command_options, "table");
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

}  // namespace cuprof::cli
