// CUPTI activity records -> cuprof events. Pure functions over CUPTI's plain C
// structs, so tests feed them synthetic records on a machine with no GPU.
//
// Records are staged with raw clock ticks until a window closes; then the
// window's API calls, the GPU work they caused and CUPTI's overhead inside it
// are moved into the trace and converted to epoch nanoseconds.
#pragma once

#include "../../event.hpp"
#include "../clock.hpp"

#include <cupti_activity.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
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

inline bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// "cudaLaunchKernel_ptsz_v7000" -> "cudaLaunchKernel"; "___cudaLaunchKernel_v13000" (the
// CUDA 13 <<<>>> path) -> "cudaLaunchKernel", the names HTA and users look for.
inline std::string display_api_name(std::string_view raw) {
  std::string name(raw);
  const std::size_t v = name.rfind("_v");
  if (v != std::string::npos && v + 2 < name.size() &&
      name.find_first_not_of("0123456789", v + 2) == std::string::npos)
    name.erase(v);
  if (name.size() > 5 && name.compare(name.size() - 5, 5, "_ptsz") == 0) name.erase(name.size() - 5);
  if (name.size() > 5 && name.compare(name.size() - 5, 5, "_ptds") == 0) name.erase(name.size() - 5);
  const std::size_t first = name.find_first_not_of('_');
  if (first != 0 && first != std::string::npos) name.erase(0, first);
  return name;
}

// Mirrors what Kineto keeps: every runtime call but a few getters, and on the
// driver side only launches, copies, memsets, syncs, occupancy queries and
// virtual-memory calls (cuBLAS makes many other driver calls per GEMM).
inline api_class classify_api(api_domain domain, std::string_view name) {
  api_class c;
  static constexpr const char* runtime_noise[] = {"cudaGetDevice",  "cudaSetDevice",           "cudaGetLastError",
                                                  "cudaPeekAtLastError", "cudaEventCreate", "cudaEventCreateWithFlags",
                                                  "cudaEventDestroy"};
  static constexpr const char* driver_kept[] = {
      "cuLaunch", "cuGraphLaunch", "cuMemcpy", "cuMemset", "cuOccupancy", "cuCtxSynchronize", "cuStreamSynchronize",
      "cuEventSynchronize", "cuStreamWaitEvent", "cuMemCreate", "cuMemMap", "cuMemUnmap", "cuMemRelease",
      "cuMemExportToShareableHandle", "cuMemImportFromShareableHandle"};
  static constexpr const char* work_prefixes[] = {"cudaLaunch", "cudaGraphLaunch", "cudaMemcpy", "cudaMemset",
                                                  "cuLaunch",   "cuGraphLaunch",   "cuMemcpy",   "cuMemset"};
  static constexpr const char* sync_names[] = {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
                                               "cudaStreamWaitEvent", "cuCtxSynchronize", "cuStreamSynchronize",
                                               "cuEventSynchronize", "cuStreamWaitEvent"};
  bool keep = true;
  if (domain == api_domain::runtime) {
    for (const char* noise : runtime_noise) keep = keep && name != noise;
  } else {
    keep = false;
    for (const char* prefix : driver_kept) keep = keep || starts_with(name, prefix);
  }
  if (!keep) return c;
  c.display_name = "";  // set by the caller, which owns the string
  for (const char* prefix : work_prefixes) c.expects_gpu_record = c.expects_gpu_record || starts_with(name, prefix);
  c.has_flow = c.expects_gpu_record;
  for (const char* sync : sync_names) c.has_flow = c.has_flow || name == sync;
  return c;
}

inline const char* memory_kind_name(std::uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE: return "Pageable";
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED: return "Pinned";
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE: return "Device";
    case CUPTI_ACTIVITY_MEMORY_KIND_ARRAY: return "Array";
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED: return "Managed";
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC: return "Device Static";
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC: return "Managed Static";
    default: return "Unknown";
  }
}

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

