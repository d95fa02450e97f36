// How a traced program ends (docs/reliability.md): CUPROF_TRACE's session from
// start to the trace written at exit, exit() and signals, interrupted writes,
// fork and daemon(), a fault in an exit-time call. Most cases run a `[child] ...`
// case of this binary in a fresh process.
// The runtime is compiled here, once for the binary; this binary's CUPROF_TRACE
// autostart is what the exit cases run in their children.

#define CUPROF_IMPLEMENTATION

#include <cuprof/cuprof.hpp>
#include <cuprof/runtime/autostart.hpp>
#include <cuprof/analysis.hpp>

#include "support/child_process.hpp"
#include "support/files.hpp"
#include "support/stderr_capture.hpp"
#include "support/traces.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <nvtx3/nvToolsExt.h>

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace cuprof_test;

namespace {

// Set in forked children of a multithreaded test that leave through exit():
// the threads that did not follow them into the child leave allocations (their
// thread_local destructor records, a std::thread being started) that
// LeakSanitizer cannot see as reachable; and a thread that was inside ASan's
// allocator at the fork (cuprof's CUPROF_TRACE signal watcher starting, say)
// leaves its lock held in the child, where the leak check at exit waits on it
// forever (GCC 12's ASan takes no allocator lock around fork). Only there is
// leak checking turned off.
std::atomic<bool> g_forked_child_no_leak_check{false};

}  // namespace

// LeakSanitizer asks this at exit (a no-op without it).
extern "C" int __lsan_is_turned_off() { return g_forked_child_no_leak_check.load() ? 1 : 0; }

TEST_SUITE("runtime_exit") {

// Runs in a fresh process (the next case starts it): the environment's profile installs signal
// handlers, std::terminate and a thread for the whole process.

TEST_CASE("[child] CUPROF_TRACE autostart") {
  if (!cuprof_test::is_child_run()) return;
  using cuprof::detail::environment_profile;
  using cuprof::detail::finish_environment_profile;
  using cuprof::detail::start_environment_profile;
  REQUIRE(environment_profile() == nullptr);  // the test binary runs without CUPROF_TRACE
  temp_dir dir;
  const std::string path = (dir.path / "autostart.pt.trace.json").string();
  const scoped_env activities("CUPROF_ACTIVITIES", "cpu");

  SUBCASE("unset: nothing starts") {
    const scoped_env trace("CUPROF_TRACE", nullptr);
    CHECK_FALSE(start_environment_profile());
    CHECK(environment_profile() == nullptr);
    CHECK_NOTHROW(finish_environment_profile());  // nothing to finish
  }
  SUBCASE("set: profiles until finish, writes the trace, prints the table") {
    const scoped_env trace("CUPROF_TRACE", path.c_str());
    const scoped_env table("CUPROF_TABLE", nullptr);
    REQUIRE(start_environment_profile());
    cuprof::profile* p = environment_profile();
    REQUIRE(p != nullptr);
    CHECK(p->running());
    CHECK_FALSE(start_environment_profile());  // only once
    {
      CUPROF_SCOPE("from_autostart");
      busy_wait_us(10);
    }
    stderr_capture err;
    finish_environment_profile();
    const std::string said = err.finish();
    CHECK(environment_profile() == nullptr);
    CHECK_FALSE(p->running());
    CHECK(said.find("trace written to " + path) != std::string::npos);
    CHECK(said.find("from_autostart") != std::string::npos);  // the table
    CHECK(said.find("Self CPU time total:") != std::string::npos);
    json doc;
    REQUIRE_NOTHROW(doc = json::parse(slurp(path)));
    std::size_t found = 0;
    for (const json& e : doc["traceEvents"]) found += e["ph"] == "X" && e["name"] == "from_autostart";
    CHECK(found == 1);
    delete p;  // finish leaves it allocated for later exit handlers; the test owns it now
  }
  SUBCASE("CUPROF_TABLE=0 silences the table") {
    const scoped_env trace("CUPROF_TRACE", path.c_str());
    const scoped_env table("CUPROF_TABLE", "0");
    REQUIRE(start_environment_profile());
    cuprof::profile* p = environment_profile();
    { CUPROF_SCOPE("quiet"); }
    stderr_capture err;
    finish_environment_profile();
    const std::string said = err.finish();
    CHECK(said.find("Self CPU time total:") == std::string::npos);
    CHECK(fs::exists(path));
    delete p;
  }
  SUBCASE("an unwritable CUPROF_TRACE path is reported, not thrown") {
    const std::string bad = (dir.path / "no" / "such" / "dir" / "t.json").string();
    const scoped_env trace("CUPROF_TRACE", bad.c_str());
    const scoped_env table("CUPROF_TABLE", "0");
    REQUIRE(start_environment_profile());
    cuprof::profile* p = environment_profile();
    stderr_capture err;
    CHECK_NOTHROW(finish_environment_profile());
    const std::string said = err.finish();
    CHECK(said.find("could not write the trace") != std::string::npos);
    CHECK(said.find(bad) != std::string::npos);
    delete p;
  }
  SUBCASE("a program's own profile is refused while CUPROF_TRACE runs, and its export leaves the file alone") {
    const scoped_env trace("CUPROF_TRACE", path.c_str());
    const scoped_env table("CUPROF_TABLE", "0");
    REQUIRE(start_environment_profile());
    cuprof::profile* p = environment_profile();
    const std::string own_path = (dir.path / "own.json").string();
    { std::ofstream(own_path) << "the program's earlier trace"; }
    stderr_capture err;
    {
      cuprof::profile own(cpu_only());
      own.start();
      CHECK_FALSE(own.running());
      { CUPROF_SCOPE("recorded_by_the_environment"); }
      const cuprof::export_result r = own.export_chrome_trace(own_path);
      CHECK(r.events == 0);
    }
    finish_environment_profile();
    const std::string said = err.finish();
    CHECK(slurp(own_path) == "the program's earlier trace");
    CHECK(said.find("this profile records nothing and will not write over its output files") != std::string::npos);
    CHECK(said.find("'" + own_path + "' left as it was") != std::string::npos);
    CHECK(slurp(path).find("recorded_by_the_environment") != std::string::npos);
    delete p;
  }
  SUBCASE("a relative CUPROF_TRACE is resolved when recording starts, not after the program changed directory") {
    const fs::path started_in = dir.path / "started_here", moved_to = dir.path / "moved_there";
    fs::create_directories(started_in);
    fs::create_directories(moved_to);
    const fs::path cwd = fs::current_path();
    const scoped_env trace("CUPROF_TRACE", "relative.json");
    const scoped_env table("CUPROF_TABLE", "0");
    fs::current_path(started_in);
    REQUIRE(start_environment_profile());
    cuprof::profile* p = environment_profile();
    fs::current_path(moved_to);
    stderr_capture err;
    finish_environment_profile();
    const std::string said = err.finish();
    fs::current_path(cwd);
    CHECK(fs::exists(started_in / "relative.json"));
    CHECK_FALSE(fs::exists(moved_to / "relative.json"));
    CHECK(said.find("trace written to " + (started_in / "relative.json").string()) != std::string::npos);
    delete p;
  }
  SUBCASE("CUPROF_DELAY longer than the run: says recording never started and keeps the existing file") {
    const scoped_env trace("CUPROF_TRACE", path.c_str());
    const scoped_env delay("CUPROF_DELAY", "1000");
    { std::ofstream(path) << "an earlier trace"; }
    REQUIRE(start_environment_profile());
    cuprof::profile* p = environment_profile();
    stderr_capture err;
    finish_environment_profile();
    const std::string said = err.finish();
    CHECK(said.find("recording never started") != std::string::npos);
    CHECK(slurp(path) == "an earlier trace");
    delete p;
  }
  CHECK(environment_profile() == nullptr);
}

TEST_CASE("CUPROF_TRACE autostart: start_environment_profile / finish_environment_profile") {
  temp_dir dir;
  const std::string output = (dir.path / "child.txt").string();
  const int rc = cuprof_test::run_child_case("[child] CUPROF_TRACE autostart", {}, output);
  const std::string said = slurp(output);
  CAPTURE(said);
  CHECK(rc == 0);
  CHECK(said.find("Status: SUCCESS!") != std::string::npos);
  CHECK(std::regex_search(said, std::regex(R"(test cases: +1 \| +1 passed)")));  // it ran
}

// CUPROF_START_STEP / CUPROF_STEPS: the window is steps 2 and 3 of six. Steps are
// the NVTX ranges CUPTI would hand to cuprof's hook; here the hook is called as
// CUPTI's NVTX callback calls it.
TEST_CASE("[child] CUPROF_START_STEP") {
  if (!cuprof_test::is_child_run()) return;
  using namespace cuprof::detail;
  temp_dir dir;
  const std::string path = (dir.path / "steps.json").string();
  const scoped_env activities("CUPROF_ACTIVITIES", "cpu");
  const scoped_env trace("CUPROF_TRACE", path.c_str());
  const scoped_env table("CUPROF_TABLE", "0");
  const scoped_env first("CUPROF_START_STEP", "2");
  const scoped_env count("CUPROF_STEPS", "2");
  REQUIRE(start_environment_profile());
  void (*hook)(const nvtx_range_event&) = process().on_nvtx_range.load();
  const bool hooked = hook != nullptr;
  REQUIRE(hooked);
  const auto range = [hook](const std::string& message) {
    nvtx_range_event e;
    e.message = message.c_str();
    e.length = message.size();
    hook(e);
    hook(nvtx_range_event{nvtx_range_event::pop});  // a pop starts no step
  };
  for (int i = 0; i < 6; ++i) {
    range("unrelated");  // not a step
    range("step " + std::to_string(i));
    const std::string work = "work " + std::to_string(i);
    cuprof::record_function scope{std::string_view(work)};
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the window's thread wakes between steps
  }
  // Written by the window's thread when step 4 started: the hook is gone, the file there.
  for (int i = 0; i < 200 && process().on_nvtx_range.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const bool unhooked = process().on_nvtx_range.load() == nullptr;
  CHECK(unhooked);
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(slurp(path)));
  std::set<std::string> names;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "X") names.insert(e["name"].get<std::string>());
  std::string listed;
  for (const std::string& n : names) listed += n + "; ";
  CAPTURE(listed);
  CHECK(names == std::set<std::string>{"work 2", "work 3", "ProfilerStep#2", "ProfilerStep#3"});
  return;
}

