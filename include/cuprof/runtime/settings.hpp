// Every setting a user gives cuprof from outside the program, in one table:
// its CUPROF_* variable, its `cuprof run` option (when it has one), the value
// it takes, the option's help and its reader. The environment reader
// (read_settings, below), `cuprof run`'s parser and help
// (tools/cli/run_command.hpp) and the guide's variable table (a test
// compares them) all follow it, so a setting is added here, in its field of
// environment_config, and in its test.
//
// Problems are found in one place, read_settings: a bad value (its reader)
// or two settings that contradict each other (resolve_conflicts) give one
// line, "<what>; <what is done instead>". Read from the environment, the
// line is printed and the fallback used (a program is never stopped for its
// profiler's settings); `cuprof run` refuses the same line's first half,
// named as its options, before the program starts.
#pragma once

#include "../base/env.hpp"
#include "../output/chrome_trace.hpp"
#include "../profile.hpp"
#include "../schedule.hpp"
#include "windows/capture_range.hpp"
#include "windows/slow_steps.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cuprof::detail {

// What the table's settings come to.
struct environment_config {
  bool enabled = false;
  std::string trace_path;
  activity activities = activity::cpu | activity::cuda;
  bool print_table = true;
  bool with_stack = false;          // CUPROF_STACKS
  bool profile_memory = false;      // CUPROF_MEMORY: allocations and frees too
  gpu_metrics_setting gpu_metrics;  // CUPROF_GPU_METRICS, CUPROF_GPU_METRICS_INTERVAL
  double delay_s = 0;               // 0: from start-up
  double duration_s = 0;            // 0: until exit
  int start_step = -1;              // CUPROF_START_STEP; -1: the window does not wait for a step
  int steps = 0;                    // CUPROF_STEPS; 0: until CUPROF_DURATION or exit
  std::string step_range;           // CUPROF_STEP_RANGE; empty: "step" (any case) or "ProfilerStep#"
  capture_range capture;            // CUPROF_CAPTURE_RANGE, CUPROF_CAPTURE_RANGE_END
  export_options export_with;
  std::optional<slow_steps> slow;       // CUPROF_SLOW_STEPS
  std::vector<std::string_view> given;  // the variables read that were set and not empty
  std::vector<std::string> problems;    // "<what>; <what is done instead>", each applied

  // A value as its reader gives it, its problem kept.
  template <class T>
  T take(env_setting<T> setting) {
    if (!setting.problem.empty()) problems.push_back(std::move(setting.problem));
    return std::move(setting.value);
  }
  bool was_given(std::string_view variable) const { return std::find(given.begin(), given.end(), variable) != given.end(); }
};

// Reads one setting's value (set and not empty) into its field: a value it
// cannot take is a problem, and the default stays. A reader sees its own
// value and the fields of the rows above it; what two settings contradict is
// settled after all are read, in resolve_conflicts.
using setting_reader = void (*)(environment_config& c, const char* variable, const char* text);

struct setting {
  std::string_view variable;
  std::string_view option = {};      // `cuprof run`'s; empty: the environment only
  std::string_view value = {};       // the option's value as its help names it ("S"); empty: a flag; "[=LIST]": optional
  std::string_view flag_value = {};  // what a flag (or an option given without its optional value) sets the variable to
  std::string_view help = {};        // the option's help, as prose: `cuprof run --help` wraps it
  setting_reader read = nullptr;     // null: read where it acts (the trace path, and the layers below this table)
};

