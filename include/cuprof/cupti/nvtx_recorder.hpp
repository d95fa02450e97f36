// NCCL's collectives from its NVTX payloads, through CUPTI's NVTX callbacks.
//
// NCCL (2.19 on) wraps each API call (ncclAllReduce, ncclAllGather,
// ncclReduceScatter, ncclBroadcast, ncclReduce, ncclSend, ncclRecv,
// ncclCommInitRank, ncclCommSplit, ...) in an NVTX push/pop range of its
// domain "NCCL", named by a registered string (the function's __func__), with
// an extended payload: attr.payloadType NVTX_PAYLOAD_TYPE_EXT, attr.reserved0
// the number of entries, attr.payload.ullValue an array of nvtxPayloadData_t
// {schemaId, size, payload}. The payload is valid only during the call, so the
// callback copies it; the range's time and name still come from CUPTI's
// MARKER activity (record_store.hpp), to which each call is tied when its
// window is taken (attach_collectives, model/attribution.hpp).
//
// What is assumed about NCCL (model/collectives.hpp has the layouts):
//   - the payload structs' layouts, stable since 2.19; not the static schema
//     ids' numbers (NVTX_PAYLOAD_SCHEMA_ID_STATIC_START + N), whose N changed;
//   - the first entry is the call's struct;
//   - the range's message is a string registered in NCCL's domain, whose text
//     is the API function's name ("ncclAllReduce").
// NCCL's domain is learnt from nvtxDomainCreateA("NCCL") and the strings'
// text from nvtxDomainRegisterStringA, both once per process, off the hot
// path. Where cuprof subscribed after NCCL created its domain (a profile
// started after the communicators were), a range with an EXT payload in an
// unknown domain is taken for NCCL's when its registered message names an
// NCCL function, or, its text unknown too, when its payload has NCCL's shape:
// one entry of a static schema id (below STATIC_START + 256) of 16 to 64
// bytes; such a call's function is decided from its range's name when the
// window is taken, and it gets no args if that name is not NCCL's.
//
// The hot path (every NVTX push in the process; cuprof's own scopes' with
// CUPROF_NVTX): a few loads for a range that is neither NCCL's nor wanted by
// the range hook. An NCCL call copies at most 64 payload bytes into its
// thread's chunks (collect/thread_buffer.hpp, as call_recorder.hpp): no lock,
// no allocation past the thread's first record, no I/O.
#pragma once

#include "record_store.hpp"
#include "../base/dynamic_library.hpp"
#include "../base/env.hpp"
#include "../base/log.hpp"
#include "../base/process_state.hpp"
#include "../collect/chunk_pool.hpp"
#include "../collect/clock.hpp"
#include "../model/collectives.hpp"
#include "../model/event.hpp"

#include <cupti.h>  // cupti_nvtx_cbid.h has no include guard: only through cupti.h
#include <generated_nvtx_meta.h>
#include <nvtx3/nvToolsExtPayload.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace cuprof::detail::cupti {

// One per process, the tracer's (its thread_locals would be shared by a second).
class nvtx_recorder {
 public:
  nvtx_recorder() : pool_(global_chunk_pool()) {}
  nvtx_recorder(const nvtx_recorder&) = delete;
  nvtx_recorder& operator=(const nvtx_recorder&) = delete;

  // The NVTX callbacks the tracer enables while CUPTI is attached.
  static constexpr CUpti_CallbackId callbacks[] = {
      CUPTI_CBID_NVTX_nvtxDomainCreateA,      CUPTI_CBID_NVTX_nvtxDomainRegisterStringA, CUPTI_CBID_NVTX_nvtxDomainRangePushEx,
      CUPTI_CBID_NVTX_nvtxDomainRangeStartEx, CUPTI_CBID_NVTX_nvtxRangePushEx,           CUPTI_CBID_NVTX_nvtxRangeStartEx,
      CUPTI_CBID_NVTX_nvtxRangePushA,         CUPTI_CBID_NVTX_nvtxRangeStartA,           CUPTI_CBID_NVTX_nvtxRangePop,
      CUPTI_CBID_NVTX_nvtxRangeEnd,           CUPTI_CBID_NVTX_nvtxDomainRangePop,        CUPTI_CBID_NVTX_nvtxDomainRangeEnd};