TEST_CASE("CUPROF_START_STEP: the window is the steps asked for, opened and written by the step ranges") {
  temp_dir dir;
  const std::string output = (dir.path / "child.txt").string();
  const int rc = cuprof_test::run_child_case("[child] CUPROF_START_STEP", {}, output);
  const std::string said = slurp(output);
  CAPTURE(said);
  CHECK(rc == 0);
  CHECK(said.find("Status: SUCCESS!") != std::string::npos);
  CHECK(std::regex_search(said, std::regex(R"(test cases: +1 \| +1 passed)")));
}

// The child half of the next case: 30 steps marked as a program marks them, with NVTX.
TEST_CASE("[child] NVTX steps") {
  if (!std::getenv("CUPROF_TEST_NVTX_STEPS") || !is_child_run()) return;
  for (int i = 0; i < 30; ++i) {
    nvtxRangePushA(("ProfilerStep#" + std::to_string(i)).c_str());
    { CUPROF_SCOPE("work"); }
    nvtxRangePop();
  }
}

// NVTX reaches cuprof through CUPTI: where CUDA tracing is off (no driver, libcupti not
// loadable), the steps cannot be seen, and that is what is said, not "0 steps".
TEST_CASE("steps that cannot be seen: CUPROF_START_STEP and CUPROF_SLOW_STEPS say why, not that the program ran 0 steps") {
  temp_dir dir;
  const std::string trace = (dir.path / "t.json").string(), out = (dir.path / "out.txt").string();
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"CUPROF_START_STEP", "2"}, {"CUPROF_SLOW_STEPS", "2x"}}) {
    const int rc = run_child_case("[child] NVTX steps",
                                  {{"CUPROF_TEST_NVTX_STEPS", "1"},
                                   {"CUPROF_TRACE", trace},
                                   {"CUPROF_TABLE", "0"},
                                   {"CUPROF_CUPTI_LIBRARY", "/nonexistent/libcupti.so"},
                                   {name, value}},
                                  out);
    const std::string said = slurp(out);
    CAPTURE(name);
    CAPTURE(said);
    CHECK(rc == 0);
    CHECK(said.find("no step could be seen (NVTX ranges reach cuprof through CUPTI, and CUDA tracing is off: ") !=
          std::string::npos);
    CHECK(said.find("0 steps") == std::string::npos);
  }
}

