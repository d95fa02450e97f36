// profile_options::slow_steps on the CPU (profile.hpp, model/slow_steps.hpp,
// runtime/profile_impl.hpp): the kept windows handed to on_trace_ready, their
// ProfilerStep#N spans, the summary line, the byte cap, and misuse; and
// CUPROF_SLOW_STEPS (base/env.hpp, runtime/autostart.hpp). Slow steps
// last 15 times a normal one, so that a busy machine does not change verdicts.

#include <cuprof/cuprof.hpp>
#include <cuprof/runtime/autostart.hpp>

#include "support/child_process.hpp"
#include "support/files.hpp"
#include "support/stderr_capture.hpp"
#include "support/traces.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace cuprof_test;
using json = nlohmann::json;

namespace {

// The step numbers of a trace's ProfilerStep#N spans, in order.
std::vector<int> profiler_steps(const cuprof::trace& t) {
  std::vector<int> steps;
  for (const cuprof::cpu_span& s : t.spans)
    if (s.is_step) steps.push_back(std::stoi(std::string(t.names.str(s.name)).substr(13)));
  std::sort(steps.begin(), steps.end());
  return steps;
}

struct kept_windows {
  std::vector<std::vector<int>> steps;  // each kept window's ProfilerStep numbers
  std::vector<std::size_t> work;        // and its "work" scopes
};

// `n` steps of 2 ms, those in `slow` of `slow_ms`, each with a "work" scope. The
// tests ask for 20x the median: a normal step must stall 40 ms to look slow (a
// loaded 2-core machine under the sanitizers stalled one past 10 ms, which kept
// a window more), and a slow step is 50x.
kept_windows run_steps(cuprof::profile_options o, int n, const std::vector<int>& slow, int slow_ms = 100) {
  kept_windows out;
  o.on_trace_ready = [&out](cuprof::profile& p) {
    out.steps.push_back(profiler_steps(p.last_trace()));
    out.work.push_back(count_spans(p.last_trace(), "work"));
  };
  cuprof::profile prof(o, cuprof::start_now);
  for (int step = 0; step < n; ++step) {
    {
      cuprof::record_function work("work");
      const bool is_slow = std::find(slow.begin(), slow.end(), step) != slow.end();
      std::this_thread::sleep_for(std::chrono::milliseconds(is_slow ? slow_ms : 2));
    }
    prof.step();
  }
  prof.stop();
  return out;
}

cuprof::profile_options slow_steps_options(double factor) {
  cuprof::profile_options o = cpu_only();
  cuprof::slow_steps s;
  s.factor = factor;
  o.slow_steps = s;
  return o;
}

}  // namespace

