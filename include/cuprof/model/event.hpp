// The event model: what one profiling cycle collected, CPU and GPU, on one
// clock (Unix-epoch nanoseconds). Pure data; knows nothing of CUPTI.
#pragma once

#include "collectives.hpp"
#include "gpu_metrics.hpp"
#include "string_table.hpp"

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace cuprof {

// Spans named ProfilerStep#N are a schedule's steps, as torch names them.
inline constexpr std::string_view step_name_prefix = "ProfilerStep#";

constexpr std::uint32_t no_index = std::numeric_limits<std::uint32_t>::max();

// The time some events cover: the earliest start to the latest end (ns).
struct time_extent {
  std::uint64_t start_ns = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t end_ns = 0;
  void add(std::uint64_t start, std::uint64_t end) noexcept {
    start_ns = start < start_ns ? start : start_ns;
    end_ns = end > end_ns ? end : end_ns;
  }
  bool empty() const noexcept { return end_ns == 0; }
};

// An argument of a scope (CUPROF_SCOPE("gemm", {{"M", m}})), or, read from a
// torch trace, an op's "Input Dims" as their text.
struct span_arg {
  enum class type : std::uint8_t { integer, real, text };
  name_id key = 0;
  type kind = type::integer;
  std::int64_t integer = 0;
  double real = 0;
  name_id text = 0;
};

// JSON has no infinities or NaN: a span_arg's non-finite real is spelled as
// JavaScript prints it, in traces and tables alike.
inline const char* non_finite_name(double v) { return v != v ? "NaN" : v > 0 ? "Infinity" : "-Infinity"; }

// A record_function scope (or a ProfilerStep#N) on a CPU thread.
struct cpu_span {
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  name_id name = 0;
  std::uint32_t tid = 0;
  std::uint32_t parent = no_index;  // enclosing span on the same thread
  std::uint32_t id = 0;             // "External id" in the trace
  std::uint32_t first_arg = 0;      // its arguments: trace::span_args[first_arg, first_arg + arg_count)
  std::uint8_t arg_count = 0;
  bool is_step = false;  // ProfilerStep#N
};

enum class api_domain : std::uint8_t { runtime, driver };

// What a CUDA call called, and how it is drawn: shared by the calls of one
// function, so that the call itself (one per launch) stays small.
struct call_kind {
  name_id name = 0;
  std::uint16_t cbid = 0;  // CUPTI's callback id (all are below 2^16)
  api_domain domain = api_domain::runtime;
  bool has_flow = false;  // launches, copies, memsets, syncs: drawn with an ac2g arrow
};

inline bool operator==(const call_kind& a, const call_kind& b) {
  return a.name == b.name && a.cbid == b.cbid && a.domain == b.domain && a.has_flow == b.has_flow;
}

// What a CUDA runtime or driver API call's record says of it: staged as it
// arrives (cupti/staged_calls.hpp) and kept in the trace as an api_call.
struct call_fields {
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  std::uint32_t tid = 0;
  std::uint32_t correlation = 0;
  std::uint16_t kind = 0;         // index into trace::call_kinds: its name, cbid, domain
  std::int16_t return_value = 0;  // cudaError_t or CUresult, all below 1000 (clamped)
};

// A CUDA runtime or driver API call made by the application. A trace holds
// one per launch: its size is a launch's memory. `parent` sits in the tail
// padding of call_fields (a class with member initialisers is no POD to the
// Itanium C++ ABI, so its padding is reused), keeping it at 32 bytes.
struct api_call : call_fields {
  std::uint32_t parent = no_index;  // innermost cpu_span open at the call (attribution)
};
static_assert(sizeof(api_call) == 32, "api_call grew: a trace holds more per launch");

enum class gpu_kind : std::uint8_t { kernel, memcpy, memset, sync };

// Copies and memsets: the GPU work with a byte count.
inline bool moves_bytes(gpu_kind kind) { return kind == gpu_kind::memcpy || kind == gpu_kind::memset; }

// Launch parameters of a kernel, kept beside the kernel record.
struct kernel_details {
  std::uint32_t grid[3] = {0, 0, 0};
  std::uint32_t block[3] = {0, 0, 0};
  std::uint32_t registers_per_thread = 0;
  std::uint32_t static_shared_memory = 0;
  std::uint32_t dynamic_shared_memory = 0;
  std::uint32_t graph_id = 0;
  std::uint64_t graph_node_id = 0;
};

// Where GPU work ran: a device's context's stream. Shared by the work of one
// stream, so that a record (one per launch) stays small.
struct gpu_lane {
  std::uint32_t device = 0, context = 0, stream = 0;
};

inline bool operator==(const gpu_lane& a, const gpu_lane& b) {
  return a.device == b.device && a.context == b.context && a.stream == b.stream;
}

struct gpu_lane_hash {
  std::size_t operator()(const gpu_lane& l) const noexcept {
    return std::hash<std::uint64_t>()((std::uint64_t(l.context) << 32 | l.stream) * 31 + l.device);
  }
};

// gpu_activity::flags: CUPTI gave the record no valid start and end (the
// kernel did not complete: a device-side assert or fault). It is shown rather
// than dropped, at the best time known (its launch call's end, or the end of
// what its stream ran before it), lasting 0 ns: no GPU time is made up.
constexpr std::uint8_t gpu_timing_unknown = 1;

// Work the GPU did: a kernel, a copy, a memset, or a synchronization. One per
// launch, as api_call: 40 bytes.
struct gpu_activity {
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  name_id name = 0;
  std::uint32_t correlation = 0;
  std::uint32_t api = no_index;      // launching api_call (attribution)
  std::uint32_t details = no_index;  // kernels: index into trace::kernels; copies and memsets: into
                                     // trace::transfer_bytes; event syncs and waits: into trace::event_waits
  std::uint32_t lane = 0;            // index into trace::gpu_lanes
  gpu_kind kind = gpu_kind::kernel;
  std::uint8_t subkind = 0;  // memcpy kind, or sync type
  std::uint8_t flags = 0;    // gpu_timing_unknown
};
static_assert(sizeof(api_call) <= 32 && sizeof(gpu_activity) <= 40,
              "a launch's trace records grew: docs/performance.md counts their bytes");

// What an event sync or a stream's wait on an event waited for (Kineto's
// wait_on_* args, HTA's cross-stream edges): the stream the CUDA event was
// recorded on and the correlation id of the call that recorded it, no_index
// where not known (recorded before the window); a number for the event, one
// per event handle.
struct event_wait {
  std::uint32_t stream = no_index;
  std::uint32_t record_correlation = no_index;
  std::uint32_t event = no_index;
};

// CUPTI's own work, shown rather than hidden.
struct overhead_span {
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  name_id name = 0;
};

struct device_info {
  int id = 0;
  std::string name;
  std::uint64_t total_global_mem = 0;
  int compute_major = 0, compute_minor = 0;
  int max_threads_per_block = 0, max_threads_per_multiprocessor = 0;
  int regs_per_block = 0, regs_per_multiprocessor = 0;
  int warp_size = 32, num_sms = 0;
  int shared_mem_per_block = 0, shared_mem_per_block_optin = 0, shared_mem_per_multiprocessor = 0;
  int max_blocks_per_multiprocessor = 0;
  int clock_rate_khz = 0;         // the SMs' clock as the driver reports it; 0: not in the trace
  int memory_clock_rate_khz = 0;  // peak memory clock
  int memory_bus_width = 0;       // bits
};

struct thread_info {
  std::uint32_t tid = 0;
  std::string name;
};

// What a window's edges left out, and what came without its partner, counted
// when the window is taken (the edge rule: a CUDA call belongs to the window
// in which it started and brings its GPU work with it; docs/guide.md).
struct window_edges {
  static constexpr std::size_t kinds = 3;  // kernel, memcpy, memset (gpu_kind's first three)
  // GPU work of the window's calls that never came (given up on): by the kind of work the call makes.
  std::array<std::uint64_t, kinds> calls_without_gpu_work{};
  // GPU work whose call was never recorded: not a call before the window, none in it.
  std::array<std::uint64_t, kinds> gpu_work_without_call{};
  // GPU work that ran in the window for a call made before it: left out by the rule.
  std::array<std::uint64_t, kinds> launched_before{};
  // Calls that started in the window and had not returned when it was taken: left out, with their work.
  std::uint64_t calls_running_at_end = 0;
  // Records missing from the window that belong in it, or without their
  // partner (the rule's own cuts are not losses).
  std::uint64_t lost_count() const {
    std::uint64_t n = calls_running_at_end;
    for (std::size_t k = 0; k < kinds; ++k) n += calls_without_gpu_work[k] + gpu_work_without_call[k];
    return n;
  }
  bool lost() const { return lost_count() != 0; }
};

// "2 kernel launches without their GPU work, 1 call still running at the
// window's end": what window_edges::lost() counts, in words; empty when none.
inline std::string window_losses(const window_edges& e) {
  static constexpr const char* work[window_edges::kinds] = {"kernel", "copy", "memset"};
  std::string out;
  const auto say = [&out](std::uint64_t n, const std::string& what) {
    if (!n) return;
    if (!out.empty()) out += ", ";
    out += std::to_string(n) + " " + what;
  };
  for (std::size_t k = 0; k < window_edges::kinds; ++k) {
    const std::uint64_t calls = e.calls_without_gpu_work[k], gpu = e.gpu_work_without_call[k];
    say(calls, std::string(work[k]) + (calls == 1 ? " call" : " calls") + " without their GPU record");
    say(gpu, std::string(work[k]) + (gpu == 1 ? " record" : " records") + " on the GPU without their call");
  }
  say(e.calls_running_at_end, e.calls_running_at_end == 1 ? "call still running when the window was taken"
                                                          : "calls still running when the window was taken");
  return out;
}

struct trace_metadata {
  std::uint32_t pid = 0;
  std::string process_name;
  std::string host_name;
  std::uint64_t window_start_ns = 0;  // the recorded window, epoch ns
  std::uint64_t window_end_ns = 0;
  std::uint64_t profiler_start_ns = 0;  // a torch trace's: its profiler's start, the origin of torch's microseconds
  int rank = 0;
  int world_size = 1;
  std::vector<device_info> devices;
  std::vector<thread_info> threads;
  int cuda_runtime_version = 0;
  int cuda_driver_version = 0;
  int cupti_version = 0;
  std::uint64_t dropped_gpu_records = 0;    // CUPTI reported them lost
  std::string dropped_gpu_detail;           // why, for the message (not written to the trace)
  std::uint64_t dropped_cpu_events = 0;     // scopes and CUDA calls lost when memory ran out
  std::uint64_t unmatched_gpu_records = 0;  // GPU work whose launch was not found
  window_edges edges;                       // what the window's edges cut, what came unpaired
  std::string cuda_status;                  // why CUDA tracing is off, empty when on
  bool memory_recorded = false;             // allocations were recorded (torch's profile_memory)
  // distributedInfo: the backend the process shows (detail::distributed_backend),
  // the NCCL library's version ("2.21.5", empty: none read) and the NCCL
  // communicators seen created (Kineto's "pg_count"; 0: none seen).
  std::string distributed_backend = "none";
  std::string nccl_version;
  int communicator_count = 0;
};

// CUPTI's copy kinds and sync types by their numeric values (a gpu_activity's
// subkind), named as Kineto names them. The two values cuprof's rules test:
inline constexpr std::uint8_t memcpy_device_to_device = 8;  // CUPTI_ACTIVITY_MEMCPY_KIND_DTOD
inline constexpr std::uint8_t sync_context = 4;             // CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE

inline const char* memcpy_kind_name(std::uint8_t kind) {
  switch (kind) {
    case 1: return "HtoD";
    case 2: return "DtoH";
    case 3: return "HtoA";
    case 4: return "AtoH";
    case 5: return "AtoA";
    case 6: return "AtoD";
    case 7: return "DtoA";
    case 8: return "DtoD";
    case 9: return "HtoH";
    case 10: return "PtoP";
    default: return "Unknown";
  }
}

inline const char* sync_kind_name(std::uint8_t type) {
  switch (type) {
    case 1: return "Event Sync";
    case 2: return "Stream Wait Event";
    case 3: return "Stream Sync";
    case 4: return "Context Sync";
    default: return "Unknown Sync";
  }
}

// A scope's extent on one GPU stream: from the first to the last GPU activity
// launched inside it (its nested scopes included). Drawn as gpu_user_annotation.
struct gpu_annotation {
  std::uint32_t span = no_index;
  std::uint32_t device = 0;
  std::uint32_t stream = 0;
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
};

// memory_event::flags.
constexpr std::uint8_t memory_from_pool = 1;  // stream-ordered (cudaMallocAsync, a memory pool)
constexpr std::uint8_t memory_virtual = 2;    // the driver's virtual-memory API (cuMemCreate, cuMemMap)

// CUPTI's memory kinds by their numeric values (memory_event::memory_kind),
// named as CUPTI's activity records name them; 0 where the kind is unknown
// (read from a torch trace).
inline constexpr std::uint8_t memory_kind_pageable = 1;
inline constexpr std::uint8_t memory_kind_pinned = 2;
inline constexpr std::uint8_t memory_kind_device = 3;
inline constexpr std::uint8_t memory_kind_managed = 5;

inline const char* memory_kind_name(std::uint8_t kind) {
  switch (kind) {
    case memory_kind_pageable: return "Pageable";
    case memory_kind_pinned: return "Pinned";
    case memory_kind_device: return "Device";
    case 4: return "Array";
    case memory_kind_managed: return "Managed";
    case 6: return "Device Static";
    case 7: return "Managed Static";
    default: return "Unknown";
  }
}

// Memory the program allocated (bytes > 0) or freed (bytes < 0): torch's
// [memory] event. `device` -1 is host memory (pinned: torch's "CPU Mem");
// otherwise the CUDA device whose "CUDA Mem" it counts in. The totals are that
// device's after the event, counted from what the profile saw allocated.
struct memory_event {
  std::uint64_t ts_ns = 0;
  std::uint64_t address = 0;
  std::int64_t bytes = 0;
  std::uint64_t total_allocated = 0;  // bytes in use
  std::uint64_t total_reserved = 0;   // bytes in use, and what memory pools hold beyond them
  std::uint32_t tid = 0;
  std::uint32_t correlation = 0;  // the CUDA call that made it; 0: none known
  std::uint32_t span = no_index;  // the scope that made it (attribution)
  std::int32_t device = -1;
  std::uint8_t memory_kind = 0;
  std::uint8_t flags = 0;  // memory_from_pool, memory_virtual
};

inline bool is_host_memory(const memory_event& m) { return m.device < 0; }

// A native call stack at a CUDA call (profile_options::with_stack): its frames
// are trace::stack_frames[first_frame, first_frame + frame_count), innermost first.
struct call_stack {
  std::uint32_t first_frame = 0;
  std::uint32_t frame_count = 0;
};

// One collected cycle. Spans, calls and GPU work refer to each other by index.
struct trace {
  string_table names;
  std::vector<cpu_span> spans;
  std::vector<span_arg> span_args;  // the spans' arguments, each span's together
  std::vector<api_call> api_calls;
  std::vector<call_kind> call_kinds;  // what api_calls refer to by `kind`
  std::vector<gpu_activity> gpu;
  std::vector<gpu_lane> gpu_lanes;            // what gpu refers to by `lane`
  std::vector<kernel_details> kernels;        // what kernels refer to by `details`
  std::vector<std::uint64_t> transfer_bytes;  // what copies and memsets refer to by `details`
  std::vector<event_wait> event_waits;        // what event syncs and waits refer to by `details`
  // Read from a file only, one per GPU record or none: the scope the file names
  // as its launcher ("External id"); attribution prefers it to the call's scope.
  std::vector<std::uint32_t> gpu_launch_spans;
  std::vector<overhead_span> overhead;
  std::vector<memory_event> memory;  // in time order
  // Native call stacks at CUDA calls (with_stack), each distinct one once, its
  // frames as text ("fn (file.cpp:42)"). call_stacks is empty when no call has
  // a stack, else parallel to api_calls: each call's index in `stacks`, or no_index.
  std::vector<name_id> stack_frames;
  std::vector<call_stack> stacks;
  std::vector<std::uint32_t> call_stacks;
  trace_metadata meta;
  // Each scope's extent per GPU stream, parents first: derived by attribute()
  // for a recorded trace, as the file has them (torch.profiler's own) for one read back.
  std::vector<gpu_annotation> gpu_annotations;
  // NCCL calls (collectives.hpp), each tied to its NVTX range's span; their
  // kernels are found through attribution (collective_of_kernel, attribution.hpp).
  std::vector<collective_call> collectives;
  std::vector<std::uint32_t> gpu_collectives;  // empty, or per GPU record: its call in `collectives`, or no_index
  // GPU hardware metrics (PM sampling), one series per GPU sampled; empty when off.
  std::vector<detail::gpu_metric_series> gpu_metrics;

  const call_kind& kind_of(const api_call& c) const { return call_kinds[c.kind]; }
  name_id name_of(const api_call& c) const { return call_kinds[c.kind].name; }
  const gpu_lane& lane_of(const gpu_activity& g) const { return gpu_lanes[g.lane]; }
  std::uint32_t stack_of(std::size_t call) const { return call < call_stacks.size() ? call_stacks[call] : no_index; }
  std::uint64_t bytes_of(const gpu_activity& g) const {
    return moves_bytes(g.kind) && g.details != no_index ? transfer_bytes[g.details] : 0;
  }

  // The index of a kind or a lane, added when new. Linear: a trace has a
  // handful of each; bulk builders (take(), the reader) keep their own maps.
  // A trace holds at most 2^16 call kinds: no_index past that.
  std::uint32_t add_call_kind(const call_kind& k) {
    for (std::size_t i = 0; i < call_kinds.size(); ++i)
      if (call_kinds[i] == k) return std::uint32_t(i);
    if (call_kinds.size() > 0xFFFF) return no_index;
    call_kinds.push_back(k);
    return std::uint32_t(call_kinds.size() - 1);
  }
  std::uint32_t add_gpu_lane(const gpu_lane& l) {
    for (std::size_t i = 0; i < gpu_lanes.size(); ++i)
      if (gpu_lanes[i] == l) return std::uint32_t(i);
    gpu_lanes.push_back(l);
    return std::uint32_t(gpu_lanes.size() - 1);
  }
  // Sets a copy's or memset's bytes.
  void set_bytes(gpu_activity& g, std::uint64_t bytes) {
    g.details = std::uint32_t(transfer_bytes.size());
    transfer_bytes.push_back(bytes);
  }
  // A sync's wait on an event, or null.
  const event_wait* wait_of(const gpu_activity& g) const {
    return g.kind == gpu_kind::sync && g.details != no_index ? &event_waits[g.details] : nullptr;
  }
  void set_wait(gpu_activity& g, const event_wait& w) {
    g.details = std::uint32_t(event_waits.size());
    event_waits.push_back(w);
  }
};

// The deviceProperties entry of device `id`, or null.
inline const device_info* find_device(const trace& t, std::uint32_t id) {
  for (const device_info& d : t.meta.devices)
    if (std::uint32_t(d.id) == id) return &d;
  return nullptr;
}

// Per GPU lane, its device's series in t.gpu_metrics, or no_index: how a
// kernel finds its GPU's samples (lanes and GPUs are a handful each).
inline std::vector<std::uint32_t> metric_series_of_lanes(const trace& t) {
  std::vector<std::uint32_t> series(t.gpu_lanes.size(), no_index);
  for (std::size_t l = 0; l < t.gpu_lanes.size(); ++l)
    for (std::size_t i = 0; i < t.gpu_metrics.size(); ++i)
      if (t.gpu_metrics[i].device == t.gpu_lanes[l].device) series[l] = std::uint32_t(i);
  return series;
}

}  // namespace cuprof