// --- Exit and fork ----------------------------------------------------------------

// The child half of the next test: does nothing unless started by it.

TEST_CASE("[child] exit while threads are inside scopes") {
  if (!is_child_run()) return;
  // A forked child of this process exits first: it must not write this process's trace.
  const char* path = std::getenv("CUPROF_TRACE");
  std::fflush(nullptr);
  const pid_t grandchild = ::fork();
  if (grandchild == 0) {
    { CUPROF_SCOPE("grandchild"); }
    g_forked_child_no_leak_check.store(true);
    std::exit(0);
  }
  int status = 0;
  ::waitpid(grandchild, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ::_exit(3);
  if (::access(path, F_OK) == 0) {
    std::fprintf(stderr, "a forked child wrote the CUPROF_TRACE trace of its parent\n");
    ::_exit(4);
  }
  for (int i = 0; i < 3; ++i)
    std::thread([i] {
      const std::string name = "exit_worker " + std::to_string(i);
      for (std::uint64_t loop = 1;; ++loop) {
        {
          cuprof::record_function r(name);
          CUPROF_SCOPE("exit_worker_inner");
        }
        pace(loop, 16);
      }
    }).detach();
  { CUPROF_SCOPE("main_before_exit"); }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::fflush(nullptr);
  std::exit(0);  // the CUPROF_TRACE exit handler runs while the workers still record
}

TEST_CASE(
    "exit: CUPROF_TRACE writes a valid trace while detached threads are still inside scopes; a forked child does not write it") {
  temp_dir dir;
  const std::string trace = (dir.path / "at_exit.json").string();
  const std::string err = (dir.path / "stderr.txt").string();
  const int rc = run_child_case("[child] exit while threads are inside scopes",
                                {{"CUPROF_TRACE", trace}, {"CUPROF_ACTIVITIES", "cpu"}, {"CUPROF_TABLE", "0"}}, err);
  const std::string said = slurp(err);
  CAPTURE(said);
  CHECK(rc == 0);  // no crash, no hang, no sanitizer report (the exit-time leak of the profile is suppressed)
  CHECK(said.find("trace written to " + trace) != std::string::npos);
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(slurp(trace)));
  std::size_t main_spans = 0, worker_spans = 0;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    main_spans += e["name"] == "main_before_exit";
    worker_spans += e["name"].get<std::string>().rfind("exit_worker ", 0) == 0;
    CHECK(e["name"] != "grandchild");
  }
  CHECK(main_spans == 1);
  CHECK(worker_spans > 0);
  const cuprof::loaded_trace back = cuprof::read_trace_file(trace);
  CHECK(malformed_spans(back.t) == 0);
}

// --- How a traced program ends (CUPROF_TRACE; docs/reliability.md) -----------------

// The child half of the next test: ends the way CUPROF_TEST_END says, after
// recording the scope "before_the_end".

