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
//
// An event record (cudaEventRecord, cuEventRecord) gets a slot with the event's
// handle and the stream it records on, an event sync or a stream's wait on an
// event one with the event's handle: the store resolves which record a wait
// waited for when the window is taken (Kineto's wait_on_* args, for HTA).
//
// With stacks on (profile_options::with_stack), the calls that matter
// (launches, copies, memsets, syncs, allocations and frees) capture their
// native stack at their exit callback (collect/native_stack.hpp), the one the
// record is written from: a call that is not recorded costs no unwinding, and
// nothing is carried from entry to exit. The stack is the same at both. A
// stack new to its thread is published as its own record ahead of the call;
// the call carries its id in spare bits of its second slot.
#pragma once

#include "record_store.hpp"
#include "../collect/clock.hpp"
#include "../collect/chunk_pool.hpp"
#include "../collect/native_stack.hpp"

#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cuprof::detail::cupti {

// One per process, the tracer's: each thread keeps its buffer in a
// thread_local, which a second recorder would share.
class call_recorder {
 public:
  call_recorder() : pool_(global_chunk_pool()) {}

  // Calls entered before this tick are not recorded: a call already running
  // when recording began has no start stamped by cuprof.
  // Each recording numbers its threads' stacks afresh.
  void start_recording(std::uint64_t ticks) noexcept {
    stack_epoch_.fetch_add(1, std::memory_order_relaxed);
    recording_since_.store(ticks, std::memory_order_relaxed);
  }

  // Before the first callback: which callback ids synchronize (kind as
  // synchronization_kind() gives it), and which of them are the per-thread
  // default stream variants (_ptsz), whose null stream is the thread's own.
  void set_synchronization(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, std::uint8_t kind, bool per_thread) noexcept {
    if (std::atomic<std::uint8_t>* e = entry_of(domain, cbid))
      e->store(std::uint8_t((e->load(std::memory_order_relaxed) & ~sync_mask) | kind | (per_thread ? per_thread_flag : 0)),
               std::memory_order_relaxed);
  }
  // Before the first callback: a call that records an event (records_event():
  // the event its first parameter, the stream its second), and whether it is
  // a per-thread default stream variant (_ptsz).
  void set_event_record(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, bool on, bool per_thread) noexcept {
    if (std::atomic<std::uint8_t>* e = entry_of(domain, cbid))
      e->store(std::uint8_t((e->load(std::memory_order_relaxed) & ~event_record_mask) | (on ? event_record_flag : 0) |
                            (on && per_thread ? event_record_per_thread : 0)),
               std::memory_order_relaxed);
  }
  // Before the first callback: a call whose stack is captured when stacks are on.
  void set_stack_call(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) noexcept {
    if (std::atomic<std::uint8_t>* e = entry_of(domain, cbid)) e->fetch_or(stack_candidate, std::memory_order_relaxed);
  }
  // with_stack, while nothing records (tracer::enable()): the stack calls'
  // flag, the one bit the callback tests, so that stacks off cost nothing.
  void set_stacks(bool on) {
    if (on) unwind_ = stack_unwinder();
    for (auto* table : {runtime_calls_, driver_calls_})
      for (std::size_t i = 0; i < calls_per_domain; ++i) {
        const std::uint8_t e = table[i].load(std::memory_order_relaxed);
        if (e & stack_candidate) table[i].store(std::uint8_t(on ? e | stack_flag : e & ~stack_flag), std::memory_order_relaxed);
      }
  }
  // Before the first callback: the calls cuprof shows, found by CUPTI's
  // names (name_of(api_domain, cbid)), each set up as its name says
  // (synchronization, event record, stack); the caller enables their callbacks.
  template <class NameOf>
  std::vector<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>> learn_shown_calls(NameOf&& name_of) {
    std::vector<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>> shown;
    for (const auto& [domain, size] : {std::pair{CUPTI_CB_DOMAIN_DRIVER_API, std::uint32_t(CUPTI_DRIVER_TRACE_CBID_SIZE)},
                                       std::pair{CUPTI_CB_DOMAIN_RUNTIME_API, std::uint32_t(CUPTI_RUNTIME_TRACE_CBID_SIZE)}}) {
      const api_domain d = domain == CUPTI_CB_DOMAIN_DRIVER_API ? api_domain::driver : api_domain::runtime;
      for (std::uint32_t cbid = 1; cbid < size; ++cbid) {
        const std::string name = name_of(d, cbid);
        if (!classify_api(d, api_base_name(name)).display_name) continue;
        shown.emplace_back(domain, cbid);
        const bool per_thread = name.find("_ptsz") != std::string::npos;
        if (const std::uint8_t sync = synchronization_kind(name)) set_synchronization(domain, cbid, sync, per_thread);
        if (records_event(name)) set_event_record(domain, cbid, true, per_thread);
        if (draws_flow(name) || allocates_or_frees(name)) set_stack_call(domain, cbid);
      }
    }
    return shown;
  }
  // cuptiGetStreamIdEx, or a stand-in (tests): a stream handle to the id its records carry.
  using stream_id_lookup = CUptiResult (*)(CUcontext, CUstream, std::uint8_t per_thread, std::uint32_t* id);
  void set_stream_id_lookup(stream_id_lookup lookup) noexcept { stream_id_ = lookup; }

