// A last line of defence for the exit path: runs a call into a library that
// may already be torn down (CUPTI, the driver) and turns a fault inside it
// into a `false` return instead of a crashed process. cuprof orders its exit
// work before CUDA's teardown (see tracer::exit_gate); this only covers the
// cases that ordering cannot see, so that the trace with everything received
// so far is still written and the program's exit status stays its own.
//
// Only for exit time: after a fault the library's state is unknown and the
// caller must not call into it again. The call must hold no lock and own no
// object with a destructor across the jump (siglongjmp unwinds nothing).
#pragma once

#include <setjmp.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

namespace cuprof::detail {

struct crash_guard_state {
  sigjmp_buf jump;
  std::atomic<long> thread{0};  // the guarded thread's id, 0 when no call is guarded
  struct sigaction previous_segv, previous_bus;
  volatile sig_atomic_t signal = 0;
};

inline crash_guard_state& crash_guard() {
  static crash_guard_state* state = new crash_guard_state;  // used during exit: never destroyed
  return *state;
}

inline void on_guarded_fault(int sig, siginfo_t*, void*) {
  crash_guard_state& g = crash_guard();
  if (g.thread.load() == long(::syscall(SYS_gettid))) {
    g.signal = sig;
    siglongjmp(g.jump, 1);
  }
  // Another thread's fault is not ours to hide: put its handler back; returning
  // re-runs the faulting instruction under it.
  ::sigaction(sig, sig == SIGBUS ? &g.previous_bus : &g.previous_segv, nullptr);
}

// Runs fn(); false when it faulted (SIGSEGV or SIGBUS on this thread), with the
// signal number in `fault`. One guarded call at a time, process-wide.
template <class Fn>
bool call_guarded(Fn&& fn, int* fault = nullptr) {
  crash_guard_state& g = crash_guard();
  long expected = 0;
  const long self = long(::syscall(SYS_gettid));
  if (!g.thread.compare_exchange_strong(expected, self)) {  // another thread is in one: run unguarded
    fn();
    return true;
  }
  struct sigaction guard {};
  guard.sa_sigaction = &on_guarded_fault;
  guard.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&guard.sa_mask);
  ::sigaction(SIGSEGV, &guard, &g.previous_segv);
  ::sigaction(SIGBUS, &guard, &g.previous_bus);
  g.signal = 0;
  bool ok = true;
  if (sigsetjmp(g.jump, 1) == 0) fn();
  else ok = false;
  ::sigaction(SIGSEGV, &g.previous_segv, nullptr);
  ::sigaction(SIGBUS, &g.previous_bus, nullptr);
  if (fault) *fault = g.signal;
  g.thread.store(0);
  return ok;
}

}  // namespace cuprof::detail
