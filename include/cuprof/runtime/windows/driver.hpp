// The environment's windows (CUPROF_TRACE and `cuprof run`): one driver, and
// a policy per way of choosing a window, one file each in this folder:
//
//   timer.hpp          CUPROF_DELAY, CUPROF_DURATION (and the whole run)
//   start_step.hpp     CUPROF_START_STEP, CUPROF_STEPS
//   capture_range.hpp  CUPROF_CAPTURE_RANGE=cuda|nvtx:..., CUPROF_CAPTURE_RANGE_END
//   trigger.hpp        `cuprof trigger`: a window of a duration or of N steps
//   slow_steps.hpp     CUPROF_SLOW_STEPS
//
// A policy's hooks run on the program's threads inside its NVTX or profiler
// calls: they only match the call and post an ask (open, close, a step) with
// the instant it came at, lock-free. The driver's one thread takes the asks in
// the order of their instants and hands each to its policy, which decides on
// the windows through a window_target: the profile (autostart.hpp), whose
// window engine (collect/window_engine.hpp) hands each window over with the
// records between its instants, or a test's engine over synthetic records.
// Policies keep their own state, read and written on the driver's thread (or
// under the same lock), so none of it is shared between threads but the asks.
#pragma once

#include "../../base/process_state.hpp"
#include "../../base/threads.hpp"
#include "../../collect/clock.hpp"
#include "../../output/file_sink.hpp"
#include "../../profile.hpp"
#include "../abnormal_exit.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cuprof::detail {

// What a hook asks, stamped where the program asked it.
struct window_ask {
  enum kind_t : std::uint8_t { open, close, step, cancel } kind = open;
  std::uint8_t policy = 0;   // the driver's index of the policy that asked
  std::uint32_t tid = 0;     // the thread that asked
  std::uint64_t ticks = 0;   // when (the tick clock)
  std::int64_t number = -1;  // a step's own number, from its range's message; -1: none
};

// What the windows are applied to: the profile, or a test's engine. Called on
// the driver's thread (or with the driver's lock held).
class window_target {
 public:
  virtual ~window_target() = default;
  // A window opens now.
  virtual void open() = 0;
  // The open window starts later, at `ticks` (a reading already past).
  virtual void move_start(std::uint64_t ticks) = 0;
  // The open window closes at `ticks` (a reading already past); its trace
  // goes to the policy that closed it once its records are in.
  virtual void close_at(std::uint64_t ticks) = 0;
  // The session's one window ends at `ticks` (0: now), and with it the session.
  virtual void end_at(std::uint64_t ticks) = 0;
  // A program step started at `ticks`: the slow steps' ring (the first is step 0).
  virtual void step_boundary(std::uint64_t ticks, bool first) = 0;
};

// The n-th trace of a process that writes several (capture ranges, triggers,
// slow steps): every %n is n; a path without one gets ".<tag><n>" before the
// file name's extension, or stays as it is when `tag` is null.
inline std::string numbered_trace_path(std::string path, int n, const char* tag) {
  bool numbered = false;
  for (std::size_t at = path.find("%n"); at != std::string::npos; at = path.find("%n", at)) {
    path.replace(at, 2, std::to_string(n));
    numbered = true;
  }
  if (numbered || !tag) return path;
  return with_tag_before_extension(path, "." + std::string(tag) + std::to_string(n));
}

// Where the environment's traces go (CUPROF_TRACE), for the policies that
// write windows of their own.
struct trace_destination {
  std::string path;                            // absolute; may hold %n
  const trace_directory* directory = nullptr;  // the path's, held from start; null: looked up when written
  export_options options;
  bool print_table = true;
  int windows_written = 0;       // capture ranges' and triggers' windows, for %n
  std::uint64_t started_ns = 0;  // the session's start, CLOCK_REALTIME; 0: every path is this process's

