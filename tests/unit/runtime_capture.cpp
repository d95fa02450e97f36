// Capture ranges (CUPROF_CAPTURE_RANGE, runtime/autostart.hpp): windows the
// program marks with cudaProfilerStart/Stop or an NVTX range. CUPTI's calls are
// synthetic here: the cases call the hooks CUPTI's callbacks call
// (process_state::on_profiler_api, on_nvtx_range), in a child process each,
// where the environment's profile starts afresh.

#include <cuprof/cuprof.hpp>
#include <cuprof/runtime/autostart.hpp>

#include "support/child_process.hpp"
#include "support/cli.hpp"
#include "support/cupti_calls.hpp"
#include "support/files.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace cuprof_test;
using cuprof::detail::capture_range;
using cuprof::detail::nvtx_range_event;
using cuprof::detail::process;

namespace {

// The scopes a trace holds, by name.
std::set<std::string> scopes_in(const std::string& path) {
  std::set<std::string> names;
  const json doc = json::parse(slurp(path));
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "X") names.insert(e["name"].get<std::string>());
  return names;
}

void scope(const char* name) {
  cuprof::record_function s{std::string_view(name)};
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

void profiler_api(bool start) {
  void (*hook)(bool) = process().on_profiler_api.load();
  const bool hooked = hook != nullptr;
  REQUIRE(hooked);
  hook(start);
}

void nvtx(nvtx_range_event::kind_t kind, const char* message, std::uintptr_t domain = 0, std::uint64_t id = 0) {
  void (*hook)(const nvtx_range_event&) = process().on_nvtx_range.load();
  const bool hooked = hook != nullptr;
  REQUIRE(hooked);
  hook(cuprof_test::nvtx_event(kind, message, domain, id));
}

// As CUPTI's NVTX callback does: the hook if one is set (the capture may be over).
void nvtx_if_hooked(nvtx_range_event::kind_t kind, const char* message, std::uintptr_t domain = 0) {
  if (void (*hook)(const nvtx_range_event&) = process().on_nvtx_range.load()) {
    nvtx_range_event e;
    e.kind = kind;
    e.message = message;
    e.length = message ? std::strlen(message) : 0;
    e.domain = domain;
    hook(e);
  }
}

// The window's thread writes each trace after its range closed.
bool wait_for_file(const std::string& path) {
  for (int i = 0; i < 300 && !fs::exists(path); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // written atomically: present means complete
  return fs::exists(path);
}

bool wait_unhooked() {
  for (int i = 0; i < 300 && process().on_profiler_api.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return process().on_profiler_api.load() == nullptr && process().on_nvtx_range.load() == nullptr;
}

void run_case(const char* name, const std::vector<std::pair<std::string, std::string>>& env = {}) {
  temp_dir dir;
  const std::string output = (dir.path / "child.txt").string();
  const int rc = run_child_case(name, env, output);
  const std::string said = slurp(output);
  CAPTURE(said);
  CHECK(rc == 0);
  CHECK(said.find("Status: SUCCESS!") != std::string::npos);
  CHECK(std::regex_search(said, std::regex(R"(test cases: +1 \| +1 passed)")));
}

struct capture_env {
  temp_dir dir;
  scoped_env activities{"CUPROF_ACTIVITIES", "cpu"};
  scoped_env table{"CUPROF_TABLE", "0"};
  scoped_env trace;
  scoped_env range;
  scoped_env end;
  capture_env(const char* file, const char* range_value, const char* end_value)
      : trace("CUPROF_TRACE", (dir.path / file).string().c_str()),
        range("CUPROF_CAPTURE_RANGE", range_value),
        end("CUPROF_CAPTURE_RANGE_END", end_value) {}
  std::string path(const std::string& file) const { return (dir.path / file).string(); }
};

}  // namespace

TEST_SUITE("runtime") {
TEST_CASE("CUPROF_CAPTURE_RANGE and CUPROF_CAPTURE_RANGE_END are read strictly") {
  using cuprof::detail::read_capture_range;
  using cuprof::detail::read_capture_range_end;
  auto r = read_capture_range("cuda");
  CHECK(r.value.kind == capture_range::cuda);
  CHECK(r.value.ranges == 1);
  CHECK(r.problem.empty());

  r = read_capture_range("nvtx:train step");
  CHECK(r.value.kind == capture_range::nvtx);
  CHECK(r.value.message == "train step");
  CHECK(r.value.domain.empty());

  r = read_capture_range("nvtx:a@b@app");
  CHECK(r.value.message == "a@b");  // the last '@' names the domain
  CHECK(r.value.domain == "app");
  CHECK(r.problem.empty());

  r = read_capture_range("trigger");
  CHECK(r.value.kind == capture_range::trigger);
  CHECK(r.value.ranges == 0);  // every window asked for

  for (const char* bad : {"nvtx:", "nvtx:@app", "nvtx:x@", "cudaa", "NVTX:x", "hotkey", " cuda", "cuda "}) {
    r = read_capture_range(bad);
    CHECK_MESSAGE(r.value.kind == capture_range::refused, bad);
    CHECK_MESSAGE(r.problem.find("nothing is traced") != std::string::npos, bad);
  }
  // The end: a count of ranges, 0 for every one; "stop" keeps the range's own.
  const std::pair<const char*, int> ends[] = {{"stop", 1}, {"repeat", 0}, {"repeat:3", 3}, {"repeat:1", 1}};
  for (const auto& [text, n] : ends) {
    CAPTURE(text);
    const auto e = read_capture_range_end(text, 1);
    CHECK(e.value == n);
    CHECK(e.problem.empty());
  }
  CHECK(read_capture_range_end("stop", 0).value == 0);  // a trigger's every window
  for (const char* bad : {"repeat:0", "repeat:-1", "repeat:x", "again", "repeat:1e3", "repeat:"}) {
    const auto e = read_capture_range_end(bad, 1);
    CHECK_MESSAGE(e.value == 1, bad);
    CHECK_MESSAGE(e.problem.find("; using stop") != std::string::npos, bad);
  }
  // Hostile text is cut for the terminal in the problem line.
  CHECK(read_capture_range("\x1b[2Jevil").problem.find('\x1b') == std::string::npos);
  // An end without a range: said and ignored, its value not read.
  const cuprof::detail::environment_config end_alone = cuprof::detail::read_settings(
      [](const char* name) -> const char* { return std::string(name) == "CUPROF_CAPTURE_RANGE_END" ? "\x1b[2J" : nullptr; });
  CHECK(end_alone.capture.kind == capture_range::none);
  CHECK(end_alone.problems == std::vector<std::string>{"CUPROF_CAPTURE_RANGE_END needs CUPROF_CAPTURE_RANGE; ignored"});
}

TEST_CASE("a capture range not understood traces nothing and says so in one line, the value cut to 64 bytes") {
  const std::string long_value = "NVTX:" + std::string(10000, 'x');
  for (const std::string& value : {std::string("NVTX:x"), std::string(" cuda"), std::string("nvtx:"), long_value}) {
    const auto env = [&](const char* name) -> const char* {
      if (std::string(name) == "CUPROF_TRACE") return "t.json";
      if (std::string(name) == "CUPROF_CAPTURE_RANGE") return value.c_str();
      return nullptr;
    };
    const cuprof::detail::environment_config c = cuprof::detail::read_environment(env, false, 1, "h", 0, 1);
    CAPTURE(value.substr(0, 20));
    CHECK_FALSE(c.enabled);  // not the whole run instead
    REQUIRE(c.problems.size() == 1);
    CHECK(c.problems[0].find("nothing is traced") != std::string::npos);
    CHECK(c.problems[0].size() < 200);
  }
  CHECK(cuprof::detail::read_capture_range(long_value.c_str())
            .problem.find("CUPROF_CAPTURE_RANGE=NVTX:" + std::string(59, 'x') + "... (10005 bytes) is not cuda") == 0);
}

TEST_CASE("CUPROF_STEP_RANGE without anything that steps choose windows for: said and ignored, as CUPROF_STEPS alone is") {
  const auto read = [](const char* start_step, const char* capture) {
    return cuprof::detail::read_environment(
        [=](const char* name) -> const char* {
          const std::string n = name;
          if (n == "CUPROF_TRACE") return "t.json";
          if (n == "CUPROF_STEP_RANGE") return "train";
          if (n == "CUPROF_START_STEP") return start_step;
          if (n == "CUPROF_CAPTURE_RANGE") return capture;
          return nullptr;
        },
        false, 1, "h", 0, 1);
  };
  const cuprof::detail::environment_config alone = read(nullptr, nullptr);
  REQUIRE(alone.problems.size() == 1);
  CHECK(alone.problems[0] ==
        "CUPROF_STEP_RANGE needs CUPROF_START_STEP, CUPROF_SLOW_STEPS or CUPROF_CAPTURE_RANGE (what steps choose windows for); "
        "ignored");
  CHECK(alone.step_range.empty());
  for (const auto& c : {read("3", nullptr), read(nullptr, "trigger")}) {
    CHECK(c.problems.empty());
    CHECK(c.step_range == "train");
  }
}

TEST_CASE("a capture range with a time window: the range wins, said once") {
  const auto env = [](const char* name) -> const char* {
    if (std::string(name) == "CUPROF_TRACE") return "t.json";
    if (std::string(name) == "CUPROF_CAPTURE_RANGE") return "cuda";
    if (std::string(name) == "CUPROF_DELAY") return "2";
    return nullptr;
  };
  const cuprof::detail::environment_config c = cuprof::detail::read_environment(env, false, 1, "h", 0, 1);
  CHECK(c.capture.kind == capture_range::cuda);
  CHECK(c.delay_s == 0);
  REQUIRE(c.problems.size() == 1);
  CHECK(c.problems[0].find("CUPROF_CAPTURE_RANGE chooses the windows") != std::string::npos);
}

TEST_CASE("[child] capture range cuda stop") {
  if (!is_child_run()) return;
  capture_env env("cuda.json", "cuda", nullptr);
  REQUIRE(cuprof::detail::start_environment_profile());
  scope("before");
  void (*api)(bool) = process().on_profiler_api.load();  // as CUPTI's callback loads it, once per call
  const bool hooked = api != nullptr;
  REQUIRE(hooked);
  api(true);
  api(true);        // cudaProfilerStart calls cuProfilerStart: both reach the hook, one range
  scope("inside");  // the start call returned once the window was open
  api(false);
  api(false);
  scope("after");
  REQUIRE(wait_for_file(env.path("cuda.json")));
  CHECK(wait_unhooked());  // one range asked for: nothing more is watched
  CHECK(scopes_in(env.path("cuda.json")) == std::set<std::string>{"inside"});
  cuprof::detail::finish_environment_profile();
  CHECK(std::distance(fs::directory_iterator(env.dir.path), fs::directory_iterator()) == 1);
}

TEST_CASE("capture range cuda: only the scopes between cudaProfilerStart and cudaProfilerStop, once") {
  run_case("[child] capture range cuda stop");
}

TEST_CASE("[child] capture range cuda repeat:2") {
  if (!is_child_run()) return;
  capture_env env("run_%n.json", "cuda", "repeat:2");
  REQUIRE(cuprof::detail::start_environment_profile());
  for (const char* name : {"first", "second"}) {
    profiler_api(true);
    scope(name);
    profiler_api(false);
    scope("between");
    REQUIRE(wait_for_file(env.path(std::string("run_") + (name[0] == 'f' ? "1" : "2") + ".json")));
  }
  CHECK(wait_unhooked());  // two ranges asked for: a third start call reaches nothing
  scope("third");
  cuprof::detail::finish_environment_profile();
  CHECK(scopes_in(env.path("run_1.json")) == std::set<std::string>{"first"});
  CHECK(scopes_in(env.path("run_2.json")) == std::set<std::string>{"second"});
  CHECK_FALSE(fs::exists(env.path("run_3.json")));
}

TEST_CASE("capture range cuda, repeat:2: two ranges, each its own trace named by %n") {
  run_case("[child] capture range cuda repeat:2");
}

TEST_CASE("[child] capture range nvtx by message and domain") {
  if (!is_child_run()) return;
  capture_env env("nvtx.json", "nvtx:train@app", "repeat");
  REQUIRE(cuprof::detail::start_environment_profile());
  using ev = nvtx_range_event;
  nvtx(ev::push, "train", 0x20);  // before its domain is known: not the one asked for
  scope("unknown domain");
  nvtx(ev::pop, nullptr, 0x20);
  nvtx(ev::domain_created, "other", 0x20);
  nvtx(ev::domain_created, "app", 0x10);
  nvtx(ev::push, "train", 0x20);  // the right message in another domain
  scope("other domain");
  nvtx(ev::pop, nullptr, 0x20);
  nvtx(ev::push, "training", 0x10);  // the message is matched whole
  nvtx(ev::pop, nullptr, 0x10);

  // A pushed range: nested pushes of its domain and pops of others leave it open.
  nvtx(ev::push, "train", 0x10);
  nvtx(ev::push, "forward", 0x10);
  scope("pushed");
  nvtx(ev::pop, nullptr, 0x20);
  nvtx(ev::pop, nullptr, 0x10);  // ends "forward"
  scope("pushed, after forward");
  std::thread other([] { nvtx(nvtx_range_event::pop, nullptr, 0x10); });  // another thread's pop is its own
  other.join();
  scope("still pushed");
  nvtx(ev::pop, nullptr, 0x10);  // ends "train"
  REQUIRE(wait_for_file(env.path("nvtx.1.json")));
  scope("outside");

  // A started range ends where its id does, on any thread.
  nvtx(ev::start, "train", 0x10, 41);
  scope("started");
  nvtx(ev::end, nullptr, 0x10, 40);  // another range's end
  std::thread ender([] { nvtx(nvtx_range_event::end, nullptr, 0x10, 41); });
  ender.join();
  REQUIRE(wait_for_file(env.path("nvtx.2.json")));
  scope("outside again");
  cuprof::detail::finish_environment_profile();

  CHECK(scopes_in(env.path("nvtx.1.json")) == std::set<std::string>{"pushed", "pushed, after forward", "still pushed"});
  CHECK(scopes_in(env.path("nvtx.2.json")) == std::set<std::string>{"started"});
  CHECK_FALSE(fs::exists(env.path("nvtx.3.json")));
}

TEST_CASE("capture range nvtx:MESSAGE@DOMAIN: pushed and started ranges, nesting, other domains and threads") {
  run_case("[child] capture range nvtx by message and domain");
}

TEST_CASE("[child] capture range nvtx any domain stop") {
  if (!is_child_run()) return;
  capture_env env("any.json", "nvtx:phase", "stop");
  REQUIRE(cuprof::detail::start_environment_profile());
  using ev = nvtx_range_event;
  nvtx(ev::domain_created, "mine", 0x40);
  nvtx(ev::push, "phase", 0);  // the default domain's
  scope("first");
  nvtx(ev::pop, nullptr, 0);
  // The same message in the program's own domain, at once: before the
  // window's thread has written the first range's trace.
  nvtx_if_hooked(ev::push, "phase", 0x40);
  scope("second");
  nvtx_if_hooked(ev::pop, nullptr, 0x40);
  REQUIRE(wait_for_file(env.path("any.json")));
  CHECK(wait_unhooked());
  scope("after");
  cuprof::detail::finish_environment_profile();
  CHECK(scopes_in(env.path("any.json")) == std::set<std::string>{"first"});
  CHECK(std::distance(fs::directory_iterator(env.dir.path), fs::directory_iterator()) == 1);  // no second window
}

TEST_CASE("capture range nvtx:MESSAGE, stop: the first range of any domain ends at its own pop, and no window follows") {
  run_case("[child] capture range nvtx any domain stop");
}

TEST_CASE("[child] capture range nvtx back to back repeat") {
  if (!is_child_run()) return;
  capture_env env("b2b.json", "nvtx:phase", "repeat");
  REQUIRE(cuprof::detail::start_environment_profile());
  using ev = nvtx_range_event;
  nvtx(ev::domain_created, "mine", 0x40);
  nvtx(ev::push, "phase", 0);
  scope("one");
  nvtx(ev::pop, nullptr, 0);
  nvtx(ev::push, "phase", 0x40);  // the next range opens before the window's thread closed the first
  scope("two");
  nvtx(ev::pop, nullptr, 0x40);
  REQUIRE(wait_for_file(env.path("b2b.2.json")));
  cuprof::detail::finish_environment_profile();
  CHECK(scopes_in(env.path("b2b.1.json")) == std::set<std::string>{"one"});
  CHECK(scopes_in(env.path("b2b.2.json")) == std::set<std::string>{"two"});
  CHECK_FALSE(fs::exists(env.path("b2b.3.json")));
}

TEST_CASE("capture range nvtx, repeat: a range that opens as the last one closes gets its own window") {
  run_case("[child] capture range nvtx back to back repeat");
}

TEST_CASE("[child] capture range open at exit") {
  if (!is_child_run()) return;
  capture_env env("exit.json", "nvtx:phase", nullptr);
  REQUIRE(cuprof::detail::start_environment_profile());
  nvtx(nvtx_range_event::push, "phase", 0x30);  // any domain: none named
  scope("open at exit");
  cuprof::detail::finish_environment_profile();  // what exit does
  const bool unhooked = process().on_nvtx_range.load() == nullptr;
  CHECK(unhooked);
  CHECK(scopes_in(env.path("exit.json")) == std::set<std::string>{"open at exit"});
}

TEST_CASE("capture range: a range still open at exit is written then") { run_case("[child] capture range open at exit"); }

TEST_CASE("[child] capture range never started") {
  if (!is_child_run()) return;
  capture_env env("never.json", "cuda", nullptr);
  REQUIRE(cuprof::detail::start_environment_profile());
  scope("no range");
  cuprof::detail::finish_environment_profile();
  CHECK_FALSE(fs::exists(env.path("never.json")));
}

TEST_CASE("capture range: no range, no trace, and a line that says so") {
  temp_dir dir;
  const std::string output = (dir.path / "child.txt").string();
  const int rc = run_child_case("[child] capture range never started", {}, output);
  const std::string said = slurp(output);
  CAPTURE(said);
  CHECK(rc == 0);
  CHECK(said.find("no capture range started (cudaProfilerStart was never called): no trace written") != std::string::npos);
}

// --- cuprof trigger on the environment's profile ------------------------------------------

// A program that runs steps of 10 ms, each a "work N" scope, until the parent
// leaves a file "stop" in TRIGGER_DIR, under CUPROF_CAPTURE_RANGE=trigger; its NVTX step ranges
// go to the hook whenever one is set (a trigger that counts steps sets it).
TEST_CASE("[child] triggered program") {
  if (!is_child_run()) return;
  const std::string never = std::string(std::getenv("TRIGGER_DIR")) + "/never.json";
  const scoped_env activities("CUPROF_ACTIVITIES", "cpu");
  const scoped_env table("CUPROF_TABLE", "0");
  const scoped_env range("CUPROF_CAPTURE_RANGE", "trigger");
  const scoped_env trace("CUPROF_TRACE", never.c_str());
  REQUIRE(cuprof::detail::start_environment_profile());
  // Until the parent says it is done (a file), or a minute: sanitizers make everything slower.
  const std::string stop = std::string(std::getenv("TRIGGER_DIR")) + "/stop";
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int i = 0; std::chrono::steady_clock::now() < until && !fs::exists(stop); ++i) {
    const std::string step = "step " + std::to_string(i);
    if (void (*hook)(const nvtx_range_event&) = process().on_nvtx_range.load()) {
      nvtx_range_event e;
      e.message = step.c_str();
      e.length = step.size();
      hook(e);
    }
    const std::string work = "work " + std::to_string(i);
    cuprof::record_function s{std::string_view(work)};
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  cuprof::detail::finish_environment_profile();
}

TEST_CASE("cuprof trigger on a program under CUPROF_CAPTURE_RANGE=trigger: a window of the length asked, then of N steps") {
  temp_dir dir;
  const scoped_env xdg("XDG_RUNTIME_DIR", dir.path.c_str());
  const std::string output = (dir.path / "child.txt").string();
  std::fflush(nullptr);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::setenv("TRIGGER_DIR", dir.path.c_str(), 1);
    ::setenv("CUPROF_TEST_CHILD", "1", 1);
    const int fd = ::open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execl("/proc/self/exe", "cuprof_tests", "--test-case=[child] triggered program", "--no-intro", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const std::string socket = (dir.path / "cuprof" / (std::to_string(child) + ".sock")).string();
  for (int i = 0; i < 500 && !fs::exists(socket); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(fs::exists(socket));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a few steps before the window

  const std::string timed = (dir.path / "timed.json").string();
  cli_run r = cli({"trigger", std::to_string(child), "--duration", "0.3", "--output", timed});
  CAPTURE(r.out);
  CAPTURE(r.err);
  CHECK(r.rc == 0);
  REQUIRE(fs::exists(timed));
  // About 30 steps of 10 ms: the window's scopes span 0.3 s, give or take the thread's wake-ups.
  const json doc = json::parse(slurp(timed));
  double first = 1e300, last = 0;
  int scopes = 0;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "X" && e["name"].get<std::string>().rfind("work ", 0) == 0) {
      first = std::min(first, e["ts"].get<double>());
      last = std::max(last, e["ts"].get<double>() + e["dur"].get<double>());
      ++scopes;
    }
  CHECK(scopes >= 15);
  CHECK(scopes <= 35);
  CHECK(last - first >= 0.2e6);
  CHECK(last - first <= 0.4e6);

  const std::string stepped = (dir.path / "steps.json").string();
  r = cli({"trigger", std::to_string(child), "--steps", "3", "--output", stepped});
  CHECK(r.rc == 0);
  std::set<std::string> names = scopes_in(stepped);
  std::vector<int> steps;
  for (const std::string& n : names)
    if (n.rfind("work ", 0) == 0) steps.push_back(std::stoi(n.substr(5)));
  std::sort(steps.begin(), steps.end());
  REQUIRE(steps.size() == 3);  // the window opens where a step starts and ends where the third after it does
  CHECK(steps[1] == steps[0] + 1);
  CHECK(steps[2] == steps[0] + 2);
  // The steps as ProfilerStep#N spans, numbered as the program numbers them (the
  // opening step's NVTX range began before the window).
  std::vector<int> marked;
  for (const std::string& n : names)
    if (n.rfind("ProfilerStep#", 0) == 0) marked.push_back(std::stoi(n.substr(13)));
  std::sort(marked.begin(), marked.end());
  CHECK(marked == steps);

  std::ofstream(dir.path / "stop") << "done\n";
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  const std::string said = slurp(output);
  CAPTURE(said);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(fs::exists(dir.path / "never.json"));  // windows only where triggered
  CHECK_FALSE(fs::exists(socket));                   // removed at exit
}
}  // TEST_SUITE("runtime")