  // The hot path: CUPTI's callback at a shown call's entry and exit. Stamps
  // the entry in CUPTI's per-call slot; at the exit, appends the call.
  void on_call(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData& call) noexcept {
    const bool driver = domain == CUPTI_CB_DOMAIN_DRIVER_API;
    const std::uint8_t entry = call_entry(driver, cbid);
    const std::uint8_t sync = entry & sync_mask;
    if (call.callbackSite == CUPTI_API_ENTER) {
      if (sync && !driver) t_inside_runtime_sync = true;
      if ((entry & event_record_flag) && !driver) t_inside_runtime_event_record = true;
      if (CUPROF_UNLIKELY(entry & stack_flag) && !driver) t_inside_runtime_stack_call = true;
      // The outermost call publishes its start (thread_buffer::call_since):
      // the store takes a window only once every thread's calls that started
      // in it are drained. An outer call whose exit this recorder never heard (recording
      // stopped mid-call) left a start from before this recording.
      thread_buffer* calls = thread_calls();
      const bool outer = calls && (!t_outer_call || calls->call_since() < recording_since_.load(std::memory_order_relaxed));
      if (outer) {
        t_outer_call = call.correlationData;
        calls->call_entering();
      }
      // Read after `entering` is visible: a drain that did not see it read its clock before this.
      const std::uint64_t now = outer ? now_ticks_ordered() : now_ticks();
      *call.correlationData = now;
      if (outer) calls->call_started(now);
      return;
    }
    // Whatever happens to the record, the outer call is over once it is pushed (or not).
    struct leave_call {
      thread_buffer* calls;
      ~leave_call() {
        if (calls) calls->call_ended();
      }
    } leave{t_outer_call == call.correlationData ? calls_slot::current() : nullptr};
    if (leave.calls) t_outer_call = nullptr;
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
    // Likewise the event record of a runtime call's driver call: kept once, by the runtime call.
    bool event_record = (entry & event_record_flag) != 0;
    if (event_record && (!driver || t_inside_runtime_event_record)) {
      event_record = !driver;
      t_inside_runtime_event_record = false;
    }
    // The driver call a runtime call makes has the runtime call's stack: captured once, by the runtime call.
    bool stack = false;
    if (CUPROF_UNLIKELY(entry & stack_flag)) {
      stack = !driver || !t_inside_runtime_stack_call;
      if (!driver) t_inside_runtime_stack_call = false;
    }
    if (start < recording_since_.load(std::memory_order_relaxed) || start > end) return;
    thread_buffer* calls = thread_calls();
    if (!calls) return;
    const std::uint64_t stack_bits = CUPROF_UNLIKELY(stack) ? publish_stack(*calls) : 0;
    std::int32_t result = 0;  // a cudaError_t or a CUresult: both int-sized enums
    if (call.functionReturnValue) std::memcpy(&result, call.functionReturnValue, sizeof result);
    if (result != 0) sync_record = event_record = false;  // a failed synchronization waited for nothing
    const std::uint8_t kind = sync & kind_mask;
    const bool event_slot = event_record || (sync_record && (kind == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE ||
                                                             kind == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT));
    slot record[max_record_slots] = {
        {end, start},
        {std::uint64_t(call.correlationId) | std::uint64_t(std::uint32_t(result)) << 32,
         std::uint64_t(cbid) | std::uint64_t(event_slot) << event_bit | std::uint64_t(driver) << driver_bit |
             std::uint64_t(sync_record) << sync_bit | stack_bits},
        {},
        {}};
    std::size_t used = record_slots;
    if (sync_record)
      record[used++] = {std::uint64_t(call.contextUid) | std::uint64_t(waited_stream(sync, call)) << 32, std::uint64_t(kind)};
    if (CUPROF_UNLIKELY(event_slot)) record[used++] = event_record ? recorded_event(entry, call) : waited_event(kind, call);
    calls->push_record(record, used);
  }

