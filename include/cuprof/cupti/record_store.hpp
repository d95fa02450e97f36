// The record store: CUPTI's activity records and the call recorder's API
// calls -> cuprof events. It reads CUPTI's plain C structs only (no CUPTI call),
// so tests feed it synthetic records on a machine with no GPU.
//
// Records are staged with raw clock ticks until a window closes; then the
// window's API calls, the GPU work they caused and CUPTI's overhead inside it
// are moved into the trace and converted to epoch nanoseconds.
#pragma once

#include "stack_store.hpp"
#include "../base/chunked_vector.hpp"
#include "../collect/clock.hpp"
#include "../model/api_vocabulary.hpp"
#include "../model/correlation_index.hpp"
#include "../model/event.hpp"

#include <cupti_activity.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace cuprof::detail::cupti {

// How an API call is shown, decided once per callback id from its name.
struct api_class {
  const char* display_name = nullptr;  // null: the call is dropped as noise
  bool has_flow = false;               // drawn with an arrow to its GPU record
  bool expects_gpu_record = false;     // a launch, copy or memset: the window waits for its record
};

// Mirrors what Kineto keeps: every runtime call but a few getters, and on the
// driver side only launches, copies, memsets, syncs, event records (what a
// wait waits for), occupancy queries, allocations and virtual-memory calls
// (cuBLAS makes many other driver calls per GEMM).
inline api_class classify_api(api_domain domain, std::string_view name) {
  api_class c;
  static constexpr const char* runtime_noise[] = {"cudaGetDevice",       "cudaSetDevice",   "cudaGetLastError",
                                                  "cudaPeekAtLastError", "cudaEventCreate", "cudaEventCreateWithFlags",
                                                  "cudaEventDestroy"};
  bool keep = true;
  if (domain == api_domain::runtime) {
    for (const char* noise : runtime_noise) keep = keep && name != noise;
  } else {
    keep = enqueues_gpu_work(name) || is_host_function_launch(name) || is_synchronization(name) || records_event(name) ||
           is_occupancy_query(name) || allocates_or_frees(name);
  }
  if (!keep) return c;
  c.display_name = "";  // set by the caller, which owns the string
  c.expects_gpu_record = enqueues_gpu_work(name);
  c.has_flow = draws_flow(name);
  return c;
}

// The model names CUPTI's numeric kinds without including CUPTI (model/event.hpp).
static_assert(memcpy_device_to_device == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD);
static_assert(sync_context == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE);

static_assert(memory_kind_pageable == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE &&
              memory_kind_pinned == CUPTI_ACTIVITY_MEMORY_KIND_PINNED &&
              memory_kind_device == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE &&
              memory_kind_managed == CUPTI_ACTIVITY_MEMORY_KIND_MANAGED && CUPTI_ACTIVITY_MEMORY_KIND_ARRAY == 4 &&
              CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC == 6 && CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC == 7);

inline const char* overhead_kind_name(std::uint32_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER: return "Driver Compiler";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH: return "Buffer Flush";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION: return "Instrumentation";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE: return "Resource";
    case CUPTI_ACTIVITY_OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING: return "Runtime Triggered Module Loading";
    case CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING: return "Lazy Function Loading";
    case CUPTI_ACTIVITY_OVERHEAD_COMMAND_BUFFER_FULL: return "Command Buffer Full";
    case CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST: return "Activity Buffer Request";
    case CUPTI_ACTIVITY_OVERHEAD_UVM_ACTIVITY_INIT: return "UVM Activity Init";
    default: return "Unknown Overhead";
  }
}

// Resolves an API callback id to its raw CUPTI name ("cudaLaunchKernel_v7000").
using api_name_lookup = std::function<std::string(api_domain, std::uint32_t cbid)>;

// A CUDA call as the call recorder (call_recorder.hpp) reports it, times in ticks.
struct call_record {
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  std::uint32_t tid = 0;
  std::uint32_t cbid = 0;
  std::uint32_t correlation = 0;
  std::int32_t return_value = 0;
  api_domain domain = api_domain::runtime;
  // For a synchronization call, what CUPTI's SYNCHRONIZATION record would hold:
  // its kind (synchronization_kind()), the call's context and the stream waited
  // on (0 where none applies: a context or event sync).
  std::uint8_t sync_kind = 0;
  std::uint32_t context = 0;
  std::uint32_t stream = 0;
  std::uint32_t stack = no_index;  // with_stack: the call's stack in the store's stacks()
  // The CUDA event (its handle; 0: none) an event sync or a stream's wait
  // waits for, or, with records_event, that the call records on `stream`.
  std::uint64_t event = 0;
  bool records_event = false;
};

// A staged record of a CUDA event (cudaEventRecord): what a later wait on the
// event resolves to, time in ticks.
struct staged_event_record {
  std::uint64_t start = 0;
  std::uint64_t event = 0;  // its handle
  std::uint32_t correlation = 0;
  std::uint32_t stream = 0;
};

// A staged API call: the fields of an api_call that the call's record gives,
// times in ticks (32 bytes, as the api_call it becomes).
struct staged_call {
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  std::uint32_t tid = 0;
  std::uint32_t correlation = 0;
  std::uint16_t kind = 0;  // index into the store's call kinds
  std::int16_t return_value = 0;
  // A driver call folded into this one on arrival: its correlation id minus
  // this one's (0: none, or one that does not fit, kept in the store's list).
  // In the padding: a launch stages no pair of ids for its folded driver call.
  std::int16_t folded_offset = 0;
  api_domain domain = api_domain::runtime;  // its kind's, at hand for the sort and the fold
  std::uint32_t folded_correlation() const { return std::uint32_t(std::int64_t(correlation) + folded_offset); }
};

// A staged GPU record: a gpu_activity less the fields attribution fills,
// times in ticks, what it is and where it ran as indices into the store's
// tables (32 bytes, against 40).
struct staged_gpu {
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  std::uint32_t correlation = 0;
  std::uint32_t lane = 0;            // index into the store's lanes
  std::uint32_t form = 0;            // index into the store's forms: name, kind, subkind
  std::uint32_t details = no_index;  // kernels: index into the store's kernel configurations;
                                     // copies and memsets: into its staged byte counts
};
static_assert(sizeof(staged_call) <= 32 && sizeof(staged_gpu) <= 32, "staged records grew: recording holds more per launch");

// A staged allocation, free or change of a memory pool's size (CUPTI's
// MEMORY2 and MEMORY_POOL records), time in ticks.
struct staged_memory {
  enum class op : std::uint8_t { allocate, release, pool_size };
  std::uint64_t ticks = 0;
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::uint64_t pool = 0;       // the memory pool it comes from (its address), 0: none
  std::uint64_t pool_size = 0;  // that pool's size after it
  std::uint32_t correlation = 0;
  std::uint32_t device = 0;
  op what = op::allocate;
  std::uint8_t memory_kind = 0;  // CUPTI's
};

