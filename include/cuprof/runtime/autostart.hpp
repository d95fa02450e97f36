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
//   CUPROF_TRACE_DETAIL=lean  GPU records without launch configuration (default kineto)
//   CUPROF_STACKS=1        native call stacks at CUDA calls (profile_options::with_stack)
#pragma once

#include "abnormal_exit.hpp"
#include "../base/env.hpp"
#include "../base/log.hpp"
#include "process_info.hpp"
#include "../base/text.hpp"
#include "../output/file_sink.hpp"
#include "../profile.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
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
  bool with_stack = false;      // CUPROF_STACKS
  bool profile_memory = false;  // CUPROF_MEMORY: allocations and frees too
  double delay_s = 0;           // 0: from start-up
  double duration_s = 0;        // 0: until exit
  export_options export_with;
  std::vector<std::string> problems;  // bad values, each reported once and replaced by the default
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
  return c;
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

inline environment_session& environment() {
  static environment_session* s = new environment_session;  // outlives exit handlers
  return *s;
}

inline profile* environment_profile() { return environment().prof; }

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
  if (root && std::to_string(s.owner_pid) == root) ::unsetenv("CUPROF_ROOT_PID");  // later processes start afresh
  if (!p->running()) {
    log_line("recording never started (CUPROF_DELAY=" + std::to_string(s.config.delay_s) +
             " s is longer than the run): no trace written, '" + terminal_safe(s.config.trace_path) + "' left as it was");
    return;
  }
  try {
    p->stop();
    if (s.directory) cuprof::export_chrome_trace(p->last_trace(), *s.directory, s.config.trace_path, s.config.export_with);
    else p->export_chrome_trace(s.config.trace_path, s.config.export_with);
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
  s.config.trace_path = resolve_trace_path(s.config.trace_path, std::uint32_t(::getpid()), std::getenv("CUPROF_ROOT_PID"),
                                           pattern && std::strstr(pattern, "%p"));
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
  if (s.config.delay_s == 0) s.prof->start();
  if (s.config.delay_s > 0 || s.config.duration_s > 0) {
    std::thread(&run_environment_window, s.prof, s.config.delay_s, s.config.duration_s).detach();
  }
  return true;
}

}  // namespace cuprof::detail
