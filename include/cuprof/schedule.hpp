// torch.profiler.schedule for C++: which steps are skipped, warmed up,
// recorded, and which one ends a cycle and hands its trace over; and
// slow_steps (model/slow_steps.hpp, with the ring that applies it), the other
// way to choose windows: the steps slower than the rest.
#pragma once

#include <cstddef>
#include <cstdint>
#include "model/slow_steps.hpp"
#ifndef CUPROF_DISABLE
#include "base/error.hpp"

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

}  // namespace cuprof