TEST_CASE("[child] the program ends") {
  const char* end = std::getenv("CUPROF_TEST_END");
  if (!end || !is_child_run()) return;
  const std::string how = end;
  { CUPROF_SCOPE("before_the_end"); }
  std::fflush(nullptr);
  if (how == "exit") std::exit(4);
  if (how == "exit_from_thread") {
    std::thread([] {
      CUPROF_SCOPE("thread_calling_exit");
      std::exit(3);
    }).detach();
    for (;;) {
      CUPROF_SCOPE("main_still_working");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (how == "quick_exit") std::quick_exit(5);
  if (how == "terminate") std::thread([] { throw std::runtime_error("nobody catches this"); }).join();
  if (how == "abort") std::abort();
  if (how == "sigpipe") {
    int fds[2];
    if (::pipe(fds) != 0) ::_exit(90);
    ::close(fds[0]);
    for (;;) (void)!::write(fds[1], "x", 1);  // the reader is gone: SIGPIPE
  }
  const int sig = std::atoi(how.c_str());  // a signal number, sent to the whole process
  ::kill(::getpid(), sig);
  for (;;) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

struct ended_child {
  int status;        // exit status, or 128 + signal
  std::string said;  // its stderr
  bool trace_written;
  std::size_t before_the_end = 0;  // spans of that name in the trace
};

ended_child end_traced_child(const std::string& how) {
  temp_dir dir;
  const std::string trace = (dir.path / "end.json").string();
  const std::string err = (dir.path / "stderr.txt").string();
  ended_child r{
      run_child_case("[child] the program ends",
                     {{"CUPROF_TEST_END", how}, {"CUPROF_TRACE", trace}, {"CUPROF_ACTIVITIES", "cpu"}, {"CUPROF_TABLE", "0"}},
                     err),
      "", false};
  r.said = slurp(err);
  std::error_code ec;
  r.trace_written = fs::exists(trace, ec);
  if (r.trace_written) {
    const json doc = json::parse(slurp(trace));
    for (const json& e : doc["traceEvents"]) r.before_the_end += e["ph"] == "X" && e["name"] == "before_the_end";
  }
  return r;
}

TEST_CASE("exit: exit() from main and from another thread write the trace and keep the program's exit status") {
  const ended_child from_main = end_traced_child("exit");
  CAPTURE(from_main.said);
  CHECK(from_main.status == 4);
  CHECK(from_main.trace_written);
  CHECK(from_main.before_the_end == 1);

  const ended_child from_thread = end_traced_child("exit_from_thread");
  CAPTURE(from_thread.said);
  CHECK(from_thread.status == 3);
  CHECK(from_thread.trace_written);
  CHECK(from_thread.before_the_end == 1);
}

TEST_CASE("abnormal ends: each catchable signal writes the trace, then ends the program as the signal would") {
  // Every signal whose default action ends the process: a terminal's, kill -USR1, timers left at
  // their default, a batch system's CPU limit.
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU, SIGVTALRM, SIGPROF, SIGIO, SIGPWR}) {
    const ended_child r = end_traced_child(std::to_string(sig));
    CAPTURE(sig);
    CAPTURE(r.said);
    CHECK(r.status == 128 + sig);
    CHECK(r.trace_written);
    CHECK(r.before_the_end == 1);
    CHECK(r.said.find("writing the trace before the program ends") != std::string::npos);
  }
  const ended_child pipe = end_traced_child("sigpipe");
  CAPTURE(pipe.said);
  CHECK(pipe.status == 128 + SIGPIPE);
  CHECK(pipe.trace_written);
}

TEST_CASE("abnormal ends: std::terminate and quick_exit write the trace; abort() says it was not written") {
  const ended_child terminated = end_traced_child("terminate");
  CAPTURE(terminated.said);
  CHECK(terminated.status == 128 + SIGABRT);
  CHECK(terminated.trace_written);
  CHECK(terminated.before_the_end == 1);
  CHECK(terminated.said.find("std::terminate was called") != std::string::npos);
  CHECK(terminated.said.find("not written") == std::string::npos);

  const ended_child quick = end_traced_child("quick_exit");
  CAPTURE(quick.said);
  CHECK(quick.status == 5);
  CHECK(quick.trace_written);

  const ended_child aborted = end_traced_child("abort");
  CAPTURE(aborted.said);
  CHECK(aborted.status == 128 + SIGABRT);
  CHECK_FALSE(aborted.trace_written);
  CHECK(aborted.said.find("cuprof: the program aborted (SIGABRT): the trace was not written") != std::string::npos);
}

// The spans named `name` in a trace's text.
std::size_t spans_named(const std::string& trace_text, const std::string& name) {
  const json doc = json::parse(trace_text);  // kept: a range over a temporary's member would dangle
  std::size_t n = 0;
  for (const json& e : doc["traceEvents"]) n += e["ph"] == "X" && e["name"] == name;
  return n;
}

// --- Two processes, one path ---------------------------------------------------------

// The child half of the next case: records a scope named by CUPROF_TEST_NAME, says it is
// running (its session started before main) with the file "<CUPROF_TEST_GO>.ready", then exits
// once the file CUPROF_TEST_GO names is there.
TEST_CASE("[child] one of two on a path") {
  const char* go = std::getenv("CUPROF_TEST_GO");
  if (!go || !is_child_run()) return;
  { cuprof::record_function scope{std::string_view(std::getenv("CUPROF_TEST_NAME"))}; }
  std::ofstream(std::string(go) + ".ready") << "";
  while (!fs::exists(go)) std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

// `export CUPROF_TRACE=t.json; a | b`: two unrelated processes traced to one path. The second to
// write keeps the first's trace and writes its own beside it, with its pid, and says so; a trace
// from before either started is replaced as ever.
TEST_CASE("two processes traced to one path: the second writes beside the first's trace, with its pid, and says so") {
  temp_dir dir;
  const std::string trace = (dir.path / "t.json").string();
  { std::ofstream(trace) << "a trace from an earlier run"; }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // older than both, by the file clock
  const auto start = [&](const std::string& name) {
    return start_child_case("[child] one of two on a path",
                            {{"CUPROF_TEST_GO", (dir.path / ("go_" + name)).string()},
                             {"CUPROF_TEST_NAME", name},
                             {"CUPROF_TRACE", trace},
                             {"CUPROF_ACTIVITIES", "cpu"},
                             {"CUPROF_TABLE", "0"}},
                            (dir.path / (name + ".out")).string());
  };
  const pid_t a = start("first"), b = start("second");
  // Both running before either ends: the second's session began before the first's trace was written.
  for (int i = 0; i < 6000 && !(fs::exists(dir.path / "go_first.ready") && fs::exists(dir.path / "go_second.ready")); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto go = [&](const std::string& name, pid_t pid) {
    std::ofstream(dir.path / ("go_" + name)) << "";
    return wait_or_kill(pid, 60);
  };
  CHECK(go("first", a) == 0);
  CHECK(go("second", b) == 0);
  const std::string first_said = slurp(dir.path / "first.out"), second_said = slurp(dir.path / "second.out");
  CAPTURE(first_said);
  CAPTURE(second_said);
  const std::string beside = (dir.path / ("t." + std::to_string(b) + ".json")).string();
  CHECK(first_said.find("trace written to " + trace + " ") != std::string::npos);
  CHECK(second_said.find("cuprof: '" + trace +
                         "' was written by another process while this one ran (two processes traced to one path): this "
                         "trace goes to '" +
                         beside + "'") != std::string::npos);
  CHECK(second_said.find("trace written to " + beside + " ") != std::string::npos);
  CHECK(spans_named(slurp(trace), "first") == 1);
  CHECK(spans_named(slurp(beside), "second") == 1);
}

// --- Resource limits (docs/reliability.md) -------------------------------------------

// The child half of the next cases: records, writes a line of its own to stdout
// without flushing it (exit flushes it, a death by signal loses it), and exits
// with 3. CUPROF_TEST_LIMIT says which limit it runs under.
TEST_CASE("[child] under a resource limit") {
  const char* limit = std::getenv("CUPROF_TEST_LIMIT");
  if (!limit || !is_child_run()) return;
  if (std::string(limit) == "threads") {
    bool threads = true;
    try {
      std::thread([] {}).join();
    } catch (const std::system_error&) {
      threads = false;
    }
    if (threads) ::_exit(77);  // the limit did not take here: nothing to check
  }
  for (int i = 0; i < 20000; ++i) CUPROF_SCOPE("under_the_limit");
  std::printf("the program's own output\n");
  std::exit(3);
}

struct limited_child {
  int status;
  std::string said;  // its stdout and stderr
};

limited_child run_under_limit(const char* limit, const std::vector<std::pair<std::string, std::string>>& env, const fs::path& dir,
                              int resource, rlim_t value) {
  const std::string out = (dir / "out.txt").string();
  std::vector<std::pair<std::string, std::string>> all = env;
  all.emplace_back("CUPROF_TEST_LIMIT", limit);
  all.emplace_back("CUPROF_ACTIVITIES", "cpu");
  all.emplace_back("CUPROF_TABLE", "0");
  const int status = run_child_case("[child] under a resource limit", all, out, 60, [resource, value] {
    const rlimit r{value, value};
    ::setrlimit(resource, &r);
  });
  return {status, slurp(out)};
}

std::size_t occurrences(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

// No thread to spare (a container's pids limit, ulimit -u, which root escapes): a stack limit of
// 1 TiB makes each new thread's default stack too large to map, for root too. Not under
// ThreadSanitizer, whose fixed memory layout the stack limit moves mappings out of ("unexpected
// memory mapping").
TEST_CASE("no thread to spare: the program runs and ends as it would; cuprof says in one line what goes without") {
#if defined(__SANITIZE_THREAD__)
  MESSAGE("not checked under ThreadSanitizer");
  return;
#endif
  constexpr rlim_t one_tib = rlim_t(1) << 40;
  temp_dir dir;
  const fs::path trace = dir.path / "t.json";
  // The whole run: only the signal watcher needs a thread; the trace is written at exit as ever.
  const limited_child whole = run_under_limit("threads", {{"CUPROF_TRACE", trace.string()}}, dir.path, RLIMIT_STACK, one_tib);
  if (whole.status == 77) {
    MESSAGE("not checked: this machine maps a thread stack of 1 TiB");
    return;
  }
  CAPTURE(whole.said);
  CHECK(whole.status == 3);
  CHECK(whole.said.find("the program's own output") != std::string::npos);
  CHECK(occurrences(whole.said, "cannot start a thread") == 1);
  CHECK(whole.said.find("a signal such as SIGTERM ends the program without writing the trace") != std::string::npos);
  REQUIRE(fs::exists(trace));
  CHECK(spans_named(slurp(trace), "under_the_limit") == 20000);
  // Windows a policy chooses (a trigger's, a timer's, steps'): nothing chooses them, the program runs untraced.
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"CUPROF_CAPTURE_RANGE", "trigger"}, {"CUPROF_DURATION", "5"}, {"CUPROF_START_STEP", "2"}}) {
    fs::remove(trace);
    const limited_child r =
        run_under_limit("threads", {{"CUPROF_TRACE", trace.string()}, {name, value}}, dir.path, RLIMIT_STACK, one_tib);
    CAPTURE(name);
    CAPTURE(r.said);
    CHECK(r.status == 3);
    CHECK(r.said.find("the program's own output") != std::string::npos);
    CHECK(occurrences(r.said, "cuprof: ") == 1);
    CHECK(r.said.find("cannot start a thread (Resource temporarily unavailable): the windows asked for cannot be chosen; the "
                      "program runs untraced") != std::string::npos);
    CHECK_FALSE(fs::exists(trace));
  }
}

// ulimit -f: the trace's write past the limit fails as a full disk does (EFBIG), said in one
// line; the program keeps its exit status and its output, no temporary file stays, and the
// trace already at the path is kept.
TEST_CASE("a file-size limit: the write fails with one line; the program ends as it would, the old trace kept") {
  temp_dir dir;
  const fs::path trace = dir.path / "t.json";
  { std::ofstream(trace) << "an earlier trace"; }
  const limited_child r = run_under_limit("file size", {{"CUPROF_TRACE", trace.string()}}, dir.path, RLIMIT_FSIZE, 20 * 1024);
  CAPTURE(r.said);
  CHECK(r.status == 3);
  CHECK(r.said.find("the program's own output") != std::string::npos);
  CHECK(r.said.find("could not write the trace: cannot write '" + trace.string() + "': File too large") != std::string::npos);
  CHECK(slurp(trace) == "an earlier trace");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir.path)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  CHECK(files == std::vector<std::string>{"out.txt", "t.json"});
}

