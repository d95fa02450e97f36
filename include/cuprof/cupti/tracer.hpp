// The CUPTI session: one per process, opened on first use. CUPTI is released
// when a profile stops (see detach) and attached again at the next start.
//
// Process exit: CUDA tears itself down from atexit handlers and static
// destructors (cudart's, cuBLAS's embedded cudart, libcupti's own statics),
// and any CUPTI call after that can crash. atexit handlers run last-in,
// first-out, so cuprof re-registers its exit gate after each of those can
// have registered theirs: when CUPTI is attached (libcupti is loaded and
// initialised by then), at every context creation (the runtime initialised
// itself just before) and at module loads (libraries initialise lazily, at
// their first kernel). The gate, run before any of them, writes the
// environment's trace, syncs, force-flushes and then closes the tracer: no
// CUPTI or driver call is made after it. A context destroyed earlier by the
// program (cudaDeviceReset, cuCtxDestroy) is flushed at the call's entry.
//
// Buffers (activity_buffers.hpp): CUPTI asks for them on application threads
// and hands them back on its own thread, without a lock; a worker thread, or
// the caller of flush(), parses them into the record_store.
#pragma once

#include "activity_buffers.hpp"
#include "call_recorder.hpp"
#include "nvtx_recorder.hpp"
#include "pm_sampler.hpp"
#include "libraries.hpp"
#include "record_store.hpp"
#include "../base/chunked_vector.hpp"
#include "../collect/clock.hpp"
#include "../base/crash_guard.hpp"
#include "../base/env.hpp"
#include "../base/log.hpp"
#include "../base/threads.hpp"
#include "../model/event.hpp"

#include <pthread.h>
#include <semaphore.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

namespace cuprof::detail::cupti {

inline std::uint64_t CUPTIAPI timestamp_callback() { return now_ticks(); }

class tracer {
 public:
  static constexpr long flush_period_ms = 100;  // full buffers reach the store at least this often

  // The process's tracer, or nullptr with `why` set when CUDA cannot be traced
  // here. One per process (one CUPTI subscriber), whichever copy of cuprof
  // opens it: kept in the process state, not in this copy's statics (two
  // copies' std::call_once over identically named lambdas run one copy's body).
  static tracer* instance(std::string& why) {
    process_state& p = process();
    once_per_process(p.tracer_state, [&p] {
      auto* t = new tracer;
      const std::string failure = t->open();
      if (failure.empty()) {
        p.tracer.store(t, std::memory_order_release);
        return;
      }
      delete t;
      const std::size_t n = std::min(failure.size(), sizeof p.tracer_failure - 1);
      std::memcpy(p.tracer_failure, failure.data(), n);
      p.tracer_failure[n] = '\0';
    });
    why = p.tracer_failure;
    return static_cast<tracer*>(p.tracer.load(std::memory_order_acquire));
  }

  // with_stack, for the windows enabled from now on: launches, copies,
  // memsets, syncs, allocations and frees capture their native call stack.
  void set_stacks(bool on) {
    std::lock_guard<std::mutex> lock(control_);
    stacks_on_ = on;
  }

  // Empty on success, else why CUPTI could not be attached again.
  // `memory`: allocations and frees are recorded too, from now until the
  // session ends (detach()), between windows as well, so that a window's
  // totals of memory in use count what was allocated before it.
  // `metrics`: GPU hardware metrics are sampled while enabled; a GPU that
  // cannot be sampled leaves tracing as it is, and says why once.
  std::string enable(bool memory = false, const pm_sampling_request* metrics = nullptr) {
    std::lock_guard<std::mutex> lock(control_);
    if (closed_) return "the process is exiting";
    if (enabled_ || forked_child()) return {};
    if (!attached_) {
      const std::string why = attach();
      if (!why.empty()) return why;
    }
    for (CUpti_ActivityKind kind : kinds()) cupti_.enable(kind);
    if (memory && !memory_on_) {
      for (CUpti_ActivityKind kind : memory_kinds()) cupti_.enable(kind);
      memory_on_ = true;
    }
    if (metrics) {
      const std::string why = pm_.open(driver_, *metrics);
      if (why.empty()) pm_.resume();
      else if (!said_metrics_off_) log_line("GPU metrics are off: " + why), said_metrics_off_ = true;
    }
    // The call callbacks, once on, stay on until detach(): turned off and on
    // again while other threads were inside calls, they lost whole threads'
    // calls (and so their kernels) in every later window. Between windows
    // on_callback() ignores them.
    if (!shown_calls_on_) record_shown_calls();
    calls_.set_stacks(stacks_on_);  // before anything records: the flag below publishes it
    calls_.start_recording(now_ticks());
    nvtx_.start_recording(now_ticks());
    enabled_ = true;
    enabled_flag_.store(true, std::memory_order_release);
    return {};
  }

