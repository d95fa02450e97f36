// Which steps slow_steps keeps (include/cuprof/model/slow_steps.hpp): verdicts
// by threshold and by factor of the median, the ring's start, kept windows at
// the ring's edges, joined, capped in number and in steps, and the summary.

#include <cuprof/model/slow_steps.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

using cuprof::slow_steps;
using cuprof::detail::slow_step_action;
using cuprof::detail::slow_step_ring;

constexpr std::uint64_t ms = 1000000;
constexpr std::uint64_t first_start = 1000;

// Runs steps of these durations (ns; times are ns too) through a ring and
// checks what must hold after every step: the ring holds at most its limit,
// its start only moves forward and is always a step's start.
struct run {
  slow_step_ring ring;
  std::vector<std::uint64_t> starts{first_start};           // starts[k]: where step k started
  std::vector<std::pair<std::int64_t, std::int64_t>> kept;  // each kept window's first and last step
  std::uint64_t ring_start = first_start;

  explicit run(const slow_steps& rule) : ring(rule, first_start) {}

  run& steps(const std::vector<std::uint64_t>& durations, std::size_t held_bytes = 0) {
    for (std::uint64_t d : durations) {
      const std::uint64_t end = starts.back() + d;
      starts.push_back(end);
      const slow_step_action a = ring.step_ended(end, d, held_bytes);
      CHECK(ring.held_steps() <= ring.step_limit());
      if (a.cut) {
        CHECK(a.cut_start == starts[std::size_t(a.first_step)]);
        CHECK(a.cut_start >= ring_start);
        CHECK(a.last_step == ring.steps() - 1);
        kept.emplace_back(a.first_step, a.last_step);
        ring_start = end;
      } else if (a.ring_start) {
        CHECK(a.ring_start > ring_start);
        CHECK(std::find(starts.begin(), starts.end(), a.ring_start) != starts.end());
        ring_start = a.ring_start;
      }
    }
    return *this;
  }
};

// n steps of `normal` with the given steps lasting `slow` instead.
std::vector<std::uint64_t> durations(int n, std::uint64_t normal, const std::vector<int>& slow_steps, std::uint64_t slow) {
  std::vector<std::uint64_t> d(std::size_t(n), normal);
  for (int s : slow_steps) d[std::size_t(s)] = slow;
  return d;
}

using windows = std::vector<std::pair<std::int64_t, std::int64_t>>;

}  // namespace