// Strings that outlive every trace: kernel names (CUPTI owns its copies only
// until the buffer is returned), demangled once each.
class name_pool {
 public:
  const char* intern(std::string_view s) { return strings_.emplace(s).first->c_str(); }
  const char* kernel_name(const char* mangled) {
    if (!mangled) return intern("(unnamed kernel)");
    auto it = demangled_.find(mangled);
    if (it != demangled_.end()) return it->second;
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
    const char* name = intern(status == 0 && out ? std::string_view(out.get()) : std::string_view(mangled));
    demangled_.emplace(intern(mangled), name);
    return name;
  }

 private:
  struct cstr_hash {
    std::size_t operator()(const char* s) const noexcept { return std::hash<std::string_view>()(s); }
  };
  struct cstr_equal {
    bool operator()(const char* a, const char* b) const noexcept { return std::strcmp(a, b) == 0; }
  };
  std::unordered_set<std::string> strings_;  // node-based: c_str() pointers stay valid
  std::unordered_map<const char*, const char*, cstr_hash, cstr_equal> demangled_;
};

struct staged_api {
  api_call call;  // times in ticks until taken
  const char* name = nullptr;
  bool expects_gpu_record = false;
};

struct staged_gpu {
  gpu_activity activity;  // times in ticks until taken
  const char* name = nullptr;
  kernel_details kernel;
};

struct staged_overhead {
  std::uint64_t start = 0, end = 0;
  const char* name = nullptr;
};

// Resolves an API callback id to its raw CUPTI name ("cudaLaunchKernel_v7000").
using api_name_lookup = std::function<std::string(api_domain, std::uint32_t cbid)>;

class record_store {
 public:
  explicit record_store(api_name_lookup lookup) : lookup_(std::move(lookup)) {}