  // Moves every call recorded so far into `store`; calls lost for want of
  // memory are counted there. Tells the store how far its calls are complete
  // (record_store::set_call_horizon): every call that started before the
  // drain is in it, but for the calls still in progress, whose starts it lists.
  void drain_into(record_store& store) {
    live_callers_.clear();
    const std::uint64_t drained_at = now_ticks_ordered();  // read before the threads: a call entered after it starts later
    std::uint64_t horizon = drained_at;
    const std::uint64_t since = recording_since_.load(std::memory_order_relaxed);
    store.note_recording(since);
    running_.clear();
    if (store.stacks().generation() != stacks_generation_) {  // the store forgot its stacks
      stack_ids_.clear();
      stacks_generation_ = store.stacks().generation();
    }
    threads_.for_each([&](thread_buffer& b) {
      const bool exited = b.exited();
      if (!exited) live_callers_.push_back(b.tid());
      // Read before the drain: what the thread pushed before publishing this is drained below.
      std::uint64_t in_call = exited ? 0 : b.call_since();
      // A thread stamping its call's start is done in a few instructions, unless it was preempted there.
      for (int spin = 0; in_call == thread_buffer::entering_call && spin < 64; ++spin) in_call = b.call_since();
      // The calls nested in the one in progress (the cuLaunchKernel inside a
      // cudaLaunchKernel) stay for the drain that reads their outer call: they
      // arrive together and fold into it. Taken alone, a nested call that
      // started after a window's end left its outer call in the window without
      // the GPU work it is linked to.
      std::uint64_t hold_from = ~std::uint64_t(0);
      if (in_call == thread_buffer::entering_call) {
        horizon = 0;                                  // its start is being stamped: known at the next drain
        hold_from = drained_at;                       // ... and later than that, as any call nested in it
      } else if (in_call != 0 && in_call >= since) {  // older: a call whose exit was never heard
        running_.push_back(in_call);
        hold_from = in_call;
      }
      std::vector<std::uint32_t>* ids = nullptr;  // the thread's stack ids -> the store's stacks
      b.drain([&](const slot* s, std::size_t n) {
        std::size_t i = 0;
        while (i < n) {
          if (s[i].head & stack_tag) {
            const std::size_t depth = std::size_t(s[i].head & ~stack_tag);
            const std::size_t used = 1 + (depth + 1) / 2;
            if (depth > max_stack_frames || i + used > n) break;  // published whole: cannot happen
            std::uint64_t frames[max_stack_frames + 1];
            std::memcpy(frames, s + i + 1, (used - 1) * sizeof(slot));
            const std::uint64_t id = s[i].payload;
            if (!ids) ids = &stack_ids_[b.serial()];
            if (id >= ids->size()) ids->resize(std::size_t(id) + 1, no_index);
            (*ids)[std::size_t(id)] = store.stacks().add(frames, depth);
            i += used;
            continue;
          }
          if (i + record_slots > n) break;
          const bool has_sync = (s[i + 1].payload >> sync_bit) & 1, has_event = (s[i + 1].payload >> event_bit) & 1;
          const std::size_t used = record_slots + has_sync + has_event;
          if (i + used > n) break;  // pushed whole: cannot happen
          if (s[i].payload >= hold_from) break;
          call_record r;
          r.start = s[i].payload;
          r.end = s[i].head;
          r.tid = b.tid();
          r.cbid = std::uint32_t(s[i + 1].payload) & cbid_mask;
          r.correlation = std::uint32_t(s[i + 1].head);
          r.return_value = std::int32_t(std::uint32_t(s[i + 1].head >> 32));
          r.domain = (s[i + 1].payload >> driver_bit) & 1 ? api_domain::driver : api_domain::runtime;
          if ((s[i + 1].payload >> stack_bit) & 1) {
            const std::uint64_t id = s[i + 1].payload >> stack_id_shift;
            if (!ids) ids = &stack_ids_[b.serial()];
            r.stack = id < ids->size() ? (*ids)[std::size_t(id)] : no_index;
          }
          if (has_sync) {
            r.context = std::uint32_t(s[i + 2].head);
            r.stream = std::uint32_t(s[i + 2].head >> 32);
            r.sync_kind = std::uint8_t(s[i + 2].payload);
          }
          if (has_event) {
            const slot& e = s[i + used - 1];
            r.event = e.head;
            r.records_event = !has_sync;
            if (!has_sync) r.stream = std::uint32_t(e.payload);
          }
          i += used;
          store.add_call(r);
        }
        return i;
      });
      store.add_dropped_calls(b.take_dropped());
      if (exited) stack_ids_.erase(b.serial());
    });
    store.set_call_horizon(horizon, running_);
  }

