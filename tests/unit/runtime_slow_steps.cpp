// profile_options::slow_steps on the CPU (profile.hpp, schedule.hpp,
// runtime/profile_impl.hpp): the kept windows handed to on_trace_ready, their
// ProfilerStep#N spans, the summary line, the byte cap, and misuse. Slow steps
// last 15 times a normal one, so that a busy machine does not change verdicts.

#include <cuprof/cuprof.hpp>

#include "support/stderr_capture.hpp"
#include "support/traces.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

using namespace cuprof_test;

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

// `n` steps of 2 ms, those in `slow` of 30 ms, each with a "work" scope.
kept_windows run_steps(cuprof::profile_options o, int n, const std::vector<int>& slow) {
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
      std::this_thread::sleep_for(std::chrono::milliseconds(is_slow ? 30 : 2));
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
  // 5x: a normal step must take 10 ms to look slow, a slow one is 15x.
  const kept_windows kept = run_steps(slow_steps_options(5), 40, {10, 25});
  const std::string said = err.finish();
  REQUIRE(kept.steps.size() == 2);
  CHECK(kept.steps[0] == std::vector<int>{9, 10, 11});
  CHECK(kept.steps[1] == std::vector<int>{24, 25, 26});
  CHECK(kept.work == std::vector<std::size_t>{3, 3});
  CHECK(said.find("cuprof: slow steps: 2 of 40 steps slower than 5.0x the median (") != std::string::npos);
  CHECK(said.find("steps 10 (") != std::string::npos);
  CHECK(said.find("2 traces kept") != std::string::npos);
  CHECK(lines_containing(said, "slow steps:") == 1);
}

TEST_CASE("slow_steps: a fixed threshold, and last_trace() and the table are those of the last kept window") {
  cuprof::profile_options o = cpu_only();
  cuprof::slow_steps s;
  s.threshold_ms = 20;
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
      std::this_thread::sleep_for(std::chrono::milliseconds(step == 7 ? 30 : 2));
    }
    prof.step();
  }
  prof.stop();
  CHECK(last == std::vector<int>{5, 6, 7});
  CHECK(profiler_steps(prof.last_trace()) == last);
  const auto* work = prof.key_averages().find("work", cuprof::row_kind::cpu_scope);
  REQUIRE(work);
  CHECK(work->count == 3);
  CHECK(err.finish().find("slower than 20.0 ms: steps 7 (") != std::string::npos);
}

TEST_CASE("slow_steps: no slow step, no trace; stop() while a kept window waits hands it over") {
  SUBCASE("no slow step") {
    stderr_capture err;
    const kept_windows kept = run_steps(slow_steps_options(5), 12, {});
    CHECK(kept.steps.empty());
    CHECK(err.finish().find("slow steps: none of 12 steps") != std::string::npos);
  }
  SUBCASE("the last step slow: its window ends at stop(), with the step running") {
    stderr_capture err;
    const kept_windows kept = run_steps(slow_steps_options(5), 12, {11});
    REQUIRE(kept.steps.size() == 1);
    CHECK(kept.steps[0] == std::vector<int>{10, 11, 12});
    CHECK(kept.work[0] == 2);  // step 12 ran no work before stop()
  }
}

TEST_CASE("slow_steps: max_traces caps the kept windows, the summary names the slow steps not kept") {
  cuprof::profile_options o = slow_steps_options(5);
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
  cuprof::profile_options o = slow_steps_options(5);
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
  o.slow_steps->threshold_ms = -1;
  CHECK(message(o).find("threshold_ms must be 0") != std::string::npos);
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

}  // TEST_SUITE("runtime_slow_steps")
