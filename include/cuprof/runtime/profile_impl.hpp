// The profiler session's code (profile.hpp declares the class), compiled in
// the one TU that defines CUPROF_IMPLEMENTATION (base/config.hpp).
#pragma once

#include "abnormal_exit.hpp"
#include "../collect/cpu_collect.hpp"
#include "../cupti/tracer.hpp"
#include "../base/log.hpp"
#include "process_info.hpp"
#include "../model/attribution.hpp"
#include "../profile.hpp"

#include <malloc.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

namespace cuprof {

namespace detail {

const bool runtime_missing_define_CUPROF_IMPLEMENTATION_in_one_file_or_link_cuprof_runtime = true;

// Staging grows on CUPTI's worker thread and is freed on the application
// thread; glibc keeps such memory in its arenas unless asked to give it back.
// Not in a process that a signal ends: the memory goes back anyway, and
// malloc_trim waits on every arena's lock.
inline void return_free_memory() {
#if defined(__GLIBC__)
  if (!process_ending_on_signal()) malloc_trim(0);
#endif
}

// PM samples carry a timestamp CUPTI does not put on the kernels' clock: they
// came some hundred microseconds off the kernels they measured, by an amount
// that changes from run to run. Each GPU's samples are moved onto its kernels
// where the data says so clearly (align_to_kernels); the shift is kept. The
// samples were taken with that much to spare on each side: what then lies
// outside [from_ns, to_ns] (the window and its GPU work) goes.
inline constexpr std::uint64_t max_metric_shift_ns = 2000000;  // align_to_kernels' default reach
inline void align_gpu_metrics(trace& t, std::uint64_t from_ns, std::uint64_t to_ns) {
  for (gpu_metric_series& s : t.gpu_metrics) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> busy;
    for (const gpu_activity& g : t.gpu)
      if (g.kind == gpu_kind::kernel && t.lane_of(g).device == s.device && g.end_ns > g.start_ns)
        busy.emplace_back(g.start_ns, g.end_ns);
    const metric_alignment a = align_to_kernels(s, std::move(busy), std::int64_t(max_metric_shift_ns));
    s.aligned = a.applied;
    s.shift_ns = a.applied ? a.shift_ns : 0;
    gpu_metric_series inside = s;
    inside.start_ns.clear(), inside.end_ns.clear(), inside.values.clear(), inside.gaps.clear();
    for (std::size_t i = 0; i < s.size(); ++i)
      if (s.end_ns[i] > from_ns && s.start_ns[i] < to_ns) inside.add(s.start_ns[i], s.end_ns[i], &s.values[i * s.metrics.size()]);
    for (const gpu_metric_gap& g : s.gaps)
      if (g.end_ns > from_ns && g.start_ns < to_ns)
        inside.gaps.push_back({std::max(g.start_ns, from_ns), std::min(g.end_ns, to_ns), g.cause});
    s = std::move(inside);
  }
}

void profile_records::discard_before(std::uint64_t ticks) {
  if (tracer)
    tracer->with_store([&](cupti::record_store& s) {
      s.discard_before(ticks);
      return 0;
    });
}

bool profile_records::complete(std::uint64_t start, std::uint64_t end) {
  return !tracer || tracer->with_store([&](cupti::record_store& s) { return s.window_complete(start, end); });
}

void profile_records::take(trace& out, std::uint64_t start, std::uint64_t end, const tick_converter& clock) {
  if (!tracer) return;
  tracer->trim_buffers();
  const std::size_t scopes = out.spans.size();
  tracer->with_store([&](cupti::record_store& s) {
    s.take(out, start, end, clock);
    return 0;
  });
  if (out.spans.size() != scopes) link_spans(out);  // NVTX ranges joined the scopes
}

}  // namespace detail

