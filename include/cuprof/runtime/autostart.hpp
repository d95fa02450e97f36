// Trace without code. With CUPROF_TRACE=<path> in the environment, a program
// built with cuprof's runtime (one TU defining CUPROF_IMPLEMENTATION before
// including cuprof.hpp, or the cuprof::runtime target) profiles from before
// main() to exit, writes the trace to <path> and prints the table to stderr.
// The injection library
// (libcuprof_inject.so, see `cuprof run`) does the same for programs that do
// not include cuprof at all.
//
//   CUPROF_TRACE=path      where to write; %p pid, %h host, %r rank, %% a '%'
//   CUPROF_TABLE=0         no table on stderr (also no, false, off)
//   CUPROF_ACTIVITIES=cpu  CPU only (default cpu,cuda)
//   CUPROF_DELAY=S         start recording S seconds after start-up
//   CUPROF_DURATION=S      stop after S seconds of recording and write the trace then
//   CUPROF_START_STEP=N    open the window when the program's step N starts (steps counted from 0
//                          as NVTX ranges named "step ..." or "ProfilerStep#...", or CUPROF_STEP_RANGE)
//   CUPROF_STEPS=K         with CUPROF_START_STEP: write the trace when step N+K starts
//   CUPROF_STEP_RANGE=NAME the NVTX range that marks a step: NAME, alone or followed by a non-letter
//   CUPROF_CAPTURE_RANGE=cuda          record only between the program's cudaProfilerStart and
//                                      cudaProfilerStop (cuProfilerStart/Stop, torch.cuda.profiler)
//   CUPROF_CAPTURE_RANGE=nvtx:MSG[@DOM] record only inside the NVTX range MSG (of domain DOM; any
//                                      domain when none is named)
//   CUPROF_CAPTURE_RANGE_END=stop|repeat|repeat:N  after the first range (default), every range,
//                                      or N ranges: each its own trace, %n in the path its number
//   CUPROF_SLOW_STEPS=SPEC keep only the slow steps, each with the steps around it, in a trace of
//                          its own (%n in CUPROF_TRACE its number, else ".slow<n>" before the
//                          extension): "2x" (the median) or "50ms", then ",before=1,after=1,
//                          keep=5,ring=32,ring_mb=256" as wanted (base/env.hpp, schedule.hpp)
//   CUPROF_TRACE_DETAIL=lean  GPU records without launch configuration (default kineto)
//   CUPROF_STACKS=1        native call stacks at CUDA calls (profile_options::with_stack)
#pragma once

#include "abnormal_exit.hpp"
#include "../base/env.hpp"
#include "../base/log.hpp"
#include "control_endpoint.hpp"
#include "process_info.hpp"
#include "../base/text.hpp"
#include "../output/file_sink.hpp"
#include "../profile.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

// Defined (as true) by the injection library only. It links the same
// compiled runtime as programs do (the cuprof::runtime target), but must not
// start the environment's profile while the loader runs its initialisers:
// the driver loads it from inside cuInit. Weak and hidden: a module without
// the definition reads a null address, and no other module's definition is
// ever bound to it.
extern "C" __attribute__((weak, visibility("hidden"))) const bool cuprof_started_by_injection;

namespace cuprof::detail {

inline bool started_by_injection() noexcept { return &::cuprof_started_by_injection != nullptr; }

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
  std::vector<std::string> problems;  // bad values, each reported once and replaced by the default

  std::optional<slow_steps> slow;  // CUPROF_SLOW_STEPS
};

// "%p" pid, "%h" host, "%r" rank, "%%" a '%'. When several ranks run and the
// pattern names no rank, ".rank<r>" goes before the extension so ranks never
// overwrite each other's traces.
inline std::string expand_trace_path(const std::string& pattern, std::uint32_t pid, const std::string& host, int rank,
                                     int world_size) {
  std::string out;
  bool has_rank = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out.push_back(pattern[i]);
      continue;
    }
    const char c = pattern[++i];
    if (c == 'p') out += std::to_string(pid);
    else if (c == 'h') out += host;
    else if (c == 'r') out += std::to_string(rank), has_rank = true;
    else if (c == '%') out.push_back('%');
    else out.push_back('%'), out.push_back(c);
  }
  if (world_size > 1 && !has_rank) {
    const std::size_t slash = out.rfind('/');
    const std::size_t dot = out.find('.', slash == std::string::npos ? 0 : slash + 1);
    out.insert(dot == std::string::npos ? out.size() : dot, ".rank" + std::to_string(rank));
  }
  return out;
}