// The child half of the next case: an uncaught exception in another thread once the exit's
// write of the trace has begun (its temporary file is there).
TEST_CASE("[child] terminate while the exit writes") {
  const char* dir = std::getenv("CUPROF_TEST_TRACE_DIR");
  if (!dir || !is_child_run()) return;
  for (int i = 0; i < 200000; ++i) CUPROF_SCOPE("in_the_trace");
  std::thread([d = std::string(dir)] {
    for (bool writing = false; !writing; std::this_thread::sleep_for(std::chrono::milliseconds(1)))
      for (const auto& e : fs::directory_iterator(d))
        writing = writing || e.path().filename().string().find(".tmp.") != std::string::npos;
    throw std::runtime_error("nobody catches this");
  }).detach();
  std::exit(3);
}

TEST_CASE("std::terminate while the exit writes the trace: the write finishes before the program ends") {
  temp_dir dir;
  const fs::path trace = dir.path / "t.json";
  const std::string out = (dir.path.parent_path() / (dir.path.filename().string() + ".out")).string();
  const int status = run_child_case("[child] terminate while the exit writes",
                                    {{"CUPROF_TEST_TRACE_DIR", dir.path.string()},
                                     {"CUPROF_TRACE", trace.string()},
                                     {"CUPROF_ACTIVITIES", "cpu"},
                                     {"CUPROF_TABLE", "0"}},
                                    out);
  const std::string said = slurp(out);
  fs::remove(out);
  CAPTURE(said);
  // Once the write is done, terminate's abort and the exit that was writing race to end the process.
  CHECK((status == 128 + SIGABRT || status == 3));
  CHECK(said.find("std::terminate was called (an uncaught exception?) while the trace was being written: letting the write "
                  "finish first") != std::string::npos);
  REQUIRE(fs::exists(trace));
  CHECK(spans_named(slurp(trace), "in_the_trace") == 200000);
}

// --- Interrupted profiles: signals that arrive while the program holds locks -----
// (docs/reliability.md, "Ending a profile safely"). The handler only remembers the
// signal and returns, so the interrupted thread lets go of its locks (malloc's,
// stdio's); cuprof's signal thread writes the trace and then ends the process with
// the signal. Each scenario runs CUPROF_STRESS_RUNS times (default 20).

int stress_runs() {
  const char* v = std::getenv("CUPROF_STRESS_RUNS");
  const int n = v ? std::atoi(v) : 20;
  return n > 0 ? n : 20;
}

