// Program steps as the policies that count them see them: NVTX ranges named
// "step ..." or "ProfilerStep#..." (or CUPROF_STEP_RANGE), posted to the driver
// as step asks, and the trace's ProfilerStep#N spans made from their starts.
#pragma once

#include "driver.hpp"
#include "../../model/event.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cuprof::detail {

// Whether an NVTX range's message marks a program step: `name` alone or
// followed by something other than a letter ("step 3", "step#3", "step_3"),
// or, with no name given, "step" in any case so followed, or "ProfilerStep#".
inline bool is_step_range(std::string_view message, std::string_view name) {
  const auto starts_word = [&message](std::string_view word, bool any_case) {
    if (message.size() < word.size()) return false;
    for (std::size_t i = 0; i < word.size(); ++i) {
      const char a = message[i], b = word[i];
      if (a != b && !(any_case && (a | 0x20) == b)) return false;
    }
    if (message.size() == word.size()) return true;
    const char next = char(message[word.size()] | 0x20);
    return next < 'a' || next > 'z';
  };
  if (!name.empty()) return starts_word(name, false);
  return starts_word("step", true) || message.substr(0, 13) == "ProfilerStep#";
}

// The number a step's message ends in ("ProfilerStep#12": 12); -1 when none.
inline std::int64_t step_number_of(std::string_view message) noexcept {
  std::size_t digits = 0;
  while (digits < message.size() && digits < 9 && message[message.size() - 1 - digits] >= '0' &&
         message[message.size() - 1 - digits] <= '9')
    ++digits;
  if (digits == 0) return -1;
  std::int64_t n = 0;
  for (std::size_t i = message.size() - digits; i < message.size(); ++i) n = n * 10 + (message[i] - '0');
  return n;
}

// A step's range is stamped by CUPTI just before the hook runs: a window that
// opens or moves to a step goes this many ticks earlier (about 10 us on the
// TSC, 20 on nanosecond ticks), so that the step's range is in it.
inline std::uint64_t before_step(std::uint64_t ticks) noexcept {
  constexpr std::uint64_t lead_ticks = 20000;
  return ticks > lead_ticks ? ticks - lead_ticks : 0;
}

// The hook's half: a step range's start posted as a step ask of `policy`.
// `opens` (called once the range is known to be a step): whether this step
// opens a window now, which the program's thread then waits for, so that
// the step's first calls and scopes are in it. False when not a step.
template <class Opens>
bool post_step(window_driver& d, int policy, const nvtx_range_event& e, std::string_view step_range, Opens&& opens) noexcept {
  if ((e.kind != nvtx_range_event::push && e.kind != nvtx_range_event::start) || !e.message) return false;
  const std::string_view message(e.message, e.length);
  if (!is_step_range(message, step_range)) return false;
  window_ask a;
  a.kind = window_ask::step;
  a.policy = std::uint8_t(policy);
  a.tid = std::uint32_t(::syscall(SYS_gettid));
  a.ticks = now_ticks();
  a.number = step_number_of(message);
  if (opens()) d.post_and_wait(a);
  else d.post(a);
  return true;
}
inline bool post_step(window_driver& d, int policy, const nvtx_range_event& e, std::string_view step_range) noexcept {
  return post_step(d, policy, e, step_range, [] { return false; });
}

// The steps' starts a window's trace shows as ProfilerStep#N spans, kept on
// the driver's thread: the latest `capacity` of them.
class step_marks {
 public:
  static constexpr std::size_t capacity = 4096;

  void clear() {
    ticks_.clear();
    first_ = 0;
  }
  // Step `index` (counted by the policy) started at `ticks` on thread `tid`.
  void mark(std::int64_t index, std::uint64_t ticks, std::uint32_t tid) {
    if (ticks_.empty()) first_ = index, tid_ = tid;
    if (ticks_.size() == capacity) ticks_.erase(ticks_.begin()), ++first_;
    ticks_.push_back(ticks);
  }
  bool empty() const noexcept { return ticks_.empty(); }

