// `cuprof trigger PID --duration S | --steps N`: a window another process asks
// for through the control endpoint (control_endpoint.hpp), for S seconds from
// now or for the program's next N steps (from the next step's start to the
// start N steps later), written to the path the request names or to the
// process's trace path numbered. One window at a time, and none while a
// capture range's window is open. Cancelled (its client went away, or
// `cuprof trigger PID --cancel`), a window still waiting for its first step
// is dropped and an open one ends now and is written.
#pragma once

#include "steps.hpp"
#include "../../base/log.hpp"
#include "../control_endpoint.hpp"

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

namespace cuprof::detail {

class trigger_window final : public window_policy {
 public:
  trigger_window(window_driver& d, trace_destination& out, std::string step_range)
      : driver_(d), out_(out), step_range_(std::move(step_range)) {
    index_ = d.add(this);
  }

  void set_endpoint(control_endpoint* e) { endpoint_ = e; }

  // The endpoint's handler, on its thread: the window is asked for now (a
  // duration) or at the next step's start (steps); the answer comes once the
  // driver opened it, or for steps once it is armed.
  trigger_reply on_request(const trigger_request& r) {
    if (driver_.stopped()) return {false, "the process is ending"};
    std::string path;
    {
      std::lock_guard<std::mutex> l(request_mutex_);
      path = r.output.empty() ? numbered_trace_path(out_.path, out_.windows_written + 1, "") : r.output;
    }
    if (const std::string why = why_unwritable(path); !why.empty()) return {false, why};
    if (!driver_.claim(index_))
      return {false, driver_.owner() == index_ ? "busy: a triggered window is open" : "busy: a capture range's window is open"};
    {
      std::lock_guard<std::mutex> l(request_mutex_);
      request_ = r;
      path_ = path;
    }
    window_ask a;
    a.kind = window_ask::open;
    a.policy = std::uint8_t(index_);
    a.ticks = now_ticks();
    if (r.steps > 0) {
      first_step_.store(true, std::memory_order_relaxed);   // the next step opens the window
      steps_armed_.store(true, std::memory_order_release);  // the hook posts steps from now on
      driver_.watch();
      driver_.post(a);
    } else {
      driver_.post_and_wait(a);
    }
    return {true, path};
  }

  // The endpoint's thread: cancels this policy's window, if it has one.
  bool cancel() {
    if (driver_.owner() != index_) return false;
    window_ask a;
    a.kind = window_ask::cancel;
    a.policy = std::uint8_t(index_);
    a.ticks = now_ticks();
    driver_.post(a);
    return true;
  }

  void on_nvtx(const nvtx_range_event& e) noexcept override {
    if (steps_armed_.load(std::memory_order_acquire))
      post_step(driver_, index_, e, step_range_, [this] { return first_step_.exchange(false, std::memory_order_relaxed); });
  }

  bool watches() const override { return steps_armed_.load(std::memory_order_relaxed); }

  void on_ask(const window_ask& a, window_target& t) override {
    if (a.kind == window_ask::cancel) {
      if (open_) close(t, a.ticks);
      else if (waiting_for_step()) drop_unopened("cancelled before its first step began: nothing was recorded");
      return;
    }
    if (a.kind == window_ask::open) {
      std::lock_guard<std::mutex> l(request_mutex_);
      steps_ = request_.steps;
      step_count_ = -1;
      marks_.clear();
      if (steps_ == 0) {
        deadline_ns_ = monotonic_ns() + std::uint64_t(request_.duration_s * 1e9);
        open_ = true;
        t.open();
      }
      return;
    }
    if (a.kind != window_ask::step || steps_ == 0) return;
    ++step_count_;
    if (step_count_ == 0) {  // the first step opens the window; its range began before, so its mark is its own
      first_number_ = a.number >= 0 ? a.number : 0;
      open_ = true;
      t.open();
    }
    if (step_count_ < steps_) marks_.mark(step_count_, a.ticks, a.tid);
    else if (step_count_ == steps_) close(t, a.ticks);
  }