  // Attaches CUPTI without recording anything: a session that waits for a
  // window of the program's choosing (a capture range, a trigger) hears the
  // calls that open one. Empty on success, else why CUPTI could not attach.
  std::string arm() {
    std::lock_guard<std::mutex> lock(control_);
    if (closed_) return "the process is exiting";
    if (attached_ || forked_child()) return {};
    return attach();
  }

  // Releases CUPTI once a session is over: with activities merely disabled,
  // CUPTI stays hooked into every CUDA call and slows the program down after
  // profiling. The next enable() attaches again. Skipped during process exit,
  // where a finalize can race CUPTI's own teardown.
  //
  // cuptiFinalize races other threads' CUDA calls inside libcupti: with
  // threads launching throughout, it corrupted the heap about once in 50
  // stops, and CUPTI alone, without cuprof, does the same. A profiler must
  // not crash the program it measures, so CUPTI is finalized only when no
  // other live thread has made a CUDA call cuprof records; otherwise it is
  // unsubscribed with every activity off: nothing more is recorded, and the
  // next session subscribes again, but CUPTI stays in each CUDA call's path,
  // which makes calls somewhat dearer until the process ends (said once).
  void detach() {
    std::lock_guard<std::mutex> lock(control_);
    if (enabled_ || !attached_ || forked_child() || exit_started_) return;
    // Records made after the session's last flush (CUPTI's own overhead
    // record for that flush, at least) would still be in CUPTI's buffers at
    // finalize, where they are dropped or handed to the next session: drain them.
    if (memory_on_) {
      for (CUpti_ActivityKind kind : memory_kinds()) cupti_.disable(kind);
      memory_on_ = false;
    }
    cupti_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    process_completed();
    const bool finalize = !calls_.other_live_caller(current_tid());
    // Finalizing with the call callbacks switched off corrupted the heap of a
    // PyTorch process now and then (H200, CUDA 13.0: 8 of 28 processes, none
    // with them left on): they go back on first, and on_callback() ignores
    // them while nothing records.
    if (finalize && !shown_calls_on_ && !shown_calls_.empty()) record_shown_calls();
    cupti_.unsubscribe(subscriber_);
    if (finalize) {
      cupti_.finalize();
    } else {
      // Buffers CUPTI still holds would be handed to whichever tool subscribes next.
      const std::size_t held = buffers_.with_cupti_now();
      if (!said_not_finalized_ || held)
        log_line(
            "other threads were making CUDA calls when the profile stopped: CUPTI is left loaded (not finalized, "
            "which could crash them), so CUDA calls may stay slightly dearer until the program ends" +
            (held ? "; CUPTI still holds " + std::to_string(held) + " of cuprof's activity buffers" : std::string()));
      said_not_finalized_ = true;
    }
    finalized_ = finalize;
    attached_ = false;
    shown_calls_on_ = false;  // a later attach() subscribes afresh
  }

  // How the last session let CUPTI go: finalized, or only unsubscribed (detach()).
  bool finalized_at_last_detach() const noexcept { return finalized_; }