  // Adds the marked steps inside the trace's window as ProfilerStep#N spans
  // (with `from_before`, also a first one that started before the window:
  // a window that opens at a step opens once that step's range began),
  // numbered from `first_number` for the first marked step (the policy's
  // count, or the opening step's own number), each from where it started to
  // where the next did or the window ended, on the thread that marks them: HTA
  // and cuprof's own step analyses find iterations by them. A mark and the
  // window's edge are the same tick converted by two fits: a microsecond apart
  // at most.
  //
  // A mark is the hook's time, a microsecond or two after CUPTI stamped the
  // step's range (or before_step's lead earlier): a span from it would cut
  // across the range, and Perfetto drops a slice that partly overlaps another
  // on its thread. So a step starts a nanosecond before its range (named as
  // `step_range` says, on the marking thread, within snap_ns of the mark) and
  // ends where the next one starts: each range nests in its step.
  void add_to(trace& t, std::int64_t first_number, std::string_view step_range, bool from_before = false) const {
    constexpr std::uint64_t slack_ns = 1000;
    const tick_converter clock(clock_anchor(), sample_clocks());
    std::vector<std::uint64_t> starts;
    std::int64_t first = -1;
    for (std::size_t k = 0; k < ticks_.size(); ++k) {
      const std::uint64_t ns = clock.to_epoch_ns(ticks_[k]);
      if ((!from_before && ns + slack_ns < t.meta.window_start_ns) || ns + slack_ns >= t.meta.window_end_ns) continue;
      if (first < 0) first = std::int64_t(k);
      starts.push_back(ns);
    }
    if (first < 0) return;
    snap_to_ranges(t, step_range, tid_, starts);
    add_profiler_steps(t, first_number + first, starts, tid_);
  }

  // Each start moved to a nanosecond before the nearest step range on thread
  // `tid` that began within snap_ns of it; one without stays.
  static void snap_to_ranges(const trace& t, std::string_view step_range, std::uint32_t tid, std::vector<std::uint64_t>& starts) {
    constexpr std::uint64_t snap_ns = 50000;
    std::vector<std::uint64_t> ranges;
    for (const cpu_span& s : t.spans)
      if (s.tid == tid && !s.is_step && s.start_ns > 1 && is_step_range(t.names.str(s.name), step_range))
        ranges.push_back(s.start_ns);
    std::sort(ranges.begin(), ranges.end());
    for (std::uint64_t& start : starts) {
      const auto after = std::lower_bound(ranges.begin(), ranges.end(), start);
      std::uint64_t best = 0, best_off = snap_ns + 1;
      if (after != ranges.end() && *after - start < best_off) best = *after, best_off = *after - start;
      if (after != ranges.begin() && start - *(after - 1) < best_off) best = *(after - 1), best_off = start - *(after - 1);
      if (best_off <= snap_ns) start = best - 1;
    }
  }

  static void add_profiler_steps(trace& t, std::int64_t first_number, const std::vector<std::uint64_t>& starts_ns,
                                 std::uint32_t tid) {
    for (std::size_t k = 0; k < starts_ns.size(); ++k) {
      const std::uint64_t end = k + 1 < starts_ns.size() ? starts_ns[k + 1] : t.meta.window_end_ns;
      if (starts_ns[k] == 0 || end <= starts_ns[k] || starts_ns[k] >= t.meta.window_end_ns) break;
      cpu_span step;
      step.start_ns = starts_ns[k];
      step.end_ns = end;
      step.tid = tid;
      step.name = t.names.intern(std::string(step_name_prefix) + std::to_string(first_number + std::int64_t(k)));
      step.is_step = true;
      step.id = std::uint32_t(t.spans.size() + 1);
      t.spans.push_back(step);
    }
  }

  std::int64_t first_index() const noexcept { return first_; }

 private:
  std::vector<std::uint64_t> ticks_;
  std::int64_t first_ = 0;
  std::uint32_t tid_ = 0;
};

}  // namespace cuprof::detail
