// The window engine: a window is two instants, its opening and its closing, on
// the tick clock; the engine keeps the windows that closed in order and hands
// each over, with exactly the records between its instants, once those records
// are in. What the records are is the caller's: the profile's are CUPTI's (the
// record store behind the tracer), a test's are synthetic. Every way of
// choosing a window (a schedule, capture ranges, triggers, steps, slow steps,
// a timer) only calls open_at, move_start and close_at; which record belongs
// to which window is decided by the records' own rule (the record store's
// take(), docs/guide.md "Windows and their edges"), never here.
//
// `Records` provides:
//   void discard_before(std::uint64_t ticks);  // what started before goes
//   bool complete(std::uint64_t start, std::uint64_t end);  // every record of [start, end] is in
//   void take(trace&, std::uint64_t start, std::uint64_t end, const tick_converter&);
#pragma once

#include "clock.hpp"
#include "../model/event.hpp"
#include "../model/slow_steps.hpp"

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>

namespace cuprof::detail {

// A window that closed: its instants, the clock that converts them, and what
// the caller collected at the close (the CPU side: its scopes, metadata).
struct closed_window {
  std::unique_ptr<trace> collected;
  std::uint64_t start_ticks = 0;
  std::uint64_t end_ticks = 0;
  tick_converter clock;
  std::uint64_t give_up_at_ns = 0;  // monotonic: handed over by then, complete or not
};

template <class Records>
class window_engine {
 public:
  // Where the open window starts (ticks).
  std::uint64_t start() const noexcept { return start_; }
  // Closed windows not handed over yet.
  bool waiting() const noexcept { return !closed_.empty(); }

  // A window opens at `ticks`. What the records hold from before it is no
  // window's, unless a closed window still waits for its own: then that
  // window's take() removes what it leaves, and this one's take() what lies
  // before `ticks`.
  void open_at(Records& r, std::uint64_t ticks) {
    if (closed_.empty()) r.discard_before(ticks);
    start_ = ticks;
  }

  // The open window starts later, at `ticks`; never earlier.
  void move_start(Records& r, std::uint64_t ticks) {
    if (ticks <= start_) return;
    open_at(r, ticks);
  }

  // The open window closes at `ticks`; the next one may open there (back to
  // back windows share their boundary; a call stamped at it goes to the
  // earlier one). Returns the closed window for the caller to fill.
  closed_window& close_at(std::uint64_t ticks, const tick_converter& clock, std::uint64_t give_up_at_ns) {
    closed_window w;
    w.collected = std::make_unique<trace>();
    w.start_ticks = start_;
    w.end_ticks = ticks;
    w.clock = clock;
    w.give_up_at_ns = give_up_at_ns;
    closed_.push_back(std::move(w));
    start_ = ticks;
    return closed_.back();
  }

  // Hands the closed windows over, oldest first, each once its records are
  // complete, or its time to wait ran out, or `at_end` (nothing more comes).
  // `hand(closed_window&)` gets it with its records taken.
  template <class Hand>
  void hand_over(Records& r, bool at_end, std::uint64_t now_ns, Hand&& hand) {
    while (!closed_.empty()) {
      closed_window& w = closed_.front();
      if (!at_end && now_ns < w.give_up_at_ns && !r.complete(w.start_ticks, w.end_ticks)) return;
      r.take(*w.collected, w.start_ticks, w.end_ticks, w.clock);
      closed_window out = std::move(w);
      closed_.pop_front();
      hand(out);
    }
  }

  // Closed windows dropped (the session ends without them).
  void clear() noexcept { closed_.clear(); }

 private:
  std::uint64_t start_ = 0;
  std::deque<closed_window> closed_;
};

// What a slow-step verdict does to the windows (profile_options::slow_steps,
// CUPROF_SLOW_STEPS): the ring is the open window, its start moved forward; a
// kept window is closed where its last step ended and the ring goes on from
// there. `w` has move_start(ticks), close_at(ticks) and open_at(ticks).
template <class Windows>
void follow_slow_step(const slow_step_action& a, std::uint64_t now, Windows& w) {
  if (a.cut) {
    w.move_start(a.cut_start);
    w.close_at(now);
    w.open_at(now);
  } else if (a.ring_start) {
    w.move_start(a.ring_start);
  }
}

}  // namespace cuprof::detail
