// What a CUDA runtime or driver API call does, told by its name: launches,
// copies and memsets, synchronizations, occupancy queries. The one place for
// it, used by the CUPTI record store (which calls to keep, which wait for a
// GPU record, which draw a flow arrow: classify_api) and by insights on traces
// read from files, where the name is all there is.
//
// Every predicate takes a name as CUPTI reports it ("cudaLaunchKernel_ptsz_v7000")
// or as a trace file shows it ("cudaLaunchKernel"), and judges api_base_name().
#pragma once

#include "event.hpp"
#include "../base/text.hpp"

#include <cstdint>
#include <string_view>

namespace cuprof::detail {

// "cudaLaunchKernel_ptsz_v7000" -> "cudaLaunchKernel"; "___cudaLaunchKernel_v13000" (the
// CUDA 13 <<<>>> path) -> "cudaLaunchKernel", the names HTA and users look for.
inline std::string_view api_base_name(std::string_view name) {
  const std::size_t v = name.rfind("_v");
  if (v != std::string_view::npos && v + 2 < name.size() && name.find_first_not_of("0123456789", v + 2) == std::string_view::npos)
    name = name.substr(0, v);
  if (name.size() > 5 && ends_with(name, "_ptsz")) name.remove_suffix(5);
  if (name.size() > 5 && ends_with(name, "_ptds")) name.remove_suffix(5);
  const std::size_t first = name.find_first_not_of('_');
  if (first != 0 && first != std::string_view::npos) name.remove_prefix(first);
  return name;
}

// cudaLaunchHostFunc, cuLaunchHostFunc: a CPU callback in stream order. CUPTI
// records no GPU activity for it, so nothing arrives to wait for or point at.
inline bool is_host_function_launch(std::string_view name) {
  const std::string_view n = api_base_name(name);
  return n == "cudaLaunchHostFunc" || n == "cuLaunchHostFunc";
}

// A kernel launch: cudaLaunchKernel(ExC), cudaLaunchCooperativeKernel(MultiDevice),
// the legacy cudaLaunch; cuLaunchKernel(Ex), cuLaunchCooperativeKernel(MultiDevice),
// cuLaunchGrid(Async). Not host functions, not graph launches (a graph is no
// single kernel).
inline bool is_kernel_launch(std::string_view name) {
  const std::string_view n = api_base_name(name);
  return (starts_with(n, "cudaLaunch") || starts_with(n, "cuLaunch")) && !is_host_function_launch(n);
}

// A copy (CUPTI's memcpy records): cudaMemcpy*, cuMemcpy*.
inline bool is_copy(std::string_view name) {
  const std::string_view n = api_base_name(name);
  return starts_with(n, "cudaMemcpy") || starts_with(n, "cuMemcpy");
}

// A memset (CUPTI's memset records): cudaMemset*, cuMemset*.
inline bool is_memset(std::string_view name) {
  const std::string_view n = api_base_name(name);
  return starts_with(n, "cudaMemset") || starts_with(n, "cuMemset");
}

// Enqueues GPU work that CUPTI reports as kernel, memcpy or memset records
// carrying the call's correlation id: kernel and graph launches, copies, memsets.
inline bool enqueues_gpu_work(std::string_view name) {
  const std::string_view n = api_base_name(name);
  return is_kernel_launch(n) || starts_with(n, "cudaGraphLaunch") || starts_with(n, "cuGraphLaunch") || is_copy(n) ||
         is_memset(n);
}

// A synchronization, as CUPTI records one (a cuda_sync record) and as Kineto
// and HTA class it, numbered as CUPTI and sync_kind_name() (event.hpp) number
// them: 1 an event sync, 2 a stream waiting on an event, 3 a stream sync, 4 a
// context (device) sync; 0 for every other call. The one list of them.
inline constexpr std::uint8_t stream_wait_event_sync = 2;  // the one kind that does not block the CPU thread
inline std::uint8_t synchronization_kind(std::string_view name) {
  const std::string_view n = api_base_name(name);
  if (n == "cudaEventSynchronize" || n == "cuEventSynchronize") return 1;
  if (n == "cudaStreamWaitEvent" || n == "cuStreamWaitEvent") return stream_wait_event_sync;
  if (n == "cudaStreamSynchronize" || n == "cuStreamSynchronize") return 3;
  if (n == "cudaDeviceSynchronize" || n == "cudaThreadSynchronize" || n == "cuCtxSynchronize") return 4;
  return 0;
}

inline bool is_synchronization(std::string_view name) { return synchronization_kind(name) != 0; }

// Records a CUDA event on a stream: cudaEventRecord(WithFlags), cuEventRecord(WithFlags).
// An event sync or a stream's wait on an event waits for the event's latest record.
inline bool records_event(std::string_view name) {
  const std::string_view n = api_base_name(name);
  return n == "cudaEventRecord" || n == "cudaEventRecordWithFlags" || n == "cuEventRecord" || n == "cuEventRecordWithFlags";
}

// The calling CPU thread blocks until GPU work is done: every synchronization
// but a stream's wait on an event, which makes the stream wait on the GPU while
// the CPU thread returns at once. This is the CPU time insights calls waiting.
// (A synchronous cudaMemcpy blocks too, but is a copy.)
inline bool is_cpu_blocking_synchronization(std::string_view name) {
  const std::uint8_t kind = synchronization_kind(name);
  return kind != 0 && kind != stream_wait_event_sync;
}

// Calls whose GPU records (the work, or the synchronization) are linked to
// them by an ac2g flow arrow in the trace.
inline bool draws_flow(std::string_view name) { return enqueues_gpu_work(name) || is_synchronization(name); }

// Allocates or frees memory outside stream order: cudaMalloc (and its pitch,
// 3D, array and managed forms), cudaFree(Array), cudaMallocHost, cudaHostAlloc,
// cudaFreeHost, and the driver's cuMemAlloc(Pitch, Managed, Host), cuMemFree(Host),
// cuMemHostAlloc. Such a call may synchronize the device (cudaFree and
// cudaFreeHost wait for its work), so inside a loop it stalls the CPU and
// drains the launch queue. Not the stream-ordered cudaMallocAsync and
// cudaFreeAsync (cuMemAllocAsync, cuMemFreeAsync, ...FromPoolAsync), which are
// served from a pool in stream order and cheap.
inline bool is_synchronous_allocation(std::string_view name) {
  const std::string_view n = api_base_name(name);
  return n == "cudaMalloc" || n == "cudaMallocPitch" || n == "cudaMalloc3D" || n == "cudaMallocArray" ||
         n == "cudaMalloc3DArray" || n == "cudaMallocMipmappedArray" || n == "cudaMallocManaged" || n == "cudaFree" ||
         n == "cudaFreeArray" || n == "cudaFreeMipmappedArray" || n == "cudaMallocHost" || n == "cudaHostAlloc" ||
         n == "cudaFreeHost" || n == "cuMemAlloc" || n == "cuMemAllocPitch" || n == "cuMemAllocManaged" ||
         n == "cuMemAllocHost" || n == "cuMemHostAlloc" || n == "cuMemFree" || n == "cuMemFreeHost";
}

// The driver's virtual-memory API: physical allocations made and released
// (cuMemCreate, cuMemRelease), mapped into reserved addresses and unmapped,
// shared between processes. CUPTI reports the memory when it is mapped and
// unmapped: its records carry cuMemMap's and cuMemUnmap's correlation ids.
inline bool is_virtual_memory_call(std::string_view name) {
  const std::string_view n = api_base_name(name);
  return n == "cuMemCreate" || n == "cuMemRelease" || n == "cuMemMap" || n == "cuMemUnmap" ||
         n == "cuMemExportToShareableHandle" || n == "cuMemImportFromShareableHandle";
}

// Allocates or frees memory, in or out of stream order, or is a call of the
// virtual-memory API: the calls whose CUPTI memory records cuprof ties to a
// scope and a thread.
inline bool allocates_or_frees(std::string_view name) {
  const std::string_view n = api_base_name(name);
  return is_synchronous_allocation(n) || n == "cudaMallocAsync" || n == "cudaMallocFromPoolAsync" || n == "cudaFreeAsync" ||
         n == "cuMemAllocAsync" || n == "cuMemAllocFromPoolAsync" || n == "cuMemFreeAsync" || is_virtual_memory_call(n);
}

// cudaOccupancy*, cuOccupancy*: a launch sizing its grid to the device.
inline bool is_occupancy_query(std::string_view name) {
  const std::string_view n = api_base_name(name);
  return starts_with(n, "cudaOccupancy") || starts_with(n, "cuOccupancy");
}

// How an API call is shown, decided once per callback id from its name.
struct api_class {
  const char* display_name = nullptr;  // null: the call is dropped as noise
  bool has_flow = false;               // drawn with an arrow to its GPU record
  bool expects_gpu_record = false;     // a launch, copy or memset: the window waits for its record
  gpu_kind work = gpu_kind::kernel;    // the GPU work it makes, as window_edges counts it: a copy, memset or kernel
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
  c.work = is_copy(name) ? gpu_kind::memcpy : is_memset(name) ? gpu_kind::memset : gpu_kind::kernel;
  return c;
}

}  // namespace cuprof::detail