  // Calls that start before this tick are not recorded (communicators are,
  // whenever CUPTI is attached: they are made before most windows).
  void start_recording(std::uint64_t ticks) noexcept { recording_since_.store(ticks, std::memory_order_relaxed); }

  // CUPTI's NVTX callback. `recording`: a window records (calls are kept).
  void on_nvtx(CUpti_CallbackId cbid, const CUpti_NvtxData& data, bool recording) noexcept {
    using event = nvtx_range_event;
    // nvtxRangePop takes no argument: CUPTI may hand over no params for it.
    if (cbid == CUPTI_CBID_NVTX_nvtxRangePop) return tell(event{event::pop});
    const void* params = data.functionParams;
    if (!params) return;
    switch (cbid) {
      case CUPTI_CBID_NVTX_nvtxDomainRangePushEx:
      case CUPTI_CBID_NVTX_nvtxDomainRangeStartEx: {
        // Both params structs are {domain, {eventAttrib}}.
        const auto& p = *static_cast<const nvtxDomainRangePushEx_params*>(params);
        const bool push = cbid == CUPTI_CBID_NVTX_nvtxDomainRangePushEx;
        return on_range(p.domain, p.core.eventAttrib, recording, push ? event::push : event::start, push ? 0 : range_id(data));
      }
      case CUPTI_CBID_NVTX_nvtxRangePushEx:
      case CUPTI_CBID_NVTX_nvtxRangeStartEx: {
        const bool push = cbid == CUPTI_CBID_NVTX_nvtxRangePushEx;
        return on_range(nullptr, static_cast<const nvtxRangePushEx_params*>(params)->eventAttrib, recording,
                        push ? event::push : event::start, push ? 0 : range_id(data));
      }
      case CUPTI_CBID_NVTX_nvtxRangePushA:
      case CUPTI_CBID_NVTX_nvtxRangeStartA: {
        const char* message = static_cast<const nvtxRangePushA_params*>(params)->message;
        event e;
        e.kind = cbid == CUPTI_CBID_NVTX_nvtxRangePushA ? event::push : event::start;
        e.message = message;
        e.length = message ? std::strlen(message) : 0;
        e.id = e.kind == event::start ? range_id(data) : 0;
        return tell(e);
      }
      case CUPTI_CBID_NVTX_nvtxRangeEnd: {
        event e{event::end};
        e.id = static_cast<const nvtxRangeEnd_params*>(params)->id;
        return tell(e);
      }
      case CUPTI_CBID_NVTX_nvtxDomainRangePop: {
        event e{event::pop};
        e.domain = reinterpret_cast<std::uintptr_t>(static_cast<const nvtxDomainRangePop_params*>(params)->domain);
        if (e.domain && e.domain == cuprof_domain_.load(std::memory_order_relaxed)) return;
        return tell(e);
      }
      case CUPTI_CBID_NVTX_nvtxDomainRangeEnd: {
        const auto& p = *static_cast<const nvtxDomainRangeEnd_params*>(params);
        event e{event::end};
        e.domain = reinterpret_cast<std::uintptr_t>(p.domain);
        e.id = p.core.id;
        if (e.domain && e.domain == cuprof_domain_.load(std::memory_order_relaxed)) return;
        return tell(e);
      }
      case CUPTI_CBID_NVTX_nvtxDomainCreateA: {
        const char* name = static_cast<const nvtxDomainCreateA_params*>(params)->name;
        if (!name || !data.functionReturnValue) return;
        const nvtxDomainHandle_t handle = *static_cast<const nvtxDomainHandle_t*>(data.functionReturnValue);
        add_domain(handle, name);
        event e{event::domain_created};
        e.message = name;
        e.length = std::strlen(name);
        e.domain = reinterpret_cast<std::uintptr_t>(handle);
        return tell(e);
      }
      case CUPTI_CBID_NVTX_nvtxDomainRegisterStringA: {
        const auto& p = *static_cast<const nvtxDomainRegisterStringA_params*>(params);
        if (p.string && data.functionReturnValue)
          add_string(p.domain, *static_cast<const nvtxStringHandle_t*>(data.functionReturnValue), p.string);
        return;
      }
      default: return;
    }
  }