// Reads cuprof's CUPROF_* variables through `env` (getenv, or a test's map).
// `injected`: loaded through CUDA_INJECTION64_PATH, which alone turns tracing on.
inline environment_config read_environment(const std::function<const char*(const char*)>& env, bool injected, std::uint32_t pid,
                                           const std::string& host, int rank, int world_size) {
  environment_config c;
  const char* path = env("CUPROF_TRACE");
  c.enabled = injected || (path && *path);
  if (!c.enabled) return c;
  c.trace_path = expand_trace_path(path && *path ? path : "cuprof_%h_%p.pt.trace.json", pid, host, rank, world_size);
  const auto use = [&c](auto setting) {
    if (!setting.problem.empty()) c.problems.push_back(setting.problem);
    return setting.value;
  };
  c.print_table = use(read_switch("CUPROF_TABLE", env("CUPROF_TABLE"), true));
  c.with_stack = use(read_switch("CUPROF_STACKS", env("CUPROF_STACKS"), false));
  c.profile_memory = use(read_switch("CUPROF_MEMORY", env("CUPROF_MEMORY"), false));
  c.gpu_metrics = read_gpu_metrics(env("CUPROF_GPU_METRICS"), env("CUPROF_GPU_METRICS_INTERVAL"), c.problems);
  if (const char* a = env("CUPROF_ACTIVITIES")) {
    const std::string v = a;
    if (v == "cpu") c.activities = activity::cpu;
    else if (v == "cuda") c.activities = activity::cuda;
    else if (v != "cpu,cuda" && v != "cuda,cpu" && !v.empty())
      c.problems.push_back("CUPROF_ACTIVITIES=" + terminal_safe(v) + " is not cpu, cuda or cpu,cuda; using cpu,cuda");
  }
  c.delay_s = use(read_seconds("CUPROF_DELAY", env("CUPROF_DELAY")));
  c.duration_s = use(read_seconds("CUPROF_DURATION", env("CUPROF_DURATION")));
  if (use(read_lean_trace(env("CUPROF_TRACE_DETAIL")))) c.export_with.detail = trace_detail::lean;
  c.start_step = use(read_step_number("CUPROF_START_STEP", env("CUPROF_START_STEP"), -1));
  c.steps = use(read_step_number("CUPROF_STEPS", env("CUPROF_STEPS"), 0));
  if (const char* r = env("CUPROF_STEP_RANGE")) c.step_range = r;
  if (c.start_step >= 0 && c.delay_s > 0) {
    c.problems.push_back("CUPROF_DELAY and CUPROF_START_STEP both given: the window opens at the step");
    c.delay_s = 0;
  }
  c.slow = use(read_slow_steps<slow_steps>(env("CUPROF_SLOW_STEPS")));
  if (c.slow && (c.start_step >= 0 || c.delay_s > 0)) {
    c.problems.push_back(std::string("CUPROF_SLOW_STEPS and ") + (c.start_step >= 0 ? "CUPROF_START_STEP" : "CUPROF_DELAY") +
                         " both choose the windows: keeping the slow steps of the whole run");
    c.start_step = -1;
    c.steps = 0;
    c.delay_s = 0;
  }
  std::string capture_problem;
  c.capture = read_capture_range(env("CUPROF_CAPTURE_RANGE"), env("CUPROF_CAPTURE_RANGE_END"), capture_problem);
  if (!capture_problem.empty()) c.problems.push_back(capture_problem);
  if (c.capture.kind != capture_range::none && (c.start_step >= 0 || c.delay_s > 0 || c.duration_s > 0 || c.slow)) {
    c.problems.push_back(
        "CUPROF_CAPTURE_RANGE chooses the windows: CUPROF_DELAY, CUPROF_DURATION, CUPROF_START_STEP and CUPROF_SLOW_STEPS are "
        "ignored");
    c.start_step = -1;
    c.delay_s = c.duration_s = 0;
    c.slow.reset();
  }
  if (c.start_step < 0 && c.steps > 0) {
    c.problems.push_back("CUPROF_STEPS needs CUPROF_START_STEP (the step the window opens at); ignored");
    c.steps = 0;
  }
  return c;
}

// Whether an NVTX range's message marks a program step: `name` alone or
// followed by something other than a letter ("step 3", "step#3", "step_3"),
// or, with no name given, "step" in any case so followed, or "ProfilerStep#".
inline bool is_step_range(std::string_view message, std::string_view name) {
  const auto starts_word = [&message](std::string_view word, bool any_case) {
    if (message.size() < word.size()) return false;
    for (std::size_t i = 0; i < word.size(); ++i) {
      const char a = message[i], b = word[i];
      if (a != b && !(any_case && (a | 0x20) == b)) return false;
    }
    if (message.size() == word.size()) return true;
    const char next = char(message[word.size()] | 0x20);
    return next < 'a' || next > 'z';
  };
  if (!name.empty()) return starts_word(name, false);
  return starts_word("step", true) || message.substr(0, 13) == "ProfilerStep#";
}

// The process-wide profile the environment asked for, and its settings.
struct environment_session {
  std::mutex mutex;
  profile* prof = nullptr;                 // running or waiting for its window; null once written
  std::atomic<bool> trace_pending{false};  // prof != nullptr, readable from signal handlers
  environment_config config;
  std::unique_ptr<trace_directory> directory;  // the trace's, held from start; null: it was not there then
  std::uint32_t owner_pid = 0;
  pid_t owner_session = 0;  // a child in another session has left its parent: daemon()
  // CUPROF_START_STEP: the steps' ranges seen, and the start of the latest up
  // to step N (clock ticks), published by the NVTX hook to the window's thread.
  std::atomic<int> steps_seen{0};
  std::atomic<std::uint64_t> latest_step_ticks{0};
  std::atomic<std::uint64_t> end_step_ticks{0};  // the start of step N+K (CUPROF_STEPS), where the window ends
  // When each of the window's steps started (ticks), from step N on, and the thread that marks them:
  // the trace's ProfilerStep#N spans. Steps past the last mark get none.
  static constexpr std::size_t step_marks = 4096;
  std::array<std::atomic<std::uint64_t>, step_marks> step_start_ticks{};
  std::atomic<std::uint32_t> step_tid{0};
  std::atomic<bool> window_open{false};
  std::mutex step_mutex;  // for step_signal only: the hook never takes it
  std::condition_variable step_signal;
  // CUPROF_CAPTURE_RANGE: what the hooks and triggers ask of the window's
  // thread. `owner` says whose the window is, from the call that opens it to
  // the one that closes it: a range's or a trigger's, never both.
  enum : int { no_window, range_window, trigger_window };
  std::atomic<int> owner{no_window};
  std::atomic<std::uint64_t> open_asked_ticks{0};   // when a range or trigger asked for a window; 0: not asked
  std::atomic<std::uint64_t> close_asked_ticks{0};  // where the window ends; 0: not asked
  std::atomic<std::uint32_t> range_tid{0};          // nvtx: the thread that opened the range
  std::atomic<std::uintptr_t> range_domain{0};      // nvtx: its domain
  std::atomic<std::uint64_t> range_id{0};           // nvtx: a started range's id; 0 a pushed range
  std::atomic<int> range_level{0};                  // pushed range: its thread's pushes in its domain, its own counted
  std::atomic<std::uintptr_t> named_domain{0};      // the handle of the domain CUPROF_CAPTURE_RANGE names, once created
  int ranges_written = 0;                           // the ranges' traces, under `mutex`
  std::atomic<bool> ranges_done{false};             // as many as CUPROF_CAPTURE_RANGE_END asked for
  std::atomic<int> ranges_closed{0};                // the ranges the hooks closed, counted at the closing call
  int windows_written = 0;                          // every window's, for %n, under `mutex`
  // A trigger's window (cuprof trigger, runtime/control_endpoint.hpp): its
  // path, and its end, a steady-clock reading or a count of program steps.
  control_endpoint* endpoint = nullptr;
  std::string trigger_path;                           // under `mutex`; empty: the window is not a trigger's
  std::atomic<std::uint64_t> trigger_deadline_ns{0};  // monotonic ns; 0: none
  std::atomic<int> trigger_steps{0};                  // N, published by trigger_steps_left's release
  int trigger_first_step = 0;                         // the opening step's number, for its ProfilerStep#N span
  std::atomic<int> trigger_steps_left{0};             // steps: the window opens at the next step's start and ends N starts later
  // The program's thread waits here, inside its start call, until the
  // window is open (at most open_wait), so its first kernels are in it.
  std::mutex capture_mutex;
  std::condition_variable capture_signal;  // to the window's thread
  std::condition_variable capture_opened;  // to the program's thread
  int slow_traces_written = 0;             // CUPROF_SLOW_STEPS: the kept windows' files, numbered from 1
  std::atomic<int> slow_marks_handled{0};  // and the marks handed to the profile (written under `mutex`)
};