  // Writes `t` to `to`: a name of this session's path (`own`: CUPROF_TRACE's,
  // numbered or not) goes elsewhere when another process wrote a file there
  // since the session started (two processes traced to one path:
  // `export CUPROF_TRACE=t.json; a | b`): to the name with this process's pid,
  // as a forked child's, said in one line. A trace from before is replaced.
  export_result write(const trace& t, const std::string& to, bool own = true) const {
    const std::string path = own ? unshared_path(to) : to;
    return directory ? cuprof::export_chrome_trace(t, *directory, path, options) : cuprof::export_chrome_trace(t, path, options);
  }

 private:
  std::string unshared_path(const std::string& to) const {
    struct stat st;
    if (started_ns == 0 || ::stat(to.c_str(), &st) != 0) return to;
    const std::uint64_t written = std::uint64_t(st.st_mtim.tv_sec) * 1000000000u + std::uint64_t(st.st_mtim.tv_nsec);
    if (written <= started_ns) return to;  // written before the session started
    const std::string mine = with_tag_before_extension(to, "." + std::to_string(::getpid()));
    log_line("'" + terminal_safe(to) +
             "' was written by another process while this one ran (two processes traced to one path): this trace goes to '" +
             terminal_safe(mine) + "'");
    return mine;
  }
};

// One way of choosing windows.
class window_policy {
 public:
  virtual ~window_policy() = default;
  // On the program's threads, inside its calls: no lock, no allocation.
  virtual void on_nvtx(const nvtx_range_event&) noexcept {}
  virtual void on_profiler_api(bool /*start*/) noexcept {}
  // On the driver's thread, in the order of their instants.
  virtual void on_ask(const window_ask&, window_target&) {}
  // Whether its hooks still have something to see; the driver takes the
  // hooks off the program's calls once no policy's have (read under the driver's lock).
  virtual bool watches() const { return false; }
  // On the driver's thread at each wake (20 ms apart at most), with the monotonic clock.
  virtual void on_time(std::uint64_t /*now_ns*/, window_target&) {}
  // A window this policy closed, its trace ready in `p` (last_trace()): written here.
  virtual void write(profile& /*p*/) {}
  // At the session's end, with the driver's lock held: a window of its own
  // still open is ended (false: the session's end writes it), and what the
  // user must know is said.
  virtual void finish(window_target&) {}
};

// The driver: the asks' queue, the one thread, whose window is open.
class window_driver {
 public:
  static constexpr std::size_t capacity = 4096;  // asks waiting at most; more are dropped and counted
  static constexpr std::chrono::milliseconds open_wait{1000};
  static constexpr int no_owner = -1;

  explicit window_driver(std::mutex& lock) : lock_(lock) {
    for (std::size_t i = 0; i < capacity; ++i) cells_[i].sequence.store(i, std::memory_order_relaxed);
  }

  int add(window_policy* p) {
    policies_.push_back(p);
    return int(policies_.size() - 1);
  }

  // Starts the thread that applies the asks to `target`; it ends at its
  // next wake after finish(). A test's driver is joined; a program's lives
  // to the process's end, its thread detached.
  std::thread start(window_target* target) {
    target_ = target;
    return std::thread(&window_driver::run_thread, this);
  }
  // A program's: false, with `why`, when the system gives no thread.
  bool start_detached(window_target* target, std::string& why) {
    target_ = target;
    if (start_detached_thread(why, &window_driver::run_thread, this)) return true;
    target_ = nullptr;
    return false;
  }

  // The policies see the program's NVTX ranges and profiler calls from now on.
  void hook(bool on) {
    if (!on && !hooked_) return;  // another copy's hooks, or none, are left alone
    hooked_ = on;
    current().store(on ? this : nullptr, std::memory_order_release);
    process().on_nvtx_range.store(on ? &dispatch_nvtx : nullptr, std::memory_order_relaxed);
    process().on_profiler_api.store(on ? &dispatch_profiler_api : nullptr, std::memory_order_relaxed);
  }

