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
//
// With slow_steps instead of a schedule, every step is recorded into a ring
// of the latest steps and only the slow ones are kept, each with the steps
// around it, as windows handed to on_trace_ready (model/slow_steps.hpp says how).
#pragma once

#ifdef CUPROF_DISABLE
#include "disabled_api.hpp"
#else
#include "activity.hpp"
#include "base/config.hpp"
#include "collect/clock.hpp"
#include "collect/window_engine.hpp"
#include "base/error.hpp"
#include "model/event.hpp"
#include "model/slow_steps.hpp"
#include "output/chrome_trace.hpp"
#include "output/key_averages.hpp"
#include "schedule.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace cuprof {

class profile;
namespace detail::cupti {
class tracer;
}
namespace detail {
class profile_target;
// The profile's records, for its window engine: the record store behind the
// tracer (runtime/profile_impl.hpp); none without CUDA tracing.
struct profile_records {
  cupti::tracer* tracer = nullptr;
  void discard_before(std::uint64_t ticks);
  bool complete(std::uint64_t start, std::uint64_t end);
  void take(trace& out, std::uint64_t start, std::uint64_t end, const tick_converter& clock);
};
// Defined where the runtime is compiled (base/config.hpp). A program that makes a
// profile without it fails to link, and the linker names this symbol.
extern const bool runtime_missing_define_CUPROF_IMPLEMENTATION_in_one_file_or_link_cuprof_runtime;
}  // namespace detail

// GPU hardware metrics sampled by CUPTI's PM sampling while a window records:
// a counter track per metric per GPU, each kernel's averages in its args, the
// table's metric columns (table_options::metrics) and the insights' verdicts.
struct gpu_metrics_options {
  // CUPTI metric names that fit one PM sampling pass together; empty: SM
  // throughput, DRAM throughput and tensor pipe activity, as percentages of
  // peak (model/gpu_metrics.hpp's default set; achieved occupancy is named).
  std::vector<std::string> metrics;
  // The sampling period: kernels shorter than it get no averages. CUPTI's
  // decoding of the default set costs about half a CPU core while the GPU is
  // busy, whatever the period (H200: about 90 us a sample at 200 us), on a
  // thread of cuprof's; more metrics can need more than a core and lose samples.
  double interval_us = double(detail::default_gpu_metrics_interval_ns) / 1000.0;
};

struct profile_options {
  activity activities = activity::cpu | activity::cuda;
  std::optional<cuprof::schedule> schedule;
  // Keeps the slow steps and the steps around them (model/slow_steps.hpp); not with a schedule.
  std::optional<cuprof::slow_steps> slow_steps;
  // Records every allocation and free of device, managed and pinned host
  // memory (torch's profile_memory): [memory] events, a bytes-in-use counter
  // per device, and the table's memory columns.
  bool profile_memory = false;
  // Captures the native call stack of each launch, copy, memset, sync,
  // allocation and free (torch's with_stack, native frames): on each call's
  // event in the trace, in export_stacks() and in key_averages(group_by, n).
  bool with_stack = false;
  // Samples GPU hardware metrics (off when empty); see gpu_metrics_options.
  std::optional<gpu_metrics_options> gpu_metrics;
  // Called when a window's trace is ready; export or summarise it from here.
  std::function<void(profile&)> on_trace_ready;
};

// Tag for the constructor that starts right away: the profile is then a
// scope, like torch's `with profile(...) as prof:`.
struct start_now_t {};
inline constexpr start_now_t start_now{};

class profile {
 public:
  explicit profile(profile_options options = {}) : options_(std::move(options)) {
    // A volatile read: kept at every optimisation level, so the link error comes first.
    static_cast<void>(*static_cast<const volatile bool*>(
        &detail::runtime_missing_define_CUPROF_IMPLEMENTATION_in_one_file_or_link_cuprof_runtime));
    if (options_.schedule) options_.schedule->validate();
    if (options_.slow_steps) options_.slow_steps->validate();
    if (options_.schedule && options_.slow_steps)
      throw error("profile_options: schedule and slow_steps both choose the windows; give one of them");
  }
  //   { cuprof::profile prof(opts, cuprof::start_now); work(); }   // stopped here
  profile(profile_options options, start_now_t) : profile(std::move(options)) { start(); }
  ~profile();
  profile(const profile&) = delete;
  profile& operator=(const profile&) = delete;

  // Starts recording (or the schedule's first step). Calling it while running
  // does nothing but say so.
  void start();

  // Ends the current window (its trace goes to on_trace_ready), waits for the
  // GPU work it launched, and switches tracing off. Does nothing when stopped.
  // An exception from on_trace_ready propagates, after the profiler stopped.
  void stop();