struct profile::slow_windows {
  profile& p;
  void move_start(std::uint64_t ticks) { p.restart_window_at(ticks); }
  void close_at(std::uint64_t ticks) { p.end_window(ticks); }
  void open_at(std::uint64_t ticks) {
    detail::profile_records r{p.tracer_};
    p.engine_.open_at(r, ticks);
  }
};

profile::~profile() {
  try {
    stop();
  } catch (const std::exception& e) {
    detail::log_line("stopping the profiler failed: " + detail::message_of(e));
  } catch (...) {
    // A destructor that lets anything out (on_trace_ready may throw 42) ends the program.
    detail::log_line(
        "stopping the profiler failed: on_trace_ready or the trace's export threw something that is not a std::exception");
  }
}

bool profile::begin_session() {
  if (running_) {
    detail::log_line("start() called on a running profiler; ignored");
    return false;
  }
  const void* expected = nullptr;
  if (!detail::process().running_profile.compare_exchange_strong(expected, this)) {
    refused_ = true;
    // Once: a program's own profile is usually started in a loop (a window per epoch).
    detail::log_line_once(
        "another cuprof profiler is already running (CUPROF_TRACE and `cuprof run` trace the whole process): "
        "this profile records nothing and will not write over its output files");
    return false;
  }
  detail::clock_anchor();
  refused_ = false;
  detail::global_chunk_pool().set_max_chunks(detail::max_cpu_chunks());
  running_ = true;
  step_num_ = 0;
  cuda_status_.clear();
  if (has(options_.activities, activity::cuda)) open_cuda();
  return true;
}

void profile::start() {
  if (!begin_session()) return;
  action_ = options_.schedule ? (*options_.schedule)(0) : profiler_action::record;
  const std::uint64_t now = detail::now_ticks();
  transition(profiler_action::none, action_, now);
  slow_.reset();
  if (options_.slow_steps) slow_.emplace(*options_.slow_steps, now);
  open_step_scope();
}

void profile::start_waiting() {
  if (options_.schedule || !begin_session()) return;
  action_ = profiler_action::none;
  if (!tracer_) return;
  const std::string why = tracer_->arm();
  if (why.empty()) return;
  cuda_status_ = why;
  tracer_ = nullptr;
  detail::log_line("CUDA tracing is off: " + why + "; " + what_is_recorded_without_cuda());
}

void profile::open_window() {
  if (!running_ || options_.schedule || action_ != profiler_action::none) return;
  action_ = profiler_action::record;
  transition(profiler_action::none, action_, detail::now_ticks());
}

void profile::close_window(std::uint64_t end_ticks) {
  if (!running_ || options_.schedule || action_ != profiler_action::record || refused_in_handler("close_window()")) return;
  const std::uint64_t now = detail::now_ticks();
  action_ = profiler_action::none;
  const std::uint64_t start = engine_.start();
  const std::uint64_t end = end_ticks && end_ticks < now && end_ticks > start ? end_ticks : now;
  transition(profiler_action::record, action_, end);
  settle_calls(start, end);
  if (tracer_) {
    tracer_->sync_devices();
    tracer_->flush(true);
  }
  finalize_ready(true);
}

void profile::stop() { stop_at(0); }

void profile::stop_at(std::uint64_t end_ticks) {
  if (!running_ || refused_in_handler("stop()")) return;
  close_step_scope();
  const std::uint64_t now = detail::now_ticks();
  profiler_action from = action_;
  if (slow_) {
    const detail::slow_step_action kept = slow_->finish();
    if (kept.cut) restart_window_at(kept.cut_start);
    else from = profiler_action::warmup;  // no kept window waits: the ring is thrown away, as a warmup is
    const std::string unseen = slow_->steps() == 0 ? detail::why_nvtx_unseen() : std::string();
    detail::log_line(unseen.empty() ? slow_->summary() : "slow steps: no step could be seen (" + unseen + "); nothing kept");
  }
  const std::uint64_t start = engine_.start();
  const std::uint64_t end = end_ticks && end_ticks < now && end_ticks > start ? end_ticks : now;
  transition(from, profiler_action::none, end);
  if (detail::records(from)) settle_calls(start, end);
  if (tracer_) {
    tracer_->sync_devices();
    tracer_->flush(true);
    // The window's records are all in the store: CUPTI goes now, not after
    // the trace is built and handed over, which the program would otherwise
    // spend running traced (every kernel and call recorded, then discarded).
    tracer_->disable();
    // A process a signal ends keeps CUPTI as it is: its other threads may
    // still be in CUDA calls, which a finalize could crash.
    if (!detail::process_ending_on_signal()) tracer_->detach();
  }
  struct stopped_anyway {
    profile& p;
    ~stopped_anyway() { p.release(); }
  } release_on_exit{*this};
  finalize_ready(true);
}