  // Moves the calls recorded so far into `store`, decoded; calls lost for
  // want of memory are counted there. Payloads that cannot be decoded are
  // counted (undecoded()) and, with CUPROF_DEBUG=1, said once per shape.
  void drain_into(record_store& store) {
    threads_.for_each([&](thread_buffer& b) {
      b.drain([&](const slot* s, std::size_t n) {
        std::size_t i = 0;
        for (; i + record_slots <= n; i += record_slots) {
          const std::uint64_t info = s[i].payload;
          const auto kind = collective_kind(info & 0xFF);
          const std::size_t size = std::size_t((info >> 8) & 0xFFFF);
          unsigned char bytes[collective_payload_max];
          std::memcpy(bytes, s + i + 1, sizeof bytes);
          collective_call c;
          c.ts_ns = s[i].head;
          c.tid = b.tid();
          if (!decode_collective_payload(kind, bytes, size, c)) {
            said_undecoded(kind, size, std::uint32_t(info >> 32));
            continue;
          }
          if (c.kind == collective_kind::comm_init || c.kind == collective_kind::comm_split)
            add_communicator(c.comm, c.group_size, c.rank);
          else communicator(c.comm, c.group_size, c.rank);
          store.add_collective(c);
        }
        return i;
      });
      store.add_dropped_calls(b.take_dropped());
    });
  }

  // The size and this process's rank of a communicator created while CUPTI
  // was attached; false (outputs untouched) for one cuprof did not see.
  bool communicator(std::uint64_t comm, std::int32_t& size, std::int32_t& rank) const noexcept {
    for (const comm_entry& e : comms_)
      if (e.comm.load(std::memory_order_acquire) == comm && comm) {
        const std::uint64_t v = e.value.load(std::memory_order_relaxed);
        size = std::int32_t(std::uint32_t(v >> 32));
        rank = std::int32_t(std::uint32_t(v));
        return true;
      }
    return false;
  }
  // Communicators seen created, and the largest (the job's world, as a rule).
  int communicator_count() const noexcept {
    int n = 0;
    for (const comm_entry& e : comms_) n += e.comm.load(std::memory_order_acquire) != 0;
    return n;
  }
  bool largest_communicator(std::int32_t& size, std::int32_t& rank) const noexcept {
    bool found = false;
    for (const comm_entry& e : comms_) {
      if (!e.comm.load(std::memory_order_acquire)) continue;
      const std::uint64_t v = e.value.load(std::memory_order_relaxed);
      if (!found || std::int32_t(std::uint32_t(v >> 32)) > size) {
        size = std::int32_t(std::uint32_t(v >> 32));
        rank = std::int32_t(std::uint32_t(v));
        found = true;
      }
    }
    return found;
  }
  // NCCL showed itself: its domain created, or one of its calls recorded.
  bool nccl_seen() const noexcept {
    return nccl_domain_.load(std::memory_order_relaxed) != 0 || nccl_calls_seen_.load(std::memory_order_relaxed);
  }
  // NCCL payloads whose layout cuprof does not know (ignored).
  std::uint64_t undecoded() const noexcept { return undecoded_.load(std::memory_order_relaxed); }

  // NVTX's payload extension (nvToolsExtPayload.h), which reaches no CUPTI
  // callback. NCCL 2.25 on ends a communicator's creation (ncclCommInitRank*,
  // ncclCommSplit, ...) with nvtxRangePopPayload, the payload filled once the
  // communicator's hash is known: with no tool serving the extension, that pop
  // is a no-op, so the communicator, its size and this rank go unseen and the
  // range stays open. `cuprof run`'s injection library
  // (InitializeInjectionNvtxExtension, tools/inject) serves the module's range
  // push and pop with these; its other functions stay no-ops, as without it.
  // False for another module, or one without those slots (the two-slot
  // payload module of the NVTX copies in NCCL 2.19 to 2.21: left alone).
  static bool install_payload_extension(nvtxExtModuleInfo_t& module) noexcept {
    if (module.moduleId != NVTX_EXT_PAYLOAD_MODULEID || module.segmentsCount < 1 || !module.segments) return false;
    intptr_t* slots = module.segments[0].functionSlots;
    if (!slots || module.segments[0].slotCount <= NVTX3EXT_CBID_nvtxRangePopPayload) return false;
    slots[NVTX3EXT_CBID_nvtxRangePushPayload] = reinterpret_cast<intptr_t>(&range_payload<true>);
    slots[NVTX3EXT_CBID_nvtxRangePopPayload] = reinterpret_cast<intptr_t>(&range_payload<false>);
    return true;
  }
  // The recorder those functions report to: the tracer's, from its attach to its exit.
  static void serve(nvtx_recorder* r) noexcept { served().store(r, std::memory_order_release); }