  // The hooks back on for a policy that watches again (a trigger that counts steps).
  void watch() {
    std::lock_guard<std::mutex> l(lock_);
    if (!hooked_ && target_) hook(true);
  }

  // Program threads. Never blocks; a full queue drops the ask (counted).
  void post(const window_ask& a) noexcept {
    std::size_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      cell& c = cells_[pos % capacity];
      const std::size_t seq = c.sequence.load(std::memory_order_acquire);
      const std::intptr_t diff = std::intptr_t(seq) - std::intptr_t(pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          c.ask = a;
          c.sequence.store(pos + 1, std::memory_order_release);
          break;
        }
      } else if (diff < 0) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
        return;
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
    wake_.notify_one();
  }

  // post(), then waits (at most open_wait) until the driver applied it: the
  // program's thread goes on once its window is open, so its next calls and
  // kernels are in it.
  void post_and_wait(const window_ask& a) noexcept {
    post(a);
    try {
      std::unique_lock<std::mutex> wait(applied_mutex_);
      applied_signal_.wait_for(wait, open_wait, [&] { return applied_.load() >= a.ticks || stopped_.load(); });
    } catch (...) {
      // The window opens when the driver gets to it.
    }
  }

  // Whose window is open or asked for: a capture range's or a trigger's, never both.
  bool claim(int policy) noexcept {
    int expected = no_owner;
    return owner_.compare_exchange_strong(expected, policy);
  }
  bool release(int policy) noexcept {
    int expected = policy;
    return owner_.compare_exchange_strong(expected, no_owner);
  }
  int owner() const noexcept { return owner_.load(); }

  // The window a policy closed on `target` goes to that policy for writing,
  // in the order the windows closed; a window closed by the session's end
  // goes to the owner of the open window, or to the first policy.
  void closing(int policy) { closing_.push_back(policy); }
  void written(profile& p) {
    int who = owner_.load();
    if (!closing_.empty()) who = closing_.front(), closing_.pop_front();
    if (who == no_owner) who = 0;
    if (std::size_t(who) < policies_.size()) policies_[std::size_t(who)]->write(p);
  }

  // At the session's end, with the driver's lock held: hooks off, the asks
  // still queued applied (steps the thread had not got to), each policy's
  // finish; the thread stops at its next wake.
  void finish() {
    hook(false);
    if (!target_ || finishing_) return;
    finishing_ = true;
    if (!applying_) apply_queued();  // else a policy ends the session from inside apply_queued()
    for (std::size_t i = 0; i < policies_.size() && target_; ++i) {
      proxy to{*this, std::uint8_t(i)};
      policies_[i]->finish(to);
    }
    target_ = nullptr;
    stopped_.store(true);
    std::lock_guard<std::mutex> l(applied_mutex_);
    applied_signal_.notify_all();
  }

  bool stopped() const noexcept { return stopped_.load(); }
  std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }

  // One step of the thread's loop, with the driver's lock held: the asks
  // queued, in the order of their instants, then the time. Public for tests.
  void apply_queued() {
    applying_ = true;
    struct done {
      bool& flag;
      ~done() { flag = false; }
    } leave{applying_};
    batch_.clear();
    for (std::size_t pos = head_.load(std::memory_order_relaxed);; ++pos) {
      cell& c = cells_[pos % capacity];
      if (c.sequence.load(std::memory_order_acquire) != pos + 1) break;
      batch_.push_back(c.ask);
      c.sequence.store(pos + capacity, std::memory_order_release);
      head_.store(pos + 1, std::memory_order_relaxed);
    }
    std::stable_sort(batch_.begin(), batch_.end(), [](const window_ask& a, const window_ask& b) { return a.ticks < b.ticks; });
    std::uint64_t latest = 0;
    for (const window_ask& a : batch_) {
      if (!target_) break;  // a policy ended the session
      proxy to{*this, a.policy};
      policies_[a.policy]->on_ask(a, to);
      latest = std::max(latest, a.ticks);
    }
    const std::uint64_t now = monotonic_ns();
    for (std::size_t i = 0; i < policies_.size() && target_; ++i) {
      proxy to{*this, std::uint8_t(i)};
      policies_[i]->on_time(now, to);
    }
    if (latest > applied_.load()) applied_.store(latest);
    if (hooked_ && std::none_of(policies_.begin(), policies_.end(), [](const window_policy* p) { return p->watches(); }))
      hook(false);  // the program's calls are no longer watched (CUPTI stays as it is until exit)
  }

 private:
  struct cell {
    std::atomic<std::size_t> sequence{0};
    window_ask ask;
  };

  // The target as a policy sees it: its closes are noted as its own.
  struct proxy final : window_target {
    window_driver& d;
    std::uint8_t policy;
    proxy(window_driver& driver, std::uint8_t index) : d(driver), policy(index) {}
    void open() override { d.target_->open(); }
    void move_start(std::uint64_t ticks) override { d.target_->move_start(ticks); }
    void close_at(std::uint64_t ticks) override {
      d.closing(policy);
      d.target_->close_at(ticks);
    }
    void end_at(std::uint64_t ticks) override { d.target_->end_at(ticks); }
    void step_boundary(std::uint64_t ticks, bool first) override { d.target_->step_boundary(ticks, first); }
  };

  // The hooked driver: set by the driver's thread, read by the program's inside their calls.
  static std::atomic<window_driver*>& current() {
    static std::atomic<window_driver*> d{nullptr};
    return d;
  }
  static void dispatch_nvtx(const nvtx_range_event& e) noexcept {
    if (window_driver* d = current().load(std::memory_order_acquire))
      for (window_policy* p : d->policies_) p->on_nvtx(e);
  }
  static void dispatch_profiler_api(bool start) noexcept {
    if (window_driver* d = current().load(std::memory_order_acquire))
      for (window_policy* p : d->policies_) p->on_profiler_api(start);
  }

  // The thread. A plain function, as every thread cuprof starts: a lambda's
  // thread code is shared by the copies of cuprof in a process and runs one
  // copy's body.
  static void run_thread(window_driver* d) { d->run(); }
  void run() {
    for (;;) {
      {
        std::unique_lock<std::mutex> wait(wake_mutex_);
        wake_.wait_for(wait, std::chrono::milliseconds(20), [this] {
          const std::size_t head = head_.load(std::memory_order_relaxed);
          return cells_[head % capacity].sequence.load(std::memory_order_acquire) == head + 1 || stopped_.load();
        });
      }
      {
        std::lock_guard<std::mutex> l(lock_);
        if (!target_) break;  // the session ended (exit, a signal)
        apply_queued();
      }
      {
        std::lock_guard<std::mutex> l(applied_mutex_);
        applied_signal_.notify_all();
      }
      raise_remembered_signal();  // a signal that came while a window was written
    }
    raise_remembered_signal();
  }

  std::mutex& lock_;  // the session's: target and policies are used under it
  std::vector<window_policy*> policies_;
  window_target* target_ = nullptr;
  std::array<cell, capacity> cells_;
  std::atomic<std::size_t> tail_{0};
  std::atomic<std::size_t> head_{0};  // moved under lock_; read by the thread's wait
  std::atomic<std::uint64_t> dropped_{0};
  std::vector<window_ask> batch_;
  std::deque<int> closing_;
  std::atomic<int> owner_{no_owner};
  std::atomic<std::uint64_t> applied_{0};  // the latest instant applied
  std::atomic<bool> stopped_{false};
  bool hooked_ = false;     // under lock_
  bool finishing_ = false;  // under lock_
  bool applying_ = false;   // under lock_: inside apply_queued()
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  std::mutex applied_mutex_;
  std::condition_variable applied_signal_;
};

}  // namespace cuprof::detail