  // Converts one CUPTI record; records of kinds cuprof does not show are ignored.
  void add(const CUpti_Activity* record) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER:
        add_api(*reinterpret_cast<const CUpti_ActivityAPI*>(record),
                record->kind == CUPTI_ACTIVITY_KIND_DRIVER ? api_domain::driver : api_domain::runtime);
        break;
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        add_kernel(*reinterpret_cast<const CUpti_ActivityKernel10*>(record));
        break;
      case CUPTI_ACTIVITY_KIND_MEMCPY:
        add_memcpy(*reinterpret_cast<const CUpti_ActivityMemcpy6*>(record));
        break;
      case CUPTI_ACTIVITY_KIND_MEMSET:
        add_memset(*reinterpret_cast<const CUpti_ActivityMemset4*>(record));
        break;
      case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
        add_sync(*reinterpret_cast<const CUpti_ActivitySynchronization2*>(record));
        break;
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        // Precedes the API record it names; kept until that record's window is taken.
        const auto& e = *reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
        external_ids_[e.correlationId] = e.externalId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_OVERHEAD: {
        const auto& o = *reinterpret_cast<const CUpti_ActivityOverhead3*>(record);
        overhead_.push_back({o.start, o.end, names_.intern(overhead_kind_name(o.overheadKind))});
        break;
      }
      default:
        break;
    }
  }

  void add_dropped(std::uint64_t n) { dropped_ += n; }

  // True when every launch, copy and memset called in [start, end] has its
  // GPU record staged: the window can be finalised without a device sync.
  bool window_complete(std::uint64_t start, std::uint64_t end) const {
    const window_calls w = select(start, end);
    std::unordered_set<std::uint32_t> pending;
    for (std::size_t i : w.kept)
      if (api_[i].expects_gpu_record && api_[i].call.return_value == 0) pending.insert(api_[i].call.correlation);
    for (const staged_gpu& g : gpu_) pending.erase(w.resolve(g.activity.correlation));
    return pending.empty();
  }

  // Moves the window's records into `out` and drops staged records that
  // belong to no later window.
  void take(trace& out, std::uint64_t start, std::uint64_t end, const tick_converter& clock) {
    const window_calls w = select(start, end);
    std::unordered_map<std::uint32_t, std::uint32_t> taken;  // correlation -> api index in `out`
    for (std::size_t i : w.kept) {
      api_call c = api_[i].call;
      c.start_ns = clock.to_epoch_ns(c.start_ns);
      c.end_ns = std::max(c.start_ns, clock.to_epoch_ns(c.end_ns));
      c.name = out.names.intern_static(api_[i].name);
      auto external = external_ids_.find(c.correlation);
      if (external != external_ids_.end()) c.external_id = external->second;
      taken.emplace(c.correlation, std::uint32_t(out.api_calls.size()));
      out.api_calls.push_back(c);
    }
    std::uint32_t lowest_kept = ~0u;
    for (const auto& entry : taken) lowest_kept = std::min(lowest_kept, entry.first);

    std::vector<staged_gpu> later;
    for (staged_gpu& g : gpu_) {
      const std::uint32_t corr = w.resolve(g.activity.correlation);
      const bool launched_in_window = taken.count(corr) != 0;
      const bool launched_before = w.dropped.count(corr) != 0 || (corr != 0 && corr < lowest_kept && lowest_kept != ~0u);
      const bool unlinked_in_window = corr == 0 && g.activity.start_ns >= start && g.activity.start_ns <= end;
      if (launched_in_window || unlinked_in_window) {
        gpu_activity a = g.activity;
        a.correlation = corr;
        a.start_ns = clock.to_epoch_ns(a.start_ns);
        a.end_ns = std::max(a.start_ns, clock.to_epoch_ns(a.end_ns));
        a.name = out.names.intern_static(g.name);
        if (a.kind == gpu_kind::kernel) {
          a.details = std::uint32_t(out.kernels.size());
          out.kernels.push_back(g.kernel);
        }
        out.gpu.push_back(a);
      } else if (!launched_before && !(corr == 0 && g.activity.start_ns < start)) {
        later.push_back(g);
      }
    }
    gpu_.swap(later);

    std::vector<staged_overhead> later_overhead;
    for (const staged_overhead& o : overhead_) {
      if (o.end < start) continue;
      if (o.start > end) {
        later_overhead.push_back(o);
        continue;
      }
      overhead_span s;
      s.start_ns = clock.to_epoch_ns(std::max(o.start, start));
      s.end_ns = std::max(s.start_ns, clock.to_epoch_ns(std::min(o.end, end)));
      s.name = out.names.intern_static(o.name);
      out.overhead.push_back(s);
    }
    overhead_.swap(later_overhead);

    std::vector<staged_api> later_api;
    std::unordered_map<std::uint32_t, std::uint64_t> later_external;
    for (const staged_api& a : api_) {
      if (a.call.start_ns <= end) continue;
      later_api.push_back(a);
      auto external = external_ids_.find(a.call.correlation);
      if (external != external_ids_.end()) later_external.insert(*external);
    }
    api_.swap(later_api);
    // Ids of calls whose API record has not arrived yet are newer than any taken call.
    const std::uint32_t newest_taken = taken.empty() ? 0 : std::max_element(taken.begin(), taken.end())->first;
    for (const auto& external : external_ids_)
      if (external.first > newest_taken) later_external.insert(external);
    external_ids_.swap(later_external);

    out.meta.dropped_gpu_records += dropped_ + lost_timestamps_;
    dropped_ = 0;
    lost_timestamps_ = 0;
  }

  // Everything recorded before `ticks` is discarded (warmup).
  void discard_before(std::uint64_t ticks) {
    trace scratch;
    take(scratch, 0, ticks ? ticks - 1 : 0, tick_converter{});
  }

  void clear() {
    api_.clear();
    gpu_.clear();
    overhead_.clear();
    external_ids_.clear();
  }

  std::size_t staged() const noexcept { return api_.size() + gpu_.size() + overhead_.size(); }

 private:
  // The API calls a window keeps. A driver call made inside a runtime call on
  // the same thread (cudaLaunchKernel -> cuLaunchKernel) is folded into it, as
  // torch shows only the outer call; its correlation id maps to the outer one.
  struct window_calls {
    std::vector<std::size_t> kept;
    std::unordered_set<std::uint32_t> dropped;               // called before the window
    std::unordered_map<std::uint32_t, std::uint32_t> folded;  // nested driver call -> outer runtime call
    std::uint32_t resolve(std::uint32_t corr) const {
      auto it = folded.find(corr);
      return it == folded.end() ? corr : it->second;
    }
  };

  window_calls select(std::uint64_t start, std::uint64_t end) const {
    window_calls w;
    std::vector<std::size_t> in_window;
    for (std::size_t i = 0; i < api_.size(); ++i) {
      const api_call& c = api_[i].call;
      if (c.start_ns < start) w.dropped.insert(c.correlation);
      else if (c.start_ns <= end) in_window.push_back(i);
    }
    std::sort(in_window.begin(), in_window.end(), [&](std::size_t a, std::size_t b) {
      const api_call& x = api_[a].call;
      const api_call& y = api_[b].call;
      if (x.tid != y.tid) return x.tid < y.tid;
      if (x.start_ns != y.start_ns) return x.start_ns < y.start_ns;
      return x.domain < y.domain;  // runtime before the driver call it makes
    });
    const api_call* outer = nullptr;
    for (std::size_t i : in_window) {
      const api_call& c = api_[i].call;
      if (outer && outer->tid == c.tid && c.domain == api_domain::driver && c.start_ns >= outer->start_ns &&
          c.end_ns <= outer->end_ns) {
        w.folded.emplace(c.correlation, outer->correlation);
        continue;
      }
      if (c.domain == api_domain::runtime) outer = &c;
      w.kept.push_back(i);
    }
    return w;
  }

  const char* api_name(api_domain domain, std::uint32_t cbid, api_class& cls) {
    auto& cache = domain == api_domain::runtime ? runtime_names_ : driver_names_;
    auto it = cache.find(cbid);
    if (it == cache.end()) {
      const std::string raw = lookup_ ? lookup_(domain, cbid) : std::string();
      api_class c = classify_api(domain, display_api_name(raw));
      if (c.display_name) c.display_name = names_.intern(display_api_name(raw.empty() ? "cbid " + std::to_string(cbid) : raw));
      it = cache.emplace(cbid, c).first;
    }
    cls = it->second;
    return cls.display_name;
  }

  void add_api(const CUpti_ActivityAPI& r, api_domain domain) {
    api_class cls;
    const char* name = api_name(domain, r.cbid, cls);
    if (!name) return;
    staged_api s;
    s.call.start_ns = r.start;
    s.call.end_ns = r.end;
    s.call.tid = r.threadId;
    s.call.cbid = r.cbid;
    s.call.correlation = r.correlationId;
    s.call.return_value = std::int32_t(r.returnValue);
    s.call.domain = domain;
    s.call.has_flow = cls.has_flow;
    s.name = name;
    s.expects_gpu_record = cls.expects_gpu_record;
    api_.push_back(s);
  }

  bool lost_times(std::uint64_t start, std::uint64_t end) {
    if (start != 0 && end >= start) return false;
    ++lost_timestamps_;  // CUPTI could not time it (start == end == 0)
    return true;
  }

  staged_gpu gpu_common(gpu_kind kind, std::uint64_t start, std::uint64_t end, std::uint32_t device,
                        std::uint32_t context, std::uint32_t stream, std::uint32_t correlation) {
    staged_gpu g;
    g.activity.kind = kind;
    g.activity.start_ns = start;
    g.activity.end_ns = end;
    g.activity.device = device;
    g.activity.context = context;
    g.activity.stream = stream;
    g.activity.correlation = correlation;
    if (kind != gpu_kind::sync) device_by_context_[context] = device;
    return g;
  }

  void add_kernel(const CUpti_ActivityKernel10& k) {
    if (lost_times(k.start, k.end)) return;
    staged_gpu g = gpu_common(gpu_kind::kernel, k.start, k.end, k.deviceId, k.contextId, k.streamId, k.correlationId);
    g.name = names_.kernel_name(k.name);
    kernel_details& d = g.kernel;
    d.grid[0] = std::uint32_t(k.gridX), d.grid[1] = std::uint32_t(k.gridY), d.grid[2] = std::uint32_t(k.gridZ);
    d.block[0] = std::uint32_t(k.blockX), d.block[1] = std::uint32_t(k.blockY), d.block[2] = std::uint32_t(k.blockZ);
    d.registers_per_thread = k.registersPerThread;
    d.static_shared_memory = std::uint32_t(k.staticSharedMemory);
    d.dynamic_shared_memory = std::uint32_t(k.dynamicSharedMemory);
    d.graph_id = k.graphId;
    d.graph_node_id = k.graphNodeId;
    gpu_.push_back(g);
  }

  void add_memcpy(const CUpti_ActivityMemcpy6& m) {
    if (lost_times(m.start, m.end)) return;
    staged_gpu g = gpu_common(gpu_kind::memcpy, m.start, m.end, m.deviceId, m.contextId, m.streamId, m.correlationId);
    g.activity.bytes = m.bytes;
    g.activity.subkind = m.copyKind;
    const std::string name = std::string("Memcpy ") + memcpy_kind_name(m.copyKind) + " (" +
                             memory_kind_name(m.srcKind) + " -> " + memory_kind_name(m.dstKind) + ")";
    g.name = names_.intern(name);
    gpu_.push_back(g);
  }

  void add_memset(const CUpti_ActivityMemset4& m) {
    if (lost_times(m.start, m.end)) return;
    staged_gpu g = gpu_common(gpu_kind::memset, m.start, m.end, m.deviceId, m.contextId, m.streamId, m.correlationId);
    g.activity.bytes = m.bytes;
    g.name = names_.intern(std::string("Memset (") + memory_kind_name(std::uint8_t(m.memoryKind)) + ")");
    gpu_.push_back(g);
  }

  void add_sync(const CUpti_ActivitySynchronization2& s) {
    if (lost_times(s.start, s.end)) return;
    const std::uint32_t stream = s.streamId == CUPTI_SYNCHRONIZATION_INVALID_VALUE ? 0 : s.streamId;
    const std::uint32_t context = s.contextId == CUPTI_SYNCHRONIZATION_INVALID_VALUE ? 0 : s.contextId;
    staged_gpu g = gpu_common(gpu_kind::sync, s.start, s.end, device_of_context(context), context, stream, s.correlationId);
    g.activity.subkind = std::uint8_t(s.type);
    g.name = names_.intern(sync_kind_name(std::uint8_t(s.type)));
    gpu_.push_back(g);
  }

  // Sync records carry a context, not a device: learn the mapping from the
  // kernels and copies (one context per device in practice).
  std::uint32_t device_of_context(std::uint32_t context) const {
    auto it = device_by_context_.find(context);
    return it == device_by_context_.end() ? 0 : it->second;
  }

  api_name_lookup lookup_;
  name_pool names_;
  std::unordered_map<std::uint32_t, api_class> runtime_names_, driver_names_;
  std::unordered_map<std::uint32_t, std::uint32_t> device_by_context_;
  std::vector<staged_api> api_;
  std::vector<staged_gpu> gpu_;
  std::vector<staged_overhead> overhead_;
  std::unordered_map<std::uint32_t, std::uint64_t> external_ids_;  // correlation -> external id
  std::uint64_t dropped_ = 0;
  std::uint64_t lost_timestamps_ = 0;
};

}  // namespace cuprof::detail::cupti
