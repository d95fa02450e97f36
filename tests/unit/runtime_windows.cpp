// Every way of choosing a window (runtime/windows/: capture ranges by
// cudaProfilerStart/Stop and by NVTX range with and without a domain,
// triggers by duration and by steps, --start-step, --delay/--duration, slow
// steps), each driven through its policy and the one driver, 100 windows
// while 8 threads launch nonstop, their kernels coming late and out of order:
// every window taken from the window engine must agree exactly with the
// threads' own log of their launches (support/busy_process.hpp).

#include <cuprof/cuprof.hpp>
#include <cuprof/runtime/autostart.hpp>

#include "support/busy_process.hpp"
#include "support/stderr_capture.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using cuprof::detail::capture_range;
using cuprof::detail::now_ticks;
using cuprof::detail::nvtx_range_event;
using cuprof::detail::window_driver;
using cuprof_test::busy_process;
using cuprof_test::busy_records;
using cuprof_test::nvtx_event;
using cuprof_test::taken_window;

constexpr int threads = 8;
constexpr int windows = 100;
// Windows of a timer or a trigger last 20 ms or more (the driver wakes every 20 ms): launches last seconds.
constexpr int launches = cuprof_test::under_sanitizer ? 25000 : 150000;
constexpr int launch_pause_us = cuprof_test::under_sanitizer ? 1000 : 200;

// The policies' target as the profile is in a program: here the window
// engine over the busy process. Called with the driver's lock held.
class engine_target final : public cuprof::detail::window_target {
 public:
  explicit engine_target(busy_process& p) : records_{p} {}

  void open() override {
    if (open_) return;
    open_ = true;
    engine_.open_at(records_, now_ticks());
  }
  void move_start(std::uint64_t ticks) override {
    if (open_) engine_.move_start(records_, ticks);
  }
  void close_at(std::uint64_t ticks) override {
    if (!open_) return;
    open_ = false;
    close(ticks);
  }
  void end_at(std::uint64_t ticks) override {
    close_at(ticks ? ticks : now_ticks());
    ended_ = true;
  }
  // The slow steps' ring, as the profile keeps it (profile::slow_step_at).
  void step_boundary(std::uint64_t ticks, bool first) override {
    if (first) {
      engine_.move_start(records_, ticks);
      ring_.emplace(rule_, ticks);
      return;
    }
    const cuprof::detail::tick_converter clock(cuprof::detail::clock_anchor(), cuprof::detail::sample_clocks());
    const std::uint64_t began = clock.to_epoch_ns(ring_->running_start()), ended = clock.to_epoch_ns(ticks);
    const cuprof::detail::slow_step_action a = ring_->step_ended(ticks, ended > began ? ended - began : 0);
    ring_windows w{*this};
    cuprof::detail::follow_slow_step(a, ticks, w);
  }

  void set_slow_rule(const cuprof::slow_steps& r) { rule_ = r; }
  // At the end: what the ring still waits for is kept, as profile::stop() does.
  void finish_slow_steps(std::uint64_t now) {
    const cuprof::detail::slow_step_action kept = ring_->finish();
    if (kept.cut) {
      engine_.move_start(records_, kept.cut_start);
      close(now);
    }
    open_ = false;
  }

  bool ended() const { return ended_; }
  // Waits until every closed window is handed over (the driver stopped).
  std::vector<taken_window> take_all() {
    cuprof_test::hand_over(engine_, records_, taken_, true);
    return std::move(taken_);
  }

 private:
  struct ring_windows {
    engine_target& t;
    void move_start(std::uint64_t ticks) { t.engine_.move_start(t.records_, ticks); }
    void close_at(std::uint64_t ticks) { t.close(ticks); }
    void open_at(std::uint64_t ticks) { t.engine_.open_at(t.records_, ticks); }
  };

  void close(std::uint64_t ticks) {
    engine_.close_at(ticks, cuprof::detail::tick_converter{}, cuprof::detail::monotonic_ns() + 20000000000ull);
    cuprof_test::hand_over(engine_, records_, taken_, false);
  }

  busy_records records_;
  cuprof::detail::window_engine<busy_records> engine_;
  bool open_ = false;
  bool ended_ = false;
  std::vector<taken_window> taken_;
  cuprof::slow_steps rule_;
  std::optional<cuprof::detail::slow_step_ring> ring_;
};

// A driver, its lock and its thread over one target.
struct driven {
  std::mutex lock;
  window_driver driver{lock};
  std::thread thread;

  void start(engine_target& t) { thread = driver.start(&t); }
  void finish() {
    {
      std::lock_guard<std::mutex> l(lock);
      driver.finish();
    }
    thread.join();
  }
  template <class Fn>
  auto locked(Fn&& fn) {
    std::lock_guard<std::mutex> l(lock);
    return fn();
  }
};

