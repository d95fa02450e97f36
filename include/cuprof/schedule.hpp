// torch.profiler.schedule for C++: which steps are skipped, warmed up,
// recorded, and which one ends a cycle and hands its trace over; and
// slow_steps, the other way to choose windows: the steps slower than the rest.
#pragma once

#include <cstddef>
#include <cstdint>
#ifndef CUPROF_DISABLE
#include "base/error.hpp"

#include <cmath>
#include <string>
#endif

namespace cuprof {

enum class profiler_action : std::uint8_t {
  none = 0,             // not profiled
  warmup = 1,           // tracing runs, results are discarded
  record = 2,           // recorded
  record_and_save = 3,  // recorded; the cycle's trace is ready after this step
};

inline const char* to_string(profiler_action a) noexcept {
  switch (a) {
    case profiler_action::none: return "NONE";
    case profiler_action::warmup: return "WARMUP";
    case profiler_action::record: return "RECORD";
    case profiler_action::record_and_save: return "RECORD_AND_SAVE";
  }
  return "?";
}

// Semantics follow torch.profiler.schedule: the first `skip_first` steps are
// skipped, then cycles of `wait` idle, `warmup` warmup and `active` recorded
// steps repeat `repeat` times (0 = forever). With `skip_first_wait`, the first
// cycle's wait is skipped too.
namespace detail {
inline bool records(profiler_action a) noexcept { return a != profiler_action::none; }
inline bool is_active(profiler_action a) noexcept {
  return a == profiler_action::record || a == profiler_action::record_and_save;
}
// The schedule as a window policy: a step whose action changes from `from`
// to `to` closes the window that recorded (its cycle's trace is ready), opens
// one, or both (cycles back to back).
inline bool closes_window(profiler_action from, profiler_action to) noexcept {
  return from == profiler_action::record_and_save || (is_active(from) && to == profiler_action::none);
}
inline bool opens_window(profiler_action from, profiler_action to) noexcept {
  return is_active(to) && (!is_active(from) || from == profiler_action::record_and_save);
}
}  // namespace detail

struct schedule {
  int wait = 0;
  int warmup = 0;
  int active = 1;
  int repeat = 0;
  int skip_first = 0;
  bool skip_first_wait = false;

  schedule() = default;
  schedule(int wait_steps, int warmup_steps, int active_steps, int repeat_cycles = 0, int skip_first_steps = 0,
           bool skip_first_wait_steps = false)
      : wait(wait_steps),
        warmup(warmup_steps),
        active(active_steps),
        repeat(repeat_cycles),
        skip_first(skip_first_steps),
        skip_first_wait(skip_first_wait_steps) {
    validate();
  }

  void validate() const {
#ifndef CUPROF_DISABLE
    if (wait < 0 || warmup < 0 || active <= 0 || repeat < 0 || skip_first < 0) {
      throw error("invalid schedule (wait=" + std::to_string(wait) + ", warmup=" + std::to_string(warmup) +
                  ", active=" + std::to_string(active) + ", repeat=" + std::to_string(repeat) +
                  ", skip_first=" + std::to_string(skip_first) + "): active must be at least 1 and every other value at least 0");
    }
#endif
  }

  profiler_action operator()(std::int64_t step) const noexcept {
    if (step < 0) return profiler_action::none;
    if (step < skip_first) return profiler_action::none;
    step -= skip_first;
    if (skip_first_wait) step += wait;
    const std::int64_t cycle = std::int64_t(wait) + warmup + active;
    if (repeat > 0 && step / cycle >= repeat) return profiler_action::none;
    const std::int64_t mod = step % cycle;
    if (mod < wait) return profiler_action::none;
    if (mod < wait + warmup) return profiler_action::warmup;
    return mod < cycle - 1 ? profiler_action::record : profiler_action::record_and_save;
  }
};

// Keeps the slow steps (profile_options::slow_steps, CUPROF_SLOW_STEPS): every
// step is recorded into a ring of the latest steps, one open window whose
// start moves forward at each step; a step slower than the threshold is kept
// with `before` steps before it and `after` after it, as a window handed to
// on_trace_ready. A slow step found while a kept window waits for its `after`
// steps joins it. At stop() one line says how many steps were slow and by how
// much. A step is slow when it takes longer than threshold_ms, or, with
// threshold_ms 0, longer than `factor` times the median of the steps before it
// (of the latest 64; no verdict before 5 steps were seen).
struct slow_steps {
  double threshold_ms = 0;
  double factor = 2.0;
  int before = 1, after = 1;  // steps kept with a slow one
  // The most steps the ring, and so a kept window, holds (the step running
  // included); at least before + 1 + after.
  int ring_steps = 32;
  int max_traces = 5;  // kept windows at most; later slow steps are counted, not kept
  // What the ring's window may hold (CPU scope records and CUDA records staged
  // for it, about): past it, the ring holds fewer steps from then on.
  std::size_t ring_bytes = std::size_t(256) << 20;

  void validate() const {
#ifndef CUPROF_DISABLE
    const auto fail = [this](const std::string& why) {
      throw error("invalid slow_steps (threshold_ms=" + std::to_string(threshold_ms) + ", factor=" + std::to_string(factor) +
                  ", before=" + std::to_string(before) + ", after=" + std::to_string(after) +
                  ", ring_steps=" + std::to_string(ring_steps) + ", max_traces=" + std::to_string(max_traces) +
                  ", ring_bytes=" + std::to_string(ring_bytes) + "): " + why);
    };
    // 1 us to 1e7 s (115 days): shorter rounds to no threshold in ns, longer overflows them.
    if (!std::isfinite(threshold_ms) || threshold_ms < 0 || (threshold_ms > 0 && threshold_ms < 1e-3) || threshold_ms > 1e10)
      fail("threshold_ms must be 0 (use factor) or a time from 0.001 (1 us) to 1e10 (1e7 s)");
    if (threshold_ms == 0 && !(std::isfinite(factor) && factor > 1)) fail("factor must be more than 1");
    if (before < 0 || after < 0) fail("before and after must be at least 0");
    if (ring_steps < 1LL + before + after || ring_steps > max_ring_steps)
      fail("ring_steps must be from before + 1 + after to " + std::to_string(max_ring_steps));
    if (max_traces < 1) fail("max_traces must be at least 1");
    if (ring_bytes == 0) fail("ring_bytes must be more than 0");
#endif
  }

  static constexpr int max_ring_steps = 1 << 16;
};

}  // namespace cuprof
