// The environment's trace when the program does not end through exit():
//
//   SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE  the trace is written, then the
//       signal's default action runs (same exit status, a core for SIGQUIT).
//       Only signals left at their default action are taken; a program's own
//       handler, installed before or after, wins. A second signal (SIGPIPE
//       aside, which a program writing to a closed pipe raises at every write),
//       or a write that takes longer than signal_write_limit_s, ends the
//       process at once, without the trace.
//   std::terminate (an uncaught exception)  the trace is written, or the
//       write in progress (the exit's) finishes, then the previous terminate
//       handler runs (abort by default); waited for signal_write_limit_s at
//       most, past which the trace is abandoned, and said so.
//   quick_exit  the trace is written (at_quick_exit).
//   abort(), SIGABRT  one line: the trace was not written (the heap may be
//       corrupt, so nothing is attempted).
//   _exit, SIGKILL, a crash  nothing can run: no trace, an existing file is kept.
//
// A signal handler may only do async-signal-safe work, and the thread it
// interrupted may hold any lock (malloc's arenas, stdio's, the program's own),
// so the handler only remembers the signal, wakes cuprof's signal thread and
// returns: the interrupted thread goes on and lets its locks go. The signal
// thread writes the trace (its lines with write(2), no malloc_trim) and then
// ends the process with the signal's default action. A signal that comes while
// the trace is being written for another reason (exit, CUPROF_DURATION) is
// remembered and raised once that write is done.
#pragma once

#include "../base/log.hpp"
#include "../base/threads.hpp"

#include <pthread.h>
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

// Every signal whose default action ends the process and that a program
// meets in practice: a terminal's, a batch system's CPU limit (SIGXCPU), a
// timer the program set and left at the default (SIGALRM, SIGVTALRM,
// SIGPROF), kill -USR1. Only where the program left the default action
// (handle_abnormal_exits). Not SIGXFSZ: past a file-size limit the trace's
// write fails too (cuprof's writes hold it off: file_sink.hpp), nor real-time
// signals, which libraries take for their own use.
constexpr int forwarded_signals[] = {SIGINT,  SIGTERM, SIGHUP,    SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2,
                                     SIGALRM, SIGXCPU, SIGVTALRM, SIGPROF, SIGIO,   SIGPWR};
// A trace whose GPU never finishes its work (the program was interrupted
// because a kernel hangs) or whose writer is stuck must not keep the program
// from ending: past this, the signal ends it without the trace.
constexpr int signal_write_limit_s = 60;

struct abnormal_exit_state {
  void (*write_trace)() = nullptr;                   // writes the trace once; later calls wait for a write in progress
  const std::atomic<bool>* trace_pending = nullptr;  // the trace is still to be written
  const std::atomic<bool>* trace_writing = nullptr;  // ... or being written
  pid_t owner = 0;                                   // a forked child takes the default action
  sem_t wake;                                        // posted by the handler: a signal came
  sem_t written;                                     // posted by the writer: the trace is written
  std::atomic<int> signal{0};                        // the first signal taken
  std::atomic<bool> ending{false};                   // the process ends once the trace is written
  std::terminate_handler previous_terminate = nullptr;
};

inline abnormal_exit_state& abnormal_exit() {
  static abnormal_exit_state* s = new abnormal_exit_state;  // used from handlers at any time: never destroyed
  return *s;
}

// True once a signal said the process ends: the profile's stop() then skips
// what only a process that goes on needs (releasing CUPTI, malloc_trim).
inline bool process_ending_on_signal() noexcept { return abnormal_exit().ending.load(std::memory_order_acquire); }

// Async-signal-safe.
inline void say_from_signal_handler(const char* text) {
  std::size_t n = 0;
  while (text[n]) ++n;
  write_stderr(text, n);
}

// Ends the process as `sig` would have by default. From any thread: the
// signal is unblocked in the calling thread and raised there.
[[noreturn]] inline void end_with_signal(int sig) {
  ::signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(sig);
  // A signal whose default action does not end the process cannot get here.
  ::_exit(128 + sig);
}

// After a write of the trace for any reason: a signal that came meanwhile
// ends the process now, as it would have without cuprof.
inline void raise_remembered_signal() {
  abnormal_exit_state& s = abnormal_exit();
  const int sig = s.signal.load(std::memory_order_acquire);
  if (sig != 0 && ::getpid() == s.owner) end_with_signal(sig);
}