  // Whether a thread other than `tid` has made a recorded call and was still
  // alive at the last drain_into.
  bool other_live_caller(std::uint32_t tid) const noexcept {
    for (std::uint32_t t : live_callers_)
      if (t != tid) return true;
    return false;
  }

 private:
  // {end, start}, {correlation | result << 32, cbid | event << 31 | driver << 32
  // | sync << 33 | has stack << 34 | stack id << 35}, for a synchronization
  // {context | stream << 32, kind}, and with the event bit, last, {event
  // handle, stream id} for an event record or {event handle, 0} for an event
  // sync or a stream's wait on an event. A stack new to its thread goes before the
  // call: {stack_tag | depth, its id}, then its frames, two a slot. A call's
  // first slot holds its end in ticks, below 2^63 (a 3 GHz TSC for 97 years):
  // stack_tag tells the two apart.
  static constexpr std::size_t record_slots = 2;
  static constexpr std::size_t max_record_slots = 4;
  static constexpr int event_bit = 31;  // callback ids are below 2^16 (CUPTI's below 2^11)
  static constexpr std::uint32_t cbid_mask = (std::uint32_t(1) << event_bit) - 1;
  static constexpr int driver_bit = 32;
  static constexpr int sync_bit = 33;
  static constexpr int stack_bit = 34;
  static constexpr int stack_id_shift = 35;
  static constexpr std::uint64_t stack_tag = std::uint64_t(1) << 63;
  static constexpr std::uint32_t max_stack_id = (std::uint32_t(1) << 29) - 1;
  // A callback id's entry: its sync kind and per-thread flag, and its stack bits.
  static constexpr std::uint8_t kind_mask = 0x7;
  static constexpr std::uint8_t per_thread_flag = 0x8;
  static constexpr std::uint8_t sync_mask = kind_mask | per_thread_flag;
  static constexpr std::uint8_t stack_flag = 0x10;               // capture its stack now
  static constexpr std::uint8_t stack_candidate = 0x20;          // capture it when stacks are on
  static constexpr std::uint8_t event_record_flag = 0x40;        // records an event (records_event())
  static constexpr std::uint8_t event_record_per_thread = 0x80;  // ... and is a _ptsz variant
  static constexpr std::uint8_t event_record_mask = event_record_flag | event_record_per_thread;
  static constexpr std::size_t calls_per_domain = std::size_t(CUPTI_RUNTIME_TRACE_CBID_SIZE) >
                                                          std::size_t(CUPTI_DRIVER_TRACE_CBID_SIZE)
                                                      ? std::size_t(CUPTI_RUNTIME_TRACE_CBID_SIZE)
                                                      : std::size_t(CUPTI_DRIVER_TRACE_CBID_SIZE);

  // Relaxed loads of a byte: the same instruction as a plain load.
  std::uint8_t call_entry(bool driver, CUpti_CallbackId cbid) const noexcept {
    return cbid < calls_per_domain ? (driver ? driver_calls_ : runtime_calls_)[cbid].load(std::memory_order_relaxed) : 0;
  }
  std::atomic<std::uint8_t>* entry_of(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) noexcept {
    if (cbid >= calls_per_domain) return nullptr;
    return (domain == CUPTI_CB_DOMAIN_DRIVER_API ? driver_calls_ : runtime_calls_) + cbid;
  }

  // The calling thread's stack, published when new to the thread; the call's
  // stack bits, 0 when none could be kept. No lock; memory only for a new stack.
  CUPROF_NOINLINE std::uint64_t publish_stack(thread_buffer& calls) noexcept {
    std::uint64_t frames[max_stack_frames];
    const std::size_t n = capture_stack(unwind_, frames);
    if (n == 0) return 0;
    thread_stacks* table = t_stacks;
    if (!table && !(table = t_stacks = new (std::nothrow) thread_stacks)) return 0;
    const std::uint32_t epoch = stack_epoch_.load(std::memory_order_relaxed);
    if (table->epoch != epoch) {
      table->clear();
      table->epoch = epoch;
    }
    const std::uint64_t hash = stack_hash(frames, n);
    std::uint32_t id = table->find(hash, frames, n);
    if (id == thread_stacks::none) {
      id = table->count();
      if (id > max_stack_id) return 0;
      slot record[1 + (max_stack_frames + 1) / 2];
      const std::size_t used = 1 + (n + 1) / 2;
      record[0] = {stack_tag | n, id};
      record[used - 1] = {};
      std::memcpy(record + 1, frames, n * sizeof *frames);
      if (!calls.push_record(record, used)) return 0;
      // Published but not kept (no memory): the id is published again with the next new stack.
      table->add(hash, frames, n);
    }
    return std::uint64_t(1) << stack_bit | std::uint64_t(id) << stack_id_shift;
  }

