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
#include "windows/capture_range.hpp"
#include "windows/driver.hpp"
#include "windows/slow_steps.hpp"
#include "windows/start_step.hpp"
#include "windows/timer.hpp"
#include "windows/trigger.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
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
  if (world_size > 1 && !has_rank) out = with_tag_before_extension(out, ".rank" + std::to_string(rank));
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
      c.problems.push_back("CUPROF_ACTIVITIES=" + quoted_value(v) + " is not cpu, cuda or cpu,cuda; using cpu,cuda");
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
  c.slow = use(read_slow_steps(env("CUPROF_SLOW_STEPS")));
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
  if (c.capture.kind == capture_range::refused) {
    c.enabled = false;  // the problem says so; nothing else applies
    return c;
  }
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
  // Steps choose windows for CUPROF_START_STEP, CUPROF_SLOW_STEPS and triggers by steps (a capture range's).
  if (!c.step_range.empty() && c.start_step < 0 && !c.slow && c.capture.kind == capture_range::none) {
    c.problems.push_back(
        "CUPROF_STEP_RANGE needs CUPROF_START_STEP, CUPROF_SLOW_STEPS or CUPROF_CAPTURE_RANGE (what steps "
        "choose windows for); ignored");
    c.step_range.clear();
  }
  return c;
}

// The profile as the window policies' target (windows/driver.hpp).
class profile_target final : public window_target {
 public:
  profile_target(profile& p, void (*end)(std::uint64_t)) : p_(p), end_(end) {}
  void open() override {
    if (p_.running()) p_.open_window();
    else p_.start();  // CUPROF_DELAY: nothing attached until now
  }
  void move_start(std::uint64_t ticks) override { p_.restart_window_at(ticks); }
  void close_at(std::uint64_t ticks) override {
    try {
      p_.close_window(ticks);
    } catch (const std::exception& x) {
      log_line("could not write the trace: " + message_of(x));
    }
  }
  void end_at(std::uint64_t ticks) override { end_(ticks); }
  void step_boundary(std::uint64_t ticks, bool first) override { p_.slow_step_at(ticks, first); }
  // The session's own: it starts with no window open (capture ranges,
  // triggers), and its one window ends at `ticks` (0: now).
  void wait_for_windows() { p_.start_waiting(); }
  void stop_at(std::uint64_t ticks) { p_.stop_at(ticks); }

 private:
  profile& p_;
  void (*end_)(std::uint64_t);
};

// The process-wide profile the environment asked for, its settings, and the
// policy that chooses its windows.
struct environment_session {
  std::mutex mutex;
  profile* prof = nullptr;                 // running or waiting for its window; null once written
  std::atomic<bool> trace_pending{false};  // prof != nullptr, readable from signal handlers
  std::atomic<bool> trace_writing{false};  // write_environment_trace() is writing it
  environment_config config;
  std::unique_ptr<trace_directory> directory;  // the trace's, held from start; null: it was not there then
  std::uint32_t owner_pid = 0;
  pid_t owner_session = 0;  // a child in another session has left its parent: daemon()
  trace_destination out;    // where windows of their own are written (capture ranges, triggers, slow steps)
  window_driver driver{mutex};
  std::unique_ptr<profile_target> target;
  // The policies asked for; null when not.
  std::unique_ptr<timer_window> timer;
  std::unique_ptr<start_step_window> start_step;
  std::unique_ptr<capture_range_window> capture;
  std::unique_ptr<trigger_window> trigger;
  std::unique_ptr<slow_steps_window> slow;
  control_endpoint* endpoint = nullptr;
  // Whether the windows are the program's or a trigger's (a profile that waits for them) or the session's one.
  bool waits_for_windows() const { return config.capture.kind != capture_range::none; }
};