void profile::step() {
  if (!running_) {
    if (!refused_) detail::log_line("step() called on a profiler that is not running; ignored");  // else said at start()
    return;
  }
  if (refused_in_handler("step()")) return;
  if (!marks_steps()) {
    ++step_num_;
    return;
  }
  const std::uint64_t now = close_step_scope();
  if (slow_) {
    keep_slow_steps(now);
  } else {
    const profiler_action previous = action_;
    action_ = (*options_.schedule)(++step_num_);
    transition(previous, action_, now);
  }
  open_step_scope();
  finalize_pending();
}

void profile::settle_calls(std::uint64_t start_ticks, std::uint64_t end_ticks) {
  if (!tracer_ || detail::process_ending_on_signal()) return;  // a signal's trace is written at once
  const std::uint64_t deadline = detail::monotonic_ns() + settle_ns;
  for (;;) {
    tracer_->flush(false);
    if (tracer_->with_store([&](detail::cupti::record_store& s) { return s.calls_complete_through(start_ticks, end_ticks); }) ||
        detail::monotonic_ns() >= deadline)
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void profile::finalize_pending() {
  if (!engine_.waiting()) return;
  if (tracer_) tracer_->flush(false);
  finalize_ready(false);
}

export_result profile::export_chrome_trace(const std::string& path, const export_options& options) const {
  if (refused_ && !last_) {
    detail::log_line("this profile recorded nothing (another profiler was running): '" + detail::terminal_safe(path) +
                     "' left as it was");
    return export_result{path, 0, 0};
  }
  return cuprof::export_chrome_trace(last_trace(), path, options);
}

void profile::release() noexcept {
  engine_.clear();
  if (tracer_) {
    tracer_->disable();
    if (!detail::process_ending_on_signal()) tracer_->detach();
    tracer_->with_store([](detail::cupti::record_store& s) {
      s.clear();
      return 0;
    });
    tracer_->trim_buffers();
  }
  detail::global_chunk_pool().trim();  // the scope chunks kept for this profile's next window
  detail::return_free_memory();
  running_ = false;
  detail::process().running_profile.store(nullptr);
}

void profile::open_cuda() {
  std::string why;
  tracer_ = detail::cupti::tracer::instance(why);
  if (!tracer_) cuda_status_ = why;
  if (detail::process().cuda_status_said.exchange(true)) return;  // once per process, whichever copy asks
  if (!tracer_) detail::log_line("CUDA tracing is off: " + why + "; " + what_is_recorded_without_cuda());
  else detail::log_info("tracing CUDA: " + tracer_->describe());
}

bool profile::refused_in_handler(const char* call) const {
  if (in_on_trace_ready_) detail::log_line(std::string(call) + " called from on_trace_ready; ignored");
  return in_on_trace_ready_;
}

void profile::enable_cuda() {
  tracer_->set_stacks(options_.with_stack);
  detail::cupti::pm_sampling_request metrics;
  if (options_.gpu_metrics) {
    for (const std::string& name : options_.gpu_metrics->metrics) metrics.metrics.push_back(detail::named_gpu_metric(name));
    metrics.interval_ns = std::uint64_t(std::max(1.0, options_.gpu_metrics->interval_us) * 1000.0 + 0.5);
  }
  const std::string why = tracer_->enable(options_.profile_memory, options_.gpu_metrics ? &metrics : nullptr);
  if (why.empty()) return;
  cuda_status_ = why;
  tracer_ = nullptr;
  detail::log_line("CUDA tracing is off: " + why + "; " + what_is_recorded_without_cuda());
}

std::string profile::what_is_recorded_without_cuda() const {
  return cpu() ? "recording the CPU side only" : "nothing is recorded (CPU activity was not asked for)";
}

void profile::open_step_scope() {
  if (!marks_steps() || !cpu() || !detail::records(action_)) return;
  detail::thread_buffer* b = detail::current_thread_buffer();
  step_scope_open_ =
      b && b->push({detail::make_head(detail::slot_kind::enter_step, detail::now_ticks()), std::uint64_t(step_num_)});
}

std::uint64_t profile::close_step_scope() {
  const std::uint64_t now = detail::now_ticks();
  if (step_scope_open_) {
    if (detail::thread_buffer* b = detail::current_thread_buffer()) b->push({detail::make_head(detail::slot_kind::exit, now), 0});
    step_scope_open_ = false;
  }
  return now;
}

void profile::transition(profiler_action from, profiler_action to, std::uint64_t now) {
  const bool recording_stops = detail::records(from) && !detail::records(to);
  if (recording_stops) detail::process().cpu_recording.store(false, std::memory_order_relaxed);
  if (detail::closes_window(from, to)) end_window(now);
  if (recording_stops) detail::discard_cpu_spans(detail::now_ticks());  // written after `now`: no window takes it
  if (!detail::records(from) && detail::records(to)) {
    detail::discard_cpu_spans(now);
    if (cpu()) detail::process().cpu_recording.store(true, std::memory_order_relaxed);
    if (tracer_) enable_cuda();  // already during warmup: CUPTI's start-up cost stays out of the window
  }
  if (detail::opens_window(from, to)) {
    if (from == profiler_action::warmup) detail::discard_cpu_spans(now);
    detail::profile_records r{tracer_};
    engine_.open_at(r, now);
  }
  if (!detail::records(to) && !engine_.waiting() && tracer_) tracer_->disable();
}

void profile::restart_window_at(std::uint64_t ticks) {
  if (!running_ || options_.schedule || !detail::is_active(action_) || ticks <= engine_.start()) return;
  detail::discard_cpu_spans(ticks);
  detail::profile_records r{tracer_};
  engine_.move_start(r, ticks);
}

void profile::keep_slow_steps(std::uint64_t now) {
  const detail::tick_converter clock(detail::clock_anchor(), detail::sample_clocks());
  const std::uint64_t started_ns = clock.to_epoch_ns(slow_->running_start()), ended_ns = clock.to_epoch_ns(now);
  const detail::slow_step_action a = slow_->step_ended(now, ended_ns > started_ns ? ended_ns - started_ns : 0, held_bytes());
  ++step_num_;
  if (a.shrunk_to) detail::log_line(slow_->shrunk_line(a.shrunk_to));
  slow_windows windows{*this};
  detail::follow_slow_step(a, now, windows);
}

void profile::slow_step_at(std::uint64_t ticks, bool first) {
  if (!running_ || !slow_) return;
  if (first) {
    restart_window_at(ticks);
    slow_.emplace(*options_.slow_steps, ticks);
    return;
  }
  keep_slow_steps(ticks);
  finalize_pending();
}

std::size_t profile::held_bytes() {
  std::size_t bytes = detail::global_chunk_pool().in_use_slots() * sizeof(detail::slot);
  if (tracer_)
    bytes += sizeof(detail::cupti::staged_call) * tracer_->with_store([](detail::cupti::record_store& s) { return s.staged(); });
  return bytes;
}

void profile::end_window(std::uint64_t now) {
  detail::closed_window& w = engine_.close_at(now, detail::tick_converter(detail::clock_anchor(), detail::sample_clocks()),
                                              detail::monotonic_ns() + give_up_after_ns);
  trace& t = *w.collected;
  detail::collect_cpu_spans(t, w.clock, w.start_ticks, w.end_ticks);
  t.meta.window_start_ns = w.clock.to_epoch_ns(w.start_ticks);
  t.meta.window_end_ns = w.clock.to_epoch_ns(w.end_ticks);
  detail::fill_process_info(t.meta);
  detail::cupti::fill_distributed_info(t.meta, false);  // the tracer's metadata adds what NCCL's NVTX showed
  t.meta.cuda_runtime_version = CUDA_VERSION;           // the toolkit cuprof was compiled with
  t.meta.cuda_status = has(options_.activities, activity::cuda) ? cuda_status_ : "not requested";
  t.meta.memory_recorded = options_.profile_memory && tracer_;
}

void profile::finalize_ready(bool at_stop) {
  detail::profile_records records{tracer_};
  engine_.hand_over(records, at_stop, detail::monotonic_ns(), [&](detail::closed_window& w) {
    if (tracer_) {
      // No window records after this one: tracing stops before the trace is built, not after.
      if (!detail::records(action_) && !engine_.waiting()) tracer_->disable();
      tracer_->fill_metadata(w.collected->meta);
      if (options_.gpu_metrics) {
        // The window's GPU work runs after its launches, past the window's end
        // on the CPU: its samples go as far as that work, and as far again as
        // their clock may be off the kernels' (align_gpu_metrics).
        std::uint64_t to = w.clock.to_epoch_ns(w.end_ticks);
        for (const gpu_activity& g : w.collected->gpu) to = std::max(to, g.end_ns);
        const std::uint64_t from = w.clock.to_epoch_ns(w.start_ticks);
        tracer_->take_metrics(*w.collected, from - std::min(from, detail::max_metric_shift_ns), to + detail::max_metric_shift_ns,
                              w.clock);
        detail::align_gpu_metrics(*w.collected, from, to);
      }
    }
    attribute(*w.collected);
    name_api_threads(*w.collected);
    last_ = std::move(w.collected);
    report_drops(*last_);
    if (options_.on_trace_ready) {
      in_on_trace_ready_ = true;
      struct leave_handler {
        bool& in_handler;
        ~leave_handler() { in_handler = false; }
      } leave{in_on_trace_ready_};
      options_.on_trace_ready(*this);
    }
    detail::return_free_memory();
  });
  // A window still waiting for its GPU work keeps CUPTI on: its kernels'
  // records and its GPU metrics' samples are still to come.
  if (!detail::records(action_) && !engine_.waiting() && tracer_) tracer_->disable();
}

void profile::name_api_threads(trace& t) {
  std::set<std::uint32_t> named;
  for (const thread_info& th : t.meta.threads) named.insert(th.tid);
  for (const api_call& c : t.api_calls)
    if (named.insert(c.tid).second) t.meta.threads.push_back({c.tid, detail::thread_name_of_tid(c.tid)});
}

void profile::report_drops(const trace& t) {
  const trace_metadata& m = t.meta;
  const std::string unpaired = window_losses(m.edges);
  if (m.dropped_gpu_records || m.dropped_cpu_events)
    detail::log_line("this window lost " + std::to_string(m.dropped_gpu_records) + " GPU records" +
                     (m.dropped_gpu_detail.empty() ? "" : " (" + m.dropped_gpu_detail + ")") + " and " +
                     std::to_string(m.dropped_cpu_events) + " CPU events" + (unpaired.empty() ? "" : "; " + unpaired) +
                     " (counts are in the trace metadata)");
  else if (!unpaired.empty())
    detail::log_line("this window is incomplete: " + unpaired + " (counts are in the trace's cuprof.window_edges)");
}

}  // namespace cuprof