  // The stream a stream sync or a stream's wait names (the first parameter of
  // cudaStreamSynchronize, cudaStreamWaitEvent, cuStreamSynchronize and
  // cuStreamWaitEvent; tests check the runtime params' layout), as its
  // records number it; 0 for the other kinds, or when CUPTI cannot tell.
  std::uint32_t waited_stream(std::uint8_t sync, const CUpti_CallbackData& call) const noexcept {
    const std::uint8_t kind = sync & kind_mask;
    if ((kind != CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT &&
         kind != CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE) ||
        !call.functionParams)
      return 0;
    return stream_id(param<CUstream>(call, 0), (sync & per_thread_flag) != 0);
  }

  // A stream handle as its records number it; 0 when CUPTI cannot tell.
  std::uint32_t stream_id(CUstream stream, bool per_thread) const noexcept {
    if (!stream_id_) return 0;
    // The handles CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2) name the default streams.
    if (stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) {
      per_thread = stream == CU_STREAM_PER_THREAD;
      stream = nullptr;
    }
    std::uint32_t id = 0;
    return stream_id_(nullptr, stream, per_thread, &id) == CUPTI_SUCCESS ? id : 0;
  }

  // The call's parameter at index `i`, each pointer-sized (the calls below
  // take handles first; tests check the runtime params' layout).
  template <class T>
  static T param(const CUpti_CallbackData& call, std::size_t i) noexcept {
    T v{};
    std::memcpy(&v, static_cast<const char*>(call.functionParams) + i * sizeof(void*), sizeof v);
    return v;
  }

  // An event record's slot: the event (first parameter) and the stream it is
  // recorded on (second), as its records number it.
  slot recorded_event(std::uint8_t entry, const CUpti_CallbackData& call) const noexcept {
    if (!call.functionParams) return {};
    return {std::uint64_t(reinterpret_cast<std::uintptr_t>(param<CUevent>(call, 0))),
            stream_id(param<CUstream>(call, 1), (entry & event_record_per_thread) != 0)};
  }
  // An event sync's or a stream's wait's slot: the event, the first parameter
  // of cudaEventSynchronize and the second of cudaStreamWaitEvent (and of their
  // driver forms).
  static slot waited_event(std::uint8_t kind, const CUpti_CallbackData& call) noexcept {
    if (!call.functionParams) return {};
    const std::size_t i = kind == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT ? 1 : 0;
    return {std::uint64_t(reinterpret_cast<std::uintptr_t>(param<CUevent>(call, i))), 0};
  }

  // The calling thread's buffer, registered at its first call; its stack table goes with it.
  static void free_thread_stacks() noexcept {
    delete t_stacks;
    t_stacks = nullptr;
  }
  using calls_slot = thread_slot<call_recorder, &free_thread_stacks>;
  thread_buffer* thread_calls() noexcept { return calls_slot::get(threads_, pool_); }

  // The outermost recorded call the thread is in: its CUPTI correlation data slot, unique to the call.
  static inline thread_local std::uint64_t* t_outer_call = nullptr;
  static inline thread_local bool t_inside_runtime_sync = false;
  static inline thread_local bool t_inside_runtime_event_record = false;
  static inline thread_local bool t_inside_runtime_stack_call = false;
  static inline thread_local thread_stacks* t_stacks = nullptr;

  std::atomic<std::uint8_t> runtime_calls_[calls_per_domain] = {};
  std::atomic<std::uint8_t> driver_calls_[calls_per_domain] = {};
  stream_id_lookup stream_id_ = nullptr;
  unwind_function unwind_ = nullptr;
  std::atomic<std::uint32_t> stack_epoch_{0};
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> stack_ids_;  // by thread buffer serial
  std::uint64_t stacks_generation_ = 0;                                      // the store's, as of the last drain_into

  chunk_pool& pool_;
  thread_registry threads_;
  std::vector<std::uint32_t> live_callers_;  // as of the last drain_into
  std::vector<std::uint64_t> running_;       // the starts of the calls in progress at the last drain_into
  std::atomic<std::uint64_t> recording_since_{~std::uint64_t(0)};
};

}  // namespace cuprof::detail::cupti