  // nvtxRangePushPayload and nvtxRangePopPayload, as the range hook and the
  // communicators see them: the range pushed or popped; a creation's payload
  // read as NCCL's when it comes in NCCL's domain (or, the domain created
  // before cuprof watched, one it never saw created) with a creation's schema id.
  void on_range_payload(bool push, std::uintptr_t domain, const nvtxPayloadData_t* entries, std::size_t count) noexcept {
    if (domain && domain == cuprof_domain_.load(std::memory_order_relaxed)) return;
    nvtx_range_event e{push ? nvtx_range_event::push : nvtx_range_event::pop};
    e.domain = domain;
    tell(e);
    if (push || !entries || count == 0) return;
    const std::uintptr_t nccl = nccl_domain_.load(std::memory_order_relaxed);
    if (nccl ? domain != nccl : known_domain(domain)) return;
    const collective_kind kind = nccl_creation_of_schema(entries[0].schemaId);
    if (kind != collective_kind::unknown && learn_communicator(kind, entries[0]))
      nccl_calls_seen_.store(true, std::memory_order_relaxed);
  }

 private:
  // {ticks, kind | size << 8 | schema id's low 32 bits << 32}, then the
  // payload's first 64 bytes.
  static constexpr std::size_t record_slots = 1 + collective_payload_max / sizeof(slot);
  static constexpr std::size_t max_domains = 64;
  static constexpr std::size_t max_strings = 1024;  // NCCL registers a few dozen
  static constexpr std::size_t max_comms = 256;
  static constexpr std::uint64_t static_schema_start = NVTX_PAYLOAD_SCHEMA_ID_STATIC_START;  // 1 << 24

  struct string_entry {
    std::atomic<std::uintptr_t> handle{0};  // published last
    const char* text = nullptr;             // copied at registration, kept for the process's life
    std::uint32_t length = 0;
    collective_kind kind = collective_kind::unknown;
    bool nccl = false;  // its text names an NCCL function
  };
  struct comm_entry {
    std::atomic<std::uint64_t> comm{0};
    std::atomic<std::uint64_t> value{0};  // nranks << 32 | rank
  };

  static std::atomic<nvtx_recorder*>& served() noexcept {
    static std::atomic<nvtx_recorder*> r{nullptr};
    return r;
  }
  template <bool Push>
  static int NVTX_API range_payload(nvtxDomainHandle_t domain, const nvtxPayloadData_t* entries, std::size_t count) noexcept {
    // A forked child has no CUPTI callbacks: its pushes go unseen, so its pops are not told either.
    if (nvtx_recorder* r = served().load(std::memory_order_acquire); r && !process().forked_child.load(std::memory_order_relaxed))
      r->on_range_payload(Push, reinterpret_cast<std::uintptr_t>(domain), entries, count);
    return NVTX_NO_PUSH_POP_TRACKING;  // as NVTX's own push and pop with no tool: no depth kept
  }

  // The runtime's hook, when one is set (process_state::on_nvtx_range).
  static void tell(const nvtx_range_event& e) noexcept {
    if (void (*hook)(const nvtx_range_event&) = process().on_nvtx_range.load(std::memory_order_relaxed)) hook(e);
  }

  // The id a range start returned; CUPTI hands the call's return value to its callback.
  static std::uint64_t range_id(const CUpti_NvtxData& data) noexcept {
    return data.functionReturnValue ? *static_cast<const nvtxRangeId_t*>(data.functionReturnValue) : 0;
  }

  void on_range(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* attr, bool recording, nvtx_range_event::kind_t kind,
                std::uint64_t id) noexcept {
    const auto d = reinterpret_cast<std::uintptr_t>(domain);
    if (d && d == cuprof_domain_.load(std::memory_order_relaxed)) return;  // cuprof's own scopes (CUPROF_NVTX)
    nvtx_range_event e;
    e.kind = kind;
    e.domain = d;
    e.id = id;
    if (attr && attr->size >= offsetof(nvtxEventAttributes_t, message) + sizeof attr->message) {
      if (CUPROF_UNLIKELY(attr->payloadType == NVTX_PAYLOAD_TYPE_EXT) && d) on_payload(d, *attr, recording);
      if (attr->messageType == NVTX_MESSAGE_TYPE_ASCII && attr->message.ascii) {
        e.message = attr->message.ascii;
        e.length = std::strlen(attr->message.ascii);
      } else if (attr->messageType == NVTX_MESSAGE_TYPE_REGISTERED) {
        if (const string_entry* s = find_string(reinterpret_cast<std::uintptr_t>(attr->message.registered))) {
          e.message = s->text;
          e.length = s->length;
        }
      }
    }
    tell(e);
  }

