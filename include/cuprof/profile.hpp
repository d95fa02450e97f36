// The profiler session, torch.profiler.profile for C++.
//
//   cuprof::profile_options opts;
//   opts.schedule = cuprof::schedule(/*wait*/1, /*warmup*/1, /*active*/3, /*repeat*/1);
//   opts.on_trace_ready = cuprof::tensorboard_trace_handler("traces");
//   cuprof::profile prof(opts);
//   prof.start();
//   for (...) { work(); prof.step(); }
//   prof.stop();   // also done by ~profile()
//
// As a scope: { cuprof::profile prof(opts, cuprof::start_now); ... }
//
// Without a schedule everything between start() and stop() is one recorded
// window. With one, steps follow torch's schedule: each step is wrapped in a
// ProfilerStep#N scope, warmup steps are traced and discarded, and the end of
// each active window hands its trace to on_trace_ready. step() never
// synchronizes the device: a window whose GPU work is still running is
// finalised at a later step() once its records arrived, or at stop().
#pragma once

#include "chrome_trace.hpp"
#include "config.hpp"
#include "detail/clock.hpp"
#include "detail/cpu_collect.hpp"
#include "detail/cupti/tracer.hpp"
#include "detail/log.hpp"
#include "detail/process_info.hpp"
#include "error.hpp"
#include "event.hpp"
#include "schedule.hpp"
#include "table.hpp"
#include "trace.hpp"

#include <malloc.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace cuprof {

enum class activity : unsigned { cpu = 1, cuda = 2 };
constexpr activity operator|(activity a, activity b) noexcept { return activity(unsigned(a) | unsigned(b)); }
constexpr bool has(activity set, activity a) noexcept { return (unsigned(set) & unsigned(a)) != 0; }

class profile;

struct profile_options {
  activity activities = activity::cpu | activity::cuda;
  std::optional<cuprof::schedule> schedule;
  // Called when a window's trace is ready; export or summarise it from here.
  std::function<void(profile&)> on_trace_ready;
};

namespace detail {

inline bool records(profiler_action a) noexcept { return a != profiler_action::none; }
inline bool is_active(profiler_action a) noexcept {
  return a == profiler_action::record || a == profiler_action::record_and_save;
}

// Staging grows on CUPTI's worker thread and is freed on the application
// thread; glibc keeps such memory in its arenas unless asked to give it back.
inline void return_free_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace detail

// Tag for the constructor that starts right away: the profile is then a
// scope, like torch's `with profile(...) as prof:`.
struct start_now_t {};
inline constexpr start_now_t start_now{};

class profile {
 public:
  explicit profile(profile_options options = {}) : options_(std::move(options)) {
    if (options_.schedule) options_.schedule->validate();
  }
  //   { cuprof::profile prof(opts, cuprof::start_now); work(); }   // stopped here
  profile(profile_options options, start_now_t) : profile(std::move(options)) { start(); }
  ~profile() {
    try {
      stop();
    } catch (const std::exception& e) {
      detail::log_line(std::string("stopping the profiler failed: ") + e.what());
    }
  }
  profile(const profile&) = delete;
  profile& operator=(const profile&) = delete;

  // Starts recording (or the schedule's first step). Calling it while running
  // does nothing but say so.
  void start() {
#ifdef CUPROF_DISABLE
    return;  // compiled out: no recording, no CUPTI
#endif
    if (running_) return detail::log_line("start() called on a running profiler; ignored");
    const void* expected = nullptr;
    if (!detail::process().running_profile.compare_exchange_strong(expected, this)) {
      refused_ = true;
      return detail::log_line(
          "another cuprof profiler is already running (CUPROF_TRACE and `cuprof run` trace the whole process): "
          "this profile records nothing and will not write over its output files");
    }
    detail::clock_anchor();
    refused_ = false;
    detail::global_chunk_pool().set_max_chunks(detail::max_cpu_chunks());
    running_ = true;
    step_num_ = 0;
    cuda_status_.clear();
    if (has(options_.activities, activity::cuda)) open_cuda();
    action_ = options_.schedule ? (*options_.schedule)(0) : profiler_action::record;
    transition(profiler_action::none, action_, detail::now_ticks());
    open_step_scope();
  }

  // Ends the current window (its trace goes to on_trace_ready), waits for the
  // GPU work it launched, and switches tracing off. Does nothing when stopped.
  // An exception from on_trace_ready propagates, after the profiler stopped.
  void stop() {
    if (!running_ || refused_in_handler("stop()")) return;
    close_step_scope();
    transition(action_, profiler_action::none, detail::now_ticks());
    if (tracer_) {
      tracer_->sync_devices();
      tracer_->flush(true);
    }
    struct stopped_anyway {
      profile& p;
      ~stopped_anyway() { p.release(); }
    } release_on_exit{*this};
    finalize_ready(true);
  }

