// CUPROF_DELAY and CUPROF_DURATION: the session's one window opens `delay`
// seconds after start-up and ends `duration` seconds after it opened; the
// trace is the session's, written at its end (autostart.hpp).
#pragma once

#include "driver.hpp"

#include <cstdint>

namespace cuprof::detail {

class timer_window final : public window_policy {
 public:
  // `started_ns`: the monotonic clock at start-up; the window is open already when delay is 0.
  timer_window(window_driver& d, double delay_s, double duration_s, std::uint64_t started_ns)
      : open_at_ns_(started_ns + std::uint64_t(delay_s * 1e9)),
        duration_ns_(std::uint64_t(duration_s * 1e9)),
        opened_(delay_s <= 0),
        opened_ns_(started_ns) {
    d.add(this);
  }

  void on_time(std::uint64_t now_ns, window_target& t) override {
    if (!opened_ && now_ns >= open_at_ns_) {
      opened_ = true;
      opened_ns_ = now_ns;
      t.open();
    }
    if (opened_ && duration_ns_ > 0 && now_ns - opened_ns_ >= duration_ns_) {
      duration_ns_ = 0;
      t.end_at(0);
    }
  }

  bool opened() const noexcept { return opened_; }

 private:
  std::uint64_t open_at_ns_;
  std::uint64_t duration_ns_;
  bool opened_;
  std::uint64_t opened_ns_;
};

}  // namespace cuprof::detail