// The memory in use, from the allocations and frees seen since recording
// began: a window's totals count from there, whatever window they fall in.
class memory_ledger {
 public:
  // Applies one record; fills the event's bytes, totals, device, kind and
  // flags (the rest is the caller's). Returns false for a record that is no
  // event (a free of nothing, or a pool change that changes nothing).
  bool apply(const staged_memory& r, memory_event& e) {
    const bool host = r.memory_kind == memory_kind_pinned || r.memory_kind == memory_kind_pageable;
    e.device = host ? -1 : std::int32_t(r.device);
    e.memory_kind = r.memory_kind;
    e.address = r.address;
    e.flags = r.pool ? memory_from_pool : 0;
    bool is_event = true;
    switch (r.what) {
      case staged_memory::op::allocate: {
        auto [it, added] = live_.try_emplace(r.address, live{r.bytes, e.device, r.pool != 0});
        if (!added) unlink(it->second);  // freed before the profile saw it: replaced
        it->second = live{r.bytes, e.device, r.pool != 0};
        totals& t = totals_[e.device];
        t.allocated += r.bytes;
        if (!r.pool) t.direct += r.bytes;
        e.bytes = std::int64_t(r.bytes);
        break;
      }
      case staged_memory::op::release: {
        auto it = live_.find(r.address);
        // A free of memory allocated before recording began counts what CUPTI says it freed.
        const live freed = it != live_.end() ? it->second : live{r.bytes, e.device, r.pool != 0};
        if (it != live_.end()) live_.erase(it);
        e.device = freed.device;
        unlink(freed);
        e.bytes = -std::int64_t(freed.bytes);
        break;
      }
      case staged_memory::op::pool_size: is_event = false; break;
    }
    if (r.pool) is_event = resize_pool(r.pool, e.device, r.pool_size) || is_event;
    const totals& t = totals_[e.device];
    e.total_allocated = t.allocated;
    e.total_reserved = t.direct + t.pools;
    return is_event;
  }

 private:
  struct live {
    std::uint64_t bytes = 0;
    std::int32_t device = 0;
    bool pooled = false;
  };
  struct totals {
    std::uint64_t allocated = 0;  // every live allocation
    std::uint64_t direct = 0;     // those not from a pool
    std::uint64_t pools = 0;      // what the device's pools hold
  };
  static void take_away(std::uint64_t& total, std::uint64_t bytes) { total = bytes < total ? total - bytes : 0; }
  void unlink(const live& l) {
    totals& t = totals_[l.device];
    take_away(t.allocated, l.bytes);
    if (!l.pooled) take_away(t.direct, l.bytes);
  }
  // Returns whether the pool's size changed.
  bool resize_pool(std::uint64_t pool, std::int32_t device, std::uint64_t size) {
    std::uint64_t& held = pool_sizes_[pool];
    if (held == size) return false;
    totals& t = totals_[device];
    take_away(t.pools, held);
    t.pools += size;
    held = size;
    return true;
  }
  std::unordered_map<std::uint64_t, live> live_;  // by address: one virtual address space for host and devices
  std::unordered_map<std::uint64_t, std::uint64_t> pool_sizes_;
  std::map<std::int32_t, totals> totals_;  // by device, -1 the host
};

// The int16 of a CUDA call's return value (api_call::return_value).
inline std::int16_t narrow_return_value(std::int32_t v) {
  return std::int16_t(std::clamp<std::int32_t>(v, INT16_MIN, INT16_MAX));
}

// Staged records are compact copies of the trace's structs with times still
// in ticks, names as ids in the store's string table and kernel launch
// configurations deduplicated, so a long window costs little memory. A window
// is built from them in storage order, each staged chunk freed once read, so
// that the staged records and the trace do not both stay whole.
class record_store {
 public:
  static constexpr std::size_t default_max_staged = 16u << 20;  // about 1 GiB of records

  explicit record_store(api_name_lookup lookup, std::size_t max_staged = default_max_staged)
      : lookup_(std::move(lookup)), max_staged_(max_staged) {}

