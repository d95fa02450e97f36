// CUPTI's activity records -> staged records (staged_activities.hpp): kernels,
// copies, memsets, NVTX ranges (MARKER), allocations and frees (MEMORY2),
// memory pools (MEMORY_POOL) and CUPTI's overhead. It reads CUPTI's plain C
// structs only (no CUPTI call), so tests feed it synthetic records on a
// machine with no GPU.
#pragma once

#include "staged_activities.hpp"
#include "../base/demangle.hpp"
#include "../model/event.hpp"
#include "../model/memory_ledger.hpp"

#include <cupti_activity.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>

namespace cuprof::detail::cupti {

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

class activity_converter {
 public:
  // Stages one record into `to`; records of kinds cuprof does not show are
  // ignored. API calls and synchronizations come through the call recorder.
  void add(const CUpti_Activity* record, staged_activities& to) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: add_kernel(*reinterpret_cast<const CUpti_ActivityKernel10*>(record), to); break;
      case CUPTI_ACTIVITY_KIND_MEMCPY: add_memcpy(*reinterpret_cast<const CUpti_ActivityMemcpy6*>(record), to); break;
      case CUPTI_ACTIVITY_KIND_MEMSET: add_memset(*reinterpret_cast<const CUpti_ActivityMemset4*>(record), to); break;
      case CUPTI_ACTIVITY_KIND_MARKER: add_marker(*reinterpret_cast<const CUpti_ActivityMarker2*>(record), to); break;
      case CUPTI_ACTIVITY_KIND_MEMORY2: add_memory(*reinterpret_cast<const CUpti_ActivityMemory4*>(record), to); break;
      case CUPTI_ACTIVITY_KIND_MEMORY_POOL:
        add_memory_pool(*reinterpret_cast<const CUpti_ActivityMemoryPool3*>(record), to);
        break;
      case CUPTI_ACTIVITY_KIND_OVERHEAD: {
        const auto& o = *reinterpret_cast<const CUpti_ActivityOverhead3*>(record);
        to.overhead.push_back({o.start, o.end, to.names.intern(overhead_kind_name(o.overheadKind))});
        break;
      }
      default: break;
    }
  }

  // The records left out since the last call for want of valid times.
  std::uint64_t take_lost_timestamps() noexcept { return std::exchange(lost_timestamps_, 0); }

  // NVTX ranges still open and the count of records lost; the kernel names
  // stay, as do the names they refer to.
  void clear() {
    open_ranges_.clear();
    lost_timestamps_ = 0;
  }

 private:
  name_id kernel_name(const char* mangled, staged_activities& to) {
    if (!mangled) return to.names.intern("(unnamed kernel)");
    // CUPTI hands the same pointer for every launch of a function; check the
    // characters too, in case a pointer is reused after a module unload.
    if (mangled == last_kernel_.pointer && std::strcmp(last_kernel_.text->c_str(), mangled) == 0) return last_kernel_.name;
    auto seen = by_pointer_.find(mangled);
    if (seen != by_pointer_.end() && std::strcmp(seen->second.first.c_str(), mangled) == 0) {
      last_kernel_ = {mangled, &seen->second.first, seen->second.second};
      return seen->second.second;
    }
    const name_id id = demangle(mangled, to);
    auto& entry = by_pointer_[mangled];
    entry = {mangled, id};
    last_kernel_ = {mangled, &entry.first, id};
    return id;
  }

  name_id demangle(const char* mangled, staged_activities& to) {
    auto it = demangled_.find(std::string(mangled));
    if (it != demangled_.end()) return it->second;
    const name_id id = to.names.intern(demangled_name(mangled));
    demangled_.emplace(mangled, id);
    return id;
  }

  // NVTX ranges pushed by any code in the process (libraries, existing
  // annotations) arrive as START/END marker pairs sharing an id; cuprof's own
  // scopes, emitted to NVTX in the "cuprof" domain for Nsight, are skipped.
  void add_marker(const CUpti_ActivityMarker2& m, staged_activities& to) {
    if (m.domain && std::strcmp(m.domain, "cuprof") == 0) return;
    if (m.flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
      const std::uint32_t tid = m.objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? m.objectId.pt.threadId : 0;
      open_ranges_[m.id] = {m.timestamp, to.names.intern(m.name && *m.name ? m.name : "(unnamed NVTX range)"), tid};
    } else if (m.flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
      auto it = open_ranges_.find(m.id);
      if (it == open_ranges_.end()) return;
      cpu_span span;
      span.start_ns = it->second.start;
      span.end_ns = std::max(m.timestamp, it->second.start);
      span.name = it->second.name;
      span.tid = it->second.tid;
      to.nvtx_ranges.push_back(span);
      open_ranges_.erase(it);
    }
  }

  static bool valid_times(std::uint64_t start, std::uint64_t end) { return start != 0 && end >= start; }

  bool lost_times(std::uint64_t start, std::uint64_t end) {
    if (valid_times(start, end)) return false;
    ++lost_timestamps_;  // CUPTI could not time it (start == end == 0)
    return true;
  }

  // A kernel without valid times did not complete (CUPTI writes start = end
  // = 0 for one that hit a device-side assert or faulted): the kernel a user
  // most wants to find. It is kept, marked, and placed by its launch when the
  // window is taken; only one with no launch to place it by is counted lost.
  void add_kernel(const CUpti_ActivityKernel10& k, staged_activities& to) {
    const bool untimed = !valid_times(k.start, k.end);
    if (untimed && k.correlationId == 0) {
      ++lost_timestamps_;
      return;
    }
    staged_gpu g =
        to.gpu_record(untimed ? 0 : k.start, untimed ? 0 : k.end, k.deviceId, k.contextId, k.streamId, k.correlationId);
    g.form = to.form_index(kernel_name(k.name, to), gpu_kind::kernel, 0, untimed);
    kernel_details d;
    d.grid[0] = std::uint32_t(k.gridX), d.grid[1] = std::uint32_t(k.gridY), d.grid[2] = std::uint32_t(k.gridZ);
    d.block[0] = std::uint32_t(k.blockX), d.block[1] = std::uint32_t(k.blockY), d.block[2] = std::uint32_t(k.blockZ);
    d.registers_per_thread = k.registersPerThread;
    d.static_shared_memory = std::uint32_t(k.staticSharedMemory);
    d.dynamic_shared_memory = std::uint32_t(k.dynamicSharedMemory);
    d.graph_id = k.graphId;
    d.graph_node_id = k.graphNodeId;
    g.details = to.kernel_config_index(d);
    to.gpu.push_back(g);
  }

  void add_memcpy(const CUpti_ActivityMemcpy6& m, staged_activities& to) {
    if (lost_times(m.start, m.end)) return;
    staged_gpu g = to.gpu_record(m.start, m.end, m.deviceId, m.contextId, m.streamId, m.correlationId);
    const name_id name = to.names.intern(std::string("Memcpy ") + memcpy_kind_name(m.copyKind) + " (" +
                                         memory_kind_name(m.srcKind) + " -> " + memory_kind_name(m.dstKind) + ")");
    g.form = to.form_index(name, gpu_kind::memcpy, m.copyKind);
    to.stage_bytes(g, m.bytes);
    to.gpu.push_back(g);
  }

  void add_memset(const CUpti_ActivityMemset4& m, staged_activities& to) {
    if (lost_times(m.start, m.end)) return;
    staged_gpu g = to.gpu_record(m.start, m.end, m.deviceId, m.contextId, m.streamId, m.correlationId);
    g.form = to.form_index(to.names.intern(std::string("Memset (") + memory_kind_name(std::uint8_t(m.memoryKind)) + ")"),
                           gpu_kind::memset, 0);
    to.stage_bytes(g, m.bytes);
    to.gpu.push_back(g);
  }

  // Allocations the program made; the static memory of loaded modules
  // (__device__ variables) is not one.
  static void add_memory(const CUpti_ActivityMemory4& m, staged_activities& to) {
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
    to.memory.push_back(r);
  }

  // A pool made, trimmed or destroyed: what it holds beyond its allocations
  // (torch's "Total Reserved") changes.
  static void add_memory_pool(const CUpti_ActivityMemoryPool3& p, staged_activities& to) {
    if (p.memoryPoolType != CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL) return;
    staged_memory r;
    r.what = staged_memory::op::pool_size;
    r.ticks = p.timestamp;
    r.correlation = p.correlationId;
    r.device = p.deviceId;
    r.memory_kind = memory_kind_device;
    r.pool = p.address;
    r.pool_size = p.memoryPoolOperationType == CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED ? 0 : p.size;
    to.memory.push_back(r);
  }

  struct open_range {
    std::uint64_t start;
    name_id name;
    std::uint32_t tid;
  };

  std::unordered_map<std::string, name_id> demangled_;  // mangled name -> its demangled name's id
  std::unordered_map<const char*, std::pair<std::string, name_id>> by_pointer_;
  struct {
    const char* pointer = nullptr;
    const std::string* text = nullptr;  // in by_pointer_, whose nodes do not move
    name_id name = 0;
  } last_kernel_;
  std::unordered_map<std::uint32_t, open_range> open_ranges_;  // NVTX range id -> its start
  std::uint64_t lost_timestamps_ = 0;
};

}  // namespace cuprof::detail::cupti