void pause_us(int us) { std::this_thread::sleep_for(std::chrono::microseconds(us)); }

// Waits (at most 20 s) for `done`, checked with the driver's lock held.
template <class Fn>
void wait_for(driven& d, Fn&& done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!d.locked(done)) {
    REQUIRE(std::chrono::steady_clock::now() < give_up);
    pause_us(200);
  }
}

// A window's length and the gap before the next, varied so that edges fall anywhere in the launches.
int window_us(int i) { return 800 + 400 * (i % 7); }
int gap_us(int i) { return i % 3 == 0 ? 0 : 200 + 150 * (i % 5); }

void check(busy_process& p, const std::vector<taken_window>& taken, std::size_t expected) {
  p.finish();
  CHECK(taken.size() == expected);
  cuprof_test::check_windows(taken, p.launches(), threads);
}

// Steps marked the way programs mark them: an NVTX range per step, on the main thread.
void step(cuprof::detail::window_policy& policy, int n) {
  const std::string message = "step " + std::to_string(n);
  policy.on_nvtx(nvtx_event(nvtx_range_event::push, message.c_str(), 0));
  policy.on_nvtx(nvtx_event(nvtx_range_event::pop, nullptr, 0));
}

}  // namespace

TEST_SUITE("runtime_windows") {
TEST_CASE("capture range cuda, repeat: 100 windows between cudaProfilerStart and Stop while 8 threads launch") {
  busy_process p(threads, launches, launch_pause_us);
  engine_target target(p);
  driven d;
  cuprof::detail::trace_destination out;
  capture_range c;
  c.kind = capture_range::cuda;
  c.ranges = 0;
  cuprof::detail::capture_range_window policy(d.driver, c, out);
  d.start(target);
  for (int i = 0; i < windows; ++i) {
    pause_us(gap_us(i));
    policy.on_profiler_api(true);
    policy.on_profiler_api(true);  // cudaProfilerStart calls cuProfilerStart: one range
    pause_us(window_us(i));
    policy.on_profiler_api(false);
    policy.on_profiler_api(false);
  }
  d.finish();  // the asks still queued are applied first
  check(p, target.take_all(), windows);
}

TEST_CASE("capture range nvtx:MSG@DOMAIN, repeat: only the named domain's range, to its own pop, nested and back to back") {
  busy_process p(threads, launches, launch_pause_us);
  engine_target target(p);
  driven d;
  cuprof::detail::trace_destination out;
  capture_range c;
  c.kind = capture_range::nvtx;
  c.message = "train";
  c.domain = "mine";
  c.ranges = 0;
  cuprof::detail::capture_range_window policy(d.driver, c, out);
  d.start(target);
  constexpr std::uintptr_t mine = 0x1000, other = 0x2000;
  policy.on_nvtx(nvtx_event(nvtx_range_event::domain_created, "other", other));
  policy.on_nvtx(nvtx_event(nvtx_range_event::domain_created, "mine", mine));
  for (int i = 0; i < windows; ++i) {
    pause_us(gap_us(i));
    policy.on_nvtx(nvtx_event(nvtx_range_event::push, "train", other));  // another domain's range of that name: no window
    policy.on_nvtx(nvtx_event(nvtx_range_event::push, "train", mine));
    policy.on_nvtx(nvtx_event(nvtx_range_event::push, "inner", mine));  // nested: its pop does not end the range
    pause_us(window_us(i) / 2);
    policy.on_nvtx(nvtx_event(nvtx_range_event::pop, nullptr, mine));
    policy.on_nvtx(nvtx_event(nvtx_range_event::pop, nullptr, other));
    pause_us(window_us(i) / 2);
    policy.on_nvtx(nvtx_event(nvtx_range_event::pop, nullptr, mine));
  }
  d.finish();
  check(p, target.take_all(), windows);
}

TEST_CASE("capture range nvtx:MSG without a domain: the first range of any domain, ended at that range's own end") {
  busy_process p(threads, launches, launch_pause_us);
  engine_target target(p);
  driven d;
  cuprof::detail::trace_destination out;
  capture_range c;
  c.kind = capture_range::nvtx;
  c.message = "train";
  c.ranges = 0;
  cuprof::detail::capture_range_window policy(d.driver, c, out);
  d.start(target);
  for (int i = 0; i < windows; ++i) {
    const std::uintptr_t domain = i % 2 ? 0 : 0x3000;  // the default domain and a program's own, in turn
    pause_us(gap_us(i));
    if (i % 4 == 3) {  // a started range (nvtxRangeStart/End): ended by its id
      policy.on_nvtx(nvtx_event(nvtx_range_event::start, "train", domain, 100 + std::uint64_t(i)));
      policy.on_nvtx(nvtx_event(nvtx_range_event::end, nullptr, domain, 7));  // another range's end
      pause_us(window_us(i));
      policy.on_nvtx(nvtx_event(nvtx_range_event::end, nullptr, domain, 100 + std::uint64_t(i)));
      continue;
    }
    policy.on_nvtx(nvtx_event(nvtx_range_event::push, "train", domain));
    policy.on_nvtx(nvtx_event(nvtx_range_event::push, "train", domain ^ 0x5000));  // the same name in another domain, inside
    pause_us(window_us(i));
    policy.on_nvtx(nvtx_event(nvtx_range_event::pop, nullptr, domain ^ 0x5000));  // not the range's pop
    pause_us(50);
    policy.on_nvtx(nvtx_event(nvtx_range_event::pop, nullptr, domain));
  }
  d.finish();
  check(p, target.take_all(), windows);
}

TEST_CASE("capture range nvtx, end rule stop: one window, none after it") {
  busy_process p(threads, launches, launch_pause_us);
  engine_target target(p);
  driven d;
  cuprof::detail::trace_destination out;
  capture_range c;
  c.kind = capture_range::nvtx;
  c.message = "train";
  c.ranges = 1;
  cuprof::detail::capture_range_window policy(d.driver, c, out);
  d.start(target);
  for (int i = 0; i < 5; ++i) {
    policy.on_nvtx(nvtx_event(nvtx_range_event::push, "train", i % 2 ? 0x10 : 0));
    pause_us(20000);  // one window: long enough for every thread to launch in it on a loaded machine
    policy.on_nvtx(nvtx_event(nvtx_range_event::pop, nullptr, i % 2 ? 0x10 : 0));
  }
  d.finish();
  check(p, target.take_all(), 1);
}

TEST_CASE("triggers by duration, 100 in a row") {
  busy_process p(threads, launches, launch_pause_us);
  engine_target target(p);
  driven d;
  cuprof::detail::trace_destination out;
  out.path = "/tmp/unused.json";
  cuprof::detail::trigger_window policy(d.driver, out, "");
  d.start(target);
  REQUIRE(d.driver.claim(7));  // another policy's window (a capture range's): no trigger meanwhile
  CHECK_FALSE(policy.on_request({}).accepted);
  REQUIRE(d.driver.release(7));
  for (int i = 0; i < windows; ++i) {
    cuprof::detail::trigger_request r;
    r.duration_s = 0.001 * (1 + i % 3);
    REQUIRE(policy.on_request(r).accepted);
    wait_for(d, [&] { return d.driver.owner() == window_driver::no_owner; });
  }
  d.finish();
  check(p, target.take_all(), windows);
}

TEST_CASE("a trigger whose trace cannot be written where it asks is refused before its window opens") {
  std::mutex lock;
  window_driver driver{lock};
  cuprof::detail::trace_destination out;
  out.path = "/tmp/unused.json";
  cuprof::detail::trigger_window policy(driver, out, "");
  cuprof::detail::trigger_request r;
  r.duration_s = 1;
  r.output = "/nonexistent-cuprof-dir/t.json";
  cuprof::detail::trigger_reply reply = policy.on_request(r);
  CHECK_FALSE(reply.accepted);
  CHECK(reply.text.find("cannot write into '/nonexistent-cuprof-dir': No such file or directory") == 0);
  r.output = "/dev/null";
  reply = policy.on_request(r);
  CHECK_FALSE(reply.accepted);
  CHECK(reply.text == "cannot write '/dev/null': it exists and is not a regular file");
  CHECK(driver.owner() == window_driver::no_owner);  // nothing claimed, nothing opened
}

// A target that only notes what was asked of it.
struct noting_target final : cuprof::detail::window_target {
  int opened = 0, closed = 0;
  void open() override { ++opened; }
  void move_start(std::uint64_t) override {}
  void close_at(std::uint64_t) override { ++closed; }
  void end_at(std::uint64_t) override {}
  void step_boundary(std::uint64_t, bool) override {}
};

TEST_CASE("a trigger for steps that never begin: cancel drops it unopened; at the end it is said that nothing was recorded") {
  std::mutex lock;
  window_driver driver{lock};
  noting_target target;
  cuprof::detail::trace_destination out;
  out.path = "/tmp/unused.json";
  cuprof::detail::trigger_window policy(driver, out, "");
  std::thread thread = driver.start(&target);
  cuprof::detail::trigger_request r;
  r.steps = 3;
  REQUIRE(policy.on_request(r).accepted);
  CHECK(driver.owner() != window_driver::no_owner);
  CHECK(policy.cancel());
  for (int i = 0; i < 2000 && driver.owner() != window_driver::no_owner; ++i) pause_us(1000);
  CHECK(driver.owner() == window_driver::no_owner);  // free for the next request
  CHECK_FALSE(policy.cancel());                      // nothing left to cancel
  CHECK(target.opened == 0);
  // Armed again, and the process ends before a step: said, nothing opened or written.
  REQUIRE(policy.on_request(r).accepted);
  std::string said;
  {
    cuprof_test::stderr_capture err;
    {
      std::lock_guard<std::mutex> l(lock);
      driver.finish();
    }
    said = err.finish();
  }
  thread.join();
  CAPTURE(said);
  CHECK(said.find("cuprof: a triggered window was never opened: the process ended before the first of its 3 steps began") == 0);
  CHECK(said.find(": nothing was recorded\n") != std::string::npos);
  CHECK(target.opened == 0);
  CHECK(target.closed == 0);
}

TEST_CASE("triggers by steps, 100 in a row: each window from a step's start to the start N steps later") {
  busy_process p(threads, launches, launch_pause_us);
  engine_target target(p);
  driven d;
  cuprof::detail::trace_destination out;
  cuprof::detail::trigger_window policy(d.driver, out, "");
  d.start(target);
  int n = 0;
  for (int i = 0; i < windows; ++i) {
    cuprof::detail::trigger_request r;
    r.steps = 1 + i % 3;
    REQUIRE(policy.on_request(r).accepted);
    while (d.locked([&] { return d.driver.owner(); }) != window_driver::no_owner) {
      step(policy, n++);
      pause_us(window_us(i) / 2);
    }
  }
  d.finish();
  check(p, target.take_all(), windows);
}

TEST_CASE("--start-step N --steps K, 100 sessions: each window from step N's start to step N+K's") {
  busy_process p(threads, launches, launch_pause_us);
  std::vector<taken_window> all;
  for (int i = 0; i < windows; ++i) {
    engine_target target(p);
    driven d;
    cuprof::detail::start_step_window policy(d.driver, 2, 1 + i % 3, 0, "");
    d.locked([&] {
      target.open();  // the profile records from start-up
      return 0;
    });
    d.start(target);
    for (int n = 0; !d.locked([&] { return target.ended(); }); ++n) {
      step(policy, n);
      pause_us(window_us(i) / 3);
    }
    d.finish();
    for (taken_window& w : target.take_all()) all.push_back(std::move(w));
  }
  check(p, all, windows);
}

TEST_CASE("--delay and --duration, 100 sessions") {
  busy_process p(threads, launches, launch_pause_us);
  std::vector<taken_window> all;
  for (int i = 0; i < windows; ++i) {
    engine_target target(p);
    driven d;
    cuprof::detail::timer_window policy(d.driver, 0.001 * (i % 3), 0.002, cuprof::detail::monotonic_ns());
    if (i % 3 == 0)
      d.locked([&] {
        target.open();  // no delay: open from start-up
        return 0;
      });
    d.start(target);
    wait_for(d, [&] { return target.ended(); });
    d.finish();
    for (taken_window& w : target.take_all()) all.push_back(std::move(w));
  }
  check(p, all, windows);
}

TEST_CASE("slow steps: 100 kept windows, each a slow step with the steps around it") {
  busy_process p(threads, launches, launch_pause_us);
  engine_target target(p);
  driven d;
  cuprof::detail::trace_destination out;
  cuprof::detail::slow_steps_window policy(d.driver, out, "");
  cuprof::slow_steps rule;
  rule.factor = 3.0;
  rule.max_traces = windows;
  target.set_slow_rule(rule);
  d.locked([&] {
    target.open();
    return 0;
  });
  d.start(target);
  int slow = 0;
  for (int n = 0; slow < windows; ++n) {
    step(policy, n);
    const bool is_slow = n > 8 && n % 6 == 0;
    slow += is_slow;
    pause_us(is_slow ? 12000 : 400);
  }
  step(policy, 100000);
  pause_us(2000);
  d.finish();
  d.locked([&] {
    target.finish_slow_steps(now_ticks());
    return 0;
  });
  const std::vector<taken_window> taken = target.take_all();
  p.finish();
  // A loaded machine can make a fast step look slow (then two slow steps share a window) or give a kept window no launch.
  CHECK(taken.size() >= windows / 2);
  CHECK(taken.size() <= std::size_t(windows));
  cuprof_test::check_windows(taken, p.launches(), threads);
}
}  // TEST_SUITE("runtime_windows")
