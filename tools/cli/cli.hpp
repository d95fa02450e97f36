// The `cuprof` command: table, insights, diff and stacks for cuprof and
// torch.profiler traces; run and trigger for programs. Everything but main()
// lives here and in the commands' own headers, so the test suite can run it
// in process. A command is one entry of `commands` (its name, its line in
// `cuprof --help`, its help, its options and its function) and one header,
// which declares its help text and options; its parser and its help both
// follow the options. Exit status: 0
// success, 1 unreadable or malformed input, 2 bad usage (or `diff
// --fail-above` given traces it cannot compare), 3 `diff --fail-above`: B
// grew by more than allowed.
#pragma once

#include <cuprof/base/config.hpp>

#include "common.hpp"
#include "diff_command.hpp"
#include "insights_command.hpp"
#include "run_command.hpp"
#include "stacks_command.hpp"
#include "table_command.hpp"
#include "trigger_command.hpp"

#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

namespace cuprof::cli {

struct command {
  const char* name;
  const char* synopsis;  // after the name, in cuprof --help
  const char* summary;   // what it does, beside or under the synopsis (prose: append_help_entry wraps it)
  const char* about;     // its help before the options: usage, what it does
  const command_options& options;
  const char* notes;  // its help after the options
  int (*run)(const invocation&);
};

inline const command commands[] = {
    {"table", "TRACE [--sort KEY] [--rows N] [--group-by args] [--stats] [--kernels] [--wide]",
     "the key_averages().table() of the trace, in torch's layout", table_about, table_command_options, "", table_command},
    {"insights", "TRACE|DIR",
     "findings ranked by what they could save: the verdict (overhead- or compute-bound), fusable elementwise chains, copies "
     "before GEMMs, step-to-step variation, cold start, launches, syncs, allocations in the loop, pageable copies, memory not "
     "freed (DIR, or several traces: one per rank; the straggler, exposed communication, clock offsets between hosts)",
     insights_about, insights_command_options, "", insights_command},
    {"stacks", "TRACE [--metric M]", "the CUDA calls' stacks (with_stack) in flamegraph.pl's folded format", stacks_about,
     stacks_command_options, "", stacks_command},
    {"diff", "A B [--fail-above PCT [--metric gpu|cpu]]",
     "same/removed/added kernels, per-kernel time change, CPU and sync time change; a CI gate on GPU or CPU time per step",
     diff_about, diff_command_options, "", diff_command},
    {"run", "[OPTIONS] -- PROGRAM [ARGS...]", "trace an unmodified CUDA program (trace and table at its exit)", run_about,
     run_options(), "", run_command},
    {"trigger", "PID [--duration S | --steps N] [--output PATH]",
     "a trace window now from a process running under cuprof run or CUPROF_TRACE; trigger --list: the processes that accept one",
     trigger_about, trigger_command_options, trigger_notes, trigger_command},
};

// cuprof COMMAND --help.
inline std::string help_of(const command& c) {
  std::string text = c.about;
  append_options(text, c.options);
  return text + c.notes;
}

inline const command* find_command(const std::string& name) {
  for (const command& c : commands)
    if (name == c.name) return &c;
  return nullptr;
}

// cuprof --help: each command's synopsis, its summary beside it when the
// synopsis is short, else below it, aligned.
inline const std::string& main_help() {
  static const std::string text = [] {
    std::string s =
        "usage: cuprof <command> [options]\n"
        "\n"
        "Reads Chrome traces written by cuprof or by torch.profiler (.json or .json.gz;\n"
        "- reads standard input).\n"
        "\n"
        "commands:\n";
    for (const command& c : commands) append_help_entry(s, std::string(c.name) + " " + c.synopsis, c.summary);
    append_help_entry(s, "help [COMMAND]", "this text, or a command's");
    return s +
           "\n"
           "options: --help on every command; --format text|csv|json for table, insights, diff;\n"
           "--version\n"
           "exit status: 0 ok, 1 unreadable or malformed trace, 2 bad usage or traces\n"
           "diff --fail-above cannot compare, 3 diff --fail-above: B grew by more than PCT\n";
  }();
  return text;
}

// --help or -h anywhere among a command's own arguments (before "--", after
// which words are a program's, or files named so) wins over everything else
// on the line, so that it works whatever else was typed.
inline bool asks_for_help(const std::vector<std::string>& args) {
  for (std::size_t i = 2; i < args.size() && args[i] != "--"; ++i)
    if (args[i] == "--help" || args[i] == "-h") return true;
  return false;
}

// Runs the command line `args` (args[0] is the program name). Appends what it
// prints to `out` (stdout) and `err` (stderr); returns the exit status. Never
// throws. `cuprof run` fills `plan` for the caller to exec.
inline int run(const std::vector<std::string>& args, std::string& out, std::string& err, launch_plan& plan,
               const terminal& term = {}) {
  std::string command;
  try {
    if (args.size() < 2) {
      err += main_help();
      return exit_usage;
    }
    command = args[1];
    if (command == "--help" || command == "-h") {
      out += main_help();
      return exit_ok;
    }
    if (command == "--version" || command == "version") {
      out += "cuprof " CUPROF_VERSION_STRING "\n";
      return exit_ok;
    }
    if (command == "help") {
      const std::string which = args.size() > 2 ? args[2] : "";
      if (which.empty() || which == "help" || which == "--help" || which == "-h") {
        out += main_help();
        return exit_ok;
      }
      if (const cli::command* c = find_command(which)) {
        out += help_of(*c);
        return exit_ok;
      }
      out += main_help();
      err += "cuprof: unknown command '" + detail::terminal_safe(which) + "'\n";
      return exit_usage;
    }
    if (const cli::command* c = find_command(command)) {
      if (asks_for_help(args)) {
        out += help_of(*c);
        return exit_ok;
      }
      return c->run({args, out, err, plan, term});
    }
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
