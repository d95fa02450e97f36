// cuprof's messages: one line each, on stderr, prefixed "cuprof: ".
// Warnings always print. Information is two lines, one when CUDA tracing
// starts and one per trace written; CUPROF_QUIET=1 silences them.
#pragma once

#include "env.hpp"

#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

namespace cuprof::detail {

// Writes to stderr with write(2), not stdio: a program thread may hold
// stderr's lock (stopped by a signal, or blocked on a full pipe), and a line
// written in one call is not interleaved with the program's. A closed pipe
// (`2>&1 | head -1`) fails the write with EPIPE, not the process with SIGPIPE.
// Async-signal-safe.
inline void write_stderr(const char* data, std::size_t n) noexcept {
  const int saved_errno = errno;
  sigset_t pipe_only, before;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_only, &before);
  sigset_t pending;
  const bool was_pending = ::sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
  bool broken_pipe = false;
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      broken_pipe = w < 0 && errno == EPIPE;
      break;
    }
    data += w;
    n -= std::size_t(w);
  }
  if (broken_pipe && !was_pending && !sigismember(&before, SIGPIPE)) {
    const timespec now{0, 0};
    ::sigtimedwait(&pipe_only, nullptr, &now);  // the SIGPIPE this write raised, and only it
  }
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  errno = saved_errno;
}

inline void write_stderr(const std::string& text) noexcept { write_stderr(text.data(), text.size()); }

inline void log_line(const std::string& message) { write_stderr("cuprof: " + message + "\n"); }

// Each distinct line once per process: settings are read again at every
// window or message, and a bad one is worth one warning.
inline void log_line_once(const std::string& message) {
  static std::mutex mutex;
  static auto* printed = new std::set<std::string>;  // outlives exit handlers that log
  std::lock_guard<std::mutex> lock(mutex);
  if (printed->insert(message).second) log_line(message);
}

// The value of a setting read from the environment, its problem reported once.
template <class T>
T use_setting(const env_setting<T>& setting) {
  if (!setting.problem.empty()) log_line_once(setting.problem);
  return setting.value;
}

inline bool quiet() { return use_setting(read_switch("CUPROF_QUIET", std::getenv("CUPROF_QUIET"), false)); }

inline void log_info(const std::string& message) {
  if (!quiet()) log_line(message);
}

}  // namespace cuprof::detail