  CUPROF_NOINLINE void on_payload(std::uintptr_t domain, const nvtxEventAttributes_t& attr, bool recording) noexcept {
    const std::uintptr_t nccl = nccl_domain_.load(std::memory_order_relaxed);
    if (nccl && domain != nccl) return;
    const string_entry* message = attr.messageType == NVTX_MESSAGE_TYPE_REGISTERED
                                      ? find_string(reinterpret_cast<std::uintptr_t>(attr.message.registered))
                                      : nullptr;
    const auto* entries = reinterpret_cast<const nvtxPayloadData_t*>(static_cast<std::uintptr_t>(attr.payload.ullValue));
    const std::uint32_t count = std::uint32_t(attr.reserved0);
    if (!entries || count == 0) return;
    const nvtxPayloadData_t& e = entries[0];
    if (!nccl) {
      if (known_domain(domain)) return;  // created while watched, and not "NCCL"
      if (message) {
        if (!message->nccl) return;
      } else if (count != 1 || e.schemaId < static_schema_start || e.schemaId >= static_schema_start + 256 || e.size < 16 ||
                 e.size > collective_payload_max) {
        return;  // not NCCL's shape
      }
    }
    nccl_calls_seen_.store(true, std::memory_order_relaxed);
    const collective_kind kind = message ? message->kind : collective_kind::unknown;
    const bool sized = e.payload && e.size <= collective_payload_max;
    if (kind == collective_kind::comm_init || kind == collective_kind::comm_split) learn_communicator(kind, e);
    if (!recording) return;
    const std::uint64_t now = now_ticks();
    if (now < recording_since_.load(std::memory_order_relaxed)) return;
    thread_buffer* b = thread_records();
    if (!b) return;
    slot record[record_slots] = {};
    const std::size_t size = e.size > 0xFFFF ? 0xFFFF : std::size_t(e.size);  // too large: undecoded at the drain
    record[0] = {now, std::uint64_t(kind) | std::uint64_t(size) << 8 | std::uint64_t(std::uint32_t(e.schemaId)) << 32};
    if (sized) std::memcpy(record + 1, e.payload, e.size);
    b->push_record(record, record_slots);
  }

  // A communicator's creation (`kind` comm_init or comm_split): known from now
  // on, in or out of a window. False when the payload does not fit the layout.
  bool learn_communicator(collective_kind kind, const nvtxPayloadData_t& e) noexcept {
    collective_call c;
    if (!e.payload || !decode_collective_payload(kind, static_cast<const unsigned char*>(e.payload), e.size, c)) return false;
    add_communicator(c.comm, c.group_size, c.rank);
    return true;
  }

  // ---- domains, strings, communicators: written once each, read lock-free ----
  void add_domain(nvtxDomainHandle_t handle, const char* name) noexcept {
    const auto h = reinterpret_cast<std::uintptr_t>(handle);
    if (!h) return;
    if (std::strcmp(name, "NCCL") == 0) nccl_domain_.store(h, std::memory_order_relaxed);
    else if (std::strcmp(name, "cuprof") == 0) cuprof_domain_.store(h, std::memory_order_relaxed);
    const std::size_t i = domain_count_.fetch_add(1, std::memory_order_relaxed);
    if (i < max_domains) domains_[i].store(h, std::memory_order_release);
  }
  bool known_domain(std::uintptr_t h) const noexcept {
    const std::size_t n = std::min<std::size_t>(domain_count_.load(std::memory_order_relaxed), max_domains);
    for (std::size_t i = 0; i < n; ++i)
      if (domains_[i].load(std::memory_order_acquire) == h) return true;
    return false;
  }

  static std::size_t string_slot(std::uintptr_t h) noexcept { return std::size_t((h >> 4) * 0x9E3779B97F4A7C15ull >> 54); }

