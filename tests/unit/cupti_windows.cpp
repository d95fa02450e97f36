// The window engine (collect/window_engine.hpp) over the real call recorder
// and record store, driven by a schedule's steps as the profile drives it:
// 8 threads launch nonstop, their kernels delivered late and out of order,
// across 100 windows back to back and with gaps between. Each worker thread
// logs, independently of cuprof, when each of its launches entered; the
// windows taken must agree with that log exactly (support/busy_process.hpp
// says the rule). The other ways of choosing windows: runtime_windows.cpp.

#include <cuprof/schedule.hpp>

#include "support/busy_process.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <thread>
#include <vector>

namespace {

using cuprof::profiler_action;
using cuprof::detail::now_ticks;
using cuprof_test::busy_process;
using cuprof_test::busy_records;
using cuprof_test::taken_window;

// Steps of 0.8-3.2 ms through `s`, as profile::step() takes them: the
// schedule's action at each step closes and opens windows on the engine.
std::vector<taken_window> run_schedule(busy_process& p, const cuprof::schedule& s, int steps) {
  busy_records records{p};
  cuprof::detail::window_engine<busy_records> engine;
  std::vector<taken_window> taken;
  profiler_action action = s(0);
  if (cuprof::detail::opens_window(profiler_action::none, action)) engine.open_at(records, now_ticks());
  for (int step = 1; step <= steps; ++step) {
    std::this_thread::sleep_for(std::chrono::microseconds(800 + 400 * (step % 7)));
    const std::uint64_t now = now_ticks();
    const profiler_action next = s(step);
    if (cuprof::detail::closes_window(action, next))
      engine.close_at(now, cuprof::detail::tick_converter{}, cuprof::detail::monotonic_ns() + 20000000000ull);
    if (cuprof::detail::opens_window(action, next)) engine.open_at(records, now);
    action = next;
    cuprof_test::hand_over(engine, records, taken, false);  // what is complete already; the rest waits
  }
  p.stop_launching();
  cuprof_test::hand_over(engine, records, taken, true);
  return taken;
}

// 8 threads launching nonstop through 100 windows, checked against their own log.
std::vector<taken_window> windows_while_busy(const cuprof::schedule& s, int steps) {
  constexpr int threads = 8;
  // Launches for about as long as the steps last (2 ms each, on average).
  const int scale = cuprof_test::under_sanitizer ? 4 : 1;
  busy_process p(threads, 40000 * steps / 100 / scale, 20 * steps / 100 * scale);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::vector<taken_window> taken = run_schedule(p, s, steps);
  p.finish();
  REQUIRE(taken.size() == 100);
  cuprof_test::check_windows(taken, p.launches(), threads);
  return taken;
}

}  // namespace

TEST_SUITE("cupti_windows") {
TEST_CASE("schedule(active=1, repeat=100): 100 windows back to back, every launch in its window with its kernel, once") {
  const std::vector<taken_window> taken = windows_while_busy(cuprof::schedule(0, 0, 1, 100), 100);
  for (std::size_t i = 1; i < taken.size(); ++i) CHECK(taken[i].span.start == taken[i - 1].span.end);
}

TEST_CASE("schedule(wait=1, warmup=1, active=2, repeat=100): 100 windows with gaps, nothing of a gap in a window") {
  const std::vector<taken_window> taken = windows_while_busy(cuprof::schedule(1, 1, 2, 100), 400);
  // The gaps' work that ran inside a window is counted as launched before it, not lost.
  std::uint64_t before = 0;
  for (const taken_window& w : taken) before += w.edges.launched_before[0];
  MESSAGE(before << " kernels launched in a gap ran in the next window");
}
}  // TEST_SUITE("cupti_windows")
