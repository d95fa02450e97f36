// What the commands share: exit statuses, the option parser, reading the
// traces named on the command line, and what every JSON report says of them.
#pragma once

#include <cuprof/analysis.hpp>
#include <cuprof/base/error.hpp>
#include <cuprof/base/text.hpp>

#include "ranks.hpp"
#include "report.hpp"
#include "terminal.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cuprof::cli {

constexpr int exit_ok = 0;
constexpr int exit_input = 1;
constexpr int exit_usage = 2;
constexpr int exit_cannot_compare = 2;  // diff --fail-above: a trace lacks what the metric compares
constexpr int exit_grew = 3;

// What `cuprof run` makes of its command line: the process main() becomes.
struct launch_plan {
  std::vector<std::pair<std::string, std::string>> environment;
  std::vector<std::string> command;
};

// A command's call: its command line (args[0] the program, args[1] the
// command), what it prints to stdout and stderr, and for run the plan.
struct invocation {
  const std::vector<std::string>& args;
  std::string& out;
  std::string& err;
  launch_plan& plan;
  const terminal& term;
};

// A line of a help listing: "  HEAD" with its text from column 22, beside a
// short head, else on the next line. The text is prose: it is wrapped at its
// spaces to end by column 96 (a longer word overflows), and broken where it
// has a '\n'; its further lines are aligned at column 22.
inline void append_help_entry(std::string& out, std::string_view head, std::string_view text) {
  constexpr std::size_t column = 22, width = 96;
  const std::string indent = "\n" + std::string(column, ' ');
  std::string line = "  " + std::string(head);
  line += line.size() + 2 <= column ? std::string(column - line.size(), ' ') : indent;
  std::size_t used = column;  // the columns the current line fills
  bool line_empty = true;
  while (!text.empty()) {
    const std::size_t end = std::min(text.find_first_of(" \n"), text.size());
    const std::string_view word = text.substr(0, end);
    if (!line_empty && used + 1 + word.size() > width) {
      line += indent;
      used = column;
      line_empty = true;
    }
    if (!line_empty) {
      line += ' ';
      ++used;
    }
    line += word;
    used += word.size();
    line_empty = false;
    if (end < text.size() && text[end] == '\n') {
      line += indent;
      used = column;
      line_empty = true;
    }
    text.remove_prefix(std::min(end + 1, text.size()));
  }
  out += line + "\n";
}

// An option of a command: its name without "--", the value it takes as its
// help names it ("" for a flag, "[=X]" for an optional one), and its help
// (prose, which append_help_entry wraps; empty for a second spelling the
// help does not list, as torch's sort_by beside --sort). The command's parser
// and its help both follow its list, so an option is declared once.
struct command_option {
  std::string_view name, value, help;
};
using command_options = std::vector<command_option>;

inline void append_options(std::string& out, const command_options& options) {
  for (const command_option& o : options)
    if (!o.help.empty())
      append_help_entry(
          out, "--" + std::string(o.name) + (o.value.empty() || o.value[0] == '[' ? "" : " ") + std::string(o.value), o.help);
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

// `options`: those that take a value as "--name VALUE" or "--name=VALUE", the flags as "--name".
inline parsed parse(const std::vector<std::string>& args, std::size_t from, const command_options& options,
                    const std::string& command) {
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
    const auto known = std::find_if(options.begin(), options.end(), [&](const command_option& o) { return o.name == name; });
    if (known != options.end() && !known->value.empty()) {
      if (!inline_value) {
        if (i + 1 >= args.size()) throw usage_error("option --" + name + " needs a value", command);
        value = args[++i];
      }
      p.options.emplace_back(name, value);
    } else if (known != options.end() && !inline_value) {
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

inline std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : "; ") + x;
  return s;
}

}  // namespace cuprof::cli