  // Nothing records until the next enable(): the activities go off, the call
  // callbacks stay on and are ignored (see enable()).
  void disable() {
    std::lock_guard<std::mutex> lock(control_);
    if (!enabled_ || forked_child()) return;
    if (!closed_)
      at_exit_guarded("disabling CUPTI", [this] {
        for (CUpti_ActivityKind kind : kinds()) cupti_.disable(kind);
        pm_.pause();
      });
    enabled_ = false;
    enabled_flag_.store(false, std::memory_order_release);
  }

  // Gives back the idle buffers but a few: after a session, so a stopped
  // profiler holds almost no memory, and before a window's trace is built,
  // so that the buffers of a burst and its trace are not both resident.
  void trim_buffers() {
    if (exit_started_) return;  // nothing to give back to a process that ends
    buffers_.trim();
  }

  // Hands every finished buffer to the store. `forced` also delivers records
  // still in flight (CUPTI never delivers those again): only after a device sync.
  void flush(bool forced) {
    std::lock_guard<std::mutex> lock(control_);
    if (forked_child() || !attached_) return;
    if (!closed_) at_exit_guarded("flushing CUPTI", [&] { cupti_.flush_all(forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0); });
    process_completed();
  }

  // Waits for the GPU work of every device this process has a context on.
  void sync_devices() {
    if (forked_child() || closed_) return;
    at_exit_guarded("waiting for the GPU", [this] { driver_.sync_active_devices(); });
  }

  // The exit gate (see the top of this file). Registered with atexit many
  // times; only the first call, the last registered, does anything.
  static void exit_gate() {
    tracer* t = self();
    if (!t || t->exit_started_.exchange(true)) return;
    if (void (*hook)() = process().before_exit.load()) hook();  // the environment's profile writes its trace, while CUDA is alive
    t->close_for_exit();
  }

  // GPU buffers CUPTI still held when a call into it failed at exit; 0 otherwise.
  std::size_t buffers_lost_at_exit() const noexcept { return buffers_lost_at_exit_; }

  // The store is shared with the worker thread: use it through this.
  template <class Fn>
  auto with_store(Fn&& fn) {
    std::lock_guard<std::mutex> lock(store_mutex_);
    return fn(store_);
  }

  void fill_metadata(trace_metadata& meta) {
    if (devices_.empty() && !closed_) devices_ = driver_.read_devices();
    meta.cupti_version = int(cupti_version_);
    meta.cuda_driver_version = driver_version_;
    meta.devices = devices_;
    fill_distributed_info(meta, nvtx_.nccl_seen());
    // distributedInfo as Kineto writes it: the communicators NCCL created
    // ("pg_count"), and, where no launcher's variable gave them, the rank and
    // size of the largest (the job's world, as a rule).
    meta.communicator_count = nvtx_.communicator_count();
    std::int32_t size = 0, rank = -1;
    if (meta.world_size <= 1 && nvtx_.largest_communicator(size, rank) && size > 1 && rank >= 0)
      meta.world_size = size, meta.rank = rank;
  }

  // The GPU metrics sampled in [from_ns, to_ns] (epoch ns) go to `t`; the
  // GPUs that could not be sampled are said once each.
  void take_metrics(trace& t, std::uint64_t from_ns, std::uint64_t to_ns, const tick_converter& clock) {
    pm_.take(t.gpu_metrics, from_ns, to_ns, clock);
    for (const std::string& line : pm_.refusals()) log_line(line);
  }

  // NCCL calls whose payload cuprof could not read (nvtx_recorder.hpp).
  std::uint64_t undecoded_nccl_payloads() const noexcept { return nvtx_.undecoded(); }

  // "NVIDIA H200 (GPU 0), CUPTI 130001, driver 13000"
  std::string describe() {
    if (devices_.empty() && !process().inside_cuda_init.load() && !closed_) devices_ = driver_.read_devices();
    std::string s;
    for (const device_info& d : devices_) s += d.name + " (GPU " + std::to_string(d.id) + "), ";
    return s + "CUPTI " + std::to_string(cupti_version_) + ", driver " + std::to_string(driver_version_);
  }

 private:
  tracer() : store_([this](api_domain d, std::uint32_t cbid) { return callback_name(d, cbid); }, max_staged_records()) {}