// Allocates and frees in a loop inside a scope: the thread is in malloc most of the time.
void allocate_in_scopes() {
  for (;;) {
    std::vector<char> v(4096);
    CUPROF_SCOPE("s");
    v[100] = 1;
  }
}

// The child half of the stress cases: CUPROF_TEST_INTERRUPT names the scenario.

TEST_CASE("[child] interrupted while holding locks") {
  const char* scenario_env = std::getenv("CUPROF_TEST_INTERRUPT");
  if (!scenario_env || !is_child_run()) return;
  const std::string scenario = scenario_env;
  { CUPROF_SCOPE("before_the_signal"); }
  std::ofstream(std::string(std::getenv("CUPROF_TRACE")) + ".ready") << "recording\n";
  if (scenario == "allocating" || scenario == "allocating_threads") {
    const int threads = scenario == "allocating" ? 0 : 3 + int(::getpid() % 18);  // 3 to 20
    for (int i = 0; i < threads; ++i) std::thread(&allocate_in_scopes).detach();
    allocate_in_scopes();
  }
  if (scenario == "stderr_logging" || scenario == "stderr_closed") {
    std::thread(&allocate_in_scopes).detach();
    for (std::uint64_t i = 0;; ++i) {
      CUPROF_SCOPE("log");
      std::fprintf(stderr, "program line %llu\n", static_cast<unsigned long long>(i));
    }
  }
  if (scenario == "during_exit_write") {
    // Enough scopes that writing the trace takes a while; a thread sends SIGTERM
    // once the exit handler's temporary file exists, i.e. during the write.
    for (int i = 0; i < 400000; ++i) CUPROF_SCOPE("many");
    const fs::path trace = std::getenv("CUPROF_TRACE");
    std::thread([trace] {
      for (;;) {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(trace.parent_path(), ec))
          if (e.path().filename().string().rfind(trace.filename().string() + ".tmp.", 0) == 0) {
            ::kill(::getpid(), SIGTERM);
            return;
          }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }).detach();
    std::fflush(nullptr);
    std::exit(0);
  }
  ::_exit(90);
}

struct interrupted_run {
  int status = 0;
  std::string said;
  bool trace_valid = false;
  std::size_t before_the_signal = 0;
};