  // Converts one CUPTI activity record; records of kinds cuprof does not show
  // are ignored. API calls and synchronizations come through add_call() instead.
  void add(const CUpti_Activity* record) {
    if (at_cap()) return;
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: add_kernel(*reinterpret_cast<const CUpti_ActivityKernel10*>(record)); break;
      case CUPTI_ACTIVITY_KIND_MEMCPY: add_memcpy(*reinterpret_cast<const CUpti_ActivityMemcpy6*>(record)); break;
      case CUPTI_ACTIVITY_KIND_MEMSET: add_memset(*reinterpret_cast<const CUpti_ActivityMemset4*>(record)); break;
      case CUPTI_ACTIVITY_KIND_MARKER: add_marker(*reinterpret_cast<const CUpti_ActivityMarker2*>(record)); break;
      case CUPTI_ACTIVITY_KIND_MEMORY2: add_memory(*reinterpret_cast<const CUpti_ActivityMemory4*>(record)); break;
      case CUPTI_ACTIVITY_KIND_MEMORY_POOL: add_memory_pool(*reinterpret_cast<const CUpti_ActivityMemoryPool3*>(record)); break;
      case CUPTI_ACTIVITY_KIND_OVERHEAD: {
        const auto& o = *reinterpret_cast<const CUpti_ActivityOverhead3*>(record);
        overhead_.push_back({o.start, o.end, names_.intern(overhead_kind_name(o.overheadKind))});
        break;
      }
      default: break;
    }
  }

  // Stages one CUDA call, and a synchronization's record; calls cuprof does
  // not show (classify_api) are dropped.
  void add_call(const call_record& r) {
    if (at_cap()) return;
    ++api_changes_;
    const std::uint32_t kind = api_kind(r.domain, r.cbid);
    if (kind == no_index) return;
    // Among the calls kept only: a hidden call's id can be older than the
    // recording (cuProfilerStart, made inside the cudaProfilerStart that
    // waited for the window to open, while other threads launched).
    if (r.start >= recording_since_) first_recorded_id_ = std::min(first_recorded_id_, r.correlation);
    if (r.stack != no_index) stacks_.link(r.correlation, r.start, r.stack);
    if (r.sync_kind) add_sync(r);
    if (r.records_event && r.event && r.return_value == 0) event_records_.push_back({r.start, r.event, r.correlation, r.stream});
    staged_call c;
    c.start_ns = r.start;
    c.end_ns = r.end;
    c.tid = r.tid;
    c.kind = std::uint16_t(kind);
    c.correlation = r.correlation;
    c.return_value = narrow_return_value(r.return_value);
    c.domain = r.domain;
    // A driver call made inside a runtime call (cudaLaunchKernel -> cuLaunchKernel)
    // is folded into it on arrival, whichever of the two records comes first:
    // one staged call per launch instead of two. select() folds what this misses
    // (records of other threads in between).
    if (!api_.empty() && folds_into(api_.back(), c)) return fold(api_.back(), c.correlation);
    while (!api_.empty() && folds_into(c, api_.back())) {
      fold(c, api_.back().correlation);
      api_.pop_back();
    }
    api_.push_back(c);
  }

  void add_dropped(std::uint64_t n) { dropped_ += n; }
  // Calls the call recorder lost for want of memory (CUPROF_MAX_CPU_EVENTS).
  void add_dropped_calls(std::uint64_t n) { dropped_calls_ += n; }

  // Stages one NCCL call (nvtx_recorder.hpp), its time in ticks; tied to its
  // NVTX range when its window is taken (attach_collectives).
  void add_collective(const collective_call& c) {
    if (at_cap()) return;
    collectives_.push_back(c);
  }

  // The recording the calls drained from now on belong to began at `since`
  // (call_recorder::start_recording): the lowest call id staged since then
  // tells GPU work of calls made before it apart from work of unrecorded calls.
  void note_recording(std::uint64_t since) {
    if (since == recording_since_) return;
    recording_since_ = since;
    first_recorded_id_ = no_index;
  }

  // Every call that started before `ticks` is staged but those still in
  // progress then, whose starts are `running` (one a thread at most): the
  // call recorder's drain says so. Without a recorder (tests feeding calls
  // themselves), all are.
  void set_call_horizon(std::uint64_t ticks, const std::vector<std::uint64_t>& running) {
    drained_at_ = ticks;
    running_calls_ = running;
  }
  // Every call that started in [start, end] is staged. A call in progress
  // that started before `start` is no matter: it is not the window's.
  bool calls_complete_through(std::uint64_t start, std::uint64_t end) const noexcept {
    if (drained_at_ <= end) return false;
    for (const std::uint64_t r : running_calls_)
      if (r >= start && r <= end) return false;
    return true;
  }

  // True when every call that started in [start, end] is staged and every
  // launch, copy and memset among them has its GPU record staged: the window
  // can be finalised without a device sync.
  bool window_complete(std::uint64_t start, std::uint64_t end) {
    if (!calls_complete_through(start, end)) return false;
    window_calls w = select(start, end);
    std::vector<char> has_record(w.kept.size(), 0);
    gpu_.for_each([&](const staged_gpu& g) {
      const std::uint32_t pos = w.owner.find(g.correlation);
      if (pos != no_index) has_record[pos] = 1;
    });
    for (std::size_t pos = 0; pos < w.kept.size(); ++pos) {
      const staged_call& c = api_[w.kept[pos]];
      if (!has_record[pos] && call_kinds_[c.kind].expects_gpu_record && c.return_value == 0) return false;
    }
    // take() of this window comes next: it reuses the selection unless API
    // records arrived in between. Kept only now, not while the window waits.
    checked_ = checked_window{start, end, api_changes_, std::move(w)};
    return true;
  }

  // Moves the window's records into `out` and drops staged records that
  // belong to no later window.
  void take(trace& out, std::uint64_t start, std::uint64_t end, const tick_converter& clock) {
    window_calls w = selection(start, end);
    std::vector<name_id> names(names_.size(), no_index);
    const auto name_in_out = [&](name_id id) {
      if (names[id] == no_index) names[id] = out.names.intern(names_.str(id));
      return names[id];
    };
    std::vector<std::uint32_t> kinds(call_kinds_.size(), no_index);
    const auto kind_in_out = [&](std::uint16_t store_kind) {
      std::uint32_t& k = kinds[store_kind];
      if (k == no_index) {
        call_kind shown = call_kinds_[store_kind].kind;
        shown.name = name_in_out(shown.name);
        k = out.add_call_kind(shown);  // the store has fewer than 2^16 kinds, so out's first window does
      }
      return std::uint16_t(k);
    };
    // Ticks to epoch ns, the kind into out's table: done once the calls are
    // in call order, which the sort compares in ticks and store kinds.
    const auto finish = [&](api_call& c) {
      c.start_ns = clock.to_epoch_ns(c.start_ns);
      c.end_ns = std::max(c.start_ns, clock.to_epoch_ns(c.end_ns));
      c.kind = kind_in_out(c.kind);
    };
    // The window's calls are copied in storage order as their chunks are
    // freed, then put in the order select() gave them unless storage order
    // was that already (as it is for one thread), so that
    // out.api_calls[first_call + pos] is w.kept[pos].
    const std::uint32_t first_call = std::uint32_t(out.api_calls.size());
    out.api_calls.reserve(out.api_calls.size() + w.kept.size());
    populating_appender<api_call> calls_out(out.api_calls);
    chunked_vector<staged_call> later_api;
    // By position: 1 + the kind of GPU work the call still owes (kernel, memcpy, memset), 0 none.
    std::vector<std::uint8_t> owed(w.kept.size(), 0);
    std::vector<std::uint32_t> later_ids;  // the later calls' correlation ids: their GPU records stay
    std::size_t index = 0;
    api_.consume([&](const staged_call& staged) {
      const std::size_t i = index++;
      if (staged.start_ns > end) {
        later_api.push_back(staged);
        later_ids.push_back(staged.correlation);
        if (staged.folded_offset) later_ids.push_back(staged.folded_correlation());
        return;
      }
      const std::uint32_t pos = w.owner.find(staged.correlation);
      if (pos == no_index || w.kept[pos] != i) return;  // before the window, or folded into a kept call
      const staged_kind& k = call_kinds_[staged.kind];
      if (k.expects_gpu_record && staged.return_value == 0) owed[pos] = std::uint8_t(1 + k.work);
      api_call c;
      c.start_ns = staged.start_ns;
      c.end_ns = staged.end_ns;
      c.tid = staged.tid;
      c.kind = staged.kind;
      c.correlation = staged.correlation;
      c.return_value = staged.return_value;
      if (w.in_order) finish(c);
      calls_out.push_back(c);
    });
    api_ = std::move(later_api);
    if (!w.in_order) {
      std::sort(out.api_calls.begin() + first_call, out.api_calls.end(), [&](const api_call& x, const api_call& y) {
        return call_order(x, call_kinds_[x.kind].kind.domain, y, call_kinds_[y.kind].kind.domain);
      });
      for (auto c = out.api_calls.begin() + first_call; c != out.api_calls.end(); ++c) finish(*c);
    }
    stacks_.take(out, first_call, w.owner, end, !discarding_);
    // The GPU records need only the index: the list of kept calls (4 bytes
    // a call) goes before they are converted, where take() peaks.
    std::vector<std::uint32_t>().swap(w.kept);

    std::vector<std::uint32_t> configs(kernel_configs_.size(), no_index);
    std::vector<std::uint32_t> lanes(lanes_.size(), no_index);
    std::unordered_map<gpu_lane, std::uint32_t, gpu_lane_hash> out_lanes;
    for (std::uint32_t i = 0; i < out.gpu_lanes.size(); ++i) out_lanes.emplace(out.gpu_lanes[i], i);
    // A sync's lane has its device once a kernel or copy showed the context's.
    const auto lane_in_out = [&](std::uint32_t store_lane) {
      std::uint32_t& l = lanes[store_lane];
      if (l == no_index) {
        gpu_lane shown = lanes_[store_lane];
        if (shown.device == unknown_device) shown.device = device_of_context(shown.context);
        auto [it, added] = out_lanes.try_emplace(shown, std::uint32_t(out.gpu_lanes.size()));
        if (added) out.gpu_lanes.push_back(shown);
        l = it->second;
      }
      return l;
    };
    chunked_vector<staged_gpu> later;
    chunked_vector<std::uint64_t> later_bytes;
    const auto unlinked_in_window = [&](const staged_gpu& g) {
      return g.correlation == 0 && g.start_ns >= start && g.start_ns <= end;
    };
    std::sort(later_ids.begin(), later_ids.end());
    const std::size_t later_calls = later_ids.size();
    for (const auto& [inner, outer] : folded_)
      if (std::binary_search(later_ids.begin(), later_ids.begin() + std::ptrdiff_t(later_calls), outer))
        later_ids.push_back(inner);
    std::sort(later_ids.begin(), later_ids.end());
    // The newest call ever left out for starting before its window: an unknown
    // id at or below it is such a call's (or one never recorded between windows).
    newest_left_out_ = std::max(newest_left_out_, discarding_ && !w.owner.empty() ? w.owner.highest() : w.newest_before);
    // Every call that started before it is staged: GPU work of an unknown call older than it has no call to wait for.
    std::uint64_t call_horizon = drained_at_;
    for (const std::uint64_t r : running_calls_) call_horizon = std::min(call_horizon, r);
    window_edges& edges = out.meta.edges;
    const auto edge_kind = [&](const staged_gpu& g) { return std::size_t(forms_[g.form].kind); };
    // Reserving every staged record costs address space, not memory: pages
    // are touched as records are written, and staged chunks freed as read.
    out.gpu.reserve(out.gpu.size() + gpu_.size());
    populating_appender<gpu_activity> gpu_out(out.gpu);
    std::vector<std::uint64_t> lane_busy_until;  // by out lane: the latest end of the work taken on it so far
    const event_wait_resolver resolve_wait(*this, out, w, first_call, start, end);
    chunked_vector<std::uint64_t> later_waited;
    gpu_.consume([&](const staged_gpu& staged) {
      const std::uint32_t pos = w.owner.find(staged.correlation);
      if (pos == no_index && !unlinked_in_window(staged)) {
        // Not this window's: its call's later, or not staged yet, which only
        // a record newer than the call horizon can wait for (it stays); its
        // call was made before the window or the recording, or never recorded
        // (it goes, counted where it ran in the window).
        const std::uint32_t id = staged.correlation;
        const bool sync = forms_[staged.form].kind == gpu_kind::sync;
        bool stays = false;
        if (id == 0) {
          stays = staged.start_ns > end;
        } else if (std::binary_search(later_ids.begin(), later_ids.end(), id) ||
                   (staged.start_ns >= call_horizon && staged.start_ns != 0)) {
          stays = true;
        } else if (id <= newest_left_out_ || id < first_recorded_id_) {
          if (!sync && staged.end_ns >= start && staged.start_ns <= end) ++edges.launched_before[edge_kind(staged)];
        } else if (!sync && staged.start_ns <= end) {
          ++edges.gpu_work_without_call[edge_kind(staged)];
        } else {
          stays = !sync;  // after the window: a later window's to count
        }
        if (stays) {
          staged_gpu kept = staged;
          if (moves_bytes(staged)) {
            kept.details = std::uint32_t(later_bytes.size());
            later_bytes.push_back(bytes_[staged.details]);
          } else if (waits_for_event(staged)) {
            kept.details = std::uint32_t(later_waited.size());
            later_waited.push_back(waited_events_[staged.details]);
          }
          later.push_back(kept);
        }
        return;
      }
      const gpu_form& form = forms_[staged.form];
      if (pos != no_index) owed[pos] = 0;
      gpu_activity a;
      a.name = name_in_out(form.name);
      // Folded calls' records belong to the outer call.
      a.correlation = pos != no_index ? out.api_calls[first_call + pos].correlation : staged.correlation;
      a.lane = lane_in_out(staged.lane);
      if (a.lane >= lane_busy_until.size()) lane_busy_until.resize(std::size_t(a.lane) + 1, 0);
      if (form.timing_unknown) {
        // No earlier than its launch returned, nor than what its stream ran before it; 0 ns.
        const std::uint64_t launched = pos != no_index ? out.api_calls[first_call + pos].end_ns : 0;
        a.start_ns = a.end_ns = std::max(launched, lane_busy_until[a.lane]);
        a.flags = gpu_timing_unknown;
      } else {
        a.start_ns = clock.to_epoch_ns(staged.start_ns);
        a.end_ns = std::max(a.start_ns, clock.to_epoch_ns(staged.end_ns));
      }
      // A sync record's times are its call's, on the CPU: not work the stream ran.
      if (form.kind != gpu_kind::sync) lane_busy_until[a.lane] = std::max(lane_busy_until[a.lane], a.end_ns);
      a.kind = form.kind;
      a.subkind = form.subkind;
      if (moves_bytes(staged)) {
        out.set_bytes(a, bytes_[staged.details]);
      } else if (form.kind == gpu_kind::sync) {
        if (staged.details != no_index) out.set_wait(a, resolve_wait(waited_events_[staged.details], staged.start_ns));
      } else if (staged.details != no_index) {
        std::uint32_t& config = configs[staged.details];
        if (config == no_index) {
          config = std::uint32_t(out.kernels.size());
          out.kernels.push_back(kernel_configs_[staged.details]);
        }
        a.details = config;
      }
      gpu_out.push_back(a);
    });
    gpu_ = std::move(later);
    bytes_ = std::move(later_bytes);
    waited_events_ = std::move(later_waited);
    for (const std::uint8_t k : owed)
      if (k) ++edges.calls_without_gpu_work[k - 1];
    // The calls still in progress when the calls were last drained that started in the window.
    for (const std::uint64_t running : running_calls_) edges.calls_running_at_end += running >= start && running <= end;
    // A wait in a later window resolves to records in that window only.
    event_records_.erase(std::remove_if(event_records_.begin(), event_records_.end(),
                                        [&](const staged_event_record& r) { return r.start <= end; }),
                         event_records_.end());

    std::vector<cpu_span> later_ranges;
    for (const cpu_span& r : nvtx_ranges_) {
      if (r.start_ns > end) {
        later_ranges.push_back(r);
      } else if (r.start_ns >= start) {
        cpu_span span = r;
        span.start_ns = clock.to_epoch_ns(r.start_ns);
        span.end_ns = std::max(span.start_ns, clock.to_epoch_ns(std::min(r.end_ns, end)));
        span.name = name_in_out(r.name);
        out.spans.push_back(span);
      }
    }
    nvtx_ranges_.swap(later_ranges);

    std::vector<collective_call> later_collectives;
    for (const collective_call& c : collectives_) {
      if (c.ts_ns > end) {
        later_collectives.push_back(c);
      } else if (c.ts_ns >= start) {
        out.collectives.push_back(c);
        out.collectives.back().ts_ns = clock.to_epoch_ns(c.ts_ns);
      }
    }
    collectives_.swap(later_collectives);

    std::vector<overhead_span> later_overhead;
    for (const overhead_span& o : overhead_) {
      if (o.end_ns < start) continue;
      if (o.start_ns > end) {
        later_overhead.push_back(o);
        continue;
      }
      overhead_span s;
      s.start_ns = clock.to_epoch_ns(std::max(o.start_ns, start));
      s.end_ns = std::max(s.start_ns, clock.to_epoch_ns(std::min(o.end_ns, end)));
      s.name = name_in_out(o.name);
      out.overhead.push_back(s);
    }
    overhead_.swap(later_overhead);

    take_memory(out, w, first_call, start, end, clock);

    // Ids of calls whose API record has not arrived yet are newer than any taken call.
    const std::uint32_t newest_taken = w.owner.empty() ? 0 : w.owner.highest();
    std::vector<std::pair<std::uint32_t, std::uint32_t>> later_folded;
    for (const auto& f : folded_)
      if (f.second > newest_taken) later_folded.push_back(f);
    folded_.swap(later_folded);

    out.meta.dropped_gpu_records += dropped_ + lost_timestamps_ + over_cap_;
    if (dropped_ + lost_timestamps_ + over_cap_)
      out.meta.dropped_gpu_detail = std::to_string(dropped_) + " dropped by CUPTI, " + std::to_string(lost_timestamps_) +
                                    " without valid timestamps, " + std::to_string(over_cap_) + " over CUPROF_MAX_RECORDS";
    dropped_ = lost_timestamps_ = over_cap_ = 0;
    out.meta.dropped_cpu_events += dropped_calls_;
    dropped_calls_ = 0;
  }

  // Everything recorded before `ticks` is discarded (warmup).
  void discard_before(std::uint64_t ticks) {
    trace scratch;
    discarding_ = true;  // its calls' stacks are not symbolized
    take(scratch, 0, ticks ? ticks - 1 : 0, tick_converter{});
    discarding_ = false;
  }

  void clear() {
    checked_.reset();
    api_.clear();
    gpu_.clear();
    bytes_.clear();
    waited_events_.clear();
    std::vector<staged_event_record>().swap(event_records_);
    event_ids_.clear();
    std::vector<overhead_span>().swap(overhead_);
    std::vector<cpu_span>().swap(nvtx_ranges_);
    std::vector<collective_call>().swap(collectives_);
    std::vector<staged_memory>().swap(memory_);
    ledger_ = memory_ledger();
    open_ranges_.clear();
    std::vector<std::pair<std::uint32_t, std::uint32_t>>().swap(folded_);
    stacks_.clear();
    dropped_ = lost_timestamps_ = over_cap_ = dropped_calls_ = 0;  // after the last window: not the next one's
    running_calls_.clear();
    newest_left_out_ = first_recorded_id_ = 0;  // a new CUPTI session numbers its calls afresh
    recording_since_ = 0;
  }

  // The native call stacks (with_stack) the call recorder publishes.
  stack_store& stacks() noexcept { return stacks_; }

  std::size_t staged() const noexcept {
    return api_.size() + gpu_.size() + overhead_.size() + nvtx_ranges_.size() + memory_.size() + event_records_.size() +
           collectives_.size();
  }

 private:
  // The API calls a window keeps. A driver call made inside a runtime call on
  // the same thread (cudaLaunchKernel -> cuLaunchKernel) is folded into it, as
  // torch shows only the outer call: its correlation id maps to the outer call.
  struct window_calls {
    std::vector<std::uint32_t> kept;  // indices into api_, in call_order
    detail::correlation_index owner;  // correlation (kept or folded) -> position in `kept`
    std::uint32_t newest_before = 0;  // highest correlation id called before the window
    bool in_order = true;             // storage order is call order: `kept` needed no sort
  };

  // A wait on a CUDA event -> what it waited for: the event's latest record in
  // the window that started before the wait (a handle is reused once its event
  // is destroyed: the latest record is the new event's), its correlation id
  // the call's that the trace shows (a nested driver call's is its runtime
  // call's). A record before the window is not resolved: its call is not in
  // the trace (Kineto writes -1 too). The event's number is one per handle.
  class event_wait_resolver {
   public:
    event_wait_resolver(record_store& store, const trace& out, const window_calls& w, std::uint32_t first_call,
                        std::uint64_t start, std::uint64_t end)
        : ids_(store.event_ids_) {
      if (store.waited_events_.empty()) return;
      std::vector<staged_event_record>& records = store.event_records_;
      std::stable_sort(records.begin(), records.end(),
                       [](const staged_event_record& a, const staged_event_record& b) { return a.start < b.start; });
      for (const staged_event_record& r : records) {
        if (r.start < start || r.start > end) continue;
        const std::uint32_t pos = w.owner.find(r.correlation);
        const std::uint32_t shown = pos != no_index ? out.api_calls[first_call + pos].correlation : r.correlation;
        by_event_[r.event].push_back({r.start, shown, r.stream});
      }
    }
    event_wait operator()(std::uint64_t event, std::uint64_t wait_start) const {
      event_wait e;
      auto [id, added] = ids_.try_emplace(event, std::uint32_t(ids_.size() + 1));
      e.event = id->second;
      const auto it = by_event_.find(event);
      if (it == by_event_.end()) return e;
      const std::vector<record>& v = it->second;
      const auto after = std::partition_point(v.begin(), v.end(), [&](const record& r) { return r.start < wait_start; });
      if (after == v.begin()) return e;
      e.stream = std::prev(after)->stream;
      e.record_correlation = std::prev(after)->correlation;
      return e;
    }

   private:
    struct record {
      std::uint64_t start;
      std::uint32_t correlation, stream;
    };
    std::unordered_map<std::uint64_t, std::uint32_t>& ids_;
    std::unordered_map<std::uint64_t, std::vector<record>> by_event_;  // each event's records in the window, by start
  };

  bool waits_for_event(const staged_gpu& g) const { return forms_[g.form].kind == gpu_kind::sync && g.details != no_index; }

  // The window's allocations and frees, in time order, with the memory in
  // use after each; those before it count towards the totals only.
  void take_memory(trace& out, const window_calls& w, std::uint32_t first_call, std::uint64_t start, std::uint64_t end,
                   const tick_converter& clock) {
    if (memory_.empty()) return;
    std::stable_sort(memory_.begin(), memory_.end(),
                     [](const staged_memory& a, const staged_memory& b) { return a.ticks < b.ticks; });
    std::size_t taken = 0;
    for (; taken < memory_.size() && memory_[taken].ticks <= end; ++taken) {
      const staged_memory& r = memory_[taken];
      memory_event e;
      if (!ledger_.apply(r, e) || r.ticks < start) continue;
      e.ts_ns = clock.to_epoch_ns(r.ticks);
      // A driver call's record belongs to the runtime call it was folded into.
      const std::uint32_t pos = r.correlation ? w.owner.find(r.correlation) : no_index;
      e.correlation = pos != no_index ? out.api_calls[first_call + pos].correlation : r.correlation;
      if (pos != no_index) {
        if (is_virtual_memory_call(out.names.str(out.name_of(out.api_calls[first_call + pos])))) e.flags |= memory_virtual;
      }
      out.memory.push_back(e);
    }
    memory_.erase(memory_.begin(), memory_.begin() + std::ptrdiff_t(taken));
  }

  // The order of a window's calls: by thread, then start, the runtime call
  // before the driver call it makes; the correlation id makes it total, so
  // that the staged calls and the trace's sort alike.
  template <class Call>
  static bool call_order(const Call& x, api_domain x_domain, const Call& y, api_domain y_domain) {
    if (x.tid != y.tid) return x.tid < y.tid;
    if (x.start_ns != y.start_ns) return x.start_ns < y.start_ns;
    if (x_domain != y_domain) return x_domain < y_domain;
    return x.correlation < y.correlation;
  }
  static bool call_order(const staged_call& x, const staged_call& y) { return call_order(x, x.domain, y, y.domain); }

  // What window_complete() found for the window it passed, to be taken next.
  struct checked_window {
    std::uint64_t start = 0, end = 0;
    std::uint64_t api_changes = 0;  // api_changes_ then
    window_calls calls;
  };

  // The window's calls: window_complete()'s selection if no API record
  // arrived since, else selected anew.
  window_calls selection(std::uint64_t start, std::uint64_t end) {
    std::optional<checked_window> checked = std::move(checked_);
    checked_.reset();
    if (checked && checked->start == start && checked->end == end && checked->api_changes == api_changes_)
      return std::move(checked->calls);
    return select(start, end);
  }

  window_calls select(std::uint64_t start, std::uint64_t end) const {
    window_calls w;
    std::vector<std::uint32_t> in_window;  // fits: staged records are capped far below 4 Gi
    // Found on the way: whether storage order is already call order, and the
    // bounds and count of the correlation ids the index will hold.
    bool& in_order = w.in_order;
    const staged_call* previous = nullptr;
    std::uint32_t lowest = no_index, highest = 0;
    std::size_t ids = 0;
    const auto count_id = [&](std::uint32_t id) { lowest = std::min(lowest, id), highest = std::max(highest, id), ++ids; };
    for (std::size_t i = 0; i < api_.size(); ++i) {
      const staged_call& c = api_[i];
      if (c.start_ns < start) {
        w.newest_before = std::max({w.newest_before, c.correlation, c.folded_correlation()});
      } else if (c.start_ns <= end) {
        in_window.push_back(std::uint32_t(i));
        in_order = in_order && (!previous || !call_order(c, *previous));
        previous = &c;
        count_id(c.correlation);
        if (c.folded_offset) count_id(c.folded_correlation());
      }
    }
    if (!in_order)
      std::sort(in_window.begin(), in_window.end(),
                [&](std::uint32_t a, std::uint32_t b) { return call_order(api_[a], api_[b]); });
    // Each window call's correlation ids (its own, and those of the calls
    // folded into it) -> its position in `kept`; the kept calls are listed
    // on the first pass.
    bool kept_listed = false;
    w.kept.reserve(in_window.size());
    const auto window_entries = [&](auto&& add) {
      const staged_call* outer = nullptr;
      std::uint32_t next_pos = 0, outer_pos = 0;
      for (std::uint32_t i : in_window) {
        const staged_call& c = api_[i];
        if (outer && folds_into(*outer, c)) {
          add(c.correlation, outer_pos);
          continue;
        }
        const std::uint32_t pos = next_pos++;
        if (!kept_listed) w.kept.push_back(i);
        if (c.domain == api_domain::runtime) outer = &c, outer_pos = pos;
        add(c.correlation, pos);
        if (c.folded_offset) add(c.folded_correlation(), pos);
      }
      kept_listed = true;
    };
    w.owner.build_from(lowest, highest, ids, window_entries);
    if (!folded_.empty()) {  // the other calls folded on arrival map to their outer call's position
      std::vector<std::pair<std::uint32_t, std::uint32_t>> also;
      for (const auto& [inner, outer] : folded_) {
        const std::uint32_t pos = w.owner.find(outer);
        if (pos != no_index) also.emplace_back(inner, pos);
        else if (outer <= w.newest_before) w.newest_before = std::max(w.newest_before, inner);
      }
      if (!also.empty())
        w.owner.build_from([&](auto&& add) {
          window_entries(add);
          for (const auto& [inner, pos] : also) add(inner, pos);
        });
    }
    return w;
  }

  // The index of a call's kind in call_kinds_, or no_index when the call is
  // dropped as noise. Callback ids are below 2^16 (CUPTI's are below 2^11).
  std::uint32_t api_kind(api_domain domain, std::uint32_t cbid) {
    auto& cache = domain == api_domain::runtime ? runtime_kinds_ : driver_kinds_;
    if (cbid > 0xFFFF) return no_index;
    if (cbid >= cache.size()) cache.resize(std::size_t(cbid) + 1);
    cached_api& entry = cache[cbid];
    if (!entry.known) {
      std::string raw = lookup_ ? lookup_(domain, cbid) : std::string();
      if (raw.empty()) raw = "cbid " + std::to_string(cbid);
      const std::string_view shown = api_base_name(raw);
      const api_class c = classify_api(domain, shown);
      if (c.display_name) {
        entry.kind = std::uint32_t(call_kinds_.size());
        const gpu_kind work = is_copy(shown) ? gpu_kind::memcpy : is_memset(shown) ? gpu_kind::memset : gpu_kind::kernel;
        call_kinds_.push_back(
            {{names_.intern(shown), std::uint16_t(cbid), domain, c.has_flow}, c.expects_gpu_record, std::uint8_t(work)});
      }
      entry.known = true;
    }
    return entry.kind;
  }

  bool moves_bytes(const staged_gpu& g) const { return cuprof::moves_bytes(forms_[g.form].kind); }

  // The store's index of what a GPU record is; records come in runs of one.
  std::uint32_t form_index(name_id name, gpu_kind kind, std::uint8_t subkind, bool timing_unknown = false) {
    const std::uint64_t key =
        std::uint64_t(name) << 17 | std::uint64_t(timing_unknown) << 16 | std::uint64_t(kind) << 8 | subkind;
    if (last_form_.first == key) return last_form_.second;
    auto [it, added] = form_by_key_.try_emplace(key, std::uint32_t(forms_.size()));
    if (added) forms_.push_back({name, kind, subkind, timing_unknown});
    last_form_ = {key, it->second};
    return it->second;
  }

  // The store's index of where a GPU record ran; records come in runs of one.
  std::uint32_t lane_index(const gpu_lane& l) {
    if (last_lane_.first == l) return last_lane_.second;
    auto [it, added] = lane_by_value_.try_emplace(l, std::uint32_t(lanes_.size()));
    if (added) lanes_.push_back(l);
    last_lane_ = {l, it->second};
    return it->second;
  }

  name_id kernel_name(const char* mangled) {
    if (!mangled) return names_.intern("(unnamed kernel)");
    // CUPTI hands the same pointer for every launch of a function; check the
    // characters too, in case a pointer is reused after a module unload.
    if (mangled == last_kernel_.pointer && std::strcmp(last_kernel_.text->c_str(), mangled) == 0) return last_kernel_.name;
    auto seen = by_pointer_.find(mangled);
    if (seen != by_pointer_.end() && std::strcmp(seen->second.first.c_str(), mangled) == 0) {
      last_kernel_ = {mangled, &seen->second.first, seen->second.second};
      return seen->second.second;
    }
    const name_id id = demangle(mangled);
    auto& entry = by_pointer_[mangled];
    entry = {mangled, id};
    last_kernel_ = {mangled, &entry.first, id};
    return id;
  }

  name_id demangle(const char* mangled) {
    auto it = demangled_.find(std::string(mangled));
    if (it != demangled_.end()) return it->second;
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
    const name_id id = names_.intern(status == 0 && out ? std::string_view(out.get()) : std::string_view(mangled));
    demangled_.emplace(mangled, id);
    return id;
  }

  struct config_hash {
    std::size_t operator()(const kernel_details& d) const noexcept {
      std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
      const auto mix = [&](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
      for (int i = 0; i < 3; ++i) mix(d.grid[i]), mix(d.block[i]);
      mix(d.registers_per_thread), mix(d.static_shared_memory), mix(d.dynamic_shared_memory);
      mix(d.graph_id), mix(d.graph_node_id);
      return std::size_t(h);
    }
  };
  struct config_equal {
    bool operator()(const kernel_details& a, const kernel_details& b) const noexcept {
      return std::memcmp(&a, &b, sizeof a) == 0;
    }
  };

  std::uint32_t kernel_config(const kernel_details& d) {
    // Launches come in runs of one configuration: compare with the last before hashing.
    if (last_config_ != no_index && config_equal()(kernel_configs_[last_config_], d)) return last_config_;
    auto [it, inserted] = config_index_.try_emplace(d, std::uint32_t(kernel_configs_.size()));
    if (inserted) kernel_configs_.push_back(d);
    return last_config_ = it->second;
  }

  // Records past CUPROF_MAX_RECORDS are counted, reported with the window's dropped records.
  bool at_cap() {
    if (staged() < max_staged_) return false;
    ++over_cap_;
    return true;
  }

  void fold(staged_call& outer, std::uint32_t inner) {
    if (inner == outer.correlation) return;  // the nested call shares the outer's id: nothing to map
    const std::int64_t offset = std::int64_t(inner) - std::int64_t(outer.correlation);
    if (outer.folded_offset == 0 && offset != 0 && offset >= INT16_MIN && offset <= INT16_MAX)
      outer.folded_offset = std::int16_t(offset);
    else folded_.emplace_back(inner, outer.correlation);
  }

  static bool folds_into(const staged_call& outer, const staged_call& inner) {
    return outer.domain == api_domain::runtime && inner.domain == api_domain::driver && outer.tid == inner.tid &&
           inner.start_ns >= outer.start_ns && inner.end_ns <= outer.end_ns;
  }

  // NVTX ranges pushed by any code in the process (libraries, existing
  // annotations) arrive as START/END marker pairs sharing an id; cuprof's own
  // scopes, emitted to NVTX in the "cuprof" domain for Nsight, are skipped.
  void add_marker(const CUpti_ActivityMarker2& m) {
    if (m.domain && std::strcmp(m.domain, "cuprof") == 0) return;
    if (m.flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
      const std::uint32_t tid = m.objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? m.objectId.pt.threadId : 0;
      open_ranges_[m.id] = {m.timestamp, names_.intern(m.name && *m.name ? m.name : "(unnamed NVTX range)"), tid};
    } else if (m.flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
      auto it = open_ranges_.find(m.id);
      if (it == open_ranges_.end()) return;
      cpu_span span;
      span.start_ns = it->second.start;
      span.end_ns = std::max(m.timestamp, it->second.start);
      span.name = it->second.name;
      span.tid = it->second.tid;
      nvtx_ranges_.push_back(span);
      open_ranges_.erase(it);
    }
  }

  static bool valid_times(std::uint64_t start, std::uint64_t end) { return start != 0 && end >= start; }

  bool lost_times(std::uint64_t start, std::uint64_t end) {
    if (valid_times(start, end)) return false;
    ++lost_timestamps_;  // CUPTI could not time it (start == end == 0)
    return true;
  }

  // A record's times, lane and correlation; `device` is unknown_device for a sync.
  staged_gpu gpu_common(std::uint64_t start, std::uint64_t end, std::uint32_t device, std::uint32_t context, std::uint32_t stream,
                        std::uint32_t correlation) {
    staged_gpu g;
    g.start_ns = start;
    g.end_ns = end;
    g.lane = lane_index({device, context, stream});
    g.correlation = correlation;
    if (device != unknown_device && (context != last_context_.first || device != last_context_.second)) {
      device_by_context_[context] = device;
      last_context_ = {context, device};
    }
    return g;
  }

  // A copy's or memset's byte count, staged beside it.
  void stage_bytes(staged_gpu& g, std::uint64_t bytes) {
    g.details = std::uint32_t(bytes_.size());
    bytes_.push_back(bytes);
  }

  // A kernel without valid times did not complete (CUPTI writes start = end
  // = 0 for one that hit a device-side assert or faulted): the kernel a user
  // most wants to find. It is kept, marked, and placed by its launch when the
  // window is taken; only one with no launch to place it by is counted lost.
  void add_kernel(const CUpti_ActivityKernel10& k) {
    const bool untimed = !valid_times(k.start, k.end);
    if (untimed && k.correlationId == 0) {
      ++lost_timestamps_;
      return;
    }
    staged_gpu g = gpu_common(untimed ? 0 : k.start, untimed ? 0 : k.end, k.deviceId, k.contextId, k.streamId, k.correlationId);
    g.form = form_index(kernel_name(k.name), gpu_kind::kernel, 0, untimed);
    kernel_details d;
    d.grid[0] = std::uint32_t(k.gridX), d.grid[1] = std::uint32_t(k.gridY), d.grid[2] = std::uint32_t(k.gridZ);
    d.block[0] = std::uint32_t(k.blockX), d.block[1] = std::uint32_t(k.blockY), d.block[2] = std::uint32_t(k.blockZ);
    d.registers_per_thread = k.registersPerThread;
    d.static_shared_memory = std::uint32_t(k.staticSharedMemory);
    d.dynamic_shared_memory = std::uint32_t(k.dynamicSharedMemory);
    d.graph_id = k.graphId;
    d.graph_node_id = k.graphNodeId;
    g.details = kernel_config(d);
    gpu_.push_back(g);
  }

  void add_memcpy(const CUpti_ActivityMemcpy6& m) {
    if (lost_times(m.start, m.end)) return;
    staged_gpu g = gpu_common(m.start, m.end, m.deviceId, m.contextId, m.streamId, m.correlationId);
    const name_id name = names_.intern(std::string("Memcpy ") + memcpy_kind_name(m.copyKind) + " (" +
                                       memory_kind_name(m.srcKind) + " -> " + memory_kind_name(m.dstKind) + ")");
    g.form = form_index(name, gpu_kind::memcpy, m.copyKind);
    stage_bytes(g, m.bytes);
    gpu_.push_back(g);
  }

  void add_memset(const CUpti_ActivityMemset4& m) {
    if (lost_times(m.start, m.end)) return;
    staged_gpu g = gpu_common(m.start, m.end, m.deviceId, m.contextId, m.streamId, m.correlationId);
    g.form = form_index(names_.intern(std::string("Memset (") + memory_kind_name(std::uint8_t(m.memoryKind)) + ")"),
                        gpu_kind::memset, 0);
    stage_bytes(g, m.bytes);
    gpu_.push_back(g);
  }

  // Allocations the program made; the static memory of loaded modules
  // (__device__ variables) is not one.
  void add_memory(const CUpti_ActivityMemory4& m) {
    if (m.memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC || m.memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC)
      return;
    staged_memory r;
    if (m.memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION) r.what = staged_memory::op::allocate;
    else if (m.memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE) r.what = staged_memory::op::release;
    else return;
    r.ticks = m.timestamp;
    r.address = m.address;
    r.bytes = m.bytes;
    r.correlation = m.correlationId;
    r.device = m.deviceId;
    r.memory_kind = std::uint8_t(m.memoryKind);
    // A local pool's size is known; an imported one's field holds its owner's process id instead.
    if (m.isAsync && m.memoryPoolConfig.memoryPoolType == CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL) {
      r.pool = m.memoryPoolConfig.address;
      r.pool_size = m.memoryPoolConfig.pool.size;
    }
    memory_.push_back(r);
  }

  // A pool made, trimmed or destroyed: what it holds beyond its allocations
  // (torch's "Total Reserved") changes.
  void add_memory_pool(const CUpti_ActivityMemoryPool3& p) {
    if (p.memoryPoolType != CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL) return;
    staged_memory r;
    r.what = staged_memory::op::pool_size;
    r.ticks = p.timestamp;
    r.correlation = p.correlationId;
    r.device = p.deviceId;
    r.memory_kind = memory_kind_device;
    r.pool = p.address;
    r.pool_size = p.memoryPoolOperationType == CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED ? 0 : p.size;
    memory_.push_back(r);
  }

  // The record CUPTI's SYNCHRONIZATION activity would write, made from the
  // call: that activity costs every runtime call a few hundred ns, shown or
  // not (docs/performance.md), and its times are the call's anyway.
  void add_sync(const call_record& r) {
    staged_gpu g = gpu_common(r.start, r.end, unknown_device, r.context, r.stream, r.correlation);
    g.form = form_index(names_.intern(sync_kind_name(r.sync_kind)), gpu_kind::sync, r.sync_kind);
    if (r.event) {  // an event sync or a stream's wait: resolved when taken
      g.details = std::uint32_t(waited_events_.size());
      waited_events_.push_back(r.event);
    }
    gpu_.push_back(g);
  }

  // Sync records carry a context, not a device: learn the mapping from the
  // kernels and copies (one context per device in practice); resolved when a
  // window is taken, as a sync may arrive before its context's first kernel.
  std::uint32_t device_of_context(std::uint32_t context) const {
    auto it = device_by_context_.find(context);
    return it == device_by_context_.end() ? 0 : it->second;
  }

  struct open_range {
    std::uint64_t start;
    name_id name;
    std::uint32_t tid;
  };

  struct cached_api {
    std::uint32_t kind = no_index;
    bool known = false;
  };

  // A call kind with its name in the store's table, and whether its calls
  // make GPU work the window waits for (launches, copies, memsets).
  struct staged_kind {
    call_kind kind;
    bool expects_gpu_record = false;
    std::uint8_t work = 0;  // the GPU work it makes, as window_edges counts it: 0 kernels, 1 copies, 2 memsets
  };

  // What a GPU record is, with its name in the store's table.
  struct gpu_form {
    name_id name = 0;
    gpu_kind kind = gpu_kind::kernel;
    std::uint8_t subkind = 0;
    bool timing_unknown = false;  // CUPTI gave no valid times: placed when taken (gpu_timing_unknown)
  };

  static constexpr std::uint32_t unknown_device = no_index;  // a sync's lane until its context's device is known

  api_name_lookup lookup_;
  std::size_t max_staged_;
  string_table names_;
  std::vector<staged_kind> call_kinds_;  // what staged calls refer to by `kind`
  std::vector<gpu_form> forms_;          // what staged GPU records refer to by `form`
  std::unordered_map<std::uint64_t, std::uint32_t> form_by_key_;
  std::pair<std::uint64_t, std::uint32_t> last_form_{~std::uint64_t(0), 0};
  std::vector<gpu_lane> lanes_;  // what staged GPU records refer to by `lane`
  std::unordered_map<gpu_lane, std::uint32_t, gpu_lane_hash> lane_by_value_;
  std::pair<gpu_lane, std::uint32_t> last_lane_{{no_index, no_index, no_index}, no_index};
  std::unordered_map<std::string, name_id> demangled_;
  std::unordered_map<const char*, std::pair<std::string, name_id>> by_pointer_;
  struct {
    const char* pointer = nullptr;
    const std::string* text = nullptr;  // in by_pointer_, whose nodes do not move
    name_id name = 0;
  } last_kernel_;
  std::unordered_map<kernel_details, std::uint32_t, config_hash, config_equal> config_index_;
  std::vector<kernel_details> kernel_configs_;
  std::uint32_t last_config_ = no_index;
  std::vector<cached_api> runtime_kinds_, driver_kinds_;  // by callback id
  std::unordered_map<std::uint32_t, std::uint32_t> device_by_context_;
  std::pair<std::uint32_t, std::uint32_t> last_context_{no_index, 0};  // the last pair written there
  chunked_vector<staged_call> api_;
  chunked_vector<staged_gpu> gpu_;
  chunked_vector<std::uint64_t> bytes_;                         // the staged copies' and memsets' byte counts
  chunked_vector<std::uint64_t> waited_events_;                 // the staged event syncs' and waits' event handles
  std::vector<staged_event_record> event_records_;              // cudaEventRecord and the like, not yet taken
  std::unordered_map<std::uint64_t, std::uint32_t> event_ids_;  // event handle -> its number (event_wait::event)
  std::vector<overhead_span> overhead_;
  std::vector<cpu_span> nvtx_ranges_;                            // ticks, store name ids
  std::vector<collective_call> collectives_;                     // NCCL calls, ticks
  std::vector<staged_memory> memory_;                            // allocations, frees, pool changes
  memory_ledger ledger_;                                         // the memory in use, from all taken so far
  std::unordered_map<std::uint32_t, open_range> open_ranges_;    // NVTX range id -> its start
  std::vector<std::pair<std::uint32_t, std::uint32_t>> folded_;  // (driver call, runtime call it is inside),
                                                                 // those not in the runtime call's folded_offset
  std::uint64_t drained_at_ = ~std::uint64_t(0);                 // the calls' last drain (set_call_horizon)
  std::vector<std::uint64_t> running_calls_;                     // the starts of the calls in progress then
  std::uint64_t recording_since_ = 0;                            // note_recording()'s
  std::uint32_t first_recorded_id_ = 0;                          // the lowest call id staged since then; 0 without a recorder
  std::uint32_t newest_left_out_ = 0;                            // the newest call id a take() left out as before its window
  std::uint64_t api_changes_ = 0;  // API records added: a checked window's selection is stale after one
  std::optional<checked_window> checked_;
  std::uint64_t dropped_ = 0;
  std::uint64_t lost_timestamps_ = 0;
  std::uint64_t over_cap_ = 0;
  std::uint64_t dropped_calls_ = 0;
  stack_store stacks_;
  bool discarding_ = false;  // inside discard_before()
};

}  // namespace cuprof::detail::cupti