inline void on_forwarded_signal(int sig) {
  const int saved_errno = errno;
  abnormal_exit_state& s = abnormal_exit();
  int none = 0;
  if (::getpid() != s.owner) {
    ::signal(sig, SIG_DFL);
    ::raise(sig);  // blocked while this handler runs: delivered when it returns
  } else if (s.signal.compare_exchange_strong(none, sig)) {
    s.ending.store(true, std::memory_order_release);
    sem_post(&s.wake);
  } else if (sig != SIGPIPE) {
    say_from_signal_handler("cuprof: a second signal: exiting without writing the trace\n");
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
  errno = saved_errno;
}

inline void on_abort_signal(int sig) {
  abnormal_exit_state& s = abnormal_exit();
  if (::getpid() == s.owner && s.trace_pending && s.trace_pending->load())
    say_from_signal_handler("cuprof: the program aborted (SIGABRT): the trace was not written\n");
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

inline bool has_default_action(int sig) {
  struct sigaction current {};
  return ::sigaction(sig, nullptr, &current) == 0 && !(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_DFL;
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

// Writes the trace, then says so through `written`: the thread of write_trace_in_time().
inline void write_trace_and_post() {
  block_forwarded_signals();
  abnormal_exit_state& st = abnormal_exit();
  st.write_trace();
  sem_post(&st.written);
}

// Writes the trace (or waits for the write in progress) on a thread of its
// own, for signal_write_limit_s at most: the caller may hold a lock the write
// needs, and a trace whose GPU work never finishes or whose writer is stuck
// must not keep the program from ending. False when the time ran out.
// Without a thread to spare, on this one, unbounded.
inline bool write_trace_in_time() {
  abnormal_exit_state& st = abnormal_exit();
  std::string why;
  if (!start_detached_thread(why, &write_trace_and_post)) {
    st.write_trace();
    return true;
  }
  timespec until{};
  ::clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += signal_write_limit_s;
  int r;
  while ((r = sem_timedwait(&st.written, &until)) != 0 && errno == EINTR) {}
  return r == 0;
}

// The thread that waits for a forwarded signal: the trace is written in
// time, then the process ends with the signal.
inline void watch_for_signals() {
  block_forwarded_signals();
  abnormal_exit_state& st = abnormal_exit();
  while (sem_wait(&st.wake) != 0) {}
  const int sig = st.signal.load();
  log_line(std::string("signal ") + std::to_string(sig) + " (" + ::strsignal(sig) +
           "): writing the trace before the program ends as the signal says (a second signal ends it at once)");
  if (!write_trace_in_time()) say_from_signal_handler("cuprof: the trace could not be written in time; exiting without it\n");
  end_with_signal(sig);
}

// The trace is written (or a write in progress, the exit's, finished) before
// the program ends, in time (write_trace_in_time()); past that, it is
// abandoned, and said so.
inline void on_terminate() {
  abnormal_exit_state& s = abnormal_exit();
  const bool pending = s.trace_pending && s.trace_pending->load();
  const bool writing = s.trace_writing && s.trace_writing->load();
  if (::getpid() == s.owner && (pending || writing)) {
    log_line(pending ? "std::terminate was called (an uncaught exception?): writing the trace first"
                     : "std::terminate was called (an uncaught exception?) while the trace was being written: letting the "
                       "write finish first");
    if (!write_trace_in_time())
      log_line("the trace could not be written within " + std::to_string(signal_write_limit_s) +
               " s: abandoned, the program ends without it");
  }
  if (s.previous_terminate) s.previous_terminate();
  std::abort();
}

// Once per process, by the process that owns the environment's profile.
// `write_trace` must be callable from any thread, write at most once, and
// return only once no write is in progress; `*trace_pending` says whether it
// still has something to write, `*trace_writing` whether it is writing.
// Without a thread to spare for the signal watcher, signals keep their
// default action (said in one line).
inline void handle_abnormal_exits(void (*write_trace)(), const std::atomic<bool>* trace_pending,
                                  const std::atomic<bool>* trace_writing) {
  abnormal_exit_state& s = abnormal_exit();
  s.write_trace = write_trace;
  s.trace_pending = trace_pending;
  s.trace_writing = trace_writing;
  s.owner = ::getpid();
  sem_init(&s.wake, 0, 0);
  sem_init(&s.written, 0, 0);
  std::string why;
  if (start_detached_thread(why, &watch_for_signals)) {
    for (int sig : forwarded_signals)
      if (has_default_action(sig)) install_handler(sig, &on_forwarded_signal);
  } else {
    log_line(why + ": a signal such as SIGTERM ends the program without writing the trace");
  }
  if (has_default_action(SIGABRT)) install_handler(SIGABRT, &on_abort_signal);
  s.previous_terminate = std::set_terminate(&on_terminate);
  std::at_quick_exit(write_trace);
}

}  // namespace cuprof::detail