// The trace path as the process will write it. Made absolute at start, so a
// program that changes directory still writes where it was asked. A process
// started by another traced process (CUPROF_ROOT_PID is the first one's) whose
// pattern names no pid gets ".<pid>" before the extension: children of one run
// never overwrite each other's trace, and the first process keeps the name.
inline std::string resolve_trace_path(std::string path, std::uint32_t pid, const char* root_pid, bool pattern_has_pid) {
  if (root_pid && *root_pid && std::to_string(pid) != root_pid && !pattern_has_pid) {
    const std::size_t slash = path.rfind('/');
    const std::size_t dot = path.find('.', slash == std::string::npos ? 0 : slash + 1);
    path.insert(dot == std::string::npos ? path.size() : dot, "." + std::to_string(pid));
  }
  if (!path.empty() && path[0] != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd)) path = std::string(cwd) + "/" + path;
  }
  return path;
}

// The n-th trace of a process that writes several (capture ranges, slow
// steps): every %n is n; a path without one gets ".<tag><n>" before the file
// name's extension, or stays as it is when `tag` is null.
inline std::string numbered_trace_path(std::string path, int n, const char* tag) {
  bool numbered = false;
  for (std::size_t at = path.find("%n"); at != std::string::npos; at = path.find("%n", at)) {
    path.replace(at, 2, std::to_string(n));
    numbered = true;
  }
  if (numbered || !tag) return path;
  const std::size_t slash = path.rfind('/');
  const std::size_t dot = path.find('.', slash == std::string::npos ? 0 : slash + 1);
  return path.insert(dot == std::string::npos ? path.size() : dot, "." + std::string(tag) + std::to_string(n));
}

// `cuprof run`'s directory for the processes of one run (CUPROF_RUN_DIR, made
// by the first process, tools/inject/inject.cpp): each process of the run that
// initialises CUDA leaves a file named by its pid there. Null unless it is a
// directory (not a link) this user made for itself, closed to others: the
// variable is inherited and could name anything.
inline const char* run_directory() {
  const char* dir = std::getenv("CUPROF_RUN_DIR");
  struct stat st {};
  if (!dir || *dir != '/' || ::lstat(dir, &st) != 0) return nullptr;
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) return nullptr;
  return dir;
}

// How many other processes of this run initialised CUDA.
inline int other_traced_processes() {
  const char* dir = run_directory();
  DIR* d = dir ? ::opendir(dir) : nullptr;
  if (!d) return 0;
  int n = 0;
  const std::string self = std::to_string(::getpid());
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    n += !name.empty() && name.find_first_not_of("0123456789") == std::string::npos && name != self;
  }
  ::closedir(d);
  return n;
}

// A launcher (torchrun, mpirun, a script) that `cuprof run` started: it
// initialised CUDA perhaps (torchrun asks how many GPUs there are) but put no
// work on a GPU, and processes it started were traced. Its CPU-only trace
// would only add a file named like a rank and a table among the ranks'
// output: it writes nothing and says so here, unless CUPROF_TRACE_LAUNCHER=1
// (--trace-launcher). Both ways a launcher ends (its environment profile's
// write, the injection library's exit check when it never initialised CUDA)
// ask this.
inline bool leave_out_launcher(bool run_root, bool put_gpu_work) {
  if (!run_root || put_gpu_work) return false;
  const char* keep = std::getenv("CUPROF_TRACE_LAUNCHER");
  const int others = keep && std::string(keep) == "1" ? 0 : other_traced_processes();
  if (others == 0) return false;
  log_line("this process (" + terminal_safe(process_name()) + ", pid " + std::to_string(::getpid()) +
           ") put no work on a GPU and started " + std::to_string(others) + " traced process" + (others == 1 ? "" : "es") +
           ": no trace of its own (--trace-launcher keeps one)");
  return true;
}

inline environment_session& environment() {
  static environment_session* s = new environment_session;  // outlives exit handlers
  return *s;
}

inline profile* environment_profile() { return environment().prof; }

// The NVTX hook (process_state::on_nvtx_range) of what counts program steps:
// a step is a range's start, its message handed to `on_start`.
template <void (*on_start)(const char*, std::size_t) noexcept>
void at_range_starts(const nvtx_range_event& e) noexcept {
  if ((e.kind == nvtx_range_event::push || e.kind == nvtx_range_event::start) && e.message) on_start(e.message, e.length);
}

// CUPROF_START_STEP: the window opens where step N's NVTX range starts. The
// profile records from start-up (CUPTI must be attached for NVTX's callbacks
// to reach cuprof); the hook, on the program's thread inside its NVTX call,
// only counts the step and publishes when it started; this thread then moves
// the window's start there, throwing away what came before (after every step
// before N as well, so that what waits for the window stays one step's worth).
// The trace is written when step N+K starts (CUPROF_STEPS), after
// CUPROF_DURATION, or at exit.
struct step_window {
  // The range's own start is stamped by CUPTI just before the hook runs: the
  // window opens this many ticks earlier (about 10 us on the TSC, 20 on
  // nanosecond ticks) so that the step's range is in it.
  static constexpr std::uint64_t lead_ticks = 20000;