  void add_string(nvtxDomainHandle_t, nvtxStringHandle_t handle, const char* text) noexcept {
    const auto h = reinterpret_cast<std::uintptr_t>(handle);
    if (!h) return;
    std::lock_guard<std::mutex> lock(strings_mutex_);
    for (std::size_t probe = 0; probe < max_strings; ++probe) {
      string_entry& s = strings_[(string_slot(h) + probe) % max_strings];
      const std::uintptr_t held = s.handle.load(std::memory_order_relaxed);
      if (held == h) return;  // registered again (NVTX returns the same handle)
      if (held) continue;
      const std::size_t length = std::strlen(text);
      char* copy = new (std::nothrow) char[length + 1];
      if (!copy) return;
      std::memcpy(copy, text, length + 1);
      s.text = copy;
      s.length = std::uint32_t(length);
      s.kind = collective_kind_of_function(text);
      s.nccl = s.kind != collective_kind::unknown || std::strncmp(text, "nccl", 4) == 0;
      s.handle.store(h, std::memory_order_release);
      return;
    }
  }
  const string_entry* find_string(std::uintptr_t h) const noexcept {
    if (!h) return nullptr;
    for (std::size_t probe = 0; probe < max_strings; ++probe) {
      const string_entry& s = strings_[(string_slot(h) + probe) % max_strings];
      const std::uintptr_t held = s.handle.load(std::memory_order_acquire);
      if (held == h) return &s;
      if (!held) return nullptr;
    }
    return nullptr;
  }

  void add_communicator(std::uint64_t comm, std::int32_t size, std::int32_t rank) noexcept {
    if (!comm || size <= 0) return;
    const std::uint64_t value = std::uint64_t(std::uint32_t(size)) << 32 | std::uint32_t(rank);
    for (comm_entry& e : comms_) {
      std::uint64_t held = e.comm.load(std::memory_order_acquire);
      if (held == 0 && e.comm.compare_exchange_strong(held, comm, std::memory_order_acq_rel)) {
        e.value.store(value, std::memory_order_relaxed);  // a reader in between reads size 0: unknown
        return;
      }
      if (held == comm) {
        e.value.store(value, std::memory_order_relaxed);
        return;
      }
    }
  }

  void said_undecoded(collective_kind kind, std::size_t size, std::uint32_t schema) {
    undecoded_.fetch_add(1, std::memory_order_relaxed);
    static const bool debug = read_switch("CUPROF_DEBUG", std::getenv("CUPROF_DEBUG"), false).value;
    if (!debug) return;
    const std::uint32_t id = schema >= static_schema_start ? schema - std::uint32_t(static_schema_start) : schema;
    log_line_once("NCCL NVTX payload not decoded: function '" + std::string(collective_torch_name(kind)) + "', " +
                  std::to_string(size) + " bytes, schema id " + (schema >= static_schema_start ? "STATIC_START+" : "") +
                  std::to_string(id) + " (cuprof reads 16 to 64 bytes in NCCL 2.19's layouts); ignored");
  }

  // The calling thread's buffer, registered at its first record.
  thread_buffer* thread_records() noexcept { return thread_slot<nvtx_recorder>::get(threads_, pool_); }

  std::atomic<std::uintptr_t> nccl_domain_{0};
  std::atomic<std::uintptr_t> cuprof_domain_{0};
  std::atomic<std::uintptr_t> domains_[max_domains] = {};
  std::atomic<std::size_t> domain_count_{0};
  string_entry strings_[max_strings];
  std::mutex strings_mutex_;
  comm_entry comms_[max_comms];
  std::atomic<bool> nccl_calls_seen_{false};
  std::atomic<std::uint64_t> undecoded_{0};
  std::atomic<std::uint64_t> recording_since_{~std::uint64_t(0)};
  chunk_pool& pool_;
  thread_registry threads_;
};

// distributedInfo's backend and NCCL version, from what the process shows
// now (model/collectives.hpp decides): at a window's end, off the hot path.
// `nccl_seen`: NCCL's NVTX domain or calls were seen (nvtx_recorder::nccl_seen).
inline void fill_distributed_info(trace_metadata& meta, bool nccl_seen) {
  const std::vector<std::string> libraries = loaded_libraries();
  meta.distributed_backend = distributed_backend(libraries, nccl_seen, [](const char* name) { return std::getenv(name); });
  if (meta.distributed_backend == "nccl") meta.nccl_version = loaded_nccl_version(libraries);
}

}  // namespace cuprof::detail::cupti
