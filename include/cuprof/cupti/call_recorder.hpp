// CUDA API calls recorded through CUPTI's callback API rather than its
// RUNTIME and DRIVER activity kinds.
//
// Why: with either activity kind enabled, CUPTI intercepts every call of its
// domain, also those whose records cuprof switched off (cudaGetDevice,
// cudaGetLastError, ...). PyTorch makes several such calls per kernel, and
// on its training loop those records cost 4-5 us per kernel (docs/performance.md).
// A callback enabled per callback id is paid only by the calls cuprof shows.
//
// Each call becomes one two-slot record in its thread's buffer (the chunks of
// scope recording, collect/thread_buffer.hpp: single producer, no lock, a chunk from
// the pool every 4096 calls); the tracer drains them into the record_store.
//
// Synchronizations are recorded here too, instead of by CUPTI's SYNCHRONIZATION
// activity, which makes CUPTI intercept every runtime call (the getters
// included) at a few hundred ns each: a synchronization call's record gets a
// third slot with its context and the stream it waited on.
#pragma once

#include "record_store.hpp"
#include "../collect/clock.hpp"
#include "../collect/chunk_pool.hpp"

#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

namespace cuprof::detail::cupti {

// One per process, the tracer's: each thread keeps its buffer in a
// thread_local, which a second recorder would share.
class call_recorder {
 public:
  call_recorder() : pool_(global_chunk_pool()) {}

  // Calls entered before this tick are not recorded: a call already running
  // when recording began has no start stamped by cuprof.
  void start_recording(std::uint64_t ticks) noexcept { recording_since_.store(ticks, std::memory_order_relaxed); }

  // Before the first callback: which callback ids synchronize (kind as
  // synchronization_kind() gives it), and which of them are the per-thread
  // default stream variants (_ptsz), whose null stream is the thread's own.
  void set_synchronization(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, std::uint8_t kind, bool per_thread) noexcept {
    std::uint8_t* table = domain == CUPTI_CB_DOMAIN_DRIVER_API ? driver_sync_ : runtime_sync_;
    const std::size_t size = domain == CUPTI_CB_DOMAIN_DRIVER_API ? sizeof driver_sync_ : sizeof runtime_sync_;
    if (cbid < size) table[cbid] = std::uint8_t(kind | (per_thread ? per_thread_flag : 0));
  }
  // cuptiGetStreamIdEx, or a stand-in (tests): a stream handle to the id its records carry.
  using stream_id_lookup = CUptiResult (*)(CUcontext, CUstream, std::uint8_t per_thread, std::uint32_t* id);
  void set_stream_id_lookup(stream_id_lookup lookup) noexcept { stream_id_ = lookup; }

  // The hot path: CUPTI's callback at a shown call's entry and exit. Stamps
  // the entry in CUPTI's per-call slot; at the exit, appends the call.
  void on_call(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData& call) noexcept {
    const bool driver = domain == CUPTI_CB_DOMAIN_DRIVER_API;
    const std::uint8_t sync = sync_entry(driver, cbid);
    if (call.callbackSite == CUPTI_API_ENTER) {
      if (sync && !driver) t_inside_runtime_sync = true;
      *call.correlationData = now_ticks();
      return;
    }
    const std::uint64_t start = *call.correlationData;
    const std::uint64_t end = now_ticks();
    // The driver call a runtime synchronization makes is the same wait: one
    // record of it. Consumed here, so a runtime exit this recorder missed (the
    // window closed mid-call) costs at most one later driver sync its record.
    bool sync_record = sync != 0;
    if (sync && (!driver || t_inside_runtime_sync)) {
      sync_record = !driver;
      t_inside_runtime_sync = false;
    }
    if (start < recording_since_.load(std::memory_order_relaxed) || start > end) return;
    thread_buffer* calls = thread_calls();
    if (!calls) return;
    std::int32_t result = 0;  // a cudaError_t or a CUresult: both int-sized enums
    if (call.functionReturnValue) std::memcpy(&result, call.functionReturnValue, sizeof result);
    if (result != 0) sync_record = false;  // a failed synchronization waited for nothing
    slot record[sync_record_slots] = {
        {end, start},
        {std::uint64_t(call.correlationId) | std::uint64_t(std::uint32_t(result)) << 32,
         std::uint64_t(cbid) | std::uint64_t(driver) << driver_bit | std::uint64_t(sync_record) << sync_bit},
        {}};
    if (sync_record)
      record[2] = {std::uint64_t(call.contextUid) | std::uint64_t(waited_stream(sync, call)) << 32,
                   std::uint64_t(sync & kind_mask)};
    calls->push_record(record, sync_record ? sync_record_slots : record_slots);
  }