  // Marks a step boundary; drives the schedule or slow_steps. Without either it only counts.
  void step();

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
  // group_by::args: a row per scope name and arguments (torch's group_by_input_shape).
  // group_by_stack_n > 0: CUDA calls and GPU work have a row per name and
  // first n frames of their stack (with_stack), as torch's.
  event_averages key_averages(group_by grouping = group_by::name, int group_by_stack_n = 0) const {
    return cuprof::key_averages(last_trace(), grouping, group_by_stack_n);
  }
  // The last window's stacks in the folded format of flamegraph.pl and
  // speedscope (torch's export_stacks): metric "self_cuda_time_total" (GPU
  // time of the work launched from each stack) or "self_cpu_time_total" (the
  // CUDA calls' own CPU time). Throws cuprof::error.
  void export_stacks(const std::string& path, const std::string& metric = "self_cuda_time_total") const;
  // A profile that was refused (another one was running) writes nothing: its
  // empty trace would replace a file the user may still want.
  export_result export_chrome_trace(const std::string& path, const export_options& options = {}) const;

 private:
  // The windows the environment's policies choose (runtime/windows/): the
  // profile is their target, through this one door.
  friend class detail::profile_target;
  // Moves the running window's start (no schedule) to `ticks`, a clock reading
  // already past: what was recorded before it is thrown away.
  void restart_window_at(std::uint64_t ticks);
  // stop(), the window ending at `end_ticks` (0: now), a clock reading already past.
  void stop_at(std::uint64_t end_ticks);
  // start_waiting() starts with no window open, CUPTI attached but recording
  // nothing; open_window() opens one now; close_window() ends it at
  // `end_ticks` (0: now) and hands its trace to on_trace_ready, then waits
  // for the next. None of them with a schedule.
  void start_waiting();
  void open_window();
  void close_window(std::uint64_t end_ticks);
  // start()'s first part: this profile becomes the process's running one. False when refused.
  bool begin_session();
  // slow_steps driven by another thread, without ProfilerStep scopes: a step
  // boundary at `ticks`, a clock reading already past. The first is where
  // step 0 starts: what was recorded before it is thrown away.
  void slow_step_at(std::uint64_t ticks, bool first);

  // The slow-step verdicts' window operations (follow_slow_step) on this profile.
  struct slow_windows;

  // Tracing off and the process-wide slot free: the end of stop(), also when
  // a handler threw. Windows not yet handed over are dropped.
  void release() noexcept;

  void open_cuda();

  bool cpu() const noexcept { return has(options_.activities, activity::cpu); }

  // step() or stop() from on_trace_ready would end a window and hand it over
  // from within the handing over, again and again: refused, with one line.
  bool refused_in_handler(const char* call) const;

  // CUPTI is released between sessions; attaching again can fail if another
  // tool took it meanwhile: then this session records the CPU side only.
  void enable_cuda();

  std::string what_is_recorded_without_cuda() const;

  // A schedule or slow_steps wraps each step in a ProfilerStep#N scope.
  bool marks_steps() const noexcept { return options_.schedule || options_.slow_steps; }

  void open_step_scope();

  std::uint64_t close_step_scope();

  // torch's ProfilerAction transitions, at tick `now`. A window ends at `now`
  // whatever other threads do: recording stops first when nothing records
  // next, and the drain leaves what they stamped later to the next window.
  void transition(profiler_action from, profiler_action to, std::uint64_t now);

  void end_window(std::uint64_t now);

  // slow_steps: the step running ended at `now`; moves the ring's start, or
  // cuts a kept window out of it.
  void keep_slow_steps(std::uint64_t now);

  // Hands over the windows whose records are in, without waiting for them.
  void finalize_pending();

  // What the ring's window holds, about: CPU scope chunks in use and the CUDA records staged.
  std::size_t held_bytes();

  // Finalises pending windows in order while their GPU records are all in
  // (always at stop, after the device sync and forced flush).
  void finalize_ready(bool at_stop);

  // Before a window is handed over at once (stop, close_window): waits, at
  // most settle_ns, until no thread is still inside a call that started
  // before `end_ticks`, so that the window gets the calls other threads
  // were making when it closed. What is still running then is counted.
  void settle_calls(std::uint64_t start_ticks, std::uint64_t end_ticks);
  static constexpr std::uint64_t settle_ns = 200000000ull;

  // Threads that made CUDA calls but opened no scope still get a named lane.
  static void name_api_threads(trace& t);

  static void report_drops(const trace& t);

  static constexpr std::uint64_t give_up_after_ns = 5000000000ull;

  profile_options options_;
  bool running_ = false;
  bool step_scope_open_ = false;
  bool refused_ = false;  // start() found another profile running
  bool in_on_trace_ready_ = false;
  std::int64_t step_num_ = 0;
  profiler_action action_ = profiler_action::none;
  std::string cuda_status_;
  detail::cupti::tracer* tracer_ = nullptr;
  detail::window_engine<detail::profile_records> engine_;
  std::unique_ptr<trace> last_;
  std::optional<detail::slow_step_ring> slow_;  // slow_steps' ring, from start()
};

}  // namespace cuprof

#endif  // CUPROF_DISABLE