  // Marks a step boundary; drives the schedule. Without a schedule it only counts.
  void step() {
#ifdef CUPROF_DISABLE
    return;
#endif
    if (!running_) {
      if (!refused_) detail::log_line("step() called on a profiler that is not running; ignored");  // else said at start()
      return;
    }
    if (refused_in_handler("step()")) return;
    if (!options_.schedule) {
      ++step_num_;
      return;
    }
    const std::uint64_t now = close_step_scope();
    const profiler_action previous = action_;
    action_ = (*options_.schedule)(++step_num_);
    transition(previous, action_, now);
    open_step_scope();
    if (!pending_.empty()) {
      if (tracer_) tracer_->flush(false);
      finalize_ready(false);
    }
  }

  bool running() const noexcept { return running_; }
  std::int64_t step_num() const noexcept { return step_num_; }
  profiler_action current_action() const noexcept { return action_; }
  // Why CUDA is not traced in this session; empty when it is (or was not asked for).
  const std::string& cuda_status() const noexcept { return cuda_status_; }

  // The most recently completed window.
  const trace& last_trace() const {
    static const trace* empty = new trace;  // never destroyed: read from exit handlers too
    return last_ ? *last_ : *empty;
  }
  event_averages key_averages() const { return cuprof::key_averages(last_trace()); }
  // A profile that was refused (another one was running) writes nothing: its
  // empty trace would replace a file the user may still want.
  export_result export_chrome_trace(const std::string& path) const {
    if (refused_ && !last_) {
      detail::log_line("this profile recorded nothing (another profiler was running): '" + path + "' left as it was");
      return export_result{path, 0, 0};
    }
    return cuprof::export_chrome_trace(last_trace(), path);
  }

 private:
  struct pending_window {
    std::unique_ptr<trace> collected;
    std::uint64_t start_ticks = 0;
    std::uint64_t end_ticks = 0;
    detail::tick_converter clock;
    std::uint64_t give_up_at_ns = 0;
  };

  // Tracing off and the process-wide slot free: the end of stop(), also when
  // a handler threw. Windows not yet handed over are dropped.
  void release() noexcept {
    pending_.clear();
    if (tracer_) {
      tracer_->disable();
      tracer_->detach();
      tracer_->with_store([](detail::cupti::record_store& s) { s.clear(); return 0; });
      tracer_->trim_buffers();
    }
    detail::return_free_memory();
    running_ = false;
    detail::process().running_profile.store(nullptr);
  }

  void open_cuda() {
    std::string why;
    tracer_ = detail::cupti::tracer::instance(why);
    if (!tracer_) cuda_status_ = why;
    if (detail::process().cuda_status_said.exchange(true)) return;  // once per process, whichever copy asks
    if (!tracer_)
      detail::log_line("CUDA tracing is off: " + why + "; " + what_is_recorded_without_cuda());
    else
      detail::log_info("tracing CUDA: " + tracer_->describe());
  }

  bool cpu() const noexcept { return has(options_.activities, activity::cpu); }

  // step() or stop() from on_trace_ready would end a window and hand it over
  // from within the handing over, again and again: refused, with one line.
  bool refused_in_handler(const char* call) const {
    if (in_on_trace_ready_) detail::log_line(std::string(call) + " called from on_trace_ready; ignored");
    return in_on_trace_ready_;
  }

  // CUPTI is released between sessions; attaching again can fail if another
  // tool took it meanwhile: then this session records the CPU side only.
  void enable_cuda() {
    const std::string why = tracer_->enable();
    if (why.empty()) return;
    cuda_status_ = why;
    tracer_ = nullptr;
    detail::log_line("CUDA tracing is off: " + why + "; " + what_is_recorded_without_cuda());
  }

  std::string what_is_recorded_without_cuda() const {
    return cpu() ? "recording the CPU side only" : "nothing is recorded (CPU activity was not asked for)";
  }

  void open_step_scope() {
    if (!options_.schedule || !cpu() || !detail::records(action_)) return;
    detail::thread_buffer* b = detail::current_thread_buffer();
    step_scope_open_ =
        b && b->push({detail::make_head(detail::slot_kind::enter_step, detail::now_ticks()), std::uint64_t(step_num_)});
  }

  std::uint64_t close_step_scope() {
    const std::uint64_t now = detail::now_ticks();
    if (step_scope_open_) {
      if (detail::thread_buffer* b = detail::current_thread_buffer())
        b->push({detail::make_head(detail::slot_kind::exit, now), 0});
      step_scope_open_ = false;
    }
    return now;
  }

