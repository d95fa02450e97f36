// CUPROF_SLOW_STEPS: only the slow steps are kept, each with the steps around
// it, in a trace of its own. The profile records from start-up into the slow
// steps' ring (profile_options::slow_steps, model/slow_steps.hpp); each
// program step's start goes to the profile as a step boundary, which moves
// the ring's start or closes a kept window, and each kept window is written
// here with its steps as ProfilerStep#N spans. At exit the profile's stop()
// hands over a window still waiting for its `after` steps and says the
// summary; nothing else is written.
#pragma once

#include "steps.hpp"
#include "../../base/log.hpp"

#include <cstdint>
#include <string>

namespace cuprof::detail {

class slow_steps_window final : public window_policy {
 public:
  slow_steps_window(window_driver& d, trace_destination& out, std::string step_range)
      : driver_(d), out_(out), step_range_(std::move(step_range)) {
    index_ = d.add(this);
  }

  void on_nvtx(const nvtx_range_event& e) noexcept override { post_step(driver_, index_, e, step_range_); }

  bool watches() const override { return true; }

  void on_ask(const window_ask& a, window_target& t) override {
    if (a.kind != window_ask::step) return;
    const std::uint64_t at = before_step(a.ticks);  // the range in the window, as a step window opens
    marks_.mark(seen_, at, a.tid);
    t.step_boundary(at, seen_ == 0);
    ++seen_;
  }

  // A kept window, with the marks inside it as its steps, to its own file.
  void write(profile& p) override {
    trace t = p.last_trace();
    marks_.add_to(t, marks_.first_index(), step_range_);
    const std::string path = numbered_trace_path(out_.path, ++written_, "slow");
    try {
      out_.write(t, path);
    } catch (const std::exception& e) {
      log_line("could not write a slow step's trace: " + message_of(e));
    }
  }

 private:
  window_driver& driver_;
  int index_ = 0;
  trace_destination& out_;
  const std::string step_range_;
  std::int64_t seen_ = 0;
  int written_ = 0;
  step_marks marks_;
};

}  // namespace cuprof::detail
