// The `cuprof` command: table, insights and diff for cuprof and torch.profiler
// traces. Everything but main() lives here so the test suite can run it in
// process. Exit status: 0 success, 1 unreadable or malformed input, 2 bad usage.
#pragma once

#include <cuprof/config.hpp>
#include <cuprof/detail/env.hpp>
#include <cuprof/diff.hpp>
#include <cuprof/error.hpp>
#include <cuprof/insights.hpp>
#include <cuprof/table.hpp>
#include <cuprof/trace_reader.hpp>

#include "run_command.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>
#include <vector>

namespace cuprof::cli {

constexpr int exit_ok = 0;
constexpr int exit_input = 1;
constexpr int exit_usage = 2;

inline const char* main_help =
    "usage: cuprof <command> [options]\n"
    "\n"
    "Reads Chrome traces written by cuprof or by torch.profiler (.json or .json.gz).\n"
    "\n"
    "commands:\n"
    "  table TRACE [--sort KEY] [--rows N] [--stats] [--kernels]\n"
    "                      the key_averages().table() of the trace, in torch's layout\n"
    "  insights TRACE      overhead- vs compute-bound, cold start, copies before GEMMs,\n"
    "                      occupancy queries, outliers, syncs, launch latency, kernel names\n"
    "  diff A B            same/removed/added kernels, per-kernel time change, CPU overhead change\n"
    "  run [OPTIONS] -- PROGRAM [ARGS...]\n"
    "                      trace an unmodified CUDA program (trace and table at its exit)\n"
    "  help [COMMAND]      this text, or a command's\n"
    "\n"
    "options: --help on every command; --version\n"
    "exit status: 0 ok, 1 unreadable or malformed trace, 2 bad usage\n";

inline const char* table_help =
    "usage: cuprof table TRACE [--sort KEY] [--rows N] [--stats] [--kernels]\n"
    "\n"
    "Prints the trace's table as torch.profiler's key_averages().table() prints it:\n"
    "scopes and ops, CUDA runtime/driver calls, kernels/memcpys/memsets, and each\n"
    "scope's extent on the GPU, with Self/total CPU and CUDA time and # of Calls.\n"
    "\n"
    "  --sort KEY   cpu_time, cuda_time, cpu_time_total, cuda_time_total,\n"
    "               self_cpu_time_total, self_cuda_time_total (device_ spellings too),\n"
    "               count, the memory keys, or none (first-occurrence order).\n"
    "               Default: cuda_time_total, or cpu_time_total without GPU time.\n"
    "  --rows N     at most N rows (default 100, torch's); -1 or all: every row\n"
    "  --stats      add per-call CPU and CUDA min, median, p95 and max columns\n"
    "  --kernels    add a column with what each kernel's name says (GEMM tile, dtype, layout...)\n";

inline const char* insights_help =
    "usage: cuprof insights TRACE [--kernels N]\n"
    "\n"
    "Reads the trace the way the PyTorch profiling articles teach, and reports:\n"
    "  - the verdict: overhead-bound or compute-bound (Self CPU vs Self CUDA totals,\n"
    "    GPU idle share of the active window)\n"
    "  - a cold first step (or first call), and where its extra time went\n"
    "  - memsets/memcpys right before GEMMs, occupancy queries before launches\n"
    "  - outlier kernels (> 1.5x their median) with their step, dominant synchronizations\n"
    "  - launch-to-start latency per kernel name, CUPTI overhead, dropped records\n"
    "  - the GPU kernels by time, with what their names say\n"
    "Each finding gives its numbers and where it is (step, scope, lane, ts in the file's us).\n"
    "\n"
    "  --kernels N  list at most N kernel names (default 15)\n";

inline const char* diff_help =
    "usage: cuprof diff A B [--rows N]\n"
    "\n"
    "Compares two traces (say eager vs compiled, unfused vs fused): which GPU kernels\n"
    "are the same (same name: the same math), removed or added, each kernel's time per\n"
    "call A -> B, what changed in a GEMM's name (tile, layout, dtype...), GPU and CPU\n"
    "totals, CUDA API calls, and CPU scopes/ops present in only one.\n"
    "\n"
    "  --rows N     at most N rows per list (default 30)\n";

struct usage_error : std::exception {
  std::string message, command;
  usage_error(std::string m, std::string c) : message(std::move(m)), command(std::move(c)) {}
  const char* what() const noexcept override { return message.c_str(); }
};

struct parsed {
  std::vector<std::string> positional;
  std::vector<std::pair<std::string, std::string>> options;  // name (without --), value ("" for flags)
  bool help = false;
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
    if (a == "--help" || a == "-h") {
      p.help = true;
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

inline std::string describe(const loaded_trace& lt) {
  std::size_t steps = 0;
  for (const cpu_span& s : lt.t.spans) steps += s.is_step ? 1 : 0;
  std::string s = lt.source + " (" + trace_format_name(lt.format) + ", " + std::to_string(lt.t.spans.size()) +
                  " scopes/ops, " + std::to_string(lt.t.api_calls.size()) + " CUDA calls, " +
                  std::to_string(lt.t.gpu.size()) + " GPU records";
  if (steps) s += ", " + std::to_string(steps) + " steps";
  return s + ")";
}

inline int table_command(const std::vector<std::string>& args, std::string& out, std::string& err) {
  const parsed p = parse(args, 2, {"sort", "sort_by", "rows", "row_limit"}, {"stats", "kernels"}, "table");
  if (p.help) {
    out += table_help;
    return exit_ok;
  }
  if (p.positional.size() != 1)
    throw usage_error(p.positional.empty() ? "missing the TRACE file" : "table takes one TRACE file", "table");
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
      throw usage_error(std::string(e.what()).substr(8), "table");
    }
  }
  o.stats = option(p, "stats") != nullptr;
  if (option(p, "kernels")) o.describe_kernel = compact_kernel_name;
  const loaded_trace lt = read_trace_file(p.positional[0]);
  const event_averages avg = key_averages(lt.t);
  if (sort) o.sort_by = *sort == "none" ? std::string() : *sort;
  else o.sort_by = avg.self_cuda_time_total_ns() > 0 ? "cuda_time_total" : "cpu_time_total";
  if (avg.rows().empty()) err += "cuprof: " + lt.source + ": no scopes, CUDA calls or GPU work in the trace\n";
  out += avg.table(o);
  return exit_ok;
}

inline int insights_command(const std::vector<std::string>& args, std::string& out, std::string&) {
  const parsed p = parse(args, 2, {"kernels"}, {}, "insights");
  if (p.help) {
    out += insights_help;
    return exit_ok;
  }
  if (p.positional.size() != 1)
    throw usage_error(p.positional.empty() ? "missing the TRACE file" : "insights takes one TRACE file", "insights");
  std::size_t kernel_rows = 15;
  if (const std::string* k = option(p, "kernels")) {
    const long v = rows_value(*k, "insights");
    kernel_rows = v < 0 ? std::size_t(-1) : std::size_t(v);
  }
  const loaded_trace lt = read_trace_file(p.positional[0]);
  insights_options o;
  o.base_ns = lt.base_ns;
  out += "cuprof insights: " + describe(lt) + "\n\n";
  out += format_insights(analyze(lt.t, o), kernel_rows);
  return exit_ok;
}

inline int diff_command(const std::vector<std::string>& args, std::string& out, std::string&) {
  const parsed p = parse(args, 2, {"rows"}, {}, "diff");
  if (p.help) {
    out += diff_help;
    return exit_ok;
  }
  if (p.positional.size() != 2)
    throw usage_error(p.positional.size() < 2 ? "diff needs two trace files, A and B" : "diff takes two trace files",
                      "diff");
  std::size_t rows = 30;
  if (const std::string* r = option(p, "rows")) {
    const long v = rows_value(*r, "diff");
    rows = v < 0 ? std::size_t(-1) : std::size_t(v);
  }
  const loaded_trace a = read_trace_file(p.positional[0]);
  const loaded_trace b = read_trace_file(p.positional[1]);
  out += "A: " + describe(a) + "\nB: " + describe(b) + "\n\n";
  out += format_diff(diff_traces(a.t, b.t), rows);
  return exit_ok;
}

inline int run_command(const std::vector<std::string>& args, std::string& out, launch_plan& plan) {
  std::size_t i = 2;
  std::string output = "cuprof_%h_%p.pt.trace.json", inject, activities, delay, duration;
  bool table = true, nvtx = true, dry_run = false;
  const auto value = [&](const std::string& name) -> std::string {
    if (i + 1 >= args.size()) throw usage_error("option " + name + " needs a value", "run");
    return args[++i];
  };
  for (; i < args.size() && args[i] != "--"; ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      out += run_help;
      return exit_ok;
    }
    if (a == "--output") output = value(a);
    else if (a == "--inject") inject = value(a);
    else if (a == "--activities") activities = value(a);
    else if (a == "--delay") delay = value(a);
    else if (a == "--duration") duration = value(a);
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
      throw usage_error(std::string(name) + " takes a number of seconds from 0 to 1e7, not '" +
                            detail::terminal_safe(*seconds) + "'",
                        "run");
  const std::string library = find_injection_library(inject);
  if (library.empty())
    throw error("cannot find libcuprof_inject.so (give it with --inject PATH or CUPROF_INJECT_LIBRARY)");
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
  if (!table) plan.environment.emplace_back("CUPROF_TABLE", "0");
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

// Runs the command line `args` (args[0] is the program name). Appends what it
// prints to `out` (stdout) and `err` (stderr); returns the exit status. Never
// throws. `cuprof run` fills `plan` for the caller to exec.
inline int run(const std::vector<std::string>& args, std::string& out, std::string& err, launch_plan& plan) {
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
      out += which == "table" ? table_help : which == "insights" ? insights_help : which == "diff" ? diff_help
             : which == "run" ? run_help : main_help;
      if (!which.empty() && which != "table" && which != "insights" && which != "diff" && which != "run") {
        err += "cuprof: unknown command '" + which + "'\n";
        return exit_usage;
      }
      return exit_ok;
    }
    if (command == "table") return table_command(args, out, err);
    if (command == "insights") return insights_command(args, out, err);
    if (command == "diff") return diff_command(args, out, err);
    if (command == "run") return run_command(args, out, plan);
    command.clear();
    throw usage_error("unknown command '" + args[1] + "'", "");
  } catch (const usage_error& e) {
    err += "cuprof: " + e.message + "\n";
    err += e.command.empty() ? "Try 'cuprof --help'.\n" : "Try 'cuprof " + e.command + " --help'.\n";
    return exit_usage;
  } catch (const error& e) {
    err += std::string(e.what()) + "\n";
    return exit_input;
  } catch (const std::bad_alloc&) {
    err += "cuprof: out of memory reading the trace\n";
    return exit_input;
  } catch (const std::exception& e) {
    err += std::string("cuprof: ") + e.what() + "\n";
    return exit_input;
  }
}

// The same, for commands that never exec (all but run).
inline int run(const std::vector<std::string>& args, std::string& out, std::string& err) {
  launch_plan unused;
  return run(args, out, err, unused);
}

}  // namespace cuprof::cli
