// The one clock every cuprof timestamp uses: CPU scopes, CUDA API records and
// GPU records (CUPTI is handed the same clock through its timestamp callback).
//
// Raw readings are "ticks": the TSC on x86-64 when it is invariant (about half
// the cost of clock_gettime), CLOCK_MONOTONIC nanoseconds otherwise. Ticks are
// turned into nanoseconds only at collection, with a linear map fitted between
// two (ticks, CLOCK_MONOTONIC) pairs, so the hot path never converts.
#pragma once

#include "../base/process_state.hpp"
#include "../base/log.hpp"
#include "../base/config.hpp"

#include <atomic>
#include <cstdint>
#include <ctime>
#include <cstdlib>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace cuprof::detail {

inline std::uint64_t realtime_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return std::uint64_t(ts.tv_sec) * 1000000000ull + std::uint64_t(ts.tv_nsec);
}

inline bool tsc_is_invariant() noexcept {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return false;
  __get_cpuid(0x80000007u, &a, &b, &c, &d);
  return (d & (1u << 8)) != 0;
#else
  return false;
#endif
}

// CUPROF_CLOCK=monotonic forces clock_gettime (for machines with a TSC that lies).
// Decided once per process, before recording first starts (clock_anchor).
inline void choose_clock() noexcept {
  process().use_tsc.store(!use_setting(read_clock_forced_monotonic(std::getenv("CUPROF_CLOCK"))) && tsc_is_invariant(),
                          std::memory_order_relaxed);
}

inline clock_sample sample_clocks() noexcept {
  // Keep the tightest of a few tries: a preemption between reads would skew the fit.
  clock_sample best{};
  std::uint64_t best_gap = ~0ull;
  for (int i = 0; i < 5; ++i) {
    const std::uint64_t m0 = monotonic_ns();
    const std::uint64_t t = now_ticks();
    const std::uint64_t m1 = monotonic_ns();
    if (m1 - m0 < best_gap) {
      best_gap = m1 - m0;
      best.ticks = t;
      best.mono_ns = m0 + (m1 - m0) / 2;
    }
  }
  best.real_ns = realtime_ns() - (monotonic_ns() - best.mono_ns);
  return best;
}

// Linear map from ticks to Unix-epoch nanoseconds, fitted between two samples.
class tick_converter {
 public:
  tick_converter() = default;
  tick_converter(const clock_sample& first, const clock_sample& last) noexcept : anchor_(first) {
    const double dt = double(last.ticks) - double(first.ticks);
    const double dn = double(last.mono_ns) - double(first.mono_ns);
    ns_per_tick_ = (process().use_tsc.load(std::memory_order_relaxed) && dt > 0 && dn > 0) ? dn / dt : 1.0;
  }
  std::uint64_t to_epoch_ns(std::uint64_t ticks) const noexcept {
    // Offsets stay small enough for a double to hold them to the nanosecond;
    // the epoch itself (about 2^61) does not, so it is added as an integer.
    const double delta = double(std::int64_t(ticks - anchor_.ticks)) * ns_per_tick_;
    const std::int64_t epoch = std::int64_t(anchor_.real_ns) + std::int64_t(delta < 0 ? delta - 0.5 : delta + 0.5);
    return epoch <= 0 ? 0 : std::uint64_t(epoch);
  }
  double ns_per_tick() const noexcept { return ns_per_tick_; }

 private:
  clock_sample anchor_{};
  double ns_per_tick_ = 1.0;
};

// One clock anchor per process, taken by the first copy that starts
// recording: every converter of every copy maps ticks from here.
inline clock_sample clock_anchor() {
  process_state& p = process();
  once_per_process(p.anchor_state, [&p] {
    choose_clock();
    p.anchor = sample_clocks();
  });
  return p.anchor;
}

}  // namespace cuprof::detail