  static void on_range(const char* message, std::size_t length) noexcept {
    environment_session& s = environment();
    if (!is_step_range(std::string_view(message, length), s.config.step_range)) return;
    const std::uint64_t now = now_ticks();
    // Steps after N leave the start alone: the thread may wake after several.
    const int step = s.steps_seen.load(std::memory_order_relaxed);
    if (step <= s.config.start_step)
      s.latest_step_ticks.store(now > lead_ticks ? now - lead_ticks : 0, std::memory_order_relaxed);
    else if (s.config.steps > 0 && step == s.config.start_step + s.config.steps)
      s.end_step_ticks.store(now, std::memory_order_relaxed);  // no lead: the previous step's range ended before
    if (step >= s.config.start_step && std::size_t(step - s.config.start_step) < environment_session::step_marks) {
      if (step == s.config.start_step) s.step_tid.store(std::uint32_t(::syscall(SYS_gettid)), std::memory_order_relaxed);
      s.step_start_ticks[std::size_t(step - s.config.start_step)].store(now, std::memory_order_relaxed);
    }
    s.steps_seen.fetch_add(1, std::memory_order_release);
    s.step_signal.notify_one();
  }

  // The program's steps in the window as torch.profiler's ProfilerStep#N spans,
  // from where each step started (epoch ns, the hook's own reading, from step
  // `first_step` on) to where the next did or the window ended, on the thread
  // that marks them: HTA and cuprof's own step analyses find iterations by them.
  static void add_profiler_steps(trace& t, int first_step, const std::vector<std::uint64_t>& starts_ns, std::uint32_t tid) {
    for (std::size_t k = 0; k < starts_ns.size(); ++k) {
      const std::uint64_t end = k + 1 < starts_ns.size() ? starts_ns[k + 1] : t.meta.window_end_ns;
      if (starts_ns[k] == 0 || end <= starts_ns[k] || starts_ns[k] >= t.meta.window_end_ns) break;
      cpu_span step;
      step.start_ns = starts_ns[k];
      step.end_ns = end;
      step.tid = tid;
      step.name = t.names.intern(std::string(step_name_prefix) + std::to_string(first_step + int(k)));
      step.is_step = true;
      step.id = std::uint32_t(t.spans.size() + 1);
      t.spans.push_back(step);
    }
  }

  // The marked steps' starts in epoch ns, up to the window's end.
  static std::vector<std::uint64_t> step_starts(environment_session& s) {
    const tick_converter clock(clock_anchor(), sample_clocks());
    std::vector<std::uint64_t> out;
    for (const std::atomic<std::uint64_t>& mark : s.step_start_ticks) {
      const std::uint64_t ticks = mark.load(std::memory_order_relaxed);
      // Step N+K's mark is where the window ends: no step of its own.
      if (ticks == 0 || (s.config.steps > 0 && out.size() == std::size_t(s.config.steps))) break;
      out.push_back(clock.to_epoch_ns(ticks));
    }
    return out;
  }

  // The trace's window ends where step N+K started, when it did.
  static void stop(profile& p, environment_session& s) { p.stop_at(s.end_step_ticks.load(std::memory_order_relaxed)); }

  // The window's thread. A plain function, as every thread cuprof starts (see run_environment_window).
  static void run(profile* p);
};

// CUPROF_CAPTURE_RANGE: windows the program marks itself, or that `cuprof
// trigger` asks for. The profile waits with CUPTI attached and nothing
// recording (an idle profiler's cost); the hooks, on the program's thread
// inside its call, only match the call and ask; the window's thread opens and
// closes the window and writes each trace; the control endpoint's thread
// takes triggers.
struct window_control {
  static constexpr std::chrono::milliseconds open_wait{1000};

  static void on_profiler_api(bool start) noexcept {
    environment_session& s = environment();
    if (s.config.capture.kind != capture_range::cuda || s.ranges_done.load(std::memory_order_relaxed)) return;
    // cudaProfilerStart calls cuProfilerStart: both reach the hook, one range.
    int expected = start ? environment_session::no_window : environment_session::range_window;
    if (!s.owner.compare_exchange_strong(expected, start ? environment_session::range_window : environment_session::no_window))
      return;
    if (start) ask_open(s);
    else range_closed(s);
  }

  static void on_nvtx(const nvtx_range_event& e) noexcept {
    environment_session& s = environment();
    const capture_range& c = s.config.capture;
    if ((e.kind == nvtx_range_event::push || e.kind == nvtx_range_event::start) && e.message &&
        s.trigger_steps_left.load(std::memory_order_acquire) > 0 &&
        is_step_range(std::string_view(e.message, e.length), s.config.step_range))
      return on_step(s, e);
    if (c.kind != capture_range::nvtx || s.ranges_done.load(std::memory_order_relaxed)) return;
    const auto is = [&e](const std::string& text) {
      return e.message && e.length == text.size() && std::memcmp(e.message, text.data(), e.length) == 0;
    };
    const bool in_range = s.owner.load(std::memory_order_relaxed) == environment_session::range_window;
    switch (e.kind) {
      case nvtx_range_event::domain_created:
        if (!c.domain.empty() && is(c.domain)) s.named_domain.store(e.domain, std::memory_order_relaxed);
        return;
      case nvtx_range_event::push:
      case nvtx_range_event::start: {
        if (in_range) {
          if (e.kind == nvtx_range_event::push && same_thread_and_domain(s, e))
            s.range_level.fetch_add(1, std::memory_order_relaxed);
          return;
        }
        if (!is(c.message) || (!c.domain.empty() && (!e.domain || e.domain != s.named_domain.load(std::memory_order_relaxed))))
          return;
        if (std::uint32_t(::getpid()) != s.owner_pid) return;  // a forked child: no window's thread there
        int expected = environment_session::no_window;
        if (!s.owner.compare_exchange_strong(expected, environment_session::range_window)) return;  // a trigger's window
        s.range_tid.store(std::uint32_t(::syscall(SYS_gettid)), std::memory_order_relaxed);
        s.range_domain.store(e.domain, std::memory_order_relaxed);
        s.range_id.store(e.kind == nvtx_range_event::start ? e.id : 0, std::memory_order_relaxed);
        s.range_level.store(1, std::memory_order_relaxed);
        return ask_open(s);
      }
      case nvtx_range_event::pop:
        if (!in_range || s.range_id.load(std::memory_order_relaxed) != 0 || !same_thread_and_domain(s, e) ||
            s.range_level.fetch_sub(1, std::memory_order_relaxed) != 1)
          return;
        break;
      case nvtx_range_event::end:
        if (!in_range || e.id == 0 || e.id != s.range_id.load(std::memory_order_relaxed)) return;
        break;
    }
    int expected = environment_session::range_window;
    if (s.owner.compare_exchange_strong(expected, environment_session::no_window)) range_closed(s);
  }