TEST_SUITE("runtime_slow_steps") {

TEST_CASE("slow_steps: two slow steps among 40, two traces, each the slow step with one step before and after") {
  stderr_capture err;
  const kept_windows kept = run_steps(slow_steps_options(20), 40, {10, 25});
  const std::string said = err.finish();
  REQUIRE(kept.steps.size() == 2);
  CHECK(kept.steps[0] == std::vector<int>{9, 10, 11});
  CHECK(kept.steps[1] == std::vector<int>{24, 25, 26});
  CHECK(kept.work == std::vector<std::size_t>{3, 3});
  CHECK(said.find("cuprof: slow steps: 2 of 40 steps slower than 20.0x the median (") != std::string::npos);
  CHECK(said.find("steps 10 (") != std::string::npos);
  CHECK(said.find("2 traces kept") != std::string::npos);
  CHECK(lines_containing(said, "slow steps:") == 1);
}

TEST_CASE("slow_steps: a fixed threshold, and last_trace() and the table are those of the last kept window") {
  cuprof::profile_options o = cpu_only();
  cuprof::slow_steps s;
  s.threshold_ms = 60;  // normal steps take 2 ms: a stall of 58 ms looks slow
  s.before = 2;
  s.after = 0;
  o.slow_steps = s;
  std::vector<int> last;
  o.on_trace_ready = [&last](cuprof::profile& p) { last = profiler_steps(p.last_trace()); };
  stderr_capture err;
  cuprof::profile prof(o, cuprof::start_now);
  for (int step = 0; step < 12; ++step) {
    {
      cuprof::record_function work("work");
      std::this_thread::sleep_for(std::chrono::milliseconds(step == 7 ? 100 : 2));
    }
    prof.step();
  }
  prof.stop();
  CHECK(last == std::vector<int>{5, 6, 7});
  CHECK(profiler_steps(prof.last_trace()) == last);
  const cuprof::event_averages rows = prof.key_averages();  // find() points into it
  const auto* work = rows.find("work", cuprof::row_kind::cpu_scope);
  REQUIRE(work);
  CHECK(work->count == 3);
  CHECK(err.finish().find("slower than 60.0 ms: steps 7 (") != std::string::npos);
}

TEST_CASE("slow_steps: no slow step, no trace; stop() while a kept window waits hands it over") {
  SUBCASE("no slow step") {
    stderr_capture err;
    const kept_windows kept = run_steps(slow_steps_options(20), 12, {});
    CHECK(kept.steps.empty());
    CHECK(err.finish().find("slow steps: none of 12 steps") != std::string::npos);
  }
  SUBCASE("the last step slow: its window ends at stop(), with the step running") {
    stderr_capture err;
    // 200 ms: still slow when a loaded machine stretches the 2 ms steps before it (median x 20).
    const kept_windows kept = run_steps(slow_steps_options(20), 12, {11}, 200);
    const std::string said = err.finish();
    INFO(said);  // the summary line says what the steps took
    REQUIRE(kept.steps.size() == 1);
    CHECK(kept.steps[0] == std::vector<int>{10, 11, 12});
    CHECK(kept.work[0] == 2);  // step 12 ran no work before stop()
  }
}

TEST_CASE("slow_steps: max_traces caps the kept windows, the summary names the slow steps not kept") {
  cuprof::profile_options o = slow_steps_options(20);
  o.slow_steps->max_traces = 1;
  stderr_capture err;
  const kept_windows kept = run_steps(o, 30, {10, 20});
  const std::string said = err.finish();
  REQUIRE(kept.steps.size() == 1);
  CHECK(kept.steps[0] == std::vector<int>{9, 10, 11});
  CHECK(said.find("2 of 30 steps") != std::string::npos);
  CHECK(said.find("1 trace kept; not kept (at most 1 traces): steps 20 (") != std::string::npos);
}

TEST_CASE("slow_steps: past ring_bytes the ring holds fewer steps, said once, and the summary gives the cap") {
  cuprof::profile_options o = slow_steps_options(20);
  o.slow_steps->ring_bytes = 1;  // any chunk in use is past it
  o.slow_steps->before = 2;
  o.slow_steps->ring_steps = 8;
  stderr_capture err;
  const kept_windows kept = run_steps(o, 20, {12});
  const std::string said = err.finish();
  CHECK(lines_containing(said, "slow steps: the ring's window held more than its") == 1);
  CHECK(said.find("ring of 1 step (of 8, shrunk to its byte cap)") != std::string::npos);
  REQUIRE(kept.steps.size() == 1);
  CHECK(kept.steps[0] == std::vector<int>{12});
}

TEST_CASE("slow_steps: invalid settings and a schedule beside it throw cuprof::error") {
  const auto message = [](const cuprof::profile_options& o) {
    try {
      cuprof::profile p(o);
    } catch (const cuprof::error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  cuprof::profile_options o = slow_steps_options(2);
  o.schedule = cuprof::schedule(0, 0, 1);
  CHECK(message(o).find("schedule and slow_steps both choose the windows") != std::string::npos);
  o.schedule.reset();
  o.slow_steps->factor = 1;
  CHECK(message(o).find("factor must be more than 1") != std::string::npos);
  o.slow_steps->threshold_ms = 5;  // a threshold needs no factor
  CHECK(message(o).empty());
  for (double bad : {-1.0, 1e-4, 2e13}) {  // below 1 us, above 1e7 s
    o.slow_steps->threshold_ms = bad;
    CHECK(message(o).find("threshold_ms must be 0 (use factor) or a time from 0.001 (1 us) to 1e10 (1e7 s)") !=
          std::string::npos);
  }
  o.slow_steps->threshold_ms = 0;
  o.slow_steps->factor = 2;
  o.slow_steps->before = 31;  // 31 + 1 + 1 steps in a ring of 32
  CHECK(message(o).find("ring_steps must be from before + 1 + after") != std::string::npos);
  o.slow_steps->before = 1;
  o.slow_steps->max_traces = 0;
  CHECK(message(o).find("max_traces must be at least 1") != std::string::npos);
  o.slow_steps->max_traces = 1;
  o.slow_steps->ring_bytes = 0;
  CHECK(message(o).find("ring_bytes must be more than 0") != std::string::npos);
}

TEST_CASE("CUPROF_SLOW_STEPS: a factor or a time, then before, after, keep, ring and ring_mb") {
  const auto parse = [](const char* text) {
    std::string why;
    const std::optional<cuprof::slow_steps> o = cuprof::detail::parse_slow_steps(text, why);
    CHECK(o.has_value() == why.empty());
    return o;
  };
  std::optional<cuprof::slow_steps> o = parse("2x");
  REQUIRE(o);
  CHECK(o->factor == 2);
  CHECK(o->threshold_ms == 0);
  o = parse("50ms");
  REQUIRE(o);
  CHECK(o->threshold_ms == 50);
  CHECK(parse("1.5s")->threshold_ms == 1500);
  CHECK(parse("250us")->threshold_ms == doctest::Approx(0.25));
  CHECK(parse("2000000ns")->threshold_ms == doctest::Approx(2));
  CHECK(parse("1us")->threshold_ms == doctest::Approx(0.001));
  CHECK(parse("10000000s")->threshold_ms == doctest::Approx(1e10));
  o = parse("3.5x,before=2,after=3,keep=4,ring=16,ring_mb=64");
  REQUIRE(o);
  CHECK(o->factor == 3.5);
  CHECK(o->before == 2);
  CHECK(o->after == 3);
  CHECK(o->max_traces == 4);
  CHECK(o->ring_steps == 16);
  CHECK(o->ring_bytes == std::size_t(64) << 20);
  for (const char* bad : {"x", "2", "abc", "-2x", "0ms", "2x,", "2x,before=-1", "2x,before=", "2x,foo=1", "1x", "2x,before=40",
                          "2x,keep=0", "2x,ring_mb=0", "50 ms", "2x ,after=1",
                          // Below 1 us (0 ns: no threshold at all) or above 1e7 s (past 2^64 ns).
                          "0.9ns", "999ns", "20000000000s", "1e30ms"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse(bad));
  }
  std::string why;
  cuprof::detail::parse_slow_steps("2x,before=40", why);
  CHECK(why.find("ring_steps must be from before + 1 + after") != std::string::npos);
  const auto problem = cuprof::detail::read_slow_steps("fast").problem;
  CHECK(problem.find("CUPROF_SLOW_STEPS=fast is not a slow-step rule (the rule comes first") == 0);
  CHECK(problem.find("; slow steps are not kept") != std::string::npos);
  CHECK(cuprof::detail::read_slow_steps(nullptr).problem.empty());
}

TEST_CASE("CUPROF_SLOW_STEPS with CUPROF_START_STEP or CUPROF_DELAY: the slow steps are kept, and that is said") {
  for (const char* other : {"CUPROF_START_STEP", "CUPROF_DELAY"}) {
    CAPTURE(other);
    const std::map<std::string, std::string> vars = {{"CUPROF_TRACE", "t.json"}, {"CUPROF_SLOW_STEPS", "2x"}, {other, "3"}};
    const auto env = [&vars](const char* name) -> const char* {
      const auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
    const cuprof::detail::environment_config c = cuprof::detail::read_environment(env, false, 1, "host", 0, 1);
    CHECK(c.slow.has_value());
    CHECK(c.start_step == -1);
    CHECK(c.delay_s == 0);
    REQUIRE(c.problems.size() == 1);
    CHECK(c.problems[0] ==
          std::string("CUPROF_SLOW_STEPS and ") + other + " both choose the windows; keeping the slow steps of the whole run");
  }
}

TEST_CASE("a kept window's trace path: %n is its number, else .slow<n> before the extension") {
  using cuprof::detail::numbered_trace_path;
  CHECK(numbered_trace_path("/t/run_%n.json", 2, "slow") == "/t/run_2.json");
  CHECK(numbered_trace_path("/t/run_%n_%n.json", 2, "slow") == "/t/run_2_2.json");
  CHECK(numbered_trace_path("/t.d/run.pt.trace.json.gz", 1, "slow") == "/t.d/run.slow1.pt.trace.json.gz");
  CHECK(numbered_trace_path("/t/run", 3, "slow") == "/t/run.slow3");
  CHECK(numbered_trace_path("/t/run.json", 3, "") == "/t/run.3.json");
  CHECK(numbered_trace_path("/t/run.json", 3, nullptr) == "/t/run.json");
}

// Steps are the NVTX ranges CUPTI would hand to cuprof's hook; here the hook
// is called as CUPTI's NVTX callback calls it.
TEST_CASE("[child] CUPROF_SLOW_STEPS") {
  if (!cuprof_test::is_child_run()) return;
  using namespace cuprof::detail;
  const char* dir = std::getenv("SLOW_STEPS_DIR");
  REQUIRE(dir);
  const std::string path = std::string(dir) + "/slow_%n.json";
  const scoped_env activities("CUPROF_ACTIVITIES", "cpu");
  const scoped_env trace("CUPROF_TRACE", path.c_str());
  const scoped_env slow("CUPROF_SLOW_STEPS", "25x");  // well above what a loaded machine adds to a 2 ms step
  REQUIRE(start_environment_profile());
  void (*hook)(const nvtx_range_event&) = process().on_nvtx_range.load();
  const bool hooked = hook != nullptr;
  REQUIRE(hooked);
  const auto range = [hook](const std::string& message) {
    nvtx_range_event e;
    e.message = message.c_str();
    e.length = message.size();
    hook(e);
    hook(nvtx_range_event{nvtx_range_event::pop});
  };
  for (int i = 0; i < 40; ++i) {
    range("unrelated");  // not a step
    range("step " + std::to_string(i));
    const std::string work = "work " + std::to_string(i);
    cuprof::record_function scope{std::string_view(work)};
    std::this_thread::sleep_for(std::chrono::milliseconds(i == 10 || i == 25 ? 120 : 2));
  }
  finish_environment_profile();
  return;
}

TEST_CASE("CUPROF_SLOW_STEPS: each slow step's window in a file of its own, with its ProfilerStep#N spans") {
  temp_dir dir;
  const std::string output = (dir.path / "child.txt").string();
  const int rc = cuprof_test::run_child_case("[child] CUPROF_SLOW_STEPS", {{"SLOW_STEPS_DIR", dir.path.string()}}, output);
  const std::string said = slurp(output);
  CAPTURE(said);
  CHECK(rc == 0);
  CHECK(said.find("Status: SUCCESS!") != std::string::npos);
  CHECK(said.find("cuprof: slow steps: 2 of 39 steps slower than 25.0x the median") != std::string::npos);
  CHECK(said.find("2 traces kept") != std::string::npos);
  const auto names_in = [](const fs::path& file) {
    std::set<std::string> names;
    const json doc = json::parse(slurp(file));
    for (const json& e : doc["traceEvents"])
      if (e["ph"] == "X") names.insert(e["name"].get<std::string>());
    return names;
  };
  REQUIRE(fs::exists(dir.path / "slow_1.json"));
  REQUIRE(fs::exists(dir.path / "slow_2.json"));
  CHECK_FALSE(fs::exists(dir.path / "slow_3.json"));
  CHECK(names_in(dir.path / "slow_1.json") ==
        std::set<std::string>{"ProfilerStep#9", "ProfilerStep#10", "ProfilerStep#11", "work 9", "work 10", "work 11"});
  CHECK(names_in(dir.path / "slow_2.json") ==
        std::set<std::string>{"ProfilerStep#24", "ProfilerStep#25", "ProfilerStep#26", "work 24", "work 25", "work 26"});
}

}  // TEST_SUITE("runtime_slow_steps")