  void on_time(std::uint64_t now_ns, window_target& t) override {
    if (open_ && steps_ == 0 && deadline_ns_ && now_ns >= deadline_ns_) close(t, now_ticks());
  }

  // The window's trace, to its path; the requester is told where.
  void write(profile& p) override {
    if (closed_.empty()) return;
    const closed_window_info w = std::move(closed_.front());
    closed_.pop_front();
    ++out_.windows_written;
    const trace* t = &p.last_trace();
    trace with_steps;
    if (!w.marks.empty()) {
      with_steps = *t;
      w.marks.add_to(with_steps, w.first_number, step_range_, /*from_before=*/true);
      t = &with_steps;
    }
    try {
      const export_result written = out_.write(*t, w.path, /*own=*/!w.asked_path);
      if (endpoint_) endpoint_->finish(true, written.path + " (" + std::to_string(written.events) + " events)");
    } catch (const std::exception& e) {
      if (endpoint_) endpoint_->finish(false, message_of(e));
      throw;
    }
    if (out_.print_table) write_stderr(p.key_averages().table("self_cuda_time_total", 30));
  }

  // A window still open at exit ends now and is written; one still waiting
  // for its first step was never recorded, and that is what is said.
  void finish(window_target& t) override {
    if (open_) {
      close(t, now_ticks());
    } else if (waiting_for_step()) {
      const std::string unseen = why_nvtx_unseen();
      const std::string why = "the process ended before the first of its " + std::to_string(steps_) + " steps began" +
                              (unseen.empty() ? std::string() : " (no step could be seen: " + unseen + ")") +
                              ": nothing was recorded";
      log_line("a triggered window was never opened: " + why);
      drop_unopened(why);
    }
  }

  // For `cuprof trigger --list`: a window is open (a range's or a trigger's).
  bool window_open() const { return driver_.owner() != window_driver::no_owner; }

 private:
  void close(window_target& t, std::uint64_t ticks) {
    {
      std::lock_guard<std::mutex> l(request_mutex_);
      closed_.push_back({path_, std::move(marks_), first_number_, !request_.output.empty()});
    }
    marks_.clear();
    open_ = false;
    steps_ = 0;
    deadline_ns_ = 0;
    steps_armed_.store(false, std::memory_order_relaxed);
    // Free before the window is written: the requester is told it was, and
    // may ask for the next at once. That one's open comes after this close.
    driver_.release(index_);
    t.close_at(ticks);
  }

  // Armed by a request for steps, its first step not yet begun.
  bool waiting_for_step() const { return !open_ && steps_ > 0 && step_count_ < 0; }

  // The armed request goes, unopened: its client is told why.
  void drop_unopened(const std::string& why) {
    steps_ = 0;
    steps_armed_.store(false, std::memory_order_relaxed);
    driver_.release(index_);
    if (endpoint_) endpoint_->finish(false, why);
  }

  // A closed window's, until its trace is written.
  struct closed_window_info {
    std::string path;
    step_marks marks;
    std::int64_t first_number = 0;
    bool asked_path = false;  // the request named it (--output): replaced as asked
  };

  window_driver& driver_;
  int index_ = 0;
  trace_destination& out_;
  const std::string step_range_;
  control_endpoint* endpoint_ = nullptr;
  std::atomic<bool> steps_armed_{false};
  std::atomic<bool> first_step_{false};  // the next step the hook sees opens the window: its thread waits for it
  std::mutex request_mutex_;             // the request, between the endpoint's thread and the driver's
  trigger_request request_;
  std::string path_;
  // The driver's.
  bool open_ = false;
  int steps_ = 0;
  std::int64_t step_count_ = -1;
  std::int64_t first_number_ = 0;
  std::uint64_t deadline_ns_ = 0;
  step_marks marks_;
  std::deque<closed_window_info> closed_;  // the driver's (write() runs with its lock held)
};

}  // namespace cuprof::detail
