// Which program steps are slow, and what a ring of the latest steps keeps of
// them: the user's rule (cuprof::slow_steps, profile_options::slow_steps and
// CUPROF_SLOW_STEPS) and the ring that applies it. The ring decides over step
// boundaries only, apart from what records the steps, so it is tested alone.
//
// The ring is the profile's one open window whose start moves forward at step
// boundaries. While no slow step waits for its `after` steps it holds the
// `before` steps a next slow step would keep, and the step running; a kept
// window is [start of the slow step's first `before` step, end of its last
// `after` step], and a slow step found while one waits joins it. A kept window
// never holds more than ring_steps steps: it is cut when it reaches them.
//
// The rule is in a disabled build too (CUPROF_DISABLE, disabled_api.hpp),
// without its checks; the ring is not, so that such a build pays nothing for it.
#pragma once

#include <cstddef>
#ifndef CUPROF_DISABLE
#include "../base/error.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>
#endif

namespace cuprof {

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

#ifndef CUPROF_DISABLE
namespace cuprof::detail {

// What the profile does once a step ended.
struct slow_step_action {
  std::uint64_t ring_start = 0;  // nonzero: the ring's oldest step now starts here
  bool cut = false;              // a kept window ends where the step did
  std::uint64_t cut_start = 0;   // where the kept window starts
  std::int64_t first_step = 0;   // its steps
  std::int64_t last_step = 0;
  // Nonzero the first time the byte cap shrinks the ring: the steps it holds
  // at most from then on (it may shrink again, unsaid until the summary).
  int shrunk_to = 0;
};

class slow_step_ring {
 public:
  // No verdict by factor before this many steps: the first steps (allocation,
  // compilation, caches) set no median worth comparing with.
  static constexpr int warmup_steps = 5;
  // The median is that of the latest steps only, so that it follows a
  // program whose steps change pace.
  static constexpr std::size_t median_steps = 64;
  // The summary names this many slow steps, and counts the others.
  static constexpr std::size_t listed_steps = 16;

  // `first_start`: where step 0 started, in the caller's clock (its ticks);
  // durations are in ns, as the threshold.
  slow_step_ring(const slow_steps& rule, std::uint64_t first_start)
      : rule_(rule),
        threshold_ns_(std::uint64_t(rule.threshold_ms * 1e6)),
        limit_(std::max(1, rule.ring_steps)),
        starts_(std::size_t(limit_)),
        running_start_(first_start) {}

  std::int64_t steps() const noexcept { return steps_; }
  std::uint64_t running_start() const noexcept { return running_start_; }
  bool window_waiting() const noexcept { return open_; }
  // Steps the ring holds now: the completed ones in it and the one running.
  int held_steps() const noexcept { return int(steps_ - ring_first_ + 1); }
  int step_limit() const noexcept { return limit_; }

  // The step running ended at `end`, after `duration_ns`; `held_bytes`: what
  // the ring holds now (checked against rule.ring_bytes).
  slow_step_action step_ended(std::uint64_t end, std::uint64_t duration_ns, std::size_t held_bytes = 0) {
    const std::int64_t i = steps_++;
    starts_[slot_of(i)] = running_start_;
    running_start_ = end;
    slow_step_action a;
    const std::uint64_t median = median_ns();
    const bool slow = threshold_ns_ > 0
                          ? duration_ns > threshold_ns_
                          : history_size_ >= std::size_t(warmup_steps) && double(duration_ns) > rule_.factor * double(median);
    history_[history_next_] = duration_ns;
    history_next_ = (history_next_ + 1) % median_steps;
    history_size_ = std::min(history_size_ + 1, median_steps);

    if (held_bytes > rule_.ring_bytes) {
      const int held = int(i - ring_first_ + 2);  // the steps ended in it and the one running
      const int shrunk = std::max(1, std::min(limit_, held) - 1);
      if (shrunk < limit_) {
        if (limit_ == rule_.ring_steps) a.shrunk_to = shrunk;
        limit_ = shrunk;
      }
    }
    if (slow) {
      bool kept = true;
      if (!open_ && kept_ < rule_.max_traces) {
        open_ = true;
        kept_first_ = std::max(ring_first_, i - std::min<std::int64_t>(rule_.before, limit_ - 1));
      } else if (!open_) {
        kept = false;
      }
      if (kept) last_slow_ = i;
      note_slow(i, duration_ns, median, kept);
    }
    if (open_ && (i >= last_slow_ + rule_.after || i - kept_first_ + 1 >= limit_)) {
      cut_kept_window(a, i);
      ring_first_ = i + 1;  // what the kept window took is gone from the ring
      return a;
    }
    const std::int64_t first = open_ ? kept_first_ : i + 1 - std::min<std::int64_t>(rule_.before, limit_ - 1);
    if (first > ring_first_) {
      ring_first_ = first;
      a.ring_start = first == i + 1 ? end : starts_[slot_of(first)];
    }
    return a;
  }

  // Recording ends: a kept window still waiting for its `after` steps is cut
  // there, the step running its last.
  slow_step_action finish() {
    slow_step_action a;
    if (open_) cut_kept_window(a, steps_);
    return a;
  }