TEST_SUITE("model_slow_steps") {

TEST_CASE("a fixed threshold keeps each slow step with one step before and after it") {
  slow_steps rule;
  rule.threshold_ms = 50;
  run r(rule);
  r.steps(durations(20, 10 * ms, {7, 15}, 100 * ms));
  CHECK(r.kept == windows{{6, 8}, {14, 16}});
  CHECK(r.ring.slow_count() == 2);
  CHECK(r.ring.kept() == 2);
  CHECK_FALSE(r.ring.window_waiting());
}

TEST_CASE("a threshold compares strictly: a step of exactly the threshold is not slow") {
  slow_steps rule;
  rule.threshold_ms = 50;
  run r(rule);
  r.steps(durations(10, 10 * ms, {3}, 50 * ms));
  CHECK(r.kept.empty());
  CHECK(r.ring.slow_count() == 0);
}

TEST_CASE("idle, the ring holds the `before` steps a slow step would keep and the step running") {
  slow_steps rule;
  rule.threshold_ms = 50;
  rule.before = 2;
  run r(rule);
  r.steps(durations(6, 10 * ms, {}, 0));
  CHECK(r.ring.held_steps() == 3);
  CHECK(r.ring_start == r.starts[4]);  // steps 4 and 5 ended, 6 runs
  rule.before = 0;
  run none(rule);
  none.steps(durations(6, 10 * ms, {}, 0));
  CHECK(none.ring.held_steps() == 1);
  CHECK(none.ring_start == none.starts[6]);
}

TEST_CASE("by factor: a step slower than factor x the median of the steps before it") {
  slow_steps rule;  // factor 2
  run r(rule);
  r.steps(durations(40, 2 * ms, {10, 25}, 30 * ms));
  CHECK(r.kept == windows{{9, 11}, {24, 26}});
  const std::string line = r.ring.summary();
  CHECK(line.find("slow steps: 2 of 40 steps slower than 2.0x the median (2.0 ms)") == 0);
  CHECK(line.find("steps 10 (30.0 ms, 15.0x), 25 (30.0 ms, 15.0x); 2 traces kept") != std::string::npos);
  CHECK(line.find("ring of 32 steps") != std::string::npos);
}

TEST_CASE("by factor, no verdict during the warm-up: the first 5 steps set the median") {
  slow_steps rule;
  rule.factor = 3;
  SUBCASE("a slow step among the first five is not judged") {
    run r(rule);
    r.steps(durations(12, 10 * ms, {2}, 100 * ms));
    CHECK(r.kept.empty());
    CHECK(r.ring.slow_count() == 0);
  }
  SUBCASE("the sixth step is") {
    run r(rule);
    r.steps(durations(12, 10 * ms, {5}, 100 * ms));
    CHECK(r.kept == windows{{4, 6}});
  }
  SUBCASE("a threshold needs no warm-up") {
    rule.threshold_ms = 50;
    run r(rule);
    r.steps(durations(12, 10 * ms, {2}, 100 * ms));
    CHECK(r.kept == windows{{1, 3}});
  }
}

TEST_CASE("the median follows the latest steps: a program that slows down for good stops being slow") {
  slow_steps rule;
  run r(rule);
  std::vector<std::uint64_t> d = durations(200, 10 * ms, {}, 0);
  for (std::size_t k = 100; k < d.size(); ++k) d[k] = 50 * ms;
  r.steps(d);
  // Slow until the latest 64 steps' median caught up: about half of them.
  CHECK(r.ring.slow_count() > 20);
  CHECK(r.ring.slow_count() < 40);
  CHECK(r.ring.median_ns() == 50 * ms);
}

TEST_CASE("at the ring's edges: a slow first step keeps no step before it; stopping cuts a waiting window") {
  slow_steps rule;
  rule.threshold_ms = 50;
  rule.before = 2;
  rule.after = 2;
  run r(rule);
  r.steps(durations(5, 10 * ms, {0}, 100 * ms));
  CHECK(r.kept == windows{{0, 2}});
  CHECK(r.starts[0] == first_start);

  run late(rule);
  late.steps(durations(10, 10 * ms, {9}, 100 * ms));
  CHECK(late.kept.empty());
  CHECK(late.ring.window_waiting());
  const slow_step_action a = late.ring.finish();
  CHECK(a.cut);
  CHECK(a.first_step == 7);
  CHECK(a.last_step == 10);  // the step running when recording stopped
  CHECK(a.cut_start == late.starts[7]);
  CHECK(late.ring.kept() == 1);
  CHECK_FALSE(late.ring.finish().cut);
}

TEST_CASE("a slow step found while a kept window waits joins it; one found just after starts its own") {
  slow_steps rule;
  rule.threshold_ms = 50;
  rule.after = 2;
  SUBCASE("adjacent and within `after`: one window") {
    run r(rule);
    r.steps(durations(20, 10 * ms, {5, 6, 8}, 100 * ms));
    CHECK(r.kept == windows{{4, 10}});
    CHECK(r.ring.slow_count() == 3);
    CHECK(r.ring.kept() == 1);
  }
  SUBCASE("right after the cut: its step before went with the kept window") {
    run r(rule);
    r.steps(durations(20, 10 * ms, {5, 8}, 100 * ms));
    CHECK(r.kept == windows{{4, 7}, {8, 10}});
  }
}

TEST_CASE("at most max_traces windows; later slow steps are counted and named as not kept") {
  slow_steps rule;
  rule.threshold_ms = 50;
  rule.max_traces = 2;
  run r(rule);
  r.steps(durations(30, 10 * ms, {5, 10, 15, 20}, 100 * ms));
  CHECK(r.kept == windows{{4, 6}, {9, 11}});
  CHECK(r.ring.slow_count() == 4);
  const std::string line = r.ring.summary();
  CHECK(
      line.find("slow steps: 4 of 30 steps slower than 50.0 ms: steps 5 (100.0 ms, 10.0x), 10 (100.0 ms, 10.0x); 2 traces kept; "
                "not kept (at most 2 traces): steps 15 (100.0 ms, 10.0x), 20 (100.0 ms, 10.0x)") == 0);
}

TEST_CASE("a kept window never holds more than ring_steps steps: a run of slow steps is cut into several") {
  slow_steps rule;
  rule.threshold_ms = 50;
  rule.ring_steps = 4;
  rule.max_traces = 10;
  run r(rule);
  r.steps(durations(20, 10 * ms, {5, 6, 7, 8, 9, 10}, 100 * ms));
  CHECK(r.kept == windows{{4, 7}, {8, 11}});
  for (const auto& w : r.kept) CHECK(w.second - w.first + 1 <= 4);
}

TEST_CASE("the ring never holds more than ring_steps steps, whatever the steps") {
  std::mt19937 random(7);
  for (int ring_steps : {1, 2, 3, 5, 8}) {
    for (int before = 0; before < ring_steps; ++before) {
      for (int after = 0; before + 1 + after <= ring_steps; ++after) {
        CAPTURE(ring_steps);
        CAPTURE(before);
        CAPTURE(after);
        slow_steps rule;
        rule.ring_steps = ring_steps;
        rule.before = before;
        rule.after = after;
        rule.max_traces = 1000;
        run r(rule);
        std::vector<std::uint64_t> d(300);
        for (std::uint64_t& x : d) x = random() % 10 == 0 ? 40 * ms : 10 * ms + random() % ms;
        r.steps(d);
        for (const auto& w : r.kept) CHECK(w.second - w.first + 1 <= ring_steps);
        CHECK(r.ring.slow_count() > 0);
      }
    }
  }
}

TEST_CASE("past its byte cap the ring holds a step fewer, says so the first time, and the summary tells") {
  slow_steps rule;
  rule.threshold_ms = 50;
  rule.before = 3;
  rule.after = 1;
  rule.ring_steps = 8;
  rule.ring_bytes = 1 << 20;
  slow_step_ring ring(rule, first_start);
  std::uint64_t t = first_start;
  int said = 0, limit_said = 0;
  for (int k = 0; k < 6; ++k) {
    t += 10 * ms;
    const slow_step_action a = ring.step_ended(t, 10 * ms, k >= 4 ? 2 << 20 : 1000);
    if (a.shrunk_to) ++said, limit_said = a.shrunk_to;
  }
  CHECK(said == 1);
  CHECK(limit_said == 4);         // it held 4 ended steps and the one running
  CHECK(ring.step_limit() == 3);  // and shrank again at the next step, unsaid
  CHECK(ring.held_steps() <= 3);
  CHECK(ring.summary().find("ring of 3 steps (of 8, shrunk to its byte cap), at most 1.0 MiB") != std::string::npos);
  CHECK(ring.shrunk_line(4) ==
        "slow steps: the ring's window held more than its 1.0 MiB (ring_bytes): it holds at most 4 steps from now on");
}

TEST_CASE("the summary with no slow step") {
  slow_steps rule;
  run r(rule);
  r.steps(durations(3, 10 * ms, {}, 0));
  CHECK(r.ring.summary() ==
        "slow steps: none of 3 steps slower than 2.0x the median (10.0 ms); no traces kept; ring of 32 steps, at most 256.0 MiB");
}

}  // TEST_SUITE("model_slow_steps")
