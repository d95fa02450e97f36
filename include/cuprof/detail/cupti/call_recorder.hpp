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
// scope recording, scope_buffer.hpp: single producer, no lock, a chunk from
// the pool every 4096 calls); the tracer drains them into the record_store.
#pragma once

#include "records.hpp"
#include "../collect/clock.hpp"
#include "../collect/thread_buffer.hpp"

#include <cupti_callbacks.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace cuprof::detail::cupti {

// One per process, the tracer's: each thread keeps its buffer in a
// thread_local, which a second recorder would share.
class call_recorder {
 public:
  call_recorder() : pool_(global_chunk_pool()) {}

  // Calls entered before this tick are not recorded: a call already running
  // when recording began has no start stamped by cuprof.
  void start_recording(std::uint64_t ticks) noexcept { recording_since_.store(ticks, std::memory_order_relaxed); }

  // The hot path: CUPTI's callback at a shown call's entry and exit. Stamps
  // the entry in CUPTI's per-call slot; at the exit, appends the call.
  void on_call(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData& call) noexcept {
    if (call.callbackSite == CUPTI_API_ENTER) {
      *call.correlationData = now_ticks();
      return;
    }
    const std::uint64_t start = *call.correlationData;
    const std::uint64_t end = now_ticks();
    if (start < recording_since_.load(std::memory_order_relaxed) || start > end) return;
    thread_buffer* calls = thread_calls();
    if (!calls) return;
    std::int32_t result = 0;  // a cudaError_t or a CUresult: both int-sized enums
    if (call.functionReturnValue) std::memcpy(&result, call.functionReturnValue, sizeof result);
    const slot record[record_slots] = {
        {end, start},
        {std::uint64_t(call.correlationId) | std::uint64_t(std::uint32_t(result)) << 32,
         std::uint64_t(cbid) | std::uint64_t(domain == CUPTI_CB_DOMAIN_DRIVER_API) << 32}};
    calls->push_record(record, record_slots);
  }

  // Moves every call recorded so far into `store`; calls lost for want of
  // memory are counted there.
  void drain_into(record_store& store) {
    threads_.for_each([&](thread_buffer& b) {
      b.drain([&](const slot* s, std::size_t n) {
        for (std::size_t i = 0; i + record_slots <= n; i += record_slots) {
          call_record r;
          r.start = s[i].payload;
          r.end = s[i].head;
          r.tid = b.tid();
          r.cbid = std::uint32_t(s[i + 1].payload);
          r.correlation = std::uint32_t(s[i + 1].head);
          r.return_value = std::int32_t(std::uint32_t(s[i + 1].head >> 32));
          r.domain = (s[i + 1].payload >> 32) & 1 ? api_domain::driver : api_domain::runtime;
          store.add_call(r);
        }
        return n;
      });
      store.add_dropped_calls(b.take_dropped());
    });
  }

 private:
  static constexpr std::size_t record_slots = 2;  // {end, start}, {correlation | result << 32, cbid | driver << 32}

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

  chunk_pool& pool_;
  thread_registry threads_;
  std::atomic<std::uint64_t> recording_since_{~std::uint64_t(0)};
};

}  // namespace cuprof::detail::cupti