  // CUPROF_MAX_RECORDS caps the GPU and API records held between windows;
  // past it records are dropped and counted in the trace metadata.
  static std::size_t max_staged_records() {
    return use_setting(
        read_record_cap("CUPROF_MAX_RECORDS", std::getenv("CUPROF_MAX_RECORDS"), record_store::default_max_staged));
  }

  // The API calls and synchronizations come through callbacks
  // (call_recorder.hpp), not activity records.
  static const std::vector<CUpti_ActivityKind>& kinds() {
    static const std::vector<CUpti_ActivityKind> k = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                                      CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_OVERHEAD,
                                                      CUPTI_ACTIVITY_KIND_MARKER};
    return k;
  }
  static const std::vector<CUpti_ActivityKind>& memory_kinds() {
    static const std::vector<CUpti_ActivityKind> k = {CUPTI_ACTIVITY_KIND_MEMORY2, CUPTI_ACTIVITY_KIND_MEMORY_POOL};
    return k;
  }

  std::string open() {
    std::string why = driver_.load(!process().inside_cuda_init.load());
    if (!why.empty()) return why;
    why = cupti_.load();
    if (!why.empty()) return why;
    if (cupti_.get_version(&cupti_version_) != CUPTI_SUCCESS) return "cuptiGetVersion failed";
    if (cupti_version_ < CUPTI_API_VERSION / 10000 * 10000)
      return "libcupti is version " + std::to_string(cupti_version_) + ", older than the headers cuprof was built with (" +
             std::to_string(CUPTI_API_VERSION) + ")";

    self() = this;  // CUPTI's callbacks may come from inside attach()
    const std::string why_not = attach();
    if (!why_not.empty()) {
      self() = nullptr;
      return why_not;
    }

    // NVTX hands its ranges to the library this names, read at the program's
    // first NVTX call: pointing it at CUPTI lets cuprof see ranges that code
    // pushes from now on (`cuprof run` sets it before the program starts).
    if (!std::getenv("NVTX_INJECTION64_PATH") && !cupti_.path.empty()) ::setenv("NVTX_INJECTION64_PATH", cupti_.path.c_str(), 0);
    driver_.driver_get_version(&driver_version_);
    if (!process().inside_cuda_init.load()) devices_ = driver_.read_devices();  // else at the first window, once CUDA is up
    sem_init(&work_ready_, 0, 0);
    std::string no_worker;
    if (!start_detached_thread(no_worker, &tracer::run_worker, this)) {  // no thread to spare: CUPTI let go
      detach();
      self() = nullptr;
      return no_worker;
    }
    pthread_atfork(nullptr, nullptr, &mark_forked_child);
    nvtx_recorder::serve(&nvtx_);
    return {};
  }