// The trace path as the process will write it. Made absolute at start, so a
// program that changes directory still writes where it was asked. A process
// started by another traced process (CUPROF_ROOT_PID is the first one's) whose
// pattern names no pid gets ".<pid>" before the extension: children of one run
// never overwrite each other's trace, and the first process keeps the name.
inline std::string resolve_trace_path(std::string path, std::uint32_t pid, const char* root_pid, bool pattern_has_pid) {
  if (root_pid && *root_pid && std::to_string(pid) != root_pid && !pattern_has_pid)
    path = with_tag_before_extension(path, "." + std::to_string(pid));
  if (!path.empty() && path[0] != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd)) path = std::string(cwd) + "/" + path;
  }
  return path;
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

// Stops recording and writes the trace and table, once, in the process that
// started it (a forked child inherits the exit handler but must not write).
// The profile is left allocated: other exit handlers may still run scopes.
inline void write_environment_trace(environment_session& s, std::uint64_t end_ticks = 0) {
  if (!s.prof || s.owner_pid != std::uint32_t(::getpid())) return;
  profile* p = s.prof;
  s.prof = nullptr;
  s.trace_writing.store(true);
  s.trace_pending.store(false);
  struct written {
    std::atomic<bool>& writing;
    ~written() { writing.store(false); }
  } done{s.trace_writing};
  process().environment_profile_claimed.store(false);
  const char* root = std::getenv("CUPROF_ROOT_PID");
  const bool run_root = root && std::to_string(s.owner_pid) == root;
  if (run_root) ::unsetenv("CUPROF_ROOT_PID");  // later processes start afresh
  try {
    s.driver.finish();  // the steps and windows asked for so far, then each policy's last word
  } catch (const std::exception& e) {
    log_line("could not write the trace: " + message_of(e));
  }
  if (s.waits_for_windows()) {
    try {
      if (p->running()) p->stop();  // a window still open is ended and written by its policy
    } catch (const std::exception& e) {
      log_line("could not write the trace: " + message_of(e));
    }
    if (s.endpoint) {
      s.endpoint->close();
      s.endpoint = nullptr;
    }
    return;
  }
  if (!p->running()) {
    log_line("recording never started (CUPROF_DELAY=" + std::to_string(s.config.delay_s) +
             " s is longer than the run): no trace written, '" + terminal_safe(s.config.trace_path) + "' left as it was");
    return;
  }
  try {
    if (s.slow) return p->stop();  // the last kept window and the summary
    s.target->stop_at(end_ticks);
    const trace* written = &p->last_trace();
    if (leave_out_launcher(run_root, !written->gpu.empty() || !written->memory.empty())) return;
    trace with_steps;
    if (s.start_step) {
      if (!s.start_step->opened()) {
        const int seen = s.start_step->steps_seen();
        const std::string unseen = seen == 0 ? why_nvtx_unseen() : std::string();
        log_line("the window never opened: CUPROF_START_STEP=" + std::to_string(s.config.start_step) +
                 (unseen.empty() ? " but the program ran " + std::to_string(seen) + " step" + (seen == 1 ? "" : "s") +
                                       " (NVTX ranges named as CUPROF_STEP_RANGE says)"
                                 : ", but no step could be seen (" + unseen + ")") +
                 "; no trace written, '" + terminal_safe(s.config.trace_path) + "' left as it was");
        return;
      }
      with_steps = *written;
      s.start_step->add_steps(with_steps);
      written = &with_steps;
    }
    s.out.write(*written, s.config.trace_path);
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
  s.config.trace_path = with_tag_before_extension(s.config.trace_path, "." + std::to_string(self));
  s.out.path = s.config.trace_path;
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

// A policy ended the session's one window at `end_ticks` (CUPROF_STEPS,
// CUPROF_DURATION), on the driver's thread with the session's lock held.
inline void end_environment_window(std::uint64_t end_ticks) { write_environment_trace(environment(), end_ticks); }

// The endpoint's handler, its cancel and --list's probe (control_endpoint.hpp).
inline trigger_reply on_environment_trigger(const trigger_request& r) {
  environment_session& s = environment();
  if (!s.trigger) return {false, "the process is ending"};
  return s.trigger->on_request(r);
}
inline bool on_environment_cancel() {
  environment_session& s = environment();
  return s.trigger && s.trigger->cancel();
}
inline bool environment_window_open() {
  environment_session& s = environment();
  return s.trigger && s.trigger->window_open();
}
inline void write_environment_window(profile& p) { environment().driver.written(p); }

// Starts the environment's profile if it asks for one. `injected`: called by
// the injection library from inside cuInit.
inline bool start_environment_profile(bool injected = false) {
  environment_session& s = environment();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.prof) return false;
  s.config = read_environment([](const char* n) { return std::getenv(n); }, injected, std::uint32_t(::getpid()), host_name(),
                              process_rank(), process_world_size());
  if (!s.config.enabled && s.config.problems.empty()) return false;
  // Every copy of cuprof in the process (the program's, its libraries', the
  // injection library of `cuprof run`) gets here; the first owns the profile.
  if (process().environment_profile_claimed.exchange(true)) return false;
  const std::string pid = std::to_string(::getpid());
  for (const std::string& problem : s.config.problems) log_line(problem);
  if (!s.config.enabled) return false;  // a setting refused: nothing is traced, as said
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
  options.slow_steps = s.config.slow;
  if (s.waits_for_windows() || s.config.slow) options.on_trace_ready = &write_environment_window;
  s.prof = new profile(options);
  s.trace_pending.store(true);
  s.owner_pid = std::uint32_t(::getpid());
  s.owner_session = ::getsid(0);
  // Registered before CUDA starts, so it runs after CUDA's teardown: it only
  // writes when the tracer's exit gate (which runs first) did not, e.g. when
  // CUDA was never traced.
  std::atexit(finish_environment_profile);
  process().before_exit.store(&finish_environment_profile);
  s.out.path = s.config.trace_path;
  s.out.directory = s.directory.get();
  s.out.options = s.config.export_with;
  s.out.print_table = s.config.print_table;
  timespec now{};
  // The fine clock: a file time is the coarse clock's tick or, on kernels with fine-grained
  // file times, finer; either way a file written before now has a time at or before it.
  ::clock_gettime(CLOCK_REALTIME, &now);
  s.out.started_ns = std::uint64_t(now.tv_sec) * 1000000000u + std::uint64_t(now.tv_nsec);
  // The policy that chooses the windows (windows/driver.hpp); none for the whole run.
  s.target = std::make_unique<profile_target>(*s.prof, &end_environment_window);
  const environment_config& c = s.config;
  if (s.waits_for_windows()) {
    s.target->wait_for_windows();
    if (c.capture.kind != capture_range::trigger) s.capture = std::make_unique<capture_range_window>(s.driver, c.capture, s.out);
    s.trigger = std::make_unique<trigger_window>(s.driver, s.out, c.step_range);
  } else if (c.slow) {
    s.slow = std::make_unique<slow_steps_window>(s.driver, s.out, c.step_range);
  } else if (c.start_step >= 0) {
    s.start_step = std::make_unique<start_step_window>(s.driver, c.start_step, c.steps, c.duration_s, c.step_range);
  } else if (c.delay_s > 0 || c.duration_s > 0) {
    s.timer = std::make_unique<timer_window>(s.driver, c.delay_s, c.duration_s, monotonic_ns());
  }
  const bool policy = s.waits_for_windows() || s.slow || s.start_step || s.timer;
  std::string why;
  if (policy && !s.driver.start_detached(s.target.get(), why)) {
    log_line(why + ": the windows asked for cannot be chosen; the program runs untraced");
    s.prof = nullptr;  // never started: nothing to write at exit
    s.trace_pending.store(false);
    return false;
  }
  if (!process().abnormal_exits_handled.exchange(true))
    handle_abnormal_exits(&finish_environment_profile, &s.trace_pending, &s.trace_writing);
  if (!s.waits_for_windows() && c.delay_s == 0) s.prof->start();
  if (!policy) return true;
  if (!s.timer) s.driver.hook(true);
  if (s.trigger) {
    s.endpoint = control_endpoint::open(&on_environment_trigger, &environment_window_open, &on_environment_cancel);
    s.trigger->set_endpoint(s.endpoint);
  }
  return true;
}

}  // namespace cuprof::detail