  // The endpoint's handler, on its thread: the window opens now (a
  // duration) or at the next step's start (steps), its trace to `r.output`
  // or the process's trace path numbered.
  static trigger_reply on_trigger(const trigger_request& r) {
    environment_session& s = environment();
    std::lock_guard<std::mutex> l(s.mutex);
    if (!s.prof || !s.prof->running()) return {false, "the process is ending"};
    int expected = environment_session::no_window;
    if (!s.owner.compare_exchange_strong(expected, environment_session::trigger_window))
      return {false, "busy: a capture range's window is open"};
    s.trigger_path = r.output.empty() ? numbered_trace_path(s.config.trace_path, s.windows_written + 1, "") : r.output;
    if (r.steps > 0) {
      s.trigger_steps.store(r.steps, std::memory_order_relaxed);
      s.trigger_steps_left.store(r.steps + 1, std::memory_order_release);  // the first start opens the window
      if (!process().on_nvtx_range.load(std::memory_order_relaxed)) hook(true);
    } else {
      s.trigger_deadline_ns.store(monotonic_ns() + std::uint64_t(r.duration_s * 1e9));
      s.prof->open_window();
    }
    return {true, s.trigger_path};
  }

  // Each window's trace (on_trace_ready): a trigger's to its path, a range's
  // to the trace path with %n its number (or ".<n>" before the extension
  // when several ranges are captured and the path has no %n).
  static void write_window(profile& p) {
    environment_session& s = environment();
    const int n = ++s.windows_written;
    const bool triggered = !s.trigger_path.empty();
    // A window after the first never replaces an earlier trace of the run: numbered, as %n would.
    const bool numbered = s.config.capture.ranges != 1 || n > 1;
    const std::string path = triggered ? s.trigger_path : numbered_trace_path(s.config.trace_path, n, numbered ? "" : nullptr);
    if (!triggered && n > 1 && s.config.capture.ranges == 1 && s.config.trace_path.find("%n") == std::string::npos)
      log_line("window " + std::to_string(n) + " is written to " + terminal_safe(path) + ", beside the first trace, not over it");
    s.trigger_path.clear();
    if (!triggered) ++s.ranges_written;
    const trace* t = &p.last_trace();
    trace with_steps;
    const int trigger_steps = s.trigger_steps.exchange(0);
    if (triggered && trigger_steps > 0) {
      with_steps = *t;
      const tick_converter clock(clock_anchor(), sample_clocks());
      std::vector<std::uint64_t> starts;
      for (std::size_t k = 0; k < std::size_t(trigger_steps) && k < environment_session::step_marks; ++k) {
        const std::uint64_t ticks = s.step_start_ticks[k].exchange(0, std::memory_order_relaxed);
        if (ticks == 0) break;
        starts.push_back(clock.to_epoch_ns(ticks));
      }
      step_window::add_profiler_steps(with_steps, s.trigger_first_step, starts, s.step_tid.load(std::memory_order_relaxed));
      t = &with_steps;
    }
    try {
      const export_result written = s.directory ? cuprof::export_chrome_trace(*t, *s.directory, path, s.config.export_with)
                                                : cuprof::export_chrome_trace(*t, path, s.config.export_with);
      if (triggered && s.endpoint) s.endpoint->finish(true, written.path + " (" + std::to_string(written.events) + " events)");
    } catch (const std::exception& e) {
      if (triggered && s.endpoint) s.endpoint->finish(false, message_of(e));
      throw;
    }
    if (s.config.print_table) write_stderr(p.key_averages().table("self_cuda_time_total", 30));
  }

  static void hook(bool on) {
    process().on_nvtx_range.store(on ? &on_nvtx : nullptr, std::memory_order_relaxed);
    process().on_profiler_api.store(on ? &on_profiler_api : nullptr, std::memory_order_relaxed);
  }

  // For `cuprof trigger --list`: a window is open (a range's or a trigger's).
  static bool window_open() { return environment().owner.load() != environment_session::no_window; }

  // The profile waits for the first range or trigger, with the hooks set,
  // the control endpoint open and the window's thread started.
  static void begin(profile* p) {
    environment_session& s = environment();
    p->start_waiting();
    if (s.config.capture.kind != capture_range::trigger) hook(true);
    s.endpoint = control_endpoint::open(&on_trigger, &window_open);
    std::thread(&run, p).detach();
  }

  // At exit (write_environment_trace, under the session's lock): a window
  // still open is ended and written; no window at all is said.
  static void finish(profile& p, environment_session& s) {
    hook(false);
    release_waiting(s);
    if (p.running()) p.stop();
    if (s.endpoint) {
      s.endpoint->close();
      s.endpoint = nullptr;
    }
    if (s.windows_written == 0 && s.config.capture.kind != capture_range::trigger)
      log_line(std::string("no capture range started (") +
               (s.config.capture.kind == capture_range::cuda
                    ? "cudaProfilerStart was never called"
                    : "no NVTX range '" + terminal_safe(s.config.capture.message) + "' in the domain asked for") +
               "): no trace written, '" + terminal_safe(s.config.trace_path) + "' left as it was");
  }

  // The window's thread. A plain function, as every thread cuprof starts (see run_environment_window).
  static void run(profile* p);

 private:
  static void close_asked(profile* p, environment_session& e, std::uint64_t end);

  // The hook that closes a range counts it at once: a range that opens
  // before the window's thread wrote the last one asked for opens nothing.
  static void range_closed(environment_session& s) noexcept {
    const int ranges = s.config.capture.ranges;
    if (ranges > 0 && s.ranges_closed.fetch_add(1, std::memory_order_relaxed) + 1 >= ranges)
      s.ranges_done.store(true, std::memory_order_relaxed);
    ask_close(s);
  }

  static bool same_thread_and_domain(environment_session& s, const nvtx_range_event& e) noexcept {
    return e.domain == s.range_domain.load(std::memory_order_relaxed) &&
           std::uint32_t(::syscall(SYS_gettid)) == s.range_tid.load(std::memory_order_relaxed);
  }