// In `cuprof run --help`'s order; the environment-only ones last.
inline constexpr setting settings[] = {
    {"CUPROF_TRACE", "--output", "PATH", "",
     "trace path; %p pid, %h host, %r rank, %n the capture range's number (default cuprof_%h_%p.pt.trace.json; a .gz suffix "
     "compresses)"},
    {"CUPROF_TRACE_DETAIL", "--detail", "LEVEL", "",
     "kineto (default: every arg torch.profiler writes) or lean (GPU records without launch configuration and without what their "
     "lane says: a quarter smaller, for long windows)",
     [](environment_config& c, const char*, const char* text) {
       if (c.take(read_lean_trace(text))) c.export_with.detail = trace_detail::lean;
     }},
    {"CUPROF_ACTIVITIES", "--activities", "LIST", "", "cpu, cuda or cpu,cuda (default)",
     [](environment_config& c, const char*, const char* text) {
       const std::string_view v = text;
       if (v == "cpu") c.activities = activity::cpu;
       else if (v == "cuda") c.activities = activity::cuda;
       else if (v != "cpu,cuda" && v != "cuda,cpu")
         c.problems.push_back("CUPROF_ACTIVITIES=" + quoted_value(v) + " is not cpu, cuda or cpu,cuda; using cpu,cuda");
     }},
    {"CUPROF_DELAY", "--delay", "S", "", "start recording S seconds after the program starts",
     [](environment_config& c, const char* variable, const char* text) { c.delay_s = c.take(read_seconds(variable, text)); }},
    {"CUPROF_DURATION", "--duration", "S", "", "record for S seconds, then write the trace",
     [](environment_config& c, const char* variable, const char* text) { c.duration_s = c.take(read_seconds(variable, text)); }},
    {"CUPROF_START_STEP", "--start-step", "N", "",
     "open the window when the program's step N starts (from 0), on every rank alike: steps are NVTX ranges named \"step ...\" "
     "(any case) or \"ProfilerStep#...\", or NAME with --step-range NAME",
     [](environment_config& c, const char* variable, const char* text) {
       c.start_step = c.take(read_step_number(variable, text, -1));
     }},
    {"CUPROF_STEPS", "--steps", "K", "", "with --start-step: write the trace when step N+K starts",
     [](environment_config& c, const char* variable, const char* text) {
       c.steps = c.take(read_step_number(variable, text, 0));
     }},
    {"CUPROF_STEP_RANGE", "--step-range", "NAME", "", "the NVTX range that marks a step (NAME alone or followed by a non-letter)",
     [](environment_config& c, const char*, const char* text) { c.step_range = text; }},
    {"CUPROF_CAPTURE_RANGE", "--capture-range", "R", "",
     "record only inside the ranges the program marks: cuda (between its cudaProfilerStart and cudaProfilerStop, as "
     "torch.cuda.profiler.start() and stop() call them), nvtx:MESSAGE[@DOMAIN] (inside that NVTX range; any domain unless one is "
     "named) or trigger (cuprof trigger's windows); outside them nothing records",
     [](environment_config& c, const char*, const char* text) { c.capture = c.take(read_capture_range(text)); }},
    {"CUPROF_CAPTURE_RANGE_END", "--capture-range-end", "E", "",
     "stop (default: the first range only), repeat (every range) or repeat:N (N ranges); each range its own trace, numbered "
     "where the path has %n (or .N before the extension)",
     [](environment_config& c, const char*, const char* text) {
       if (c.capture.kind != capture_range::none && c.capture.kind != capture_range::refused)
         c.capture.ranges = c.take(read_capture_range_end(text, c.capture.ranges));
     }},
    {"CUPROF_SLOW_STEPS", "--slow-steps", "SPEC", "",
     "keep only the slow steps (NVTX step ranges as for --start-step), each with the steps around it, in a trace of its own (%n "
     "in --output its number, else .slow<n> before the extension): 2x (twice the median) or 50ms, then "
     ",before=1,after=1,keep=5,ring=32,ring_mb=256 as wanted",
     [](environment_config& c, const char*, const char* text) { c.slow = c.take(read_slow_steps(text)); }},
    {"CUPROF_MEMORY", "--memory", "", "1", "record every allocation and free (CUDA memory columns, a memory counter per device)",
     [](environment_config& c, const char* variable, const char* text) {
       c.profile_memory = c.take(read_switch(variable, text, false));
     }},
    {"CUPROF_GPU_METRICS", "--gpu-metrics", "[=LIST]", "1",
     "sample GPU hardware metrics (CUPTI PM sampling): SM and DRAM throughput and tensor pipe activity, "
     "or the CUPTI metrics LIST names (comma-separated; "
     "sm__warps_active_realtime.avg.pct_of_peak_sustained_active is achieved occupancy); "
     "a counter track per metric per GPU, each kernel's averages, `cuprof table --metrics`",
     [](environment_config& c, const char*, const char* text) { c.gpu_metrics = c.take(read_gpu_metrics(text)); }},
    {"CUPROF_GPU_METRICS_INTERVAL", "--gpu-metrics-interval", "T", "", "the sampling period (default 200us; ns, us or ms)",
     [](environment_config& c, const char*, const char* text) {
       if (c.gpu_metrics.on) c.gpu_metrics.interval_ns = c.take(read_gpu_metrics_interval(text));
     }},
    {"CUPROF_STACKS", "--stacks", "", "1",
     "capture the native call stack of each launch, copy, memset, sync, allocation and free (on the calls in the trace; cuprof "
     "stacks)",
     [](environment_config& c, const char* variable, const char* text) {
       c.with_stack = c.take(read_switch(variable, text, false));
     }},
    {"CUPROF_TRACE_LAUNCHER", "--trace-launcher", "", "1",
     "also trace the program itself when it uses no GPU but starts processes that do (torchrun, mpirun, a script): by default it "
     "writes nothing"},
    {"CUPROF_TABLE", "--no-table", "", "0", "do not print the table",
     [](environment_config& c, const char* variable, const char* text) {
       c.print_table = c.take(read_switch(variable, text, true));
     }},
    // The environment only: read where they act (the lower layers cannot see this table).
    {"CUPROF_QUIET"},
    {"CUPROF_MAX_RECORDS"},
    {"CUPROF_MAX_CPU_EVENTS"},
    {"CUPROF_GPU_METRICS_MAX_SAMPLES"},
    {"CUPROF_CUPTI_LIBRARY"},
    {"CUPROF_CLOCK"},
    {"CUPROF_DEBUG"},
};

