// Runs test code in a child process, and sets environment variables for a while. Cases that change process-wide state
// (signal handlers, std::set_terminate, CUPROF_TRACE's profile and its threads)
// or that end the process run in one, so the test process itself stays
// single-threaded for the fork-based cases after them (ThreadSanitizer refuses
// a child that starts threads after a multi-threaded fork).
#pragma once

#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace cuprof_test {

// Waits for a child for at most `seconds`; kills it if it is still running.
// Returns its exit status, 128 + signal, or -1 when it had to be killed (a hang).
inline int wait_or_kill(pid_t child, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(child, &status, WNOHANG);
    if (r == child) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0) return -2;
    if (std::chrono::steady_clock::now() > until) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Runs fn in a forked child; its exit status (fn's result; 98 when it threw),
// 128 + signal, or -1 on a hang.
inline int in_child(const std::function<int()>& fn, double seconds = 60) {
  std::fflush(nullptr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    int rc = 99;
    try {
      rc = fn();
    } catch (...) {
      rc = 98;
    }
    ::_exit(rc);
  }
  return wait_or_kill(child, seconds);
}

// True in a process started by run_child_case: the `[child] ...` cases do
// nothing in a plain run of the test binary.
inline bool is_child_run() { return std::getenv("CUPROF_TEST_CHILD") != nullptr; }

// Starts this test binary's `[child] ...` case in a fresh process (cuprof's once-per-process state
// starts afresh there) with the environment `env` on top of this one and CUPROF_TEST_CHILD set,
// its stdout and stderr to `output`, the signals a shell leaves at their default; returns its pid.
// `before_exec` runs in the child before the binary starts again (resource limits, say).
inline pid_t start_child_case(const std::string& test_case, const std::vector<std::pair<std::string, std::string>>& env,
                              const std::string& output, const std::function<void()>& before_exec = nullptr) {
  std::fflush(nullptr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::setenv("CUPROF_TEST_CHILD", "1", 1);
    ::unsetenv("CUPROF_ROOT_PID");  // not a process that this one started under tracing
    // Under LeakSanitizer: the profile CUPROF_TRACE leaves allocated at exit is expected.
    ::setenv("LSAN_OPTIONS", "suppressions=" CUPROF_TEST_SOURCE_DIR "/tests/lsan.supp", 0);
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    const int fd = ::open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGABRT}) ::signal(sig, SIG_DFL);
    if (before_exec) before_exec();
    const std::string selector = "--test-case=" + test_case;
    ::execl("/proc/self/exe", "cuprof_tests", selector.c_str(), "--no-intro", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return child;
}

// start_child_case(), then waits for it: its exit status (doctest's: 0 when every check passed),
// 128 + signal, or -1 when it had to be killed after `seconds`.
inline int run_child_case(const std::string& test_case, const std::vector<std::pair<std::string, std::string>>& env,
                          const std::string& output, double seconds = 120, const std::function<void()>& before_exec = nullptr) {
  return wait_or_kill(start_child_case(test_case, env, output, before_exec), seconds);
}

// Restores an environment variable when it goes out of scope; given a value, sets
// it (null: unsets it) until then.
class scoped_env {
 public:
  explicit scoped_env(const char* name) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
  }
  scoped_env(const char* name, const char* value) : scoped_env(name) {
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~scoped_env() {
    if (had_) ::setenv(name_.c_str(), old_.c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

}  // namespace cuprof_test