// Runs the scenario once: stderr to a file, or to a pipe that is read for a line and
// closed (stderr_closed); SIGTERM after `delay_s` unless the child signals itself.
interrupted_run interrupt_once(const std::string& scenario, double delay_s) {
  temp_dir dir;
  const std::string trace = (dir.path / "t.json").string();
  const std::string err = (dir.path / "stderr.txt").string();
  int pipe_fds[2] = {-1, -1};
  const bool closed_pipe = scenario == "stderr_closed";
  if (closed_pipe) REQUIRE(::pipe(pipe_fds) == 0);
  std::fflush(nullptr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::setenv("CUPROF_TEST_CHILD", "1", 1);
    ::setenv("CUPROF_TEST_INTERRUPT", scenario.c_str(), 1);
    ::setenv("CUPROF_TRACE", trace.c_str(), 1);
    ::setenv("CUPROF_ACTIVITIES", "cpu", 1);
    ::setenv("CUPROF_TABLE", "0", 1);
    // Small traces: the scenarios are about locks, not volume (past the cap scopes are counted, not kept).
    ::setenv("CUPROF_MAX_CPU_EVENTS", scenario == "during_exit_write" ? "1048576" : "131072", 1);
    ::unsetenv("CUPROF_ROOT_PID");
    ::setenv("LSAN_OPTIONS", "suppressions=" CUPROF_TEST_SOURCE_DIR "/tests/lsan.supp", 0);
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    if (closed_pipe) {
      ::dup2(pipe_fds[1], 2);
      ::close(pipe_fds[0]);
      ::close(pipe_fds[1]);
    } else {
      ::dup2(fd, 2);
    }
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGABRT}) ::signal(sig, SIG_DFL);
    const std::string selector = "--test-case=[child] interrupted while holding locks";
    ::execl("/proc/self/exe", "cuprof_tests", selector.c_str(), "--no-intro", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  interrupted_run r;
  if (closed_pipe) {
    ::close(pipe_fds[1]);
    // The reader of `program 2>&1 | head -1`: one line, then gone.
    char c = 0;
    while (::read(pipe_fds[0], &c, 1) == 1 && c != '\n') {}
    ::close(pipe_fds[0]);
  } else if (delay_s > 0) {
    std::error_code ec;
    for (int i = 0; i < 30000 && !fs::exists(trace + ".ready", ec); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
    ::kill(child, SIGTERM);
  }
  r.status = wait_or_kill(child, 90);
  r.said = slurp(err);
  std::error_code ec;
  if (fs::exists(trace, ec)) {
    try {
      const json doc = json::parse(slurp(trace));
      r.trace_valid = true;
      for (const json& e : doc["traceEvents"]) r.before_the_signal += e["ph"] == "X" && e["name"] == "before_the_signal";
    } catch (const std::exception&) {}
  }
  return r;
}

TEST_CASE(
    "interrupted: SIGTERM, a closed stderr pipe or a signal during the exit write: the trace is written and the status is the "
    "signal's, every time") {
  const int runs = stress_runs();
  const std::vector<std::pair<std::string, int>> scenarios = {{"allocating", SIGTERM},
                                                              {"allocating_threads", SIGTERM},
                                                              {"stderr_logging", SIGTERM},
                                                              {"stderr_closed", SIGPIPE},
                                                              {"during_exit_write", SIGTERM}};
  for (const auto& [scenario, sig] : scenarios) {
    int passed = 0;
    for (int i = 0; i < runs; ++i) {
      const interrupted_run r =
          interrupt_once(scenario, scenario == "during_exit_write" || scenario == "stderr_closed" ? 0 : 0.3 + 0.05 * (i % 10));
      CAPTURE(scenario);
      CAPTURE(i);
      CAPTURE(r.said.substr(r.said.size() > 2000 ? r.said.size() - 2000 : 0));
      CHECK(r.status == 128 + sig);
      CHECK(r.trace_valid);
      CHECK(r.before_the_signal == 1);
      CHECK(r.said.find("could not be written in time") == std::string::npos);
      passed += r.status == 128 + sig && r.trace_valid && r.before_the_signal == 1;
    }
    MESSAGE(scenario << ": " << passed << " of " << runs << " runs wrote the trace and ended with signal " << sig);
  }
}

// The child half of the next case: a CUPROF_DURATION write in progress when a
// thread forks; the child exits at once.

TEST_CASE("[child] fork during the duration write") {
  if (!std::getenv("CUPROF_TEST_FORK_DURING_WRITE") || !is_child_run()) return;
  for (int i = 0; i < 400000; ++i) CUPROF_SCOPE("many");
  const fs::path trace = std::getenv("CUPROF_TRACE");
  for (;;) {  // CUPROF_DURATION's thread writes the trace: wait for its temporary file
    std::error_code ec;
    bool writing = false;
    for (const auto& e : fs::directory_iterator(trace.parent_path(), ec))
      writing |= e.path().filename().string().rfind(trace.filename().string() + ".tmp.", 0) == 0;
    if (writing) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child == 0) {
    g_forked_child_no_leak_check.store(true);  // the writing thread's allocations did not follow
    std::exit(0);                              // the exit handler must not wait on the parent's write
  }
  const int rc = wait_or_kill(child, 20);
  std::exit(rc == 0 ? 0 : 70);  // after the duration's write: the exit handler waits for it
}

TEST_CASE("fork: a child forked while a CUPROF_DURATION trace is written exits at once") {
  for (int i = 0; i < 5; ++i) {
    temp_dir dir;
    const std::string trace = (dir.path / "d.json").string();
    const std::string err = (dir.path / "stderr.txt").string();
    const int rc = run_child_case("[child] fork during the duration write",
                                  {{"CUPROF_TEST_FORK_DURING_WRITE", "1"},
                                   {"CUPROF_TRACE", trace},
                                   {"CUPROF_DURATION", "0.3"},
                                   {"CUPROF_ACTIVITIES", "cpu"},
                                   {"CUPROF_TABLE", "0"}},
                                  err);
    CAPTURE(slurp(err));
    CHECK(rc == 0);  // 70: the forked child hung in exit()
    CHECK(fs::exists(trace));
  }
}

// The child half of the next case: daemon(), then a scope, then exit.

TEST_CASE("[child] daemon") {
  const char* pid_file = std::getenv("CUPROF_TEST_DAEMON_PID_FILE");
  if (!pid_file || !is_child_run()) return;
  { CUPROF_SCOPE("before_daemon"); }
  std::fflush(nullptr);
  if (::daemon(1, 1) != 0) ::_exit(80);
  { CUPROF_SCOPE("in_daemon"); }
  std::ofstream(pid_file) << ::getpid() << "\n";
  std::exit(0);
}

TEST_CASE("daemon() under CUPROF_TRACE: the daemon writes its own trace, named with its pid, and says so") {
  temp_dir dir;
  const std::string trace = (dir.path / "srv.json").string();
  const std::string pid_file = (dir.path / "pid").string();
  const std::string err = (dir.path / "stderr.txt").string();
  const int rc = run_child_case(
      "[child] daemon",
      {{"CUPROF_TEST_DAEMON_PID_FILE", pid_file}, {"CUPROF_TRACE", trace}, {"CUPROF_ACTIVITIES", "cpu"}, {"CUPROF_TABLE", "0"}},
      err);
  CHECK(rc == 0);
  // The daemon goes on after its parent returned: wait for its trace.
  std::string daemon_trace;
  for (int i = 0; i < 2000 && daemon_trace.empty(); ++i) {
    std::ifstream in(pid_file);
    std::string pid;
    if (in >> pid) {
      const std::string expected = (dir.path / ("srv." + pid + ".json")).string();
      if (fs::exists(expected) && slurp(err).find("trace written to") != std::string::npos) daemon_trace = expected;
    }
    if (daemon_trace.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CAPTURE(slurp(err));
  REQUIRE_FALSE(daemon_trace.empty());
  CHECK_FALSE(fs::exists(trace));  // daemon()'s parent ends with _exit: nothing of its own
  CHECK(slurp(err).find("daemon()") != std::string::npos);
  const json doc = json::parse(slurp(daemon_trace));
  std::set<std::string> names;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "X") names.insert(e["name"].get<std::string>());
  CHECK(names.count("before_daemon") == 1);
  CHECK(names.count("in_daemon") == 1);
}

TEST_CASE("trace paths: absolute from the start, one per process for processes a traced process started") {
  using cuprof::detail::resolve_trace_path;
  char cwd[4096];
  REQUIRE(::getcwd(cwd, sizeof cwd) != nullptr);
  CHECK(resolve_trace_path("t.json", 100, nullptr, false) == std::string(cwd) + "/t.json");
  CHECK(resolve_trace_path("/abs/t.json", 100, nullptr, false) == "/abs/t.json");
  CHECK(resolve_trace_path("/abs/t.json", 100, "100", false) == "/abs/t.json");  // the first process keeps the name
  CHECK(resolve_trace_path("/abs/t.json", 101, "100", false) == "/abs/t.101.json");
  CHECK(resolve_trace_path("/abs/t.pt.trace.json.gz", 101, "100", false) == "/abs/t.101.pt.trace.json.gz");
  CHECK(resolve_trace_path("/a.b/trace", 101, "100", false) == "/a.b/trace.101");
  CHECK(resolve_trace_path("/abs/t_101.json", 101, "100", true) == "/abs/t_101.json");  // %p already names it
}

// The child half of the next test, in a fresh process: cuprof's "CUDA is off" line is said once per process.

TEST_CASE("[child] CUDA activity alone") {
  if (!is_child_run()) return;
  cuprof::profile_options o;
  o.activities = cuprof::activity::cuda;
  cuprof::profile prof(o);
  prof.start();
  { CUPROF_SCOPE("not_recorded"); }
  prof.stop();
  ::_exit(prof.last_trace().spans.empty() ? 0 : 1);
}

TEST_CASE("CUDA activity alone where CUDA cannot be traced: the line says nothing is recorded, not 'the CPU side'") {
  temp_dir dir;
  const std::string err = (dir.path / "stderr.txt").string();
  // CUDA cannot be traced with this libcupti, on any machine.
  const int rc =
      run_child_case("[child] CUDA activity alone", {{"CUPROF_CUPTI_LIBRARY", "/nonexistent/libcupti.so.13"}}, err, 60);
  const std::string said = slurp(err);
  CAPTURE(said);
  CHECK(rc == 0);
  CHECK(said.find("CUDA tracing is off: ") != std::string::npos);
  CHECK(said.find("nothing is recorded (CPU activity was not asked for)") != std::string::npos);
  CHECK(said.find("recording the CPU side only") == std::string::npos);
}

TEST_CASE("exit: a fault inside a guarded exit-time call is contained and reported as such") {
  int fault = 0;
  // The fault is raised rather than made: a store through a null pointer is undefined behaviour,
  // which UBSan reports before any fault happens.
  const bool ok = cuprof::detail::call_guarded([] { ::raise(SIGSEGV); }, &fault);
  CHECK_FALSE(ok);
  CHECK(fault == SIGSEGV);
  int calls = 0;
  CHECK(cuprof::detail::call_guarded([&] { ++calls; }));
  CHECK(calls == 1);
  // The guard is gone afterwards: a later fault is the program's own (checked in a child: it dies,
  // by SIGSEGV, or with a sanitizer's report where one handles faults).
  CHECK(in_child([] {
          ::raise(SIGSEGV);
          return 0;
        }) != 0);
}

// Runs in a fresh process (the case below): the threads and process-wide state
// that earlier cases leave behind made a child hang under ThreadSanitizer now and then.

TEST_CASE("[child] fork while a profile records") {
  if (!is_child_run() || !std::getenv("CUPROF_TEST_FORK_WHILE_RECORDING")) return;
  std::vector<std::unique_ptr<scope_worker>> workers;
  // Long dynamic names fill chunks fast, so the chunk pool's lock is taken often;
  // a window per fork hands the chunks back (to the same lock) and bounds memory.
  for (int i = 0; i < 3; ++i) workers.push_back(std::make_unique<scope_worker>(2000));
    // GCC 12's AddressSanitizer takes no lock of its allocator around fork: a child whose parent had
    // another thread inside malloc at that moment may wait on that lock forever (a child of 60 hung
    // under it, never in the other builds). Under it the other threads are idle at each fork; the
    // plain and ThreadSanitizer builds fork while they allocate, take chunks and register.
#if defined(__SANITIZE_ADDRESS__)
  constexpr bool quiet_fork = true;
#else
  constexpr bool quiet_fork = false;
#endif
  std::atomic<bool> spawning{true};
  std::mutex starting;       // held while a short-lived thread starts and ends
  std::thread spawner([&] {  // short-lived threads register (the registry's lock) and exit
    while (spawning.load()) {
      {
        std::lock_guard<std::mutex> lock(starting);
        std::thread([] { CUPROF_SCOPE("short_lived"); }).join();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // each thread holds a 128 KiB chunk until collected
    }
  });
  std::size_t windows = 0, malformed = 0, rounds = 0, child_spans = 0, worker_spans = 0, dropped = 0;
  cuprof::profile_options o = cpu_only();
  o.schedule = cuprof::schedule(/*wait*/ 0, /*warmup*/ 0, /*active*/ 1);
  o.on_trace_ready = [&](cuprof::profile& p) {
    const cuprof::trace& t = p.last_trace();
    ++windows;
    malformed += malformed_spans(t);
    rounds += count_spans(t, "fork_round");
    child_spans += count_spans(t, "child_scope");
    worker_spans += count_spans(t, "worker_outer");
    dropped += t.meta.dropped_cpu_events;
  };
  cuprof::profile prof(o);
  prof.start();
  for (auto& w : workers) w->run_loops(10);
  constexpr int forks = 60;
  int ok = 0, hung = 0, failed = 0;
  for (int i = 0; i < forks; ++i) {
    {
      CUPROF_SCOPE("fork_round");
      for (auto& w : workers) {  // a few chunks each, taken while the fork happens
        if (quiet_fork) w->run_loops(200);
        else w->allow_loops(200);
      }
      std::unique_lock<std::mutex> quiet(starting, std::defer_lock);
      if (quiet_fork) quiet.lock();
      std::fflush(nullptr);
      const pid_t child = ::fork();
      REQUIRE(child >= 0);
      if (child == 0) {
        // Scopes in the child: enough to need fresh chunks from the pool.
        for (int k = 0; k < 3000; ++k) {
          CUPROF_SCOPE("child_scope");
          cuprof::record_function r(std::string(200, 'c'));
        }
        if (i % 2) ::_exit(0);
        g_forked_child_no_leak_check.store(true);
        std::exit(0);  // exit handlers and static destructors run too
      }
      if (quiet_fork) quiet.unlock();
      const int rc = wait_or_kill(child, 30);
      if (rc == 0) ++ok;
      else if (rc == -1) ++hung;
      else ++failed;
      for (auto& w : workers) w->run_loops(2);
    }
    prof.step();
  }
  prof.stop();
  spawning.store(false);
  spawner.join();
  for (auto& w : workers) w->finish();
  CHECK(hung == 0);
  CHECK(failed == 0);
  CHECK(ok == forks);
  CHECK(windows == std::size_t(forks) + 1);  // one per step, and the one stop() ends
  CHECK(rounds == std::size_t(forks));
  CHECK(child_spans == 0);  // the children's scopes stay in the children
  CHECK(worker_spans > 0);
  CHECK(malformed == 0);
  CHECK(dropped == 0);
  temp_dir dir;
  const std::string path = (dir.path / "parent.json").string();
  prof.export_chrome_trace(path);
  CHECK(cuprof::read_trace_file(path).t.spans.size() == prof.last_trace().spans.size());
}

TEST_CASE("fork: children forked while a profile records and threads use scopes run scopes, exit, and do not hang") {
  temp_dir dir;
  const std::string err = (dir.path / "stderr.txt").string();
  const int rc = run_child_case("[child] fork while a profile records", {{"CUPROF_TEST_FORK_WHILE_RECORDING", "1"}}, err, 600);
  CAPTURE(slurp(err).substr(0, 4000));
  CHECK(rc == 0);
}

}  // TEST_SUITE("runtime_exit")