inline const setting* find_setting(std::string_view variable) {
  for (const setting& s : settings)
    if (s.variable == variable) return &s;
  return nullptr;
}

// A problem line in `cuprof run`'s words: what was wrong, without what the
// environment does instead, each variable named as its option.
inline std::string as_options(std::string problem) {
  problem = problem.substr(0, problem.find("; "));
  std::vector<const setting*> named;
  for (const setting& s : settings)
    if (!s.option.empty()) named.push_back(&s);
  // CUPROF_CAPTURE_RANGE_END before CUPROF_CAPTURE_RANGE, and so on.
  std::sort(named.begin(), named.end(),
            [](const setting* a, const setting* b) { return a->variable.size() > b->variable.size(); });
  for (const setting* s : named)
    for (std::size_t at = problem.find(s->variable); at != std::string::npos;
         at = problem.find(s->variable, at + s->option.size()))
      problem.replace(at, s->variable.size(), s->option);
  return problem;
}

// What two settings contradict, after every reader ran: the one that
// decides is kept, the other dropped, and the line says which.
inline void resolve_conflicts(environment_config& c) {
  if (c.was_given("CUPROF_GPU_METRICS_INTERVAL") && !c.gpu_metrics.on)
    c.problems.push_back("CUPROF_GPU_METRICS_INTERVAL needs CUPROF_GPU_METRICS; ignored");
  if (c.start_step >= 0 && c.delay_s > 0) {
    c.problems.push_back("CUPROF_DELAY and CUPROF_START_STEP both choose when the window opens; it opens at the step");
    c.delay_s = 0;
  }
  if (c.slow && (c.start_step >= 0 || c.delay_s > 0)) {
    c.problems.push_back(std::string("CUPROF_SLOW_STEPS and ") + (c.start_step >= 0 ? "CUPROF_START_STEP" : "CUPROF_DELAY") +
                         " both choose the windows; keeping the slow steps of the whole run");
    c.start_step = -1;
    c.steps = 0;
    c.delay_s = 0;
  }
  if (c.was_given("CUPROF_CAPTURE_RANGE_END") && c.capture.kind == capture_range::none)
    c.problems.push_back("CUPROF_CAPTURE_RANGE_END needs CUPROF_CAPTURE_RANGE; ignored");
  if (c.capture.kind == capture_range::refused) return;  // nothing is traced: nothing else applies
  if (c.capture.kind != capture_range::none && (c.start_step >= 0 || c.delay_s > 0 || c.duration_s > 0 || c.slow)) {
    c.problems.push_back(
        "CUPROF_CAPTURE_RANGE chooses the windows, not CUPROF_DELAY, CUPROF_DURATION, CUPROF_START_STEP or "
        "CUPROF_SLOW_STEPS; they are ignored");
    c.start_step = -1;
    c.delay_s = c.duration_s = 0;
    c.slow.reset();
  }
  if (c.start_step < 0 && c.steps > 0) {
    c.problems.push_back("CUPROF_STEPS needs CUPROF_START_STEP (the step the window opens at); ignored");
    c.steps = 0;
  }
  // Steps choose windows for CUPROF_START_STEP, CUPROF_SLOW_STEPS and triggers by steps (a capture range's).
  if (!c.step_range.empty() && c.start_step < 0 && !c.slow && c.capture.kind == capture_range::none) {
    c.problems.push_back(
        "CUPROF_STEP_RANGE needs CUPROF_START_STEP, CUPROF_SLOW_STEPS or CUPROF_CAPTURE_RANGE (what steps "
        "choose windows for); ignored");
    c.step_range.clear();
  }
}

// The settings of the table that choose what a window records, read through
// `env` (getenv, `cuprof run`'s options, or a test's map) in the table's
// order, then checked together. CUPROF_TRACE and the environment-only
// settings are read where they act. A capture range not understood leaves
// `capture.kind` refused: nothing else applies.
inline environment_config read_settings(const std::function<const char*(const char*)>& env) {
  environment_config c;
  for (const setting& s : settings) {
    if (!s.read) continue;
    const char* text = env(s.variable.data());
    if (!text || !*text) continue;
    c.given.push_back(s.variable);
    s.read(c, s.variable.data(), text);
  }
  resolve_conflicts(c);
  return c;
}

}  // namespace cuprof::detail
