// cuprof's own threads (the CUPTI worker, the metrics decoder, the window
// driver, the signal watcher, the trigger endpoint) start here. A process may
// have no thread to spare (a container's pids limit, ulimit -u): std::thread
// then throws, which before main, or under a lock, ended or hung the program
// it was to measure. Here a thread that cannot start is a reason the caller
// says in its one line, and the feature the thread serves goes without it.
#pragma once

#include <exception>
#include <string>
#include <thread>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace cuprof::detail {

// Runs fn(args...) on a detached thread; false, with `why` saying why not,
// when the system gives none. `fn` is a function pointer, never a lambda:
// std::thread's code for a lambda's type is shared by every copy of cuprof in
// the process and would run one copy's body.
template <class Fn, class... Args>
bool start_detached_thread(std::string& why, Fn fn, Args... args) noexcept {
  try {
    std::thread(fn, args...).detach();
    return true;
  } catch (const std::exception& e) {
    try {
      why = std::string("cannot start a thread (") + e.what() + ")";
    } catch (...) {  // no memory for the reason: the thread is still not there
    }
    return false;
  }
}

// The calling thread runs only on CPU time the program's threads leave
// (Linux's SCHED_IDLE): for background work that may wait, such as decoding
// GPU metrics. Under CFS's fair share, a program's thread waking from a
// synchronize could wait a time slice for a core that such work held.
// Best effort: where the policy is refused, the thread keeps its priority.
inline void run_only_on_idle_cpu() noexcept {
#if defined(__linux__) && defined(SCHED_IDLE)
  sched_param none{};
  none.sched_priority = 0;
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &none);
#endif
}

}  // namespace cuprof::detail