  // Moves every call recorded so far into `store`; calls lost for want of
  // memory are counted there.
  void drain_into(record_store& store) {
    live_callers_.clear();
    threads_.for_each([&](thread_buffer& b) {
      if (!b.exited()) live_callers_.push_back(b.tid());
      b.drain([&](const slot* s, std::size_t n) {
        std::size_t i = 0;
        while (i + record_slots <= n) {
          call_record r;
          r.start = s[i].payload;
          r.end = s[i].head;
          r.tid = b.tid();
          r.cbid = std::uint32_t(s[i + 1].payload);
          r.correlation = std::uint32_t(s[i + 1].head);
          r.return_value = std::int32_t(std::uint32_t(s[i + 1].head >> 32));
          r.domain = (s[i + 1].payload >> driver_bit) & 1 ? api_domain::driver : api_domain::runtime;
          if ((s[i + 1].payload >> sync_bit) & 1) {
            r.context = std::uint32_t(s[i + 2].head);
            r.stream = std::uint32_t(s[i + 2].head >> 32);
            r.sync_kind = std::uint8_t(s[i + 2].payload);
            i += sync_record_slots;
          } else {
            i += record_slots;
          }
          store.add_call(r);
        }
        return i;
      });
      store.add_dropped_calls(b.take_dropped());
    });
  }

  // Whether a thread other than `tid` has made a recorded call and was still
  // alive at the last drain_into.
  bool other_live_caller(std::uint32_t tid) const noexcept {
    for (std::uint32_t t : live_callers_)
      if (t != tid) return true;
    return false;
  }

 private:
  // {end, start}, {correlation | result << 32, cbid | driver << 32 | sync << 33},
  // and for a synchronization {context | stream << 32, kind}.
  static constexpr std::size_t record_slots = 2;
  static constexpr std::size_t sync_record_slots = 3;
  static constexpr int driver_bit = 32;
  static constexpr int sync_bit = 33;
  static constexpr std::uint8_t kind_mask = 0x7;
  static constexpr std::uint8_t per_thread_flag = 0x8;

  std::uint8_t sync_entry(bool driver, CUpti_CallbackId cbid) const noexcept {
    if (driver) return cbid < sizeof driver_sync_ ? driver_sync_[cbid] : 0;
    return cbid < sizeof runtime_sync_ ? runtime_sync_[cbid] : 0;
  }

  // The stream a stream sync or a stream's wait names (the first parameter of
  // cudaStreamSynchronize, cudaStreamWaitEvent, cuStreamSynchronize and
  // cuStreamWaitEvent; tests check the runtime params' layout), as its
  // records number it; 0 for the other kinds, or when CUPTI cannot tell.
  std::uint32_t waited_stream(std::uint8_t sync, const CUpti_CallbackData& call) const noexcept {
    const std::uint8_t kind = sync & kind_mask;
    if ((kind != CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT &&
         kind != CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE) ||
        !stream_id_ || !call.functionParams)
      return 0;
    CUstream stream = nullptr;
    std::memcpy(&stream, call.functionParams, sizeof stream);
    // The handles CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2) name the default streams.
    bool per_thread = (sync & per_thread_flag) != 0;
    if (stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) {
      per_thread = stream == CU_STREAM_PER_THREAD;
      stream = nullptr;
    }
    std::uint32_t id = 0;
    return stream_id_(nullptr, stream, per_thread, &id) == CUPTI_SUCCESS ? id : 0;
  }

  // The calling thread's buffer, registered at its first call. A thread whose
  // buffer was given back (it is exiting) records no more.
  thread_buffer* thread_calls() noexcept {
    thread_buffer* b = t_calls;
    if (CUPROF_LIKELY(b != nullptr) || t_calls_given_back) return b;
    thread_local buffer_release release;
    (void)release;
    return t_calls = threads_.add(pool_, current_tid(), pthread_self());
  }

  // Marks the thread's buffer exited when the thread ends: the next drain
  // frees it once its calls are read.
  struct buffer_release {
    ~buffer_release() {
      t_calls_given_back = true;
      if (thread_buffer* b = t_calls) b->mark_exited();
      t_calls = nullptr;
    }
  };

  static inline thread_local thread_buffer* t_calls = nullptr;
  static inline thread_local bool t_calls_given_back = false;
  static inline thread_local bool t_inside_runtime_sync = false;

  std::uint8_t runtime_sync_[CUPTI_RUNTIME_TRACE_CBID_SIZE] = {};
  std::uint8_t driver_sync_[CUPTI_DRIVER_TRACE_CBID_SIZE] = {};
  stream_id_lookup stream_id_ = nullptr;

  chunk_pool& pool_;
  thread_registry threads_;
  std::vector<std::uint32_t> live_callers_;  // as of the last drain_into
  std::atomic<std::uint64_t> recording_since_{~std::uint64_t(0)};
};

}  // namespace cuprof::detail::cupti