  // A program step started while a trigger counts steps: the first opens
  // the window, the one N steps later closes it.
  // Each step's start is marked (step_start_ticks, from the opening step on):
  // the trace's ProfilerStep#N spans, numbered from the opening step's own
  // number when its message ends in one. The opening step's NVTX range began
  // before the window did, so the trace would otherwise lack it.
  static void on_step(environment_session& s, const nvtx_range_event& e) noexcept {
    const int left = s.trigger_steps_left.fetch_sub(1, std::memory_order_relaxed) - 1;
    if (left < 0) return;
    const int steps = s.trigger_steps.load(std::memory_order_relaxed);
    const std::size_t k = std::size_t(steps - left);
    if (k < environment_session::step_marks) s.step_start_ticks[k].store(now_ticks(), std::memory_order_relaxed);
    if (left == steps) {
      std::size_t digits = 0;
      while (digits < e.length && digits < 9 && e.message[e.length - 1 - digits] >= '0' &&
             e.message[e.length - 1 - digits] <= '9')
        ++digits;
      int number = 0;
      for (std::size_t i = e.length - digits; i < e.length; ++i) number = number * 10 + (e.message[i] - '0');
      s.trigger_first_step = number;
      s.step_tid.store(std::uint32_t(::syscall(SYS_gettid)), std::memory_order_relaxed);
      ask_open(s);
    } else if (left == 0) {
      ask_close(s);
    }
  }

  static void ask_open(environment_session& s) noexcept {
    try {
      std::unique_lock<std::mutex> lock(s.capture_mutex);
      s.open_asked_ticks.store(now_ticks());
      s.capture_signal.notify_one();
      s.capture_opened.wait_for(lock, open_wait, [&s] { return s.open_asked_ticks.load() == 0; });
    } catch (...) {
      // The window opens when the thread gets to it.
    }
  }

  static void ask_close(environment_session& s) noexcept {
    s.close_asked_ticks.store(now_ticks());
    try {
      std::lock_guard<std::mutex> lock(s.capture_mutex);
      s.capture_signal.notify_one();
    } catch (...) {}
  }

  static void release_waiting(environment_session& s) {
    std::lock_guard<std::mutex> lock(s.capture_mutex);
    s.open_asked_ticks.store(0);
    s.capture_opened.notify_all();
  }
};

// ---- CUPROF_SLOW_STEPS ---------------------------------------------------------------------------
// The profile records from start-up into slow_steps' ring. The hook marks
// every step's start, as step_window's does (each step k at
// step_start_ticks[k % step_marks]); this thread hands each mark to the
// profile as a step boundary, which moves the ring's start or cuts a kept
// window, and each kept window is written to a file of its own from
// on_trace_ready. At exit stop() hands over a window still waiting for its
// `after` steps and says the summary; nothing else is written.
struct slow_step_marks {
  static void on_range(const char* message, std::size_t length) noexcept {
    environment_session& s = environment();
    if (!is_step_range(std::string_view(message, length), s.config.step_range)) return;
    const std::uint64_t now = now_ticks();
    const int step = s.steps_seen.load(std::memory_order_relaxed);
    if (step == 0) s.step_tid.store(std::uint32_t(::syscall(SYS_gettid)), std::memory_order_relaxed);
    s.step_start_ticks[std::size_t(step) % environment_session::step_marks].store(
        now > step_window::lead_ticks ? now - step_window::lead_ticks : 0, std::memory_order_relaxed);
    s.steps_seen.fetch_add(1, std::memory_order_release);
    s.step_signal.notify_one();
  }

  // on_trace_ready: the kept window with its steps as ProfilerStep#N spans
  // (from the marks in it), to its own file.
  static void write_kept(profile& p) {
    environment_session& s = environment();
    trace t = p.last_trace();
    const tick_converter clock(clock_anchor(), sample_clocks());
    const int seen = s.steps_seen.load(std::memory_order_acquire);
    // A mark and the window's edge are the same tick, each converted by its own fit: a microsecond apart at most.
    constexpr std::uint64_t slack_ns = 1000;
    int first = -1;
    std::vector<std::uint64_t> starts;
    for (int k = std::max(0, seen - int(environment_session::step_marks)); k < seen; ++k) {
      const std::uint64_t ns =
          clock.to_epoch_ns(s.step_start_ticks[std::size_t(k) % environment_session::step_marks].load(std::memory_order_relaxed));
      if (ns + slack_ns < t.meta.window_start_ns || ns + slack_ns >= t.meta.window_end_ns) continue;
      if (first < 0) first = k;
      starts.push_back(ns);
    }
    if (first >= 0) step_window::add_profiler_steps(t, first, starts, s.step_tid.load(std::memory_order_relaxed));
    const std::string path = numbered_trace_path(s.config.trace_path, ++s.slow_traces_written, "slow");
    try {
      if (s.directory) cuprof::export_chrome_trace(t, *s.directory, path, s.config.export_with);
      else cuprof::export_chrome_trace(t, path, s.config.export_with);
    } catch (const std::exception& e) {
      log_line("could not write a slow step's trace: " + message_of(e));
    }
  }

  // Hands the marks not handed yet to the profile, with the session's mutex held.
  static void catch_up(environment_session& e, profile& p) {
    const int seen = e.steps_seen.load(std::memory_order_acquire);
    // Marks older than the array holds were written over: the steps they ended are skipped.
    int handled = std::max(e.slow_marks_handled.load(), seen - int(environment_session::step_marks) + 1);
    for (; handled < seen; ++handled)
      p.slow_step_at(e.step_start_ticks[std::size_t(handled) % environment_session::step_marks].load(std::memory_order_relaxed),
                     handled == 0);
    e.slow_marks_handled.store(handled);  // read by the marks' thread's wait, outside `mutex`
  }

  // The marks' thread. A plain function, as every thread cuprof starts (see run_environment_window).
  static void run(profile* p) {
    environment_session& e = environment();
    for (;;) {
      {
        std::unique_lock<std::mutex> wait(e.step_mutex);
        e.step_signal.wait_for(wait, std::chrono::milliseconds(20),
                               [&] { return e.steps_seen.load(std::memory_order_acquire) != e.slow_marks_handled.load(); });
      }
      {
        std::lock_guard<std::mutex> l(e.mutex);
        if (e.prof != p) break;  // written meanwhile (exit, a signal)
        catch_up(e, *p);
      }
      raise_remembered_signal();  // a signal that came while a kept window was written
    }
    raise_remembered_signal();
  }
};
// ---- end of CUPROF_SLOW_STEPS --------------------------------------------------------------------