  // Subscribes and hands CUPTI cuprof's clock and buffers. Empty on success.
  std::string attach() {
    CUpti_SubscriberParams params{};
    char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN * 2] = {0};
    params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
    params.subscriberName = "cuprof";
    params.oldSubscriberName = holder;
    params.oldSubscriberSize = sizeof holder;
    const CUptiResult r = cupti_.subscribe(&subscriber_, &on_callback, nullptr, &params);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED || r == CUPTI_ERROR_MAX_LIMIT_REACHED)
      return std::string("another tool already holds CUPTI (") + (holder[0] ? holder : "it did not give its name") +
             "), e.g. Nsight, compute-sanitizer or torch.profiler";
    if (r != CUPTI_SUCCESS) return "CUPTI could not attach: " + result_string(cupti_.get_result_string, r);

    // Order matters: thread ids and the clock before any activity is enabled.
    cupti_.set_thread_id_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
    std::string why;
    if (cupti_.register_timestamp_callback(&timestamp_callback) != CUPTI_SUCCESS) {
      why = "CUPTI refused cuprof's clock callback";
    } else {
      const CUptiResult rc = cupti_.register_callbacks(&buffer_requested, &buffer_completed);
      if (rc != CUPTI_SUCCESS) why = "CUPTI refused the buffer callbacks: " + result_string(cupti_.get_result_string, rc);
      // Buffers come zeroed (activity_buffers::clear_for_reuse()): CUPTI need not zero each one
      // on the launching thread, and only the pages it writes take memory.
      std::uint8_t zeroed = 1;
      std::size_t size = sizeof zeroed;
      cupti_.set_attribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &size, &zeroed);
    }
    if (!why.empty()) {
      cupti_.unsubscribe(subscriber_);
      return why;
    }
    for (CUpti_CallbackId cbid : {CUPTI_CBID_RESOURCE_CONTEXT_CREATED, CUPTI_CBID_RESOURCE_MODULE_LOADED})
      cupti_.enable_callback(1, subscriber_, CUPTI_CB_DOMAIN_RESOURCE, cbid);
    for (const auto& [domain, cbid] : context_teardown_calls) cupti_.enable_callback(1, subscriber_, domain, cbid);
    for (const auto& [domain, cbid] : profiler_api_calls) cupti_.enable_callback(1, subscriber_, domain, cbid);
    // NVTX: NCCL's domain, strings and communicators are learnt whenever CUPTI
    // is attached, recording or not; calls are kept while a window records.
    for (CUpti_CallbackId cbid : nvtx_recorder::callbacks) cupti_.enable_callback(1, subscriber_, CUPTI_CB_DOMAIN_NVTX, cbid);
    // CUPTI counts a record or so dropped while the previous session released
    // it (cuptiFinalize), and reports it at the next read: that loss belongs
    // to no window (nothing was recording), so the count starts afresh here.
    std::size_t dropped_between_sessions = 0;
    cupti_.get_num_dropped_records(nullptr, 0, &dropped_between_sessions);
    attached_ = true;
    register_exit_gate();  // libcupti and the driver are initialised by now
    return {};
  }

  // Each registration puts the gate ahead of every exit handler registered
  // before it. Bounded: a program loading thousands of modules registers it
  // that many times at most.
  static void register_exit_gate() {
    static std::atomic<int> registrations{0};
    if (registrations.fetch_add(1, std::memory_order_relaxed) < max_gate_registrations) std::atexit(&exit_gate);
  }
  static constexpr int max_gate_registrations = 256;

  // Their callbacks stay on while CUPTI is attached, recording or not.
  static constexpr std::pair<CUpti_CallbackDomain, CUpti_CallbackId> context_teardown_calls[] = {
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaDeviceReset_v3020},
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuCtxDestroy_v2},
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxReset_v2}};
  static bool tears_down_context(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
    for (const auto& [d, id] : context_teardown_calls)
      if (d == domain && id == cbid) return true;
    return false;
  }

  // Their callbacks stay on while CUPTI is attached: the program's own capture
  // ranges (process_state::on_profiler_api). cudaProfilerStart calls
  // cuProfilerStart; a window already open or closed ignores the second.
  static constexpr std::pair<CUpti_CallbackDomain, CUpti_CallbackId> profiler_api_calls[] = {
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000},
      {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000},
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart},
      {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop}};
  // 1 a start, 0 a stop, -1 neither.
  static int profiler_api(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
      return cbid == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000  ? 1
             : cbid == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000 ? 0
                                                                       : -1;
    if (domain == CUPTI_CB_DOMAIN_DRIVER_API)
      return cbid == CUPTI_DRIVER_TRACE_CBID_cuProfilerStart ? 1 : cbid == CUPTI_DRIVER_TRACE_CBID_cuProfilerStop ? 0 : -1;
    return -1;
  }

  // Shown calls are recorded while a window is open (call_recorder.hpp);
  // context and module events re-register the exit gate; the calls that
  // destroy a context get its records out first (CUPTI would drop them).
  static void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
    tracer* t = self();
    if (!t || t->closed_.load(std::memory_order_relaxed) || forked_child()) return;
    if (domain == CUPTI_CB_DOMAIN_RESOURCE) return register_exit_gate();
    if (domain == CUPTI_CB_DOMAIN_NVTX)
      return t->nvtx_.on_nvtx(cbid, *static_cast<const CUpti_NvtxData*>(data), t->enabled_flag_.load(std::memory_order_relaxed));
    const auto& call = *static_cast<const CUpti_CallbackData*>(data);
    if (CUPROF_UNLIKELY(call.callbackSite == CUPTI_API_ENTER)) {
      const int start = profiler_api(domain, cbid);
      if (void (*hook)(bool) = start < 0 ? nullptr : process().on_profiler_api.load(std::memory_order_relaxed)) {
        // The call's entry is stamped before the hook, which may wait for the
        // window it opens: stamped after, the call would count as the
        // recording's first, and its correlation id (older than every call
        // other threads made meanwhile) would make their GPU work look as if
        // cuprof had missed their calls, not as launched before the window.
        if (t->enabled_flag_.load(std::memory_order_acquire)) t->calls_.on_call(domain, cbid, call);
        else *call.correlationData = 0;  // no entry stamped: its exit is no window's
        return hook(start == 1);
      }
    }
    if (!t->enabled_flag_.load(std::memory_order_acquire)) return;
    if (CUPROF_UNLIKELY(call.callbackSite == CUPTI_API_ENTER && tears_down_context(domain, cbid))) {
      t->driver_.ctx_synchronize();  // the context the call destroys is current
      t->cupti_.flush_all(0);
      t->process_completed();
    }
    t->calls_.on_call(domain, cbid, call);
  }

  // The gate's last step: everything the GPU did reaches the store, then the
  // tracer makes no further CUPTI or driver call. Profiles still running stop
  // later (static destructors) with what is in the store.
  void close_for_exit() {
    std::lock_guard<std::mutex> lock(control_);
    // Its threads make no CUPTI call from here on, while CUPTI may be tearing down. A forked child
    // has none of them, and the sampler's lock may have been held by one at the fork.
    if (!forked_child()) pm_.close();
    if (attached_ && enabled_ && !forked_child() && !closed_)
      at_exit_guarded("flushing CUPTI at exit", [this] {
        driver_.sync_active_devices();
        cupti_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
      });
    closed_ = true;
    nvtx_recorder::serve(nullptr);
    process_completed();
  }

  // Runs a CUPTI or driver call; once exit has started, under the crash guard:
  // if the library faults, the tracer closes and says what was lost, and the
  // program exits as it would have. Callers hold control_.
  template <class Fn>
  void at_exit_guarded(const char* what, Fn&& fn) {
    if (!exit_started_) return fn();
    int fault = 0;
    if (call_guarded(fn, &fault)) return;
    closed_ = true;
    buffers_lost_at_exit_ = buffers_.with_cupti_now();
    log_line(std::string("CUPTI failed while ") + what + " (signal " + std::to_string(fault) +
             "): the trace keeps the GPU records received so far; " + std::to_string(buffers_lost_at_exit_) +
             " buffers still held by CUPTI are lost");
  }

  // Only the calls cuprof shows get a callback: the others (cuBLAS makes
  // dozens of driver calls per GEMM, PyTorch several runtime getters per
  // kernel) then cost nothing. On from the first enable() to detach().
  void record_shown_calls() {
    if (shown_calls_.empty()) {
      shown_calls_ = calls_.learn_shown_calls([this](api_domain d, std::uint32_t cbid) { return callback_name(d, cbid); });
      calls_.set_stream_id_lookup(cupti_.get_stream_id_ex);
    }
    for (const auto& [domain, cbid] : shown_calls_) cupti_.enable_callback(true, subscriber_, domain, cbid);
    shown_calls_on_ = true;
  }

  std::string callback_name(api_domain domain, std::uint32_t cbid) const {
    const char* name = nullptr;
    const auto d = domain == api_domain::driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API;
    if (cupti_.get_callback_name(d, cbid, &name) != CUPTI_SUCCESS || !name) return {};
    return name;
  }

  static tracer*& self() {
    static tracer* t = nullptr;
    return t;
  }
  static void run_worker(tracer* t) { t->worker(); }
  static void mark_forked_child() { process().forked_child.store(true, std::memory_order_relaxed); }
  // A forked child has no CUPTI worker thread: a CUPTI call there can hang.
  static bool forked_child() { return process().forked_child.load(std::memory_order_relaxed); }

  static void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
    *max_records = 0;
    *buffer = self()->buffers_.request();
    *size = *buffer ? activity_buffers::buffer_bytes : 0;  // CUPTI drops the records it cannot place
  }

  static void CUPTIAPI buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t, std::size_t valid) {
    tracer* t = self();
    if (!buffer) return;
    t->buffers_.complete(buffer, valid);
    sem_post(&t->work_ready_);
  }

  void process_completed() {
    buffers_.take_completed([this](std::uint8_t* records, std::size_t valid) {
      std::size_t dropped = 0;
      cupti_.get_num_dropped_records(nullptr, 0, &dropped);
      if (dropped)
        log_line("CUPTI dropped " + std::to_string(dropped) + " records (" + std::to_string(buffers_.refused()) +
                 " buffer requests could not be met so far)");
      std::lock_guard<std::mutex> lock(store_mutex_);
      CUpti_Activity* record = nullptr;
      while (cupti_.get_next_record(records, valid, &record) == CUPTI_SUCCESS) store_.add(record);
      store_.add_dropped(dropped);
    });
    std::lock_guard<std::mutex> lock(store_mutex_);
    calls_.drain_into(store_);
    nvtx_.drain_into(store_);
  }

  // Parses completed buffers as they come; while tracing, also asks CUPTI for
  // full buffers every flush_period_ms, as CUPTI may otherwise hold many
  // until the next explicit flush.
  void worker() {
    std::uint64_t last_flush = monotonic_ns();
    for (;;) {
      timespec deadline;
      clock_gettime(CLOCK_REALTIME, &deadline);
      deadline.tv_nsec += flush_period_ms * 1000000L;
      if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec += 1;
        deadline.tv_nsec -= 1000000000L;
      }
      sem_timedwait(&work_ready_, &deadline);
      // Once the process exits, CUPTI may be tearing down: the exit path
      // processes the last buffers itself (stop() flushes on its thread).
      if (exit_started_) continue;
      std::unique_lock<std::mutex> lock(control_, std::try_to_lock);  // never while attaching or detaching
      if (!lock.owns_lock()) continue;
      if (enabled_ && !forked_child() && monotonic_ns() - last_flush >= std::uint64_t(flush_period_ms) * 1000000u) {
        cupti_.flush_all(0);
        last_flush = monotonic_ns();
      }
      if (attached_) process_completed();
    }
  }

  cupti_library cupti_;
  driver_library driver_;
  std::uint32_t cupti_version_ = 0;
  int driver_version_ = 0;
  std::vector<device_info> devices_;
  std::mutex control_;  // every CUPTI call but the buffer callbacks' is made under it
  CUpti_SubscriberHandle subscriber_ = nullptr;
  bool attached_ = false;
  bool enabled_ = false;
  bool memory_on_ = false;                 // allocations are recorded (enable(memory))
  std::atomic<bool> exit_started_{false};  // the exit gate ran: no detach, no trimming
  std::atomic<bool> closed_{false};        // no CUPTI or driver call any more
  std::size_t buffers_lost_at_exit_ = 0;
  std::atomic<bool> enabled_flag_{false};  // enabled_, for the worker thread and the callbacks
  std::vector<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>> shown_calls_;  // found once, at the first enable()
  bool shown_calls_on_ = false;                                                 // their callbacks enabled on this subscriber
  bool stacks_on_ = false;                                                      // set_stacks()
  bool finalized_ = false;                                                      // how detach() last let CUPTI go
  bool said_not_finalized_ = false;                                             // its line, once per process
  bool said_metrics_off_ = false;                                               // "GPU metrics are off", once per process
  pm_sampler pm_;
  activity_buffers buffers_;
  sem_t work_ready_;
  std::mutex store_mutex_;
  record_store store_;
  call_recorder calls_;
  nvtx_recorder nvtx_;
};

}  // namespace cuprof::detail::cupti