  // torch's ProfilerAction transitions, at tick `now`. A window ends at `now`
  // whatever other threads do: recording stops first when nothing records
  // next, and the drain leaves what they stamped later to the next window.
  void transition(profiler_action from, profiler_action to, std::uint64_t now) {
    const bool recording_stops = detail::records(from) && !detail::records(to);
    if (recording_stops) detail::process().cpu_recording.store(false, std::memory_order_relaxed);
    if (from == profiler_action::record_and_save || (detail::is_active(from) && to == profiler_action::none)) end_window(now);
    if (recording_stops) detail::discard_cpu_spans(detail::now_ticks());  // written after `now`: no window takes it
    if (!detail::records(from) && detail::records(to)) {
      detail::discard_cpu_spans(now);
      if (cpu()) detail::process().cpu_recording.store(true, std::memory_order_relaxed);
      if (tracer_) enable_cuda();  // already during warmup: CUPTI's start-up cost stays out of the window
    }
    if (detail::is_active(to) && (!detail::is_active(from) || from == profiler_action::record_and_save)) {
      if (from == profiler_action::warmup) detail::discard_cpu_spans(now);
      if (tracer_) tracer_->with_store([&](detail::cupti::record_store& s) { s.discard_before(now); return 0; });
      window_start_ = now;
    }
    if (!detail::records(to) && pending_.empty() && tracer_) tracer_->disable();
  }

  void end_window(std::uint64_t now) {
    pending_window w;
    w.collected = std::make_unique<trace>();
    w.start_ticks = window_start_;
    w.end_ticks = now;
    w.clock = detail::tick_converter(detail::clock_anchor(), detail::sample_clocks());
    w.give_up_at_ns = detail::monotonic_ns() + give_up_after_ns;
    trace& t = *w.collected;
    detail::collect_cpu_spans(t, w.clock, w.start_ticks, w.end_ticks);
    t.meta.window_start_ns = w.clock.to_epoch_ns(w.start_ticks);
    t.meta.window_end_ns = w.clock.to_epoch_ns(w.end_ticks);
    detail::fill_process_info(t.meta);
    t.meta.cuda_runtime_version = CUDA_VERSION;  // the toolkit cuprof was compiled with
    t.meta.cuda_status = has(options_.activities, activity::cuda) ? cuda_status_ : "not requested";
    pending_.push_back(std::move(w));
  }

  // Finalises pending windows in order while their GPU records are all in
  // (always at stop, after the device sync and forced flush).
  void finalize_ready(bool at_stop) {
    while (!pending_.empty()) {
      pending_window& w = pending_.front();
      if (tracer_) {
        const bool complete = at_stop || detail::monotonic_ns() >= w.give_up_at_ns ||
                              tracer_->with_store([&](detail::cupti::record_store& s) {
                                return s.window_complete(w.start_ticks, w.end_ticks);
                              });
        if (!complete) return;
        const std::size_t scopes = w.collected->spans.size();
        tracer_->with_store([&](detail::cupti::record_store& s) {
          s.take(*w.collected, w.start_ticks, w.end_ticks, w.clock);
          return 0;
        });
        if (w.collected->spans.size() != scopes) link_spans(*w.collected);  // NVTX ranges joined the scopes
        tracer_->fill_metadata(w.collected->meta);
      }
      attribute(*w.collected);
      name_api_threads(*w.collected);
      last_ = std::move(w.collected);
      pending_.pop_front();
      report_drops(*last_);
      if (options_.on_trace_ready) {
        in_on_trace_ready_ = true;
        struct leave_handler {
          bool& in_handler;
          ~leave_handler() { in_handler = false; }
        } leave{in_on_trace_ready_};
        options_.on_trace_ready(*this);
      }
      if (tracer_) tracer_->trim_buffers();
      detail::return_free_memory();
    }
    if (!detail::records(action_) && tracer_) tracer_->disable();
  }

  // Threads that made CUDA calls but opened no scope still get a named lane.
  static void name_api_threads(trace& t) {
    std::set<std::uint32_t> named;
    for (const thread_info& th : t.meta.threads) named.insert(th.tid);
    for (const api_call& c : t.api_calls)
      if (named.insert(c.tid).second) t.meta.threads.push_back({c.tid, detail::thread_name_of_tid(c.tid)});
  }

  static void report_drops(const trace& t) {
    const trace_metadata& m = t.meta;
    if (m.dropped_gpu_records || m.dropped_cpu_events)
      detail::log_line("this window lost " + std::to_string(m.dropped_gpu_records) + " GPU records" +
                       (m.dropped_gpu_detail.empty() ? "" : " (" + m.dropped_gpu_detail + ")") + " and " +
                       std::to_string(m.dropped_cpu_events) + " CPU events (counts are in the trace metadata)");
  }

  static constexpr std::uint64_t give_up_after_ns = 5000000000ull;

  profile_options options_;
  bool running_ = false;
  bool step_scope_open_ = false;
  bool refused_ = false;  // start() found another profile running
  bool in_on_trace_ready_ = false;
  std::int64_t step_num_ = 0;
  profiler_action action_ = profiler_action::none;
  std::uint64_t window_start_ = 0;
  std::string cuda_status_;
  detail::cupti::tracer* tracer_ = nullptr;
  std::deque<pending_window> pending_;
  std::unique_ptr<trace> last_;
};

}  // namespace cuprof