// Stops recording and writes the trace and table, once, in the process that
// started it (a forked child inherits the exit handler but must not write).
// The profile is left allocated: other exit handlers may still run scopes.
inline void write_environment_trace(environment_session& s) {
  if (!s.prof || s.owner_pid != std::uint32_t(::getpid())) return;
  profile* p = s.prof;
  s.prof = nullptr;
  s.trace_pending.store(false);
  process().environment_profile_claimed.store(false);
  const char* root = std::getenv("CUPROF_ROOT_PID");
  const bool run_root = root && std::to_string(s.owner_pid) == root;
  if (run_root) ::unsetenv("CUPROF_ROOT_PID");  // later processes start afresh
  if (s.config.start_step >= 0 || s.config.slow) process().on_nvtx_range.store(nullptr, std::memory_order_relaxed);
  if (s.config.capture.kind != capture_range::none) {
    try {
      window_control::finish(*p, s);
    } catch (const std::exception& e) {
      log_line("could not write the trace: " + message_of(e));
    }
    return;
  }
  if (!p->running()) {
    log_line("recording never started (CUPROF_DELAY=" + std::to_string(s.config.delay_s) +
             " s is longer than the run): no trace written, '" + terminal_safe(s.config.trace_path) + "' left as it was");
    return;
  }
  try {
    if (s.config.slow) {  // the steps not handed over yet, the last kept window and the summary
      slow_step_marks::catch_up(s, *p);
      return p->stop();
    }
    step_window::stop(*p, s);
    const trace* written = &p->last_trace();
    if (leave_out_launcher(run_root, !written->gpu.empty() || !written->memory.empty())) return;
    if (s.config.start_step >= 0 && !s.window_open.load()) {
      const int seen = s.steps_seen.load();
      log_line("the window never opened: CUPROF_START_STEP=" + std::to_string(s.config.start_step) + " but the program ran " +
               std::to_string(seen) + " step" + (seen == 1 ? "" : "s") +
               " (NVTX ranges named as CUPROF_STEP_RANGE says); no trace written, '" + terminal_safe(s.config.trace_path) +
               "' left as it was");
      return;
    }
    trace with_steps;
    if (s.config.start_step >= 0) {
      with_steps = *written;
      step_window::add_profiler_steps(with_steps, s.config.start_step, step_window::step_starts(s),
                                      s.step_tid.load(std::memory_order_relaxed));
      written = &with_steps;
    }
    if (s.directory) cuprof::export_chrome_trace(*written, *s.directory, s.config.trace_path, s.config.export_with);
    else cuprof::export_chrome_trace(*written, s.config.trace_path, s.config.export_with);
    if (s.config.print_table) write_stderr(p->key_averages().table("self_cuda_time_total", 30));
  } catch (const std::exception& e) {
    log_line("could not write the trace: " + message_of(e));
  }
}

// A process that daemon() (or fork and setsid) made from the traced one: its
// parent ends without writing (daemon's parent calls _exit), so the child
// takes the profile over and writes its own trace, beside the parent's name.
// Other forked children (workers) write nothing: they share the parent's
// session and the parent writes the trace.
inline void adopt_if_daemon(environment_session& s) {
  const pid_t self = ::getpid();
  if (!s.prof || s.owner_pid == std::uint32_t(self) || ::getsid(0) == s.owner_session) return;
  s.owner_pid = std::uint32_t(self);
  s.owner_session = ::getsid(0);
  const std::string& path = s.config.trace_path;
  const std::size_t slash = path.rfind('/');
  const std::size_t dot = path.find('.', slash == std::string::npos ? 0 : slash + 1);
  s.config.trace_path.insert(dot == std::string::npos ? path.size() : dot, "." + std::to_string(self));
  log_line("this process left its parent's session (daemon()): it writes its own trace, to " +
           terminal_safe(s.config.trace_path));
}

// Every way the trace gets written (exit, the exit gate, CUPROF_DURATION, a
// signal, std::terminate) comes here. A forked child returns before the lock,
// which its parent may have held at the fork (its copy stays locked: the
// writing thread did not follow).
inline void finish_environment_profile() {
  environment_session& s = environment();
  if (s.owner_pid != std::uint32_t(::getpid()) && (!s.prof || ::getsid(0) == s.owner_session)) return;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    adopt_if_daemon(s);
    write_environment_trace(s);
  }
  raise_remembered_signal();  // a signal that came during the write ends the process now
}

// The timer thread of CUPROF_DELAY / CUPROF_DURATION: opens and closes the
// window; the exit handler writes whatever was recorded if the program ends
// first. A plain function, as every thread cuprof starts: a lambda's thread
// code is shared by the copies of cuprof in a process and runs one copy's body.
inline void run_environment_window(profile* p, double delay, double duration) {
  environment_session& e = environment();
  const auto sleep = [](double seconds) { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); };
  if (delay > 0) {
    sleep(delay);
    std::lock_guard<std::mutex> l(e.mutex);
    if (e.prof == p) p->start();
  }
  if (duration > 0) {
    sleep(duration);
    {
      std::lock_guard<std::mutex> l(e.mutex);
      if (e.prof == p) write_environment_trace(e);
    }
    raise_remembered_signal();
  }
}

inline void window_control::run(profile* p) {
  environment_session& e = environment();
  for (;;) {
    {
      std::unique_lock<std::mutex> wait(e.capture_mutex);
      e.capture_signal.wait_for(wait, std::chrono::milliseconds(20),
                                [&e] { return e.open_asked_ticks.load() != 0 || e.close_asked_ticks.load() != 0; });
    }
    const std::uint64_t deadline = e.trigger_deadline_ns.load();
    if (deadline > 0 && monotonic_ns() >= deadline) {
      e.trigger_deadline_ns.store(0);
      e.close_asked_ticks.store(now_ticks());
    }
    if (e.open_asked_ticks.load() == 0 && e.close_asked_ticks.load() == 0) continue;
    std::lock_guard<std::mutex> l(e.mutex);
    if (e.prof != p) return;  // written meanwhile (exit, a signal)
    // A range can close and the next one open before this thread wakes:
    // the window that was asked to close first goes first.
    const std::uint64_t open_at = e.open_asked_ticks.load();
    std::uint64_t end = e.close_asked_ticks.load();
    if (end != 0 && open_at != 0 && end < open_at) {
      e.close_asked_ticks.store(0);
      close_asked(p, e, end);
      end = 0;
    }
    if (open_at != 0) {
      p->open_window();
      release_waiting(e);
    }
    if (end == 0) end = e.close_asked_ticks.exchange(0);
    else e.close_asked_ticks.store(0);
    if (end != 0) close_asked(p, e, end);
  }
}

