// CUPROF_START_STEP=N, CUPROF_STEPS=K: the window opens where the program's
// step N starts and ends where step N+K starts (or after CUPROF_DURATION, or
// at exit). The profile records from start-up (CUPTI must be attached for
// NVTX's callbacks to reach cuprof); each step up to N moves the window's
// start there, throwing away what came before, so that what waits for the
// window stays one step's worth.
#pragma once

#include "steps.hpp"

#include <cstdint>
#include <string>

namespace cuprof::detail {

class start_step_window final : public window_policy {
 public:
  start_step_window(window_driver& d, int start_step, int steps, double duration_s, std::string step_range)
      : driver_(d),
        start_step_(start_step),
        steps_(steps),
        duration_ns_(std::uint64_t(duration_s * 1e9)),
        step_range_(std::move(step_range)) {
    index_ = d.add(this);
  }

  void on_nvtx(const nvtx_range_event& e) noexcept override { post_step(driver_, index_, e, step_range_); }

  bool watches() const override { return !ended_; }

  void on_ask(const window_ask& a, window_target& t) override {
    if (a.kind != window_ask::step || ended_) return;
    const int step = seen_++;
    if (steps_ > 0 && step == start_step_ + steps_) {  // no lead: the previous step's range ended before
      ended_ = true;
      return t.end_at(a.ticks);
    }
    if (step <= start_step_) t.move_start(before_step(a.ticks));
    if (step == start_step_) opened_ns_ = monotonic_ns();
    if (step >= start_step_) marks_.mark(step, a.ticks, a.tid);
  }

  void on_time(std::uint64_t now_ns, window_target& t) override {
    if (!ended_ && opened_ns_ && duration_ns_ > 0 && now_ns - opened_ns_ >= duration_ns_) {
      ended_ = true;
      t.end_at(0);
    }
  }

  bool opened() const noexcept { return opened_ns_ != 0; }
  int steps_seen() const noexcept { return seen_; }
  // The session's trace: its steps as ProfilerStep#N spans.
  void add_steps(trace& t) const { marks_.add_to(t, marks_.first_index(), step_range_); }

 private:
  window_driver& driver_;
  int index_ = 0;
  const int start_step_;
  const int steps_;
  const std::uint64_t duration_ns_;
  const std::string step_range_;
  int seen_ = 0;
  bool ended_ = false;
  std::uint64_t opened_ns_ = 0;
  step_marks marks_;
};

}  // namespace cuprof::detail
