// The environment's trace when the program does not end through exit():
//
//   SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE  the trace is written, then the
//       signal's default action runs (same exit status, a core for SIGQUIT).
//       Only signals left at their default action are taken; a program's own
//       handler, installed before or after, wins. A second signal, or a write
//       that takes longer than signal_write_limit_s, ends the process at once.
//   std::terminate (an uncaught exception)  the trace is written, then the
//       previous terminate handler runs (abort by default).
//   quick_exit  the trace is written (at_quick_exit).
//   abort(), SIGABRT  one line: the trace was not written (the heap may be
//       corrupt, so nothing is attempted).
//   _exit, SIGKILL, a crash  nothing can run: no trace, an existing file is kept.
//
// A signal handler cannot format and write a trace (nothing it may call
// allocates), so it wakes a thread that does, and waits for it.
#pragma once

#include "log.hpp"

#include <semaphore.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>

namespace cuprof::detail {

constexpr int forwarded_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE};
constexpr int signal_write_limit_s = 60;

struct abnormal_exit_state {
  void (*write_trace)() = nullptr;      // writes the trace once; later calls do nothing
  const std::atomic<bool>* trace_pending = nullptr;  // the trace is still to be written
  pid_t owner = 0;                       // a forked child takes the default action
  sem_t wake;
  std::atomic<int> signal{0};            // the first signal taken
  std::atomic<bool> written{false};      // the writer thread is done
  std::terminate_handler previous_terminate = nullptr;
};

inline abnormal_exit_state& abnormal_exit() {
  static abnormal_exit_state* s = new abnormal_exit_state;  // used from handlers at any time: never destroyed
  return *s;
}

// Async-signal-safe.
inline void say_from_signal_handler(const char* text) {
  std::size_t n = 0;
  while (text[n]) ++n;
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, text, n);
    if (w <= 0 && errno != EINTR) return;
    if (w > 0) text += w, n -= std::size_t(w);
  }
}

inline void take_default_action(int sig) {
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // blocked while its handler runs: delivered when the handler returns
}

inline void on_forwarded_signal(int sig) {
  abnormal_exit_state& s = abnormal_exit();
  int none = 0;
  if (::getpid() != s.owner || !s.signal.compare_exchange_strong(none, sig)) return take_default_action(sig);
  sem_post(&s.wake);
  const timespec tick{0, 10 * 1000 * 1000};
  for (int waited = 0; !s.written.load() && waited < signal_write_limit_s * 100; ++waited) ::nanosleep(&tick, nullptr);
  if (!s.written.load()) say_from_signal_handler("cuprof: the trace could not be written in time; exiting without it\n");
  take_default_action(sig);
}

inline void on_abort_signal(int sig) {
  abnormal_exit_state& s = abnormal_exit();
  if (::getpid() == s.owner && s.trace_pending && s.trace_pending->load())
    say_from_signal_handler("cuprof: the program aborted (SIGABRT): the trace was not written\n");
  take_default_action(sig);
}

inline void on_terminate() {
  abnormal_exit_state& s = abnormal_exit();
  if (::getpid() == s.owner && s.trace_pending->load()) {
    log_line("std::terminate was called (an uncaught exception?): writing the trace first");
    s.write_trace();
  }
  if (s.previous_terminate) s.previous_terminate();
  std::abort();
}

inline bool has_default_action(int sig) {
  struct sigaction current {};
  return ::sigaction(sig, nullptr, &current) == 0 && !(current.sa_flags & SA_SIGINFO) &&
         current.sa_handler == SIG_DFL;
}

inline void install_handler(int sig, void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(sig, &action, nullptr);
}

// Blocks the forwarded signals in the calling thread (cuprof's own threads),
// so that a process-directed signal lands in a program thread.
inline void block_forwarded_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : forwarded_signals) sigaddset(&set, sig);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// The thread that writes the trace when a forwarded signal arrives.
inline void write_trace_on_signal() {
  block_forwarded_signals();
  abnormal_exit_state& st = abnormal_exit();
  while (sem_wait(&st.wake) != 0) {}
  const int sig = st.signal.load();
  log_line(std::string("signal ") + std::to_string(sig) + " (" + ::strsignal(sig) +
           "): writing the trace before the program ends as the signal says");
  st.write_trace();
  st.written.store(true);
}

// Once per process, by the process that owns the environment's profile.
// `write_trace` must be callable from any thread and write at most once;
// `*trace_pending` says whether it still has something to write.
inline void handle_abnormal_exits(void (*write_trace)(), const std::atomic<bool>* trace_pending) {
  abnormal_exit_state& s = abnormal_exit();
  s.write_trace = write_trace;
  s.trace_pending = trace_pending;
  s.owner = ::getpid();
  sem_init(&s.wake, 0, 0);
  std::thread(&write_trace_on_signal).detach();
  for (int sig : forwarded_signals)
    if (has_default_action(sig)) install_handler(sig, &on_forwarded_signal);
  if (has_default_action(SIGABRT)) install_handler(SIGABRT, &on_abort_signal);
  s.previous_terminate = std::set_terminate(&on_terminate);
  std::at_quick_exit(write_trace);
}

}  // namespace cuprof::detail