// The window asked to close at `end`, written; with the session's lock held.
inline void window_control::close_asked(profile* p, environment_session& e, std::uint64_t end) {
  const bool triggered = e.owner.load() == environment_session::trigger_window;
  try {
    p->close_window(end);
  } catch (const std::exception& x) {
    log_line("could not write the trace: " + message_of(x));
  }
  if (triggered) {
    e.trigger_deadline_ns.store(0);
    e.trigger_steps_left.store(0);
    if (e.config.capture.kind == capture_range::trigger || e.ranges_done.load()) hook(false);
    e.owner.store(environment_session::no_window);
  }
  const int ranges = e.config.capture.ranges;
  if (!triggered && ranges > 0 && e.ranges_written >= ranges) {
    // No more ranges: the program's calls are no longer watched. The
    // profile waits as before (a trigger may still come); CUPTI is let go
    // at exit, not here, where the program's threads may be in CUDA calls.
    e.ranges_done.store(true);
    hook(false);
  }
}

inline void step_window::run(profile* p) {
  environment_session& e = environment();
  const environment_config& c = e.config;
  int handled = 0;
  std::chrono::steady_clock::time_point opened{};
  for (;;) {
    {
      std::unique_lock<std::mutex> wait(e.step_mutex);
      e.step_signal.wait_for(wait, std::chrono::milliseconds(20),
                             [&] { return e.steps_seen.load(std::memory_order_acquire) != handled; });
    }
    const int seen = e.steps_seen.load(std::memory_order_acquire);
    const bool timed_out = e.window_open.load() && c.duration_s > 0 &&
                           std::chrono::steady_clock::now() - opened >= std::chrono::duration<double>(c.duration_s);
    if (seen == handled && !timed_out) continue;
    handled = seen;
    const int step = seen - 1;  // the latest step that started, counted from 0
    const bool ends = timed_out || (e.window_open.load() && c.steps > 0 && step >= c.start_step + c.steps);
    std::lock_guard<std::mutex> l(e.mutex);
    if (e.prof != p) return;  // written meanwhile (exit, a signal)
    if (ends) {
      write_environment_trace(e);
      break;
    }
    if (!e.window_open.load()) {
      p->restart_window_at(e.latest_step_ticks.load(std::memory_order_relaxed));
      if (step >= c.start_step) {
        e.window_open.store(true);
        opened = std::chrono::steady_clock::now();
      }
    }
  }
  raise_remembered_signal();
}

// Starts the environment's profile if it asks for one. `injected`: called by
// the injection library from inside cuInit.
inline bool start_environment_profile(bool injected = false) {
  environment_session& s = environment();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.prof) return false;
  s.config = read_environment([](const char* n) { return std::getenv(n); }, injected, std::uint32_t(::getpid()), host_name(),
                              process_rank(), process_world_size());
  if (!s.config.enabled) return false;
  // Every copy of cuprof in the process (the program's, its libraries', the
  // injection library of `cuprof run`) gets here; the first owns the profile.
  if (process().environment_profile_claimed.exchange(true)) return false;
  const std::string pid = std::to_string(::getpid());
  for (const std::string& problem : s.config.problems) log_line(problem);
  const char* pattern = std::getenv("CUPROF_TRACE");
  // A path with the pid, or with the rank in a process a launcher gave one, is its own.
  const bool own_path = pattern && (std::strstr(pattern, "%p") || (std::strstr(pattern, "%r") && launched_with_rank()));
  s.config.trace_path =
      resolve_trace_path(s.config.trace_path, std::uint32_t(::getpid()), std::getenv("CUPROF_ROOT_PID"), own_path);
  // Held from now: the directory's name looked up again at exit could lead elsewhere (a symlink put in its place).
  try {
    s.directory = std::make_unique<trace_directory>(s.config.trace_path);
  } catch (const error&) {
    // Not there yet: the program may create it; looked up when the trace is written.
  }
  // Loaded now rather than at the write: a signal's trace is written while the
  // program is stopped wherever it was, perhaps inside the dynamic loader.
  if (ends_with(s.config.trace_path, ".gz")) libdeflate();
  ::setenv("CUPROF_ROOT_PID", pid.c_str(), 0);     // the first traced process of a run
  ::setenv("CUPROF_STARTED_PID", pid.c_str(), 1);  // for good: the injection library's exit check
  profile_options options;
  options.activities = s.config.activities;
  options.with_stack = s.config.with_stack;
  options.profile_memory = s.config.profile_memory;
  if (s.config.gpu_metrics.on)
    options.gpu_metrics = gpu_metrics_options{s.config.gpu_metrics.names, double(s.config.gpu_metrics.interval_ns) / 1000.0};
  if (s.config.capture.kind != capture_range::none) options.on_trace_ready = &window_control::write_window;
  options.slow_steps = s.config.slow;
  if (s.config.slow) options.on_trace_ready = &slow_step_marks::write_kept;
  s.prof = new profile(options);
  s.trace_pending.store(true);
  s.owner_pid = std::uint32_t(::getpid());
  s.owner_session = ::getsid(0);
  // Registered before CUDA starts, so it runs after CUDA's teardown: it only
  // writes when the tracer's exit gate (which runs first) did not, e.g. when
  // CUDA was never traced.
  std::atexit(finish_environment_profile);
  process().before_exit.store(&finish_environment_profile);
  if (!process().abnormal_exits_handled.exchange(true))
    handle_abnormal_exits(&finish_environment_profile, &environment().trace_pending);
  if (s.config.capture.kind != capture_range::none) {
    window_control::begin(s.prof);
    return true;
  }
  if (s.config.delay_s == 0) s.prof->start();
  if (s.config.slow) {
    process().on_nvtx_range.store(&at_range_starts<&slow_step_marks::on_range>, std::memory_order_relaxed);
    std::thread(&slow_step_marks::run, s.prof).detach();
  } else if (s.config.start_step >= 0) {
    process().on_nvtx_range.store(&at_range_starts<&step_window::on_range>, std::memory_order_relaxed);
    std::thread(&step_window::run, s.prof).detach();
  } else if (s.config.delay_s > 0 || s.config.duration_s > 0) {
    std::thread(&run_environment_window, s.prof, s.config.delay_s, s.config.duration_s).detach();
  }
  return true;
}

}  // namespace cuprof::detail