  int kept() const noexcept { return kept_; }
  std::int64_t slow_count() const noexcept { return slow_; }

  // The median of the latest steps (up to median_steps), 0 before any.
  std::uint64_t median_ns() const {
    std::array<std::uint64_t, median_steps> sorted{};
    std::copy(history_.begin(), history_.begin() + std::ptrdiff_t(history_size_), sorted.begin());
    if (history_size_ == 0) return 0;
    const auto mid = sorted.begin() + std::ptrdiff_t(history_size_ / 2);
    std::nth_element(sorted.begin(), mid, sorted.begin() + std::ptrdiff_t(history_size_));
    return *mid;
  }

  // One line: how many steps were slow, by how much, and what was kept.
  //   slow steps: 2 of 40 steps slower than 2.0x the median (2.1 ms): steps 10 (30.2 ms, 14.4x),
  //   25 (30.1 ms, 14.3x); 2 traces kept
  std::string summary() const {
    std::string s = "slow steps: " + (slow_ ? std::to_string(slow_) : std::string("none")) + " of " + std::to_string(steps_) +
                    " step" + (steps_ == 1 ? "" : "s") + " slower than ";
    s += threshold_ns_ > 0 ? milliseconds(threshold_ns_)
                           : number(rule_.factor) + "x the median (" + milliseconds(median_ns()) + ")";
    std::string kept_steps, dropped_steps;
    for (std::size_t k = 0; k < listed_; ++k) {
      const slow_step& l = listed_steps_[k];
      std::string& list = l.kept ? kept_steps : dropped_steps;
      list += (list.empty() ? "" : ", ") + std::to_string(l.step) + " (" + milliseconds(l.duration_ns);
      if (l.median_ns > 0) list += ", " + number(double(l.duration_ns) / double(l.median_ns)) + "x";
      list += ")";
    }
    if (!kept_steps.empty()) s += ": steps " + kept_steps;
    if (std::int64_t(listed_) < slow_) s += " and " + std::to_string(slow_ - std::int64_t(listed_)) + " more";
    s += "; " + (kept_ ? std::to_string(kept_) : std::string("no")) + " trace" + (kept_ == 1 ? "" : "s") + " kept";
    if (!dropped_steps.empty())
      s += "; not kept (at most " + std::to_string(rule_.max_traces) + " traces): steps " + dropped_steps;
    s += "; ring of " + std::to_string(limit_) + (limit_ == 1 ? " step" : " steps");
    if (limit_ < rule_.ring_steps) s += " (of " + std::to_string(rule_.ring_steps) + ", shrunk to its byte cap)";
    s += ", at most " + mebibytes(rule_.ring_bytes);
    return s;
  }

  // The line that says the byte cap shrank the ring (slow_step_action::shrunk_to).
  std::string shrunk_line(int steps) const {
    return "slow steps: the ring's window held more than its " + mebibytes(rule_.ring_bytes) +
           " (ring_bytes): it holds at most " + std::to_string(steps) + (steps == 1 ? " step" : " steps") + " from now on";
  }

 private:
  struct slow_step {
    std::int64_t step = 0;
    std::uint64_t duration_ns = 0;
    std::uint64_t median_ns = 0;  // of the steps before it
    bool kept = false;
  };

  std::size_t slot_of(std::int64_t step) const noexcept { return std::size_t(step) % starts_.size(); }

  // The kept window waiting ends with step `last`: `a` says so, and it counts as kept.
  void cut_kept_window(slow_step_action& a, std::int64_t last) {
    a.cut = true;
    a.cut_start = starts_[slot_of(kept_first_)];
    a.first_step = kept_first_;
    a.last_step = last;
    open_ = false;
    ++kept_;
  }

  void note_slow(std::int64_t step, std::uint64_t duration_ns, std::uint64_t median, bool kept) {
    ++slow_;
    if (listed_ < listed_steps) listed_steps_[listed_++] = slow_step{step, duration_ns, median, kept};
  }

  static std::string number(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", x);
    return buf;
  }
  static std::string milliseconds(std::uint64_t ns) { return number(double(ns) / 1e6) + " ms"; }
  static std::string mebibytes(std::size_t bytes) { return number(double(bytes) / double(1 << 20)) + " MiB"; }

  slow_steps rule_;
  std::uint64_t threshold_ns_;         // > 0: a step longer than this is slow, whatever the median
  int limit_;                          // ring_steps, or fewer once the byte cap shrank it
  std::vector<std::uint64_t> starts_;  // each held step's start, by step % ring_steps: sized once
  std::uint64_t running_start_;
  std::int64_t steps_ = 0;       // steps ended
  std::int64_t ring_first_ = 0;  // the oldest step the ring holds
  bool open_ = false;            // a kept window waits for its after steps
  std::int64_t kept_first_ = 0;
  std::int64_t last_slow_ = 0;
  int kept_ = 0;
  std::int64_t slow_ = 0;
  std::array<std::uint64_t, median_steps> history_{};
  std::size_t history_next_ = 0, history_size_ = 0;
  std::array<slow_step, listed_steps> listed_steps_{};
  std::size_t listed_ = 0;
};

}  // namespace cuprof::detail
#endif
