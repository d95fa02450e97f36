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

// Holds `sig` off the calling thread while cuprof writes: SIGPIPE (a closed
// pipe) and SIGXFSZ (past a file-size limit, ulimit -f) would end the
// program, whose default action they have; held, the write fails with EPIPE
// or EFBIG instead and cuprof says so. One such signal raised meanwhile is
// taken at the end, unless it was pending or blocked before. Async-signal-safe.
class signal_held {
 public:
  explicit signal_held(int sig) noexcept : sig_(sig) {
    sigemptyset(&only_);
    sigaddset(&only_, sig);
    ::pthread_sigmask(SIG_BLOCK, &only_, &before_);
    sigset_t pending;
    was_pending_ = ::sigpending(&pending) == 0 && sigismember(&pending, sig);
  }
  signal_held(const signal_held&) = delete;
  signal_held& operator=(const signal_held&) = delete;
  ~signal_held() {
    const int saved_errno = errno;
    sigset_t pending;
    if (!was_pending_ && !sigismember(&before_, sig_) && ::sigpending(&pending) == 0 && sigismember(&pending, sig_)) {
      const timespec now{0, 0};
      ::sigtimedwait(&only_, nullptr, &now);
    }
    ::pthread_sigmask(SIG_SETMASK, &before_, nullptr);
    errno = saved_errno;
  }

 private:
  int sig_;
  sigset_t only_, before_;
  bool was_pending_ = false;
};

// Writes to stderr with write(2), not stdio: a program thread may hold
// stderr's lock (stopped by a signal, or blocked on a full pipe), and a line
// written in one call is not interleaved with the program's. A closed pipe
// (`2>&1 | head -1`) fails the write with EPIPE, not the process with SIGPIPE.
// Async-signal-safe.
inline void write_stderr(const char* data, std::size_t n) noexcept {
  const int saved_errno = errno;
  {
    const signal_held pipe(SIGPIPE);
    while (n > 0) {
      const ssize_t w = ::write(STDERR_FILENO, data, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      data += w;
      n -= std::size_t(w);
    }
  }
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
