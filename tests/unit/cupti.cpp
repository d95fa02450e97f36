// Synthetic CUPTI activity records and callback data through record_store: conversion, noise
// filtering, folding of nested driver calls, windowing, then attribution,
// key_averages() and the Chrome trace; the tracer's activity buffers. No GPU, no libcupti: plain structs.
// Also: libcupti that cannot be loaded, and a profile where CUDA cannot be traced.

#include <cuprof/cuprof.hpp>
#include <cuprof/cupti/call_recorder.hpp>
#include <cuprof/cupti/record_store.hpp>
#include <cuprof/cupti/tracer.hpp>
#include <cuda_runtime_api.h>  // and through tracer.hpp's cupti.h, generated_cuda_runtime_api_meta.h (no include guard)

#include "support/child_process.hpp"
#include "support/cupti_calls.hpp"
#include "support/files.hpp"
#include "support/flow_arrows.hpp"
#include "support/stderr_capture.hpp"
#include "support/traces.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace cuprof_test;

namespace {

using cuprof::api_domain;
using cuprof::no_index;
using cuprof::detail::cupti::record_store;

constexpr std::uint32_t tid = 100;

// Raw callback names as cuptiGetCallbackName returns them.
std::string raw_name(api_domain d, std::uint32_t cbid) {
  static const std::map<std::uint32_t, std::string> runtime = {
      {211, "cudaLaunchKernel_v7000"},
      {214, "cudaLaunchKernel_ptsz_v7000"},
      {505, "___cudaLaunchKernel_v13000"},
      {41, "cudaMemcpyAsync_v3020"},
      {51, "cudaMemsetAsync_v3020"},
      {3, "cudaGetDevice_v3020"},
      {251, "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_v7000"},
      {131, "cudaStreamSynchronize_v3020"},
      {165, "cudaDeviceSynchronize_v3020"},
      {239, "cudaStreamSynchronize_ptsz_v7000"},
      {311, "cudaGraphLaunch_v10000"},
      {20, "cudaMalloc_v3020"},
      {22, "cudaFree_v3020"},
      {23, "cudaMallocHost_v3020"},
      {25, "cudaFreeHost_v3020"},
      {272, "cudaMallocManaged_v6000"},
      {363, "cudaMallocAsync_v11020"},
      {367, "cudaFreeAsync_v11020"},
      {132, "cudaStreamSynchronize_v3020"},
      {135, "cudaEventRecord_v3020"},
      {137, "cudaEventSynchronize_v3020"},
      {147, "cudaStreamWaitEvent_v3020"},
      {242, "cudaEventRecord_ptsz_v7000"},
      {370, "cudaEventRecordWithFlags_v11010"},
  };
  static const std::map<std::uint32_t, std::string> driver = {
      {307, "cuLaunchKernel"},     {652, "cuLaunchKernelEx"},
      {1000, "cuKernelGetName"},   {451, "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"},
      {17, "cuCtxSynchronize"},    {126, "cuStreamSynchronize"},
      {514, "cuGraphLaunch"},      {289, "cuMemAlloc_v2"},
      {291, "cuMemFree_v2"},       {590, "cuMemCreate"},
      {591, "cuMemRelease"},       {592, "cuMemMap"},
      {593, "cuMemUnmap"},         {121, "cuEventSynchronize"},
      {119, "cuEventRecord"},      {295, "cuStreamWaitEvent"},
      {441, "cuEventRecord_ptsz"}, {900, "cuProfilerStart"},
  };
  const auto& m = d == api_domain::runtime ? runtime : driver;
  const auto it = m.find(cbid);
  return it == m.end() ? std::string() : it->second;
}

template <class T>
T zeroed(CUpti_ActivityKind kind) {
  T r;
  std::memset(static_cast<void*>(&r), 0, sizeof r);
  r.kind = kind;
  return r;
}

template <class T>
void feed(record_store& s, const T& r) {
  s.add(reinterpret_cast<const CUpti_Activity*>(&r));
}

cuprof::detail::cupti::call_record call_of(api_domain d, std::uint32_t cbid, std::uint64_t start, std::uint64_t end,
                                           std::uint32_t corr, std::uint32_t thread = tid, std::uint32_t ret = 0) {
  cuprof::detail::cupti::call_record r;
  r.start = start;
  r.end = end;
  r.tid = thread;
  r.cbid = cbid;
  r.correlation = corr;
  r.return_value = std::int32_t(ret);
  r.domain = d;
  return r;
}
void api(record_store& s, api_domain d, std::uint32_t cbid, std::uint64_t start, std::uint64_t end, std::uint32_t corr,
         std::uint32_t thread = tid, std::uint32_t ret = 0) {
  s.add_call(call_of(d, cbid, start, end, corr, thread, ret));
}
void runtime(record_store& s, std::uint32_t cbid, std::uint64_t start, std::uint64_t end, std::uint32_t corr,
             std::uint32_t ret = 0) {
  api(s, api_domain::runtime, cbid, start, end, corr, tid, ret);
}
void driver(record_store& s, std::uint32_t cbid, std::uint64_t start, std::uint64_t end, std::uint32_t corr) {
  api(s, api_domain::driver, cbid, start, end, corr);
}

void kernel(record_store& s, const char* name, std::uint64_t start, std::uint64_t end, std::uint32_t corr,
            std::uint32_t stream = 7, std::uint32_t device = 0, std::uint32_t context = 1, std::uint32_t graph = 0) {
  auto k = zeroed<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  k.start = start;
  k.end = end;
  k.deviceId = device;
  k.contextId = context;
  k.streamId = stream;
  k.correlationId = corr;
  k.name = name;
  k.gridX = 120, k.gridY = 2, k.gridZ = 1;
  k.blockX = 128, k.blockY = 1, k.blockZ = 1;
  k.registersPerThread = 40;
  k.staticSharedMemory = 2048;
  k.dynamicSharedMemory = 512;
  k.graphId = graph;
  k.graphNodeId = graph ? 1000 + corr : 0;
  feed(s, k);
}

void memcpy_rec(record_store& s, std::uint8_t copy_kind, std::uint8_t src, std::uint8_t dst, std::uint64_t bytes,
                std::uint64_t start, std::uint64_t end, std::uint32_t corr, std::uint32_t stream = 7) {
  auto m = zeroed<CUpti_ActivityMemcpy6>(CUPTI_ACTIVITY_KIND_MEMCPY);
  m.copyKind = copy_kind;
  m.srcKind = src;
  m.dstKind = dst;
  m.bytes = bytes;
  m.start = start;
  m.end = end;
  m.deviceId = 0;
  m.contextId = 1;
  m.streamId = stream;
  m.correlationId = corr;
  feed(s, m);
}

void memset_rec(record_store& s, std::uint16_t kind, std::uint64_t bytes, std::uint64_t start, std::uint64_t end,
                std::uint32_t corr) {
  auto m = zeroed<CUpti_ActivityMemset4>(CUPTI_ACTIVITY_KIND_MEMSET);
  m.value = 0;
  m.bytes = bytes;
  m.start = start;
  m.end = end;
  m.deviceId = 0;
  m.contextId = 1;
  m.streamId = 7;
  m.correlationId = corr;
  m.memoryKind = kind;
  feed(s, m);
}

// A runtime synchronization call as the call recorder reports it, with what
// its sync record needs: kind, context, the stream waited on.
void sync_call(record_store& s, std::uint32_t cbid, CUpti_ActivitySynchronizationType kind, std::uint64_t start,
               std::uint64_t end, std::uint32_t corr, std::uint32_t context, std::uint32_t stream) {
  cuprof::detail::cupti::call_record r = call_of(api_domain::runtime, cbid, start, end, corr);
  r.sync_kind = std::uint8_t(kind);
  r.context = context;
  r.stream = stream;
  s.add_call(r);
}

void overhead_rec(record_store& s, CUpti_ActivityOverheadKind kind, std::uint64_t start, std::uint64_t end) {
  auto o = zeroed<CUpti_ActivityOverhead3>(CUPTI_ACTIVITY_KIND_OVERHEAD);
  o.overheadKind = kind;
  o.start = start;
  o.end = end;
  feed(s, o);
}

std::uint32_t span(cuprof::trace& t, const char* name, std::uint64_t start, std::uint64_t end, std::uint32_t parent) {
  cuprof::cpu_span s;
  s.start_ns = start;
  s.end_ns = end;
  s.name = t.names.intern(name);
  s.tid = tid;
  s.parent = parent;
  s.id = std::uint32_t(t.spans.size() + 1);
  t.spans.push_back(s);
  return std::uint32_t(t.spans.size() - 1);
}

const cuprof::api_call* call_named(const cuprof::trace& t, const std::string& name, int nth = 0) {
  for (const auto& c : t.api_calls)
    if (t.names.str(t.name_of(c)) == name && nth-- == 0) return &c;
  return nullptr;
}
const cuprof::gpu_activity* gpu_named(const cuprof::trace& t, const std::string& name) {
  for (const auto& g : t.gpu)
    if (t.names.str(g.name) == name) return &g;
  return nullptr;
}
std::size_t calls_named(const cuprof::trace& t, const std::string& name) {
  std::size_t n = 0;
  for (const auto& c : t.api_calls) n += t.names.str(t.name_of(c)) == name;
  return n;
}

const char* const vector_subtract = "VectorSubtract(int const*, int const*, int*, int)";

// The window [1000, 100000] (ticks; the identity converter makes them ns):
//   outer [1000, 90000] { launch_scope [2000, 20000], copy_scope [30000, 40000] }
// plus records before the window, after it, noise, and lost ones.
struct scenario {
  record_store store{raw_name};
  static constexpr std::uint64_t start = 1000, end = 100000;

  void api_records() {
    runtime(store, 211, 500, 800, 5);            // before the window
    runtime(store, 3, 2500, 2600, 9);            // cudaGetDevice: noise
    runtime(store, 211, 3000, 8000, 10);         // cudaLaunchKernel ...
    driver(store, 1000, 3200, 3300, 12);         //   cuKernelGetName: noise
    driver(store, 307, 3500, 7500, 11);          //   ... nested cuLaunchKernel: folded, its kernel is the runtime call's
    runtime(store, 505, 9000, 12000, 13);        // ___cudaLaunchKernel (CUDA 13 <<<>>>)
    driver(store, 307, 9500, 11000, 14);         //   nested cuLaunchKernel
    driver(store, 652, 13000, 15000, 15);        // cuLaunchKernelEx alone (cuBLAS)
    runtime(store, 251, 16000, 16500, 16);       // occupancy query ...
    driver(store, 451, 16100, 16400, 17);        //   ... with its nested driver call
    runtime(store, 999, 17000, 17100, 18);       // a cbid CUPTI cannot name
    driver(store, 2000, 17200, 17300, 19);       // an unnamed driver call: not whitelisted
    runtime(store, 214, 18000, 18500, 25);       // cudaLaunchKernel_ptsz
    runtime(store, 211, 19000, 19500, 26, 700);  // a launch that failed: no kernel will come
    runtime(store, 41, 31000, 33000, 20);        // cudaMemcpyAsync
    runtime(store, 51, 34000, 35000, 21);        // cudaMemsetAsync
    sync_call(store, 131, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, 36000, 39000, 22, 1, 7);
    // cudaDeviceSynchronize, outside every scope
    sync_call(store, 165, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE, 91000, 95000, 23, 1, 0);
    runtime(store, 211, 150000, 151000, 30);  // after the window
  }
  void gpu_records_but_the_first_kernel() {
    kernel(store, "_Z14VectorSubtractPKiS0_Pii", 900, 950, 5);  // launched before the window
    kernel(store, "plain_kernel", 61000, 62000, 13);
    kernel(store, "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 63000, 70000, 15);
    kernel(store, "ptsz_kernel", 73500, 74000, 25, 9);
    memcpy_rec(store, CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
               1 << 20, 71000, 72000, 20);
    memset_rec(store, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 4, 72500, 72600, 21);
    kernel(store, "late_kernel", 152000, 153000, 30);  // belongs to the next window
    memcpy_rec(store, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 64,
               0, 0, 24);                                                             // timestamps lost
    overhead_rec(store, CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST, 500, 1500);  // clamped to 1000
    overhead_rec(store, CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH, 99000, 101000);   // clamped to 100000
    overhead_rec(store, CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE, 100, 200);            // before: dropped
    overhead_rec(store, CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER, 150000, 151000);     // after: kept
    store.add_dropped(3);
  }
  void first_kernel() { kernel(store, "_Z14VectorSubtractPKiS0_Pii", 50000, 60000, 11); }

  cuprof::trace take() {
    cuprof::trace t;
    const std::uint32_t outer = span(t, "outer", 1000, 90000, no_index);
    span(t, "launch_scope", 2000, 20000, outer);
    span(t, "copy_scope", 30000, 40000, outer);
    store.take(t, start, end, cuprof::detail::tick_converter{});
    cuprof::attribute(t);
    return t;
  }
  cuprof::trace full() {
    api_records();
    gpu_records_but_the_first_kernel();
    first_kernel();
    return take();
  }
};

// CUPTI's MEMORY2 record of an allocation (op 1) or a free (op 2), as CUDA
// 13.0 writes them (tests/gpu/memory_kinds.cu on an H100): a free carries its
// bytes; a stream-ordered one names its pool and the pool's size.
void memory_rec(record_store& s, int op, CUpti_ActivityMemoryKind kind, std::uint64_t address, std::uint64_t bytes,
                std::uint64_t ts, std::uint32_t corr, std::uint64_t pool = 0, std::uint64_t pool_size = 0) {
  auto m = zeroed<CUpti_ActivityMemory4>(CUPTI_ACTIVITY_KIND_MEMORY2);
  m.memoryOperationType = CUpti_ActivityMemoryOperationType(op);
  m.memoryKind = kind;
  m.address = address;
  m.bytes = bytes;
  m.timestamp = ts;
  m.correlationId = corr;
  m.deviceId = 0;
  m.contextId = 1;
  m.isAsync = pool != 0;
  if (pool) {
    m.memoryPoolConfig.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
    m.memoryPoolConfig.address = pool;
    m.memoryPoolConfig.pool.size = pool_size;
  }
  feed(s, m);
}
void pool_rec(record_store& s, CUpti_ActivityMemoryPoolOperationType op, std::uint64_t pool, std::uint64_t size, std::uint64_t ts,
              std::uint32_t corr) {
  auto p = zeroed<CUpti_ActivityMemoryPool3>(CUPTI_ACTIVITY_KIND_MEMORY_POOL);
  p.memoryPoolOperationType = op;
  p.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
  p.address = pool;
  p.size = size;
  p.timestamp = ts;
  p.correlationId = corr;
  feed(s, p);
}

constexpr std::uint64_t MiB = 1 << 20;

// The window [1000, 100000] of memory_kinds.cu in small: allocations of every
// kind in scopes, and 8 MiB allocated before the window and freed in it.
struct memory_scenario {
  record_store store{raw_name};
  void records() {
    runtime(store, 20, 500, 600, 1);  // before the window: 8 MiB
    memory_rec(store, 1, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x8000, 8 * MiB, 550, 1);
    // device_malloc [2000, 9000]: 1 MiB kept, 3 MiB allocated and freed
    runtime(store, 20, 2100, 2900, 10);
    memory_rec(store, 1, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x1000, 1 * MiB, 2500, 10);
    runtime(store, 20, 3000, 3900, 11);
    memory_rec(store, 1, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x2000, 3 * MiB, 3500, 11);
    runtime(store, 22, 4000, 4900, 12);
    memory_rec(store, 2, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x2000, 3 * MiB, 4500, 12);
    // pool [10000, 19000]: 2 MiB from a 32 MiB pool, freed, the pool trimmed at a sync
    runtime(store, 363, 10100, 10900, 20);
    pool_rec(store, CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED, 0x9000, 32 * MiB, 10400, 20);
    memory_rec(store, 1, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x9000, 2 * MiB, 10500, 20, 0x9000, 32 * MiB);
    runtime(store, 367, 11000, 11900, 21);
    memory_rec(store, 2, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x9000, 2 * MiB, 11500, 21, 0x9000, 32 * MiB);
    runtime(store, 132, 12000, 12900, 22);
    pool_rec(store, CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED, 0x9000, 0, 12500, 22);
    // host [20000, 29000]: 256 KiB of pinned host memory kept; managed 512 KiB
    runtime(store, 23, 20100, 20900, 30);
    memory_rec(store, 1, CUPTI_ACTIVITY_MEMORY_KIND_PINNED, 0x3000, 256 * 1024, 20500, 30);
    runtime(store, 272, 21000, 21900, 31);
    memory_rec(store, 1, CUPTI_ACTIVITY_MEMORY_KIND_MANAGED, 0x4000, 512 * 1024, 21500, 31);
    // driver [30000, 39000]: cuMemAlloc inside cudaMalloc (folded), and the virtual-memory API,
    // whose memory CUPTI reports at cuMemMap and cuMemUnmap
    runtime(store, 20, 30100, 30900, 40);
    driver(store, 289, 30200, 30800, 41);
    memory_rec(store, 1, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x5000, 64 * 1024, 30500, 41);
    driver(store, 590, 31000, 31400, 42);
    driver(store, 592, 31500, 31900, 44);
    memory_rec(store, 1, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x6000, 2 * MiB, 31600, 44);
    driver(store, 593, 32000, 32400, 45);
    memory_rec(store, 2, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x6000, 2 * MiB, 32200, 45);
    driver(store, 591, 32500, 32900, 43);
    // outside every scope: the 8 MiB from before the window freed; static memory of a module (not an allocation)
    runtime(store, 22, 50000, 50900, 50);
    memory_rec(store, 2, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x8000, 8 * MiB, 50500, 50);
    memory_rec(store, 1, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC, 0x7000, 4096, 51000, 0);
    // after the window
    runtime(store, 20, 150000, 150900, 60);
    memory_rec(store, 1, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0xa000, 4 * MiB, 150500, 60);
  }
  cuprof::trace take(std::uint64_t start = 1000, std::uint64_t end = 100000) {
    cuprof::trace t;
    span(t, "device_malloc", 2000, 9000, no_index);
    span(t, "pool", 10000, 19000, no_index);
    span(t, "host", 20000, 29000, no_index);
    span(t, "driver", 30000, 39000, no_index);
    t.meta.memory_recorded = true;
    store.take(t, start, end, cuprof::detail::tick_converter{});
    cuprof::attribute(t);
    return t;
  }
};

const cuprof::memory_event* memory_at(const cuprof::trace& t, std::uint64_t ts) {
  for (const auto& m : t.memory)
    if (m.ts_ns == ts) return &m;
  return nullptr;
}

}  // namespace

TEST_SUITE("cupti") {

TEST_CASE("memory records: every allocation kind, with the memory in use after each, charged to its call's scope") {
  memory_scenario sc;
  sc.records();
  const cuprof::trace t = sc.take();
  const std::uint32_t device_malloc = 0, pool = 1, host = 2, driver_scope = 3;
  // The 8 MiB allocated before the window count in the totals, not as an event; static memory is none.
  REQUIRE(t.memory.size() == 13);
  CHECK(std::is_sorted(t.memory.begin(), t.memory.end(), [](const auto& a, const auto& b) { return a.ts_ns < b.ts_ns; }));
  const cuprof::memory_event* m = memory_at(t, 2500);
  REQUIRE(m);
  CHECK(m->bytes == std::int64_t(MiB));
  CHECK(m->total_allocated == 9 * MiB);
  CHECK(m->total_reserved == 9 * MiB);
  CHECK(m->device == 0);
  CHECK(m->memory_kind == cuprof::memory_kind_device);
  CHECK(m->span == device_malloc);
  CHECK(m->tid == tid);
  CHECK(m->correlation == 10);
  m = memory_at(t, 4500);  // the free names the bytes it gives back
  REQUIRE(m);
  CHECK(m->bytes == -std::int64_t(3 * MiB));
  CHECK(m->total_allocated == 9 * MiB);

  // A pool's size is reserved, not allocated, until it is trimmed.
  m = memory_at(t, 10400);
  REQUIRE(m);
  CHECK(m->bytes == 0);
  CHECK(m->total_reserved == 9 * MiB + 32 * MiB);
  m = memory_at(t, 10500);
  REQUIRE(m);
  CHECK(m->bytes == std::int64_t(2 * MiB));
  CHECK((m->flags & cuprof::memory_from_pool) != 0);
  CHECK(m->total_allocated == 11 * MiB);
  CHECK(m->total_reserved == 9 * MiB + 32 * MiB);
  CHECK(m->span == pool);
  m = memory_at(t, 12500);
  REQUIRE(m);
  CHECK(m->bytes == 0);
  CHECK(m->total_allocated == 9 * MiB);
  CHECK(m->total_reserved == 9 * MiB);

  m = memory_at(t, 20500);  // pinned host memory is the host's, counted apart
  REQUIRE(m);
  CHECK(cuprof::is_host_memory(*m));
  CHECK(m->total_allocated == 256 * 1024);
  CHECK(m->span == host);
  m = memory_at(t, 21500);
  REQUIRE(m);
  CHECK(m->device == 0);
  CHECK(m->memory_kind == cuprof::memory_kind_managed);
  CHECK(m->total_allocated == 9 * MiB + 512 * 1024);

  m = memory_at(t, 30500);  // cuMemAlloc's record belongs to the cudaMalloc it was folded into
  REQUIRE(m);
  CHECK(m->correlation == 40);
  CHECK(m->span == driver_scope);
  m = memory_at(t, 31600);
  REQUIRE(m);
  CHECK((m->flags & cuprof::memory_virtual) != 0);
  CHECK(m->correlation == 44);
  CHECK(m->span == driver_scope);
  m = memory_at(t, 32200);
  REQUIRE(m);
  CHECK((m->flags & cuprof::memory_virtual) != 0);
  CHECK(m->bytes == -std::int64_t(2 * MiB));

  m = memory_at(t, 50500);  // freed outside every scope what was allocated before the window
  REQUIRE(m);
  CHECK(m->bytes == -std::int64_t(8 * MiB));
  CHECK(m->span == no_index);
  CHECK(m->total_allocated == MiB + 512 * 1024 + 64 * 1024);
  CHECK(calls_named(t, "cuMemCreate") == 1);  // driver allocation and virtual-memory calls are kept
  CHECK(calls_named(t, "cuMemMap") == 1);
}

TEST_CASE("memory records: a later window's totals count what earlier windows and the time between them allocated") {
  memory_scenario sc;
  sc.records();
  sc.take(1000, 40000);
  cuprof::trace later = sc.take(45000, 200000);
  REQUIRE(later.memory.size() == 2);
  CHECK(later.memory[0].bytes == -std::int64_t(8 * MiB));
  CHECK(later.memory[1].bytes == std::int64_t(4 * MiB));
  CHECK(later.memory[1].total_allocated == MiB + 512 * 1024 + 64 * 1024 + 4 * MiB);
  // A free of memory allocated before recording began counts what CUPTI says, never below zero.
  record_store fresh{raw_name};
  runtime(fresh, 22, 100, 200, 1);
  memory_rec(fresh, 2, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 0x1, 5 * MiB, 150, 1);
  cuprof::trace t;
  fresh.take(t, 0, 1000, cuprof::detail::tick_converter{});
  REQUIRE(t.memory.size() == 1);
  CHECK(t.memory[0].bytes == -std::int64_t(5 * MiB));
  CHECK(t.memory[0].total_allocated == 0);
}

TEST_CASE("memory in the table: torch's CPU Mem and CUDA Mem columns, self and total, and their sort keys") {
  memory_scenario sc;
  sc.records();
  cuprof::trace t = sc.take();
  // "driver" nests in an outer scope for the totals.
  const cuprof::event_averages rows = cuprof::key_averages(t);
  const cuprof::event_average* device_malloc = rows.find("device_malloc", cuprof::row_kind::cpu_scope);
  REQUIRE(device_malloc);
  CHECK(device_malloc->self_cuda_memory == std::int64_t(MiB));
  CHECK(device_malloc->cuda_memory == std::int64_t(MiB));
  const cuprof::event_average* host = rows.find("host", cuprof::row_kind::cpu_scope);
  REQUIRE(host);
  CHECK(host->self_cpu_memory == 256 * 1024);
  CHECK(host->self_cuda_memory == 512 * 1024);
  CHECK(rows.find("pool", cuprof::row_kind::cpu_scope)->self_cuda_memory == 0);
  CHECK(rows.find("driver", cuprof::row_kind::cpu_scope)->self_cuda_memory == 64 * 1024);
  const std::string table = rows.table("self_cuda_memory_usage");
  CHECK(table.find("CPU Mem  Self CPU Mem      CUDA Mem  Self CUDA Mem    # of Calls") != std::string::npos);
  CHECK(table.find("1.00 MB") != std::string::npos);
  CHECK(table.find("256.00 KB") != std::string::npos);
  const auto sorted = rows.sorted_rows("self_cuda_memory_usage", 2);
  REQUIRE(sorted.size() == 2);
  CHECK(sorted[0]->key == "device_malloc");
  CHECK(sorted[1]->key == "host");

  // Nested: totals include the children's, self does not.
  cuprof::trace nested;
  const std::uint32_t outer = span(nested, "outer", 0, 100, no_index);
  const std::uint32_t inner = span(nested, "inner", 10, 50, outer);
  cuprof::memory_event e;
  e.ts_ns = 20, e.bytes = 4096, e.device = 0, e.span = inner;
  nested.memory.push_back(e);
  e.ts_ns = 60, e.bytes = -1024, e.span = outer;
  nested.memory.push_back(e);
  const cuprof::event_averages n = cuprof::key_averages(nested);
  CHECK(n.find("outer", cuprof::row_kind::cpu_scope)->self_cuda_memory == -1024);
  CHECK(n.find("outer", cuprof::row_kind::cpu_scope)->cuda_memory == 3072);
  CHECK(n.find("inner", cuprof::row_kind::cpu_scope)->cuda_memory == 4096);
  CHECK(n.table("cuda_memory_usage").find("-1.00 KB") != std::string::npos);

  // Without memory figures, a memory sort key is refused with how to get them.
  cuprof::trace none;
  span(none, "s", 0, 10, no_index);
  const cuprof::event_averages plain = cuprof::key_averages(none);
  CHECK(plain.table().find("CUDA Mem") == std::string::npos);
  CHECK_THROWS_WITH_AS(plain.table("self_cuda_memory_usage"), doctest::Contains("profile_memory"), cuprof::error);
}

TEST_CASE("memory in the trace: torch's [memory] instant events and a counter per device") {
  memory_scenario sc;
  sc.records();
  cuprof::trace t = sc.take();
  t.meta.pid = 42;
  const json doc = json::parse(cuprof::chrome_trace_json(t));
  CHECK(doc.at("profile_memory") == 1);
  std::vector<json> instants, counters;
  for (const json& e : doc.at("traceEvents")) {
    if (e.value("name", "") == "[memory]") instants.push_back(e);
    if (e.value("ph", "") == "C") counters.push_back(e);
  }
  REQUIRE(instants.size() == t.memory.size());
  REQUIRE(counters.size() == t.memory.size());
  const json& first = instants.front();
  CHECK(first.at("ph") == "i");
  CHECK(first.at("cat") == "cpu_instant_event");
  CHECK(first.at("s") == "t");
  CHECK(first.at("pid") == 42);
  CHECK(first.at("tid") == tid);
  const json& a = first.at("args");
  CHECK(a.at("Bytes") == MiB);
  CHECK(a.at("Total Allocated") == 9 * MiB);
  CHECK(a.at("Total Reserved") == 9 * MiB);
  CHECK(a.at("Device Id") == 0);
  CHECK(a.at("Device Type") == 1);
  CHECK(a.at("Addr") == 0x1000);
  CHECK(a.at("Memory Kind") == "Device");
  CHECK(a.at("External id") == t.spans[0].id);
  bool host_seen = false;
  for (std::size_t i = 0; i < instants.size(); ++i) {
    const json& args = instants[i].at("args");
    const bool host = args.at("Device Type") == 0;
    host_seen = host_seen || host;
    CHECK(args.at("Device Id") == (host ? -1 : 0));
    CHECK(counters[i].at("name") == (host ? "Pinned host memory" : "CUDA memory"));
    CHECK(counters[i].at("pid") == (host ? 42 : 0));
    CHECK(counters[i].at("args").at("Allocated") == args.at("Total Allocated"));
    CHECK(counters[i].at("args").at("Reserved") == args.at("Total Reserved"));
  }
  CHECK(host_seen);
  // No memory recorded: no key, no events.
  cuprof::trace plain;
  const json none = json::parse(cuprof::chrome_trace_json(plain));
  CHECK(!none.contains("profile_memory"));
}

TEST_CASE("api_base_name strips CUPTI's version suffix, _ptsz/_ptds and leading underscores") {
  using cuprof::detail::api_base_name;
  CHECK(api_base_name("cudaLaunchKernel_v7000") == "cudaLaunchKernel");
  CHECK(api_base_name("___cudaLaunchKernel_v13000") == "cudaLaunchKernel");
  CHECK(api_base_name("___cudaLaunchKernel_ptsz_v13000") == "cudaLaunchKernel");
  CHECK(api_base_name("cudaLaunchKernel_ptsz_v7000") == "cudaLaunchKernel");
  CHECK(api_base_name("cudaMemcpy_ptds_v7000") == "cudaMemcpy");
  CHECK(api_base_name("cudaMemcpyAsync_v3020") == "cudaMemcpyAsync");
  CHECK(api_base_name("cuLaunchKernelEx") == "cuLaunchKernelEx");
  CHECK(api_base_name("cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_v7000") ==
        "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags");
  CHECK(api_base_name("name_v") == "name_v");  // no digits: not a version
  CHECK(api_base_name("name_v12a") == "name_v12a");
  CHECK(api_base_name("") == "");
}

TEST_CASE("record kinds' names: memory kinds, copy kinds, sync types, overhead kinds") {
  using namespace cuprof::detail::cupti;
  CHECK(std::string(cuprof::memory_kind_name(CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE)) == "Pageable");
  CHECK(std::string(cuprof::memory_kind_name(CUPTI_ACTIVITY_MEMORY_KIND_PINNED)) == "Pinned");
  CHECK(std::string(cuprof::memory_kind_name(CUPTI_ACTIVITY_MEMORY_KIND_DEVICE)) == "Device");
  CHECK(std::string(cuprof::memory_kind_name(CUPTI_ACTIVITY_MEMORY_KIND_MANAGED)) == "Managed");
  CHECK(std::string(cuprof::memory_kind_name(200)) == "Unknown");
  CHECK(std::string(cuprof::memcpy_kind_name(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD)) == "HtoD");
  CHECK(std::string(cuprof::memcpy_kind_name(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH)) == "DtoH");
  CHECK(std::string(cuprof::memcpy_kind_name(CUPTI_ACTIVITY_MEMCPY_KIND_DTOD)) == "DtoD");
  CHECK(std::string(cuprof::memcpy_kind_name(CUPTI_ACTIVITY_MEMCPY_KIND_HTOH)) == "HtoH");
  CHECK(std::string(cuprof::memcpy_kind_name(CUPTI_ACTIVITY_MEMCPY_KIND_PTOP)) == "PtoP");
  CHECK(std::string(cuprof::sync_kind_name(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE)) == "Event Sync");
  CHECK(std::string(cuprof::sync_kind_name(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT)) == "Stream Wait Event");
  CHECK(std::string(cuprof::sync_kind_name(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE)) == "Stream Sync");
  CHECK(std::string(cuprof::sync_kind_name(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE)) == "Context Sync");
  CHECK(std::string(overhead_kind_name(CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST)) == "Activity Buffer Request");
  CHECK(std::string(overhead_kind_name(CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH)) == "Buffer Flush");
  CHECK(std::string(overhead_kind_name(CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER)) == "Driver Compiler");
  CHECK(std::string(overhead_kind_name(CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE)) == "Resource");
}

TEST_CASE("a driver call inside a runtime call is folded on arrival, in either record order") {
  record_store store{raw_name};
  driver(store, 307, 3500, 7500, 11);  // CUPTI writes an API record at the call's exit: the inner one first
  runtime(store, 211, 3000, 8000, 10);
  runtime(store, 211, 9000, 12000, 13);
  driver(store, 307, 9500, 11000, 14);       // and the other order
  kernel(store, "first", 20000, 21000, 11);  // carries the driver call's id
  kernel(store, "second", 22000, 23000, 13);
  CHECK(store.staged() == 4);  // two calls, two kernels: the driver calls are not kept
  // Another thread's record between the two: folded when the window is taken.
  api(store, api_domain::driver, 307, 30500, 31000, 21);
  api(store, api_domain::runtime, 211, 40000, 41000, 30, tid + 1);
  api(store, api_domain::runtime, 211, 30000, 32000, 20);
  kernel(store, "third", 50000, 51000, 21);
  // A runtime call with two driver calls inside, the second's id far from
  // the first's (another thread made 40,000 calls in between): both folded.
  runtime(store, 211, 60000, 62000, 100);
  driver(store, 307, 60500, 61000, 101);
  driver(store, 307, 61200, 61800, 40101);
  kernel(store, "near", 63000, 64000, 101);
  kernel(store, "far", 64000, 65000, 40101);
  CHECK(store.staged() == 11);  // 6 calls, 5 kernels
  cuprof::trace t;
  store.take(t, 1000, 100000, cuprof::detail::tick_converter{});
  CHECK(calls_named(t, "cuLaunchKernel") == 0);
  CHECK(calls_named(t, "cudaLaunchKernel") == 5);
  REQUIRE(gpu_named(t, "first"));
  CHECK(gpu_named(t, "first")->correlation == 10);
  CHECK(gpu_named(t, "second")->correlation == 13);
  CHECK(gpu_named(t, "third")->correlation == 20);
  REQUIRE(gpu_named(t, "near"));
  CHECK(gpu_named(t, "near")->correlation == 100);
  REQUIRE(gpu_named(t, "far"));
  CHECK(gpu_named(t, "far")->correlation == 100);
  CHECK(store.staged() == 0);
}

TEST_CASE("a driver call that shares its runtime call's correlation id folds into it, in either order") {
  record_store store{raw_name};
  driver(store, 307, 3500, 7500, 10);
  runtime(store, 211, 3000, 8000, 10);
  runtime(store, 211, 9000, 12000, 11);
  driver(store, 307, 9500, 11000, 11);
  kernel(store, "first", 20000, 21000, 10);
  kernel(store, "second", 22000, 23000, 11);
  CHECK(store.staged() == 4);
  REQUIRE(store.window_complete(1000, 100000));
  cuprof::trace t;
  store.take(t, 1000, 100000, cuprof::detail::tick_converter{});
  CHECK(calls_named(t, "cuLaunchKernel") == 0);
  CHECK(calls_named(t, "cudaLaunchKernel") == 2);
  REQUIRE(gpu_named(t, "first"));
  CHECK(gpu_named(t, "first")->correlation == 10);
  CHECK(gpu_named(t, "second")->correlation == 11);
}

TEST_CASE("take(): noise dropped, names cleaned, nested driver calls folded, window respected") {
  scenario sc;
  const cuprof::trace t = sc.full();

  // API calls kept, in (thread, start) order, times converted (identity here).
  std::vector<std::string> names;
  for (const auto& c : t.api_calls) names.push_back(t.names.str(t.name_of(c)));
  CHECK(names == std::vector<std::string>{"cudaLaunchKernel", "cudaLaunchKernel", "cuLaunchKernelEx",
                                          "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", "cbid 999",
                                          "cudaLaunchKernel", "cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync",
                                          "cudaStreamSynchronize", "cudaDeviceSynchronize"});
  CHECK(calls_named(t, "cudaGetDevice") == 0);
  CHECK(calls_named(t, "cuKernelGetName") == 0);
  CHECK(calls_named(t, "cuLaunchKernel") == 0);  // folded into the runtime calls around them
  CHECK(calls_named(t, "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags") == 0);
  for (const auto& c : t.api_calls) {
    const std::string n = t.names.str(t.name_of(c));
    CHECK(n.find("_v") == std::string::npos);
    CHECK(n.rfind("_", 0) != 0);
    CHECK(c.start_ns >= sc.start);
    CHECK(c.start_ns <= sc.end);
    CHECK(c.tid == tid);
  }
  const cuprof::api_call* first = call_named(t, "cudaLaunchKernel", 0);
  REQUIRE(first);
  CHECK(first->start_ns == 3000);
  CHECK(first->end_ns == 8000);
  CHECK(first->correlation == 10);
  CHECK(t.kind_of(*first).cbid == 211);
  CHECK(t.kind_of(*first).domain == api_domain::runtime);
  CHECK(t.kind_of(*first).has_flow);
  const cuprof::api_call* ex = call_named(t, "cuLaunchKernelEx");
  REQUIRE(ex);
  CHECK(t.kind_of(*ex).domain == api_domain::driver);
  CHECK(t.kind_of(*ex).has_flow);
  const cuprof::api_call* failed = call_named(t, "cudaLaunchKernel", 3);
  REQUIRE(failed);
  CHECK(failed->return_value == 700);
  const cuprof::api_call* occ = call_named(t, "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags");
  REQUIRE(occ);
  CHECK_FALSE(t.kind_of(*occ).has_flow);
  CHECK(t.kind_of(*call_named(t, "cudaStreamSynchronize")).has_flow);

  // GPU records of the window only.
  CHECK(t.gpu.size() == 8);
  const cuprof::gpu_activity* vs = gpu_named(t, vector_subtract);
  REQUIRE(vs);                   // demangled
  CHECK(vs->correlation == 10);  // its record carried the nested cuLaunchKernel's id
  CHECK(vs->start_ns == 50000);
  CHECK(vs->end_ns == 60000);
  CHECK(vs->kind == cuprof::gpu_kind::kernel);
  CHECK(t.lane_of(*vs).stream == 7);
  CHECK(t.lane_of(*vs).context == 1);
  REQUIRE(vs->details != no_index);
  const cuprof::kernel_details& k = t.kernels[vs->details];
  CHECK(k.grid[0] == 120);
  CHECK(k.grid[1] == 2);
  CHECK(k.block[0] == 128);
  CHECK(k.registers_per_thread == 40);
  CHECK(k.static_shared_memory == 2048);
  CHECK(k.dynamic_shared_memory == 512);
  REQUIRE(gpu_named(t, "plain_kernel"));  // not mangled: kept as is
  CHECK(gpu_named(t, "plain_kernel")->correlation == 13);
  REQUIRE(gpu_named(t, "ptsz_kernel"));
  CHECK(t.lane_of(*gpu_named(t, "ptsz_kernel")).stream == 9);
  CHECK(gpu_named(t, "late_kernel") == nullptr);
  const cuprof::gpu_activity* cp = gpu_named(t, "Memcpy DtoD (Device -> Device)");
  REQUIRE(cp);
  CHECK(cp->kind == cuprof::gpu_kind::memcpy);
  CHECK(t.bytes_of(*cp) == (1u << 20));
  CHECK(cp->subkind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD);
  const cuprof::gpu_activity* ms = gpu_named(t, "Memset (Device)");
  REQUIRE(ms);
  CHECK(ms->kind == cuprof::gpu_kind::memset);
  CHECK(t.bytes_of(*ms) == 4);
  const cuprof::gpu_activity* ss = gpu_named(t, "Stream Sync");
  REQUIRE(ss);
  CHECK(ss->kind == cuprof::gpu_kind::sync);
  CHECK(t.lane_of(*ss).stream == 7);
  CHECK(t.lane_of(*ss).device == 0);
  const cuprof::gpu_activity* cs = gpu_named(t, "Context Sync");
  REQUIRE(cs);
  CHECK(t.lane_of(*cs).stream == 0);  // a context sync waits on no one stream
  CHECK(cs->subkind == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE);
  for (const auto& g : t.gpu) {
    CHECK(g.start_ns >= 1000);
    CHECK(g.end_ns >= g.start_ns);
  }

  // Overhead clamped to the window; the one before it dropped.
  REQUIRE(t.overhead.size() == 2);
  std::map<std::string, cuprof::overhead_span> oh;
  for (const auto& o : t.overhead) oh[t.names.str(o.name)] = o;
  REQUIRE(oh.count("Activity Buffer Request"));
  CHECK(oh["Activity Buffer Request"].start_ns == 1000);
  CHECK(oh["Activity Buffer Request"].end_ns == 1500);
  REQUIRE(oh.count("Buffer Flush"));
  CHECK(oh["Buffer Flush"].start_ns == 99000);
  CHECK(oh["Buffer Flush"].end_ns == 100000);

  // Lost timestamps and CUPTI's own drop count.
  CHECK(t.meta.dropped_gpu_records == 3 + 1);
  CHECK(t.meta.unmatched_gpu_records == 0);
}

TEST_CASE("take(): records share their kinds and lanes; a copy taken in a later window keeps its bytes") {
  record_store store(raw_name);
  for (std::uint32_t i = 0; i < 4; ++i) {
    runtime(store, 211, 1000 + i * 100, 1050 + i * 100, 10 + i);
    kernel(store, "k", 5000 + i * 100, 5050 + i * 100, 10 + i, /*stream*/ 7 + i % 2);
  }
  runtime(store, 41, 2000, 2100, 20);  // cudaMemcpyAsync: its copy runs after the window, and belongs to it
  memcpy_rec(store, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, CUPTI_ACTIVITY_MEMORY_KIND_PINNED, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
             3ull << 32, 9000, 9500, 20);  // 12 GiB: beyond 32 bits
  runtime(store, 41, 20000, 20100, 21);    // the second window's copy, staged before the first is taken
  memcpy_rec(store, CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, CUPTI_ACTIVITY_MEMORY_KIND_PINNED, 4096,
             21000, 21500, 21);
  runtime(store, 211, 22000, 22100, 22, 100000);  // a return value beyond 16 bits: clamped, still nonzero

  cuprof::trace first;
  store.take(first, 0, 8000, cuprof::detail::tick_converter{});
  CHECK(first.api_calls.size() == 5);
  CHECK(first.call_kinds.size() == 2);  // cudaLaunchKernel and cudaMemcpyAsync, once each
  REQUIRE(first.gpu.size() == 5);
  CHECK(first.gpu_lanes.size() == 2);
  for (const cuprof::gpu_activity& g : first.gpu)
    if (g.kind == cuprof::gpu_kind::kernel) CHECK(first.lane_of(g).stream == 7 + (g.correlation - 10) % 2);
  CHECK(first.bytes_of(first.gpu.back()) == 3ull << 32);
  CHECK(first.transfer_bytes.size() == 1);

  cuprof::trace second;
  store.take(second, 8001, 30000, cuprof::detail::tick_converter{});
  REQUIRE(second.gpu.size() == 1);
  CHECK(second.gpu[0].correlation == 21);  // staged while the first window was taken
  CHECK(second.bytes_of(second.gpu[0]) == 4096);
  CHECK(second.names.str(second.gpu[0].name) == "Memcpy DtoH (Device -> Pinned)");
  const cuprof::api_call* failed = call_named(second, "cudaLaunchKernel");
  REQUIRE(failed);
  CHECK(failed->return_value == INT16_MAX);
}

TEST_CASE("take(): a program that creates a stream per launch gets a lane per stream, past 2^16") {
  record_store store(raw_name);
  constexpr std::uint32_t streams = 70000;
  for (std::uint32_t i = 0; i < streams; ++i) {
    runtime(store, 211, 1000 + i * 10, 1005 + i * 10, 10 + i);
    kernel(store, "k", 2000000 + i * 10, 2000005 + i * 10, 10 + i, /*stream*/ 100 + i);
  }
  cuprof::trace t;
  store.take(t, 0, 5000000, cuprof::detail::tick_converter{});
  REQUIRE(t.gpu.size() == streams);
  CHECK(t.gpu_lanes.size() == streams);
  CHECK(t.lane_of(t.gpu.back()).stream == 100 + streams - 1);
  CHECK(t.kernels.size() == 1);  // one launch configuration
}

TEST_CASE("take(): what belongs to a later window stays staged") {
  scenario sc;
  sc.full();
  CHECK(sc.store.staged() == 3);  // the later launch, its kernel, the later overhead
  cuprof::trace next;
  sc.store.take(next, 100001, 200000, cuprof::detail::tick_converter{});
  REQUIRE(next.api_calls.size() == 1);
  CHECK(next.api_calls[0].correlation == 30);
  REQUIRE(next.gpu.size() == 1);
  CHECK(next.names.str(next.gpu[0].name) == "late_kernel");
  REQUIRE(next.overhead.size() == 1);
  CHECK(next.names.str(next.overhead[0].name) == "Driver Compiler");
  CHECK(next.meta.dropped_gpu_records == 0);  // counted once, in the first window
  CHECK(sc.store.staged() == 0);
}

TEST_CASE("take(): a window of many staged chunks, threads interleaved in storage, keeps every launch linked") {
  // Three threads launch in turn; their records arrive interleaved, each
  // runtime call's driver call after the other threads' runtime calls, so
  // that calls are folded when the window is taken, not on arrival, and the
  // staged order is not the trace's (thread, start) order. 12,000 launches a
  // thread fill more than one staged chunk of calls and of kernels.
  record_store store{raw_name};
  constexpr std::uint32_t launches = 12000, threads = 3, before = 100, after = 100;
  const auto call_start = [](std::uint32_t i, std::uint32_t th) { return 10000 + std::uint64_t(i) * 1000 + th * 300; };
  const auto runtime_id = [](std::uint32_t i, std::uint32_t th) { return 2 * (threads * i + th) + 1; };
  for (std::uint32_t i = 0; i < launches; ++i) {
    for (std::uint32_t th = 0; th < threads; ++th)
      api(store, api_domain::runtime, 211, call_start(i, th), call_start(i, th) + 250, runtime_id(i, th), tid + th);
    for (std::uint32_t th = 0; th < threads; ++th)
      api(store, api_domain::driver, 307, call_start(i, th) + 50, call_start(i, th) + 200, runtime_id(i, th) + 1, tid + th);
  }
  for (std::uint32_t i = 0; i < launches; ++i)
    for (std::uint32_t th = 0; th < threads; ++th)  // the driver call's id, or the runtime call's, as CUPTI gives either
      kernel(store, "k", 100000000 + std::uint64_t(threads * i + th) * 10, 100000000 + std::uint64_t(threads * i + th) * 10 + 5,
             runtime_id(i, th) + (i % 2));
  const std::uint64_t start = call_start(before, 0), end = call_start(launches - after, 0) - 1;
  REQUIRE(store.window_complete(start, end));
  cuprof::trace t;
  store.take(t, start, end, cuprof::detail::tick_converter{});
  constexpr std::size_t in_window = std::size_t(threads) * (launches - before - after);
  REQUIRE(t.api_calls.size() == in_window);
  REQUIRE(t.gpu.size() == in_window);
  CHECK(calls_named(t, "cudaLaunchKernel") == in_window);
  for (std::size_t n = 0; n < t.api_calls.size(); ++n) {  // thread by thread, each in call order
    const cuprof::api_call& c = t.api_calls[n];
    const std::uint32_t th = std::uint32_t(n / (launches - before - after));
    const std::uint32_t i = before + std::uint32_t(n % (launches - before - after));
    CHECK(c.tid == tid + th);
    CHECK(c.start_ns == call_start(i, th));
    CHECK(c.correlation == runtime_id(i, th));
    CHECK(t.kind_of(c).domain == api_domain::runtime);
  }
  for (const cuprof::gpu_activity& g : t.gpu) {  // linked to its launch's runtime call, whichever id it carried
    const std::uint64_t nth = (g.start_ns - 100000000) / 10;
    CHECK(g.correlation == 2 * nth + 1);
  }
  cuprof::attribute(t);
  CHECK(t.meta.unmatched_gpu_records == 0);
  for (const cuprof::gpu_activity& g : t.gpu) {
    REQUIRE(g.api != no_index);
    CHECK(t.api_calls[g.api].correlation == g.correlation);
  }
  // The later launches stay staged (runtime and driver calls, not folded yet) with their kernels; the earlier ones are gone.
  CHECK(store.staged() == 3 * threads * after);
  cuprof::trace later;
  store.take(later, end + 1, call_start(launches, 0), cuprof::detail::tick_converter{});
  CHECK(later.api_calls.size() == threads * after);
  CHECK(later.gpu.size() == threads * after);
  CHECK(store.staged() == 0);
}

TEST_CASE("window_complete(): false until the kernel of every launch in the window arrived") {
  scenario sc;
  CHECK(sc.store.window_complete(sc.start, sc.end));  // nothing called yet
  sc.api_records();
  CHECK_FALSE(sc.store.window_complete(sc.start, sc.end));
  sc.gpu_records_but_the_first_kernel();
  // Every record but the folded launch's kernel: still incomplete. The failed
  // launch, the syncs and the occupancy query wait for nothing.
  CHECK_FALSE(sc.store.window_complete(sc.start, sc.end));
  sc.first_kernel();  // carries the nested driver call's correlation id
  CHECK(sc.store.window_complete(sc.start, sc.end));
  // A later window with a launch whose kernel has not come yet.
  CHECK(sc.store.window_complete(100001, 200000));  // the late kernel is staged
  runtime(sc.store, 211, 160000, 161000, 40);
  CHECK_FALSE(sc.store.window_complete(100001, 200000));
  kernel(sc.store, "k40", 162000, 163000, 40);
  CHECK(sc.store.window_complete(100001, 200000));
}

TEST_CASE("take(): GPU work of a call made before recording began is launched before, whatever hidden call came first") {
  record_store store(raw_name);
  store.note_recording(1000);
  // cuProfilerStart, a call cuprof does not show, entered after recording
  // began inside the cudaProfilerStart that waited for the window, with an
  // id older than the launches other threads made meanwhile.
  driver(store, 900, 1100, 1200, 5);
  runtime(store, 211, 2000, 2100, 20);
  kernel(store, "k20", 2200, 2300, 20);
  kernel(store, "k10", 1300, 1400, 10);  // its launch began before recording: never recorded
  store.set_call_horizon(5000, {});
  REQUIRE(store.window_complete(1000, 3000));
  cuprof::trace t;
  store.take(t, 1000, 3000, cuprof::detail::tick_converter{});
  CHECK(t.meta.edges.launched_before[0] == 1);
  CHECK(t.meta.edges.gpu_work_without_call[0] == 0);
  REQUIRE(t.gpu.size() == 1);
  CHECK(t.gpu[0].correlation == 20);
}

TEST_CASE("take() after window_complete(): API records that arrived in between are taken too") {
  record_store store(raw_name);
  runtime(store, 211, 100, 200, 1);
  kernel(store, "k1", 300, 400, 1);
  REQUIRE(store.window_complete(0, 1000));
  runtime(store, 131, 500, 600, 2);  // a stream sync of the window, delivered after the check
  cuprof::trace t;
  store.take(t, 0, 1000, cuprof::detail::tick_converter{});
  REQUIRE(t.api_calls.size() == 2);
  CHECK(t.names.str(t.name_of(t.api_calls[1])) == "cudaStreamSynchronize");
  REQUIRE(t.gpu.size() == 1);
  CHECK(t.gpu[0].correlation == 1);
  CHECK(store.staged() == 0);
}

TEST_CASE("a kernel name's pointer reused by another kernel (a module reloaded) gets the new name") {
  record_store store(raw_name);
  runtime(store, 211, 100, 200, 1);
  runtime(store, 211, 300, 400, 2);
  runtime(store, 211, 500, 600, 3);
  char name[64];
  std::strcpy(name, "_Z14VectorSubtractPKiS0_Pii");
  kernel(store, name, 1000, 1100, 1);
  std::strcpy(name, "_Z5firstv");  // the same address now holds another module's kernel
  kernel(store, name, 1200, 1300, 2);
  kernel(store, name, 1400, 1500, 3);
  cuprof::trace t;
  store.take(t, 0, 2000, cuprof::detail::tick_converter{});
  REQUIRE(t.gpu.size() == 3);
  CHECK(t.names.str(t.gpu[0].name) == vector_subtract);
  CHECK(t.names.str(t.gpu[1].name) == "first()");
  CHECK(t.gpu[2].name == t.gpu[1].name);
}

TEST_CASE("discard_before() drops everything recorded before a tick") {
  record_store store(raw_name);
  runtime(store, 211, 100, 200, 1);
  kernel(store, "early", 300, 400, 1);
  overhead_rec(store, CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH, 50, 60);
  runtime(store, 211, 1500, 1600, 2);
  kernel(store, "late", 1700, 1800, 2);
  runtime(store, 211, 900, 950, 3);  // called before, its kernel runs after the cut
  kernel(store, "straddling", 1100, 1200, 3);
  memcpy_rec(store, 1, 1, 3, 8, 0, 0, 4);  // lost: counted before the cut, so discarded too
  CHECK(store.staged() == 7);
  store.discard_before(1000);
  CHECK(store.staged() == 2);
  cuprof::trace t;
  store.take(t, 1000, 2000, cuprof::detail::tick_converter{});
  REQUIRE(t.api_calls.size() == 1);
  CHECK(t.api_calls[0].correlation == 2);
  REQUIRE(t.gpu.size() == 1);
  CHECK(t.names.str(t.gpu[0].name) == "late");
  CHECK(t.overhead.empty());
  CHECK(t.meta.dropped_gpu_records == 0);
  store.clear();
  CHECK(store.staged() == 0);
}

TEST_CASE(
    "lost timestamps (start = end = 0, or end before start): copies, memsets and kernels with no launch id are counted, not "
    "staged") {
  record_store store(raw_name);
  runtime(store, 211, 100, 200, 1);
  kernel(store, "lost", 0, 0, 1);  // kept, marked, placed by its launch (the next case)
  memcpy_rec(store, 1, 1, 3, 8, 0, 0, 2);
  memset_rec(store, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, 4, 0, 0, 3);
  kernel(store, "inverted", 500, 400, 1);
  kernel(store, "no_launch_id", 0, 0, 0);
  CHECK(store.staged() == 3);
  cuprof::trace t;
  store.take(t, 0, 1000, cuprof::detail::tick_converter{});
  REQUIRE(t.gpu.size() == 2);
  for (const cuprof::gpu_activity& g : t.gpu) {
    CHECK(g.flags == cuprof::gpu_timing_unknown);
    CHECK(g.start_ns == 200);
    CHECK(g.end_ns == 200);
  }
  CHECK(t.meta.dropped_gpu_records == 3);
}

TEST_CASE(
    "a kernel CUPTI could not time (a device-side assert) is kept: on its stream, at its launch's end, 0 ns, marked, linked") {
  record_store store(raw_name);
  runtime(store, 211, 2000, 3000, 1);
  kernel(store, "before_the_assert", 3500, 4000, 1);
  runtime(store, 211, 5000, 6000, 2);
  kernel(store, "_Z13assert_kernelv", 0, 0, 2);  // start = end = 0: the kernel never completed
  runtime(store, 211, 7000, 7500, 3);
  kernel(store, "long_kernel", 8000, 20000, 3, 9);
  runtime(store, 211, 9000, 9500, 4);
  kernel(store, "inverted_after_long", 600, 500, 4, 9);  // end before start; stream 9 is busy until 20000
  cuprof::trace t;
  const std::uint32_t step = span(t, "step", 1000, 30000, no_index);
  store.take(t, 1000, 40000, cuprof::detail::tick_converter{});
  cuprof::attribute(t);

  CHECK(t.meta.dropped_gpu_records == 0);
  const cuprof::gpu_activity* k = gpu_named(t, "assert_kernel()");
  REQUIRE(k);
  CHECK(k->start_ns == 6000);  // the launch call's end
  CHECK(k->end_ns == k->start_ns);
  CHECK(t.lane_of(*k).stream == 7);
  REQUIRE(k->api != no_index);
  CHECK(t.api_calls[k->api].correlation == 2);
  CHECK(cuprof::launching_span(t, *k) == step);
  const cuprof::gpu_activity* after_long = gpu_named(t, "inverted_after_long");
  REQUIRE(after_long);
  CHECK(after_long->start_ns == 20000);  // not before what ran on its stream before it
  CHECK(after_long->end_ns == 20000);
  CHECK(t.lane_of(*after_long).stream == 9);
  CHECK((k->flags & cuprof::gpu_timing_unknown) != 0);
  CHECK((gpu_named(t, "before_the_assert")->flags & cuprof::gpu_timing_unknown) == 0);

  // Counted as a launch with no GPU time: nothing made up goes into a total.
  const cuprof::event_averages avg = cuprof::key_averages(t);
  const auto* row = avg.find("assert_kernel()", cuprof::row_kind::gpu_work);
  REQUIRE(row);
  CHECK(row->count == 1);
  CHECK(row->self_cuda_ns == 0);
  CHECK(avg.self_cuda_time_total_ns() == 500 + 12000);

  for (const cuprof::trace_detail detail : {cuprof::trace_detail::kineto, cuprof::trace_detail::lean}) {
    cuprof::export_options o;
    o.detail = detail;
    const json doc = json::parse(cuprof::chrome_trace_json(t, "cuprof", o));
    const flow_test::arrows arrows(doc["traceEvents"]);
    const json* kernel_event = nullptr;
    const json* launch_event = nullptr;
    for (const json& e : doc["traceEvents"]) {
      if (e.value("name", "") == "assert_kernel()") kernel_event = &e;
      if (e.value("cat", "") == "cuda_runtime" && e["args"].value("correlation", 0) == 2) launch_event = &e;
      if (e.value("cat", "") == "kernel" && e.value("name", "") != "assert_kernel()" &&
          e.value("name", "") != "inverted_after_long")
        CHECK_FALSE(e["args"].contains("timing"));
    }
    REQUIRE(kernel_event);
    REQUIRE(launch_event);
    CHECK((*kernel_event)["cat"] == "kernel");
    CHECK((*kernel_event)["dur"].get<double>() == 0);
    CHECK((*kernel_event)["tid"] == 7);
    REQUIRE((*kernel_event)["args"].contains("timing"));
    CHECK((*kernel_event)["args"]["timing"].get<std::string>().rfind("unknown", 0) == 0);
    const flow_test::arrow* in = arrows.into(*kernel_event);
    REQUIRE(in);
    CHECK(in->from == launch_event);
  }
}

TEST_CASE("records over the store's cap are counted as dropped, not staged") {
  record_store store(raw_name, 4);
  runtime(store, 211, 100, 200, 1);
  kernel(store, "k1", 300, 400, 1);
  runtime(store, 211, 500, 600, 2);
  kernel(store, "k2", 700, 800, 2);
  CHECK(store.staged() == 4);
  runtime(store, 211, 900, 950, 3);  // over the cap
  kernel(store, "k3", 1000, 1100, 3);
  CHECK(store.staged() == 4);
  cuprof::trace t;
  store.take(t, 0, 2000, cuprof::detail::tick_converter{});
  CHECK(t.api_calls.size() == 2);
  CHECK(t.gpu.size() == 2);
  CHECK(t.meta.dropped_gpu_records == 2);
  CHECK(store.staged() == 0);
  runtime(store, 211, 3000, 3100, 4);  // room again
  CHECK(store.staged() == 1);
}

TEST_CASE("take() converts ticks with the window's clock") {
  cuprof::detail::clock_sample a, b;
  a.ticks = 0;
  a.mono_ns = 0;
  a.real_ns = 1700000000000000000ull;
  b.ticks = 1000000;
  b.mono_ns = 1000000;
  b.real_ns = a.real_ns + 1000000;
  const cuprof::detail::tick_converter clock(a, b);
  record_store store(raw_name);
  runtime(store, 211, 3000, 4000, 1);
  kernel(store, "k", 5000, 6000, 1);
  overhead_rec(store, CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH, 2000, 2500);
  cuprof::trace t;
  store.take(t, 1000, 10000, clock);
  REQUIRE(t.api_calls.size() == 1);
  REQUIRE(t.gpu.size() == 1);
  REQUIRE(t.overhead.size() == 1);
  CHECK(t.api_calls[0].start_ns == clock.to_epoch_ns(3000));
  CHECK(t.api_calls[0].end_ns == clock.to_epoch_ns(4000));
  CHECK(t.gpu[0].start_ns == clock.to_epoch_ns(5000));
  CHECK(t.gpu[0].end_ns == clock.to_epoch_ns(6000));
  CHECK(t.overhead[0].start_ns == clock.to_epoch_ns(2000));
  CHECK(t.api_calls[0].start_ns > 1700000000000000000ull);
  CHECK(t.gpu[0].start_ns - t.api_calls[0].start_ns == 2000);
}

TEST_CASE("sync records take their device from the context's other records") {
  record_store store(raw_name);
  kernel(store, "on_device_2", 200, 300, 2, 7, /*device*/ 2, /*context*/ 5);
  runtime(store, 211, 150, 160, 2);
  sync_call(store, 131, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, 400, 900, 1, 5, 7);
  cuprof::trace t;
  store.take(t, 0, 1000, cuprof::detail::tick_converter{});
  const cuprof::gpu_activity* s = gpu_named(t, "Stream Sync");
  REQUIRE(s);
  CHECK(t.lane_of(*s).device == 2);
  CHECK(t.lane_of(*s).context == 5);
}

TEST_CASE("a sync record that arrives before its context's first kernel still gets the right device") {
  // Records of one window are all staged before take(); their order in
  // CUPTI's buffers should not decide which GPU a sync is drawn on.
  record_store store(raw_name);
  runtime(store, 211, 150, 160, 2);
  sync_call(store, 131, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, 400, 900, 1, 5, 7);
  kernel(store, "on_device_2", 200, 300, 2, 7, /*device*/ 2, /*context*/ 5);
  cuprof::trace t;
  store.take(t, 0, 1000, cuprof::detail::tick_converter{});
  const cuprof::gpu_activity* s = gpu_named(t, "Stream Sync");
  REQUIRE(s);
  CHECK(t.lane_of(*s).device == 2);
}

TEST_CASE("a kernel record without a name, and repeated mangled names, demangled once") {
  record_store store(raw_name);
  runtime(store, 211, 100, 200, 1);
  runtime(store, 211, 300, 400, 2);
  runtime(store, 211, 500, 600, 3);
  kernel(store, nullptr, 1000, 1100, 1);
  kernel(store, "_Z14VectorSubtractPKiS0_Pii", 1200, 1300, 2);
  kernel(store, "_Z14VectorSubtractPKiS0_Pii", 1400, 1500, 3);
  cuprof::trace t;
  store.take(t, 0, 2000, cuprof::detail::tick_converter{});
  REQUIRE(t.gpu.size() == 3);
  CHECK(t.names.str(t.gpu[0].name) == "(unnamed kernel)");
  CHECK(t.names.str(t.gpu[1].name) == vector_subtract);
  CHECK(t.gpu[1].name == t.gpu[2].name);
}

TEST_CASE("graph launches: every node kernel links to the one launch") {
  record_store store(raw_name);
  runtime(store, 311, 100, 200, 7);
  driver(store, 514, 120, 180, 8);  // nested cuGraphLaunch
  kernel(store, "node_a", 300, 400, 7, 7, 0, 1, /*graph*/ 2);
  kernel(store, "node_b", 410, 500, 7, 7, 0, 1, 2);
  kernel(store, "node_c", 510, 600, 7, 7, 0, 1, 2);
  CHECK(store.window_complete(0, 1000));
  cuprof::trace t;
  span(t, "graph_scope", 50, 250, no_index);
  store.take(t, 0, 1000, cuprof::detail::tick_converter{});
  cuprof::attribute(t);
  REQUIRE(t.api_calls.size() == 1);
  CHECK(t.names.str(t.name_of(t.api_calls[0])) == "cudaGraphLaunch");
  REQUIRE(t.gpu.size() == 3);
  for (const auto& g : t.gpu) {
    CHECK(g.api == 0);
    CHECK(t.kernels[g.details].graph_id == 2);
    CHECK(cuprof::launching_span(t, g) == 0);
  }
  const cuprof::event_averages avg = cuprof::key_averages(t);
  REQUIRE(avg.find("graph_scope", cuprof::row_kind::cpu_scope));
  CHECK(avg.find("graph_scope", cuprof::row_kind::cpu_scope)->self_cuda_ns == 280);
  // One arrow per node kernel, all from the launch: the first node's by flow v2
  // (a slice carries one bind_id), the others' by v1 s/f pairs.
  const json doc = json::parse(cuprof::chrome_trace_json(t));
  const json& ev = doc["traceEvents"];
  std::set<std::uint64_t> s_ids, f_ids;
  for (const json& e : ev) {
    if (e["ph"] == "s") s_ids.insert(e["id"].get<std::uint64_t>());
    if (e["ph"] == "f") f_ids.insert(e["id"].get<std::uint64_t>());
  }
  CHECK(s_ids.size() == 2);
  CHECK(s_ids == f_ids);
  const flow_test::arrows arrows(ev);
  CHECK(arrows.v2 == 1);
  CHECK(arrows.v1 == 2);
  CHECK(arrows.out_of(ev, t.api_calls[0].correlation).size() == 3);
  for (const json& e : ev)
    if (e.value("cat", "") == "kernel") {
      const flow_test::arrow* in = arrows.into(e);
      REQUIRE(in);
      CHECK(in->v2 == (e["name"] == "node_a"));
    }
}

constexpr std::uint64_t whole_time = std::uint64_t(1) << 62;

// The process's one recorder (threads keep their buffers in a thread_local);
// each test drains what it recorded.
cuprof::detail::cupti::call_recorder& process_recorder() {
  static auto* recorder = new cuprof::detail::cupti::call_recorder;  // never destroyed, as the tracer's
  return *recorder;
}

TEST_CASE("call_recorder: calls from callbacks reach the store with their times, thread, id and result") {
  cuprof::detail::cupti::call_recorder& recorder = process_recorder();
  record_store store(raw_name);
  const std::uint64_t before = cuprof::detail::now_ticks();
  recorder.start_recording(before);
  // cudaLaunchKernel -> cuLaunchKernel; a failed cudaStreamSynchronize; a hidden getter.
  traced_call(recorder, CUPTI_CB_DOMAIN_RUNTIME_API, 211, 10, 0,
              [&] { traced_call(recorder, CUPTI_CB_DOMAIN_DRIVER_API, 307, 11); });
  traced_call(recorder, CUPTI_CB_DOMAIN_RUNTIME_API, 131, 12, 700);
  traced_call(recorder, CUPTI_CB_DOMAIN_RUNTIME_API, 3, 13);
  const std::uint64_t after = cuprof::detail::now_ticks();
  CHECK(store.staged() == 0);  // nothing until drained
  recorder.drain_into(store);
  kernel(store, "k", after + 10, after + 20, 11);  // the kernel carries the nested driver call's id
  REQUIRE(store.window_complete(0, after));
  cuprof::trace t;
  store.take(t, 0, whole_time, cuprof::detail::tick_converter{});
  REQUIRE(t.api_calls.size() == 2);  // the driver call folded, the getter dropped as noise
  const cuprof::api_call& launch = t.api_calls[0];
  CHECK(t.names.str(t.name_of(launch)) == "cudaLaunchKernel");
  CHECK(t.kind_of(launch).domain == api_domain::runtime);
  CHECK(launch.correlation == 10);
  CHECK(launch.tid == cuprof::detail::current_tid());
  CHECK(launch.start_ns >= before);
  CHECK(launch.start_ns <= launch.end_ns);
  const cuprof::api_call& sync = t.api_calls[1];
  CHECK(t.names.str(t.name_of(sync)) == "cudaStreamSynchronize");
  CHECK(sync.return_value == 700);
  CHECK(sync.start_ns >= launch.end_ns);
  CHECK(sync.end_ns <= after);
  REQUIRE(t.gpu.size() == 1);
  CHECK(t.gpu[0].correlation == 10);  // linked to the outer runtime call
  CHECK(t.meta.dropped_cpu_events == 0);
  recorder.drain_into(store);
  CHECK(store.staged() == 0);  // a drain takes each call once
}

TEST_CASE("call_recorder: a call entered before recording began is not recorded") {
  cuprof::detail::cupti::call_recorder& recorder = process_recorder();
  record_store store(raw_name);
  traced_call(recorder, CUPTI_CB_DOMAIN_RUNTIME_API, 211, 1, 0, [&] {
    recorder.start_recording(cuprof::detail::now_ticks());  // the window opens mid-call
    traced_call(recorder, CUPTI_CB_DOMAIN_RUNTIME_API, 165, 2);
  });
  recorder.drain_into(store);
  cuprof::trace t;
  store.take(t, 0, whole_time, cuprof::detail::tick_converter{});
  REQUIRE(t.api_calls.size() == 1);
  CHECK(t.names.str(t.name_of(t.api_calls[0])) == "cudaDeviceSynchronize");
}

TEST_CASE("call_recorder: a drain during a launch keeps its nested driver call for the launch, whose window gets the kernel") {
  cuprof::detail::cupti::call_recorder& recorder = process_recorder();
  record_store store(raw_name);
  const std::uint64_t before = cuprof::detail::now_ticks();
  recorder.start_recording(before);
  std::uint64_t edge = 0;  // the window ends after the launch started, before its driver call did
  traced_call(recorder, CUPTI_CB_DOMAIN_RUNTIME_API, 211, 20, 0, [&] {
    edge = cuprof::detail::now_ticks();
    traced_call(recorder, CUPTI_CB_DOMAIN_DRIVER_API, 307, 21);
    recorder.drain_into(store);                // CUPTI's worker drains while the launch returns
    cuprof::detail::cupti::call_record other;  // another thread's call, staged in between
    other.start = edge + 1;
    other.end = edge + 2;
    other.tid = cuprof::detail::current_tid() + 1;
    other.cbid = 165;
    other.correlation = 30;
    store.add_call(other);
    CHECK_FALSE(store.window_complete(before, edge));  // the launch is in progress
  });
  recorder.drain_into(store);
  kernel(store, "k", cuprof::detail::now_ticks() + 10, cuprof::detail::now_ticks() + 20, 21);
  REQUIRE(store.window_complete(before, edge));
  cuprof::trace t;
  store.take(t, before, edge, cuprof::detail::tick_converter{});
  REQUIRE(t.api_calls.size() == 1);
  CHECK(t.names.str(t.name_of(t.api_calls[0])) == "cudaLaunchKernel");
  CHECK(t.api_calls[0].correlation == 20);
  REQUIRE(t.gpu.size() == 1);
  CHECK(t.gpu[0].correlation == 20);
  CHECK_FALSE(t.meta.edges.lost());
  cuprof::trace later;  // the driver call went with its launch: the next window has only the other thread's call
  store.take(later, edge + 1, whole_time, cuprof::detail::tick_converter{});
  REQUIRE(later.api_calls.size() == 1);
  CHECK(later.api_calls[0].correlation == 30);
}

TEST_CASE("call_recorder: each thread's calls carry its id, also once the thread has exited") {
  cuprof::detail::cupti::call_recorder& recorder = process_recorder();
  record_store store(raw_name);
  recorder.start_recording(0);
  std::uint32_t worker_tid = 0;
  constexpr std::uint32_t calls_per_thread = 5000;  // more than one chunk holds
  std::thread worker([&] {
    worker_tid = cuprof::detail::current_tid();
    for (std::uint32_t i = 0; i < calls_per_thread; ++i) traced_call(recorder, CUPTI_CB_DOMAIN_RUNTIME_API, 165, 2 * i + 1);
  });
  for (std::uint32_t i = 0; i < calls_per_thread; ++i) traced_call(recorder, CUPTI_CB_DOMAIN_RUNTIME_API, 165, 2 * i + 2);
  worker.join();
  recorder.drain_into(store);
  cuprof::trace t;
  store.take(t, 0, whole_time, cuprof::detail::tick_converter{});
  std::map<std::uint32_t, std::set<std::uint32_t>> ids_by_thread;
  for (const cuprof::api_call& c : t.api_calls) ids_by_thread[c.tid].insert(c.correlation);
  REQUIRE(ids_by_thread.size() == 2);
  CHECK(ids_by_thread[worker_tid].size() == calls_per_thread);
  CHECK(ids_by_thread[cuprof::detail::current_tid()].size() == calls_per_thread);
  CHECK(*ids_by_thread[worker_tid].begin() % 2 == 1);
}

TEST_CASE("call_recorder: calls past the chunk cap are dropped and counted, the ones recorded kept") {
  cuprof::detail::cupti::call_recorder& recorder = process_recorder();
  record_store store(raw_name);
  recorder.start_recording(0);
  cuprof::detail::chunk_pool& pool = cuprof::detail::global_chunk_pool();
  const std::size_t cap = pool.max_chunks();
  constexpr std::uint32_t calls = 3 * 4096;  // a full chunk holds 4096 calls
  std::uint32_t recorder_tid = 0;
  // Room for a fresh thread's first chunk (64 slots, 32 calls), none after it:
  // the cap counts every chunk allocated, free ones included.
  pool.trim();
  pool.set_max_slots(pool.allocated_slots() + cuprof::detail::chunk_class_slots[0]);
  std::thread caller([&] {
    recorder_tid = cuprof::detail::current_tid();
    for (std::uint32_t i = 0; i < calls; ++i) traced_call(recorder, CUPTI_CB_DOMAIN_RUNTIME_API, 165, i + 1);
  });
  caller.join();
  pool.set_max_chunks(cap);
  recorder.drain_into(store);
  cuprof::trace t;
  store.take(t, 0, whole_time, cuprof::detail::tick_converter{});
  std::size_t kept = 0;
  for (const cuprof::api_call& c : t.api_calls) kept += c.tid == recorder_tid;
  CHECK(kept == 32);
  CHECK(t.meta.dropped_cpu_events == calls - 32);
}

TEST_CASE("attribution, key_averages and flows over the converted window") {
  scenario sc;
  const cuprof::trace t = sc.full();
  const std::uint32_t outer = 0, launch_scope = 1, copy_scope = 2;

  // Calls belong to the innermost scope open at their start.
  CHECK(call_named(t, "cudaLaunchKernel", 0)->parent == launch_scope);
  CHECK(call_named(t, "cuLaunchKernelEx")->parent == launch_scope);
  CHECK(call_named(t, "cudaMemcpyAsync")->parent == copy_scope);
  CHECK(call_named(t, "cudaStreamSynchronize")->parent == copy_scope);
  CHECK(call_named(t, "cudaDeviceSynchronize")->parent == no_index);  // after outer ended
  for (const auto& g : t.gpu) CHECK(g.api != no_index);
  CHECK(cuprof::launching_span(t, *gpu_named(t, vector_subtract)) == launch_scope);
  CHECK(t.api_calls[gpu_named(t, vector_subtract)->api].correlation == 10);
  CHECK(cuprof::launching_span(t, *gpu_named(t, "Memcpy DtoD (Device -> Device)")) == copy_scope);
  (void)outer;

  const cuprof::event_averages avg = cuprof::key_averages(t);
  const auto* r_launch = avg.find("launch_scope", cuprof::row_kind::cpu_scope);
  const auto* r_copy = avg.find("copy_scope", cuprof::row_kind::cpu_scope);
  const auto* r_outer = avg.find("outer", cuprof::row_kind::cpu_scope);
  REQUIRE(r_launch);
  REQUIRE(r_copy);
  REQUIRE(r_outer);
  // Self CUDA of the launching scope = its kernels: 10000 + 1000 + 7000 + 500.
  CHECK(r_launch->self_cuda_ns == 18500);
  CHECK(r_launch->cuda_total_ns == 18500);
  CHECK(r_copy->self_cuda_ns == 1100);  // memcpy + memset; the sync is not work
  CHECK(r_outer->self_cuda_ns == 0);
  CHECK(r_outer->cuda_total_ns == 18500 + 1100);
  // Self CPU of the launching scope excludes its runtime calls.
  CHECK(r_launch->self_cpu_ns == 18000 - 5000 - 3000 - 2000 - 500 - 100 - 500 - 500);
  // Kernel rows, API rows, annotation rows.
  const auto* k_vs = avg.find(vector_subtract, cuprof::row_kind::gpu_work);
  REQUIRE(k_vs);
  CHECK(k_vs->count == 1);
  CHECK(k_vs->self_cuda_ns == 10000);
  CHECK(k_vs->self_cpu_ns == 0);
  const auto* r_calls = avg.find("cudaLaunchKernel", cuprof::row_kind::cuda_api);
  REQUIRE(r_calls);
  CHECK(r_calls->count == 4);
  CHECK(r_calls->cpu_total_ns == 5000 + 3000 + 500 + 500);
  CHECK(r_calls->self_cuda_ns == 0);
  CHECK(avg.find("cuLaunchKernel", cuprof::row_kind::cuda_api) == nullptr);
  const auto* a_launch = avg.find("launch_scope", cuprof::row_kind::gpu_annotation);
  REQUIRE(a_launch);
  CHECK(a_launch->count == 2);  // streams 7 and 9
  CHECK(a_launch->self_cuda_ns == (70000 - 50000) + (74000 - 73500));
  const auto* a_outer = avg.find("outer", cuprof::row_kind::gpu_annotation);
  REQUIRE(a_outer);
  CHECK(a_outer->count == 2);
  CHECK(a_outer->self_cuda_ns == (72600 - 50000) + 500);
  CHECK(avg.self_cuda_time_total_ns() == 18500 + 1100);

  const std::string table = avg.table("self_cuda_time_total", -1);
  CHECK(table.find("Self CUDA") != std::string::npos);
  CHECK(table.find("VectorSubtract(int const*, int const*, int*, int)") != std::string::npos);
  CHECK(table.find("Self CUDA time total: 19.600us") != std::string::npos);

  // Every GPU record has an arrow from its launching call: flow v2 (each call
  // here caused one record), bind_id on both slices = the correlation id.
  const json doc = json::parse(cuprof::chrome_trace_json(t));
  const json& ev = doc["traceEvents"];
  const flow_test::arrows arrows(ev);
  std::vector<const json*> gpu_events;
  for (const json& e : ev) {
    const std::string cat = e.value("cat", "");
    if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset" || cat == "cuda_sync") gpu_events.push_back(&e);
    CHECK(e["ph"] != "s");
    CHECK(e["ph"] != "f");
  }
  REQUIRE(gpu_events.size() == 8);
  CHECK(arrows.v2 == 8);
  for (const json* g : gpu_events) {
    const std::uint64_t corr = (*g)["args"]["correlation"];
    CAPTURE(corr);
    const flow_test::arrow* in = arrows.into(*g);
    REQUIRE(in);
    CHECK(in->v2);
    CHECK(in->id == corr);
    const json& s = *in->from;
    CHECK(s["args"]["correlation"] == corr);
    const cuprof::api_call* call = nullptr;
    for (const auto& c : t.api_calls)
      if (c.correlation == corr) call = &c;
    REQUIRE(call);
    CHECK(s["tid"] == call->tid);
    CHECK(std::llround(s["ts"].get<double>() * 1000) + doc["baseTimeNanoseconds"].get<std::int64_t>() ==
          std::int64_t(call->start_ns));
  }
  // No arrow start without its end: the failed launch and the occupancy query have none.
  std::size_t outs = 0;
  for (const json& e : ev) outs += e.contains("flow_out");
  CHECK(outs == 8);
}

// The recorder reads the stream from the first parameter of these calls (the
// driver's cuStreamSynchronize and cuStreamWaitEvent take it first too; their
// params header needs the driver API's old types, which cuda.h here hides).
static_assert(offsetof(cudaStreamSynchronize_v3020_params, stream) == 0 &&
                  offsetof(cudaStreamSynchronize_ptsz_v7000_params, stream) == 0 &&
                  offsetof(cudaStreamWaitEvent_v3020_params, stream) == 0 &&
                  offsetof(cudaStreamWaitEvent_ptsz_v7000_params, stream) == 0,
              "a synchronization's stream is no longer its call's first parameter");

// Stands in for cuptiGetStreamIdEx: stream ids 100 + the handle's value;
// the default streams 1 (legacy) and 2 (the calling thread's).
CUptiResult fake_stream_id(CUcontext, CUstream stream, std::uint8_t per_thread, std::uint32_t* id) {
  *id = stream ? 100 + std::uint32_t(reinterpret_cast<std::uintptr_t>(stream)) : per_thread ? 2 : 1;
  return CUPTI_SUCCESS;
}

TEST_CASE("call_recorder: synchronizations get their sync records from the calls, once per wait") {
  cuprof::detail::cupti::call_recorder& recorder = process_recorder();
  recorder.set_synchronization(CUPTI_CB_DOMAIN_RUNTIME_API, 131, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, false);
  recorder.set_synchronization(CUPTI_CB_DOMAIN_RUNTIME_API, 239, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, true);
  recorder.set_synchronization(CUPTI_CB_DOMAIN_RUNTIME_API, 165, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE, false);
  recorder.set_synchronization(CUPTI_CB_DOMAIN_DRIVER_API, 126, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, false);
  recorder.set_stream_id_lookup(&fake_stream_id);
  record_store store(raw_name);
  recorder.start_recording(0);
  const cudaStream_t user_stream = reinterpret_cast<cudaStream_t>(std::uintptr_t(0x40));
  const CUstream per_thread = CU_STREAM_PER_THREAD;
  const cudaStream_t default_stream = nullptr;
  // cudaStreamSynchronize(s) and the driver call it makes: one wait, one record.
  traced_call(
      recorder, CUPTI_CB_DOMAIN_RUNTIME_API, 131, 1, 0,
      [&] {
        traced_call(
            recorder, CUPTI_CB_DOMAIN_DRIVER_API, 126, 2, 0, [] {}, &user_stream, 3);
      },
      &user_stream, 3);
  traced_call(
      recorder, CUPTI_CB_DOMAIN_RUNTIME_API, 165, 3, 0, [] {}, nullptr, 3);  // cudaDeviceSynchronize
  traced_call(
      recorder, CUPTI_CB_DOMAIN_DRIVER_API, 126, 4, 0, [] {}, &per_thread, 3);  // cuStreamSynchronize alone
  traced_call(
      recorder, CUPTI_CB_DOMAIN_RUNTIME_API, 239, 5, 0, [] {}, &default_stream, 3);  // the _ptsz variant
  traced_call(recorder, CUPTI_CB_DOMAIN_RUNTIME_API, 211, 6);                        // a launch: no sync record
  traced_call(
      recorder, CUPTI_CB_DOMAIN_RUNTIME_API, 131, 7, 900, [] {}, &user_stream, 3);  // failed: waited for nothing
  recorder.drain_into(store);
  cuprof::trace t;
  store.take(t, 0, whole_time, cuprof::detail::tick_converter{});
  std::map<std::uint32_t, const cuprof::gpu_activity*> by_correlation;
  for (const cuprof::gpu_activity& g : t.gpu) {
    CHECK(g.kind == cuprof::gpu_kind::sync);
    by_correlation[g.correlation] = &g;
  }
  REQUIRE(by_correlation.size() == 4);
  REQUIRE(t.gpu.size() == 4);                           // the nested driver call made none of its own, nor the failed sync
  CHECK(calls_named(t, "cudaStreamSynchronize") == 3);  // the failed one still shown as a call (and the _ptsz one)
  const cuprof::gpu_activity& stream_sync = *by_correlation[1];
  CHECK(t.names.str(stream_sync.name) == "Stream Sync");
  CHECK(t.lane_of(stream_sync).stream == 100 + 0x40);
  CHECK(t.lane_of(stream_sync).context == 3);
  const cuprof::api_call* call = call_named(t, "cudaStreamSynchronize");
  REQUIRE(call);
  CHECK(stream_sync.start_ns == call->start_ns);  // the call's times, as CUPTI's record has them
  CHECK(stream_sync.end_ns == call->end_ns);
  CHECK(t.names.str(by_correlation[3]->name) == "Context Sync");
  CHECK(t.lane_of(*by_correlation[3]).stream == 0);
  CHECK(t.lane_of(*by_correlation[4]).stream == 2);  // CU_STREAM_PER_THREAD: the thread's default stream
  CHECK(t.lane_of(*by_correlation[5]).stream == 2);  // a null stream in a _ptsz call: the same
  // The other tests share the recorder: as it was.
  for (const auto& [domain, cbid] : {std::pair{CUPTI_CB_DOMAIN_RUNTIME_API, 131}, std::pair{CUPTI_CB_DOMAIN_RUNTIME_API, 239},
                                     std::pair{CUPTI_CB_DOMAIN_RUNTIME_API, 165}, std::pair{CUPTI_CB_DOMAIN_DRIVER_API, 126}})
    recorder.set_synchronization(domain, CUpti_CallbackId(cbid), 0, false);
  recorder.set_stream_id_lookup(nullptr);
}

// cudaEventRecord(event, stream) as the recorder reports it: the event, the stream it records on.
void event_record(record_store& s, std::uint64_t event, std::uint32_t stream, std::uint64_t start, std::uint32_t corr,
                  std::int32_t result = 0) {
  cuprof::detail::cupti::call_record r = call_of(api_domain::runtime, 135, start, start + 10, corr);
  r.return_value = result;
  r.event = event;
  r.records_event = true;
  r.stream = stream;
  s.add_call(r);
}
// cudaStreamWaitEvent(stream, event) (147), or cudaEventSynchronize(event) (137, stream 0).
void event_wait(record_store& s, std::uint64_t event, std::uint32_t waiting_stream, std::uint64_t start, std::uint32_t corr,
                bool cpu_sync = false) {
  cuprof::detail::cupti::call_record r = call_of(api_domain::runtime, cpu_sync ? 137 : 147, start, start + 10, corr);
  r.sync_kind = std::uint8_t(cpu_sync ? CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE
                                      : CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT);
  r.context = 1;
  r.stream = waiting_stream;
  r.event = event;
  s.add_call(r);
}
// The wait (a sync record) of call `corr`, and what it waited for.
const cuprof::gpu_activity* sync_of(const cuprof::trace& t, std::uint32_t corr) {
  for (const cuprof::gpu_activity& g : t.gpu)
    if (g.kind == cuprof::gpu_kind::sync && g.correlation == corr) return &g;
  return nullptr;
}
cuprof::event_wait waited(const cuprof::trace& t, std::uint32_t corr) {
  const cuprof::gpu_activity* g = sync_of(t, corr);
  REQUIRE(g);
  const cuprof::event_wait* w = t.wait_of(*g);
  REQUIRE(w);
  return *w;
}

TEST_CASE("event waits: a stream's wait and an event sync name the stream and the call that recorded the event") {
  record_store store(raw_name);
  const std::uint64_t ev = 0x7f0010;
  event_record(store, ev, 101, 100, 1);            // cudaEventRecord(ev, A)
  event_wait(store, ev, 102, 200, 2);              // cudaStreamWaitEvent(B, ev)
  event_wait(store, ev, 0, 300, 3, /*cpu*/ true);  // cudaEventSynchronize(ev)
  cuprof::trace t;
  store.take(t, 0, 1000, cuprof::detail::tick_converter{});
  CHECK(calls_named(t, "cudaEventRecord") == 1);
  const cuprof::gpu_activity* wait = sync_of(t, 2);
  REQUIRE(wait);
  CHECK(t.names.str(wait->name) == "Stream Wait Event");
  CHECK(t.lane_of(*wait).stream == 102);  // the stream that waits
  const cuprof::event_wait w = waited(t, 2);
  CHECK(w.stream == 101);
  CHECK(w.record_correlation == 1);
  CHECK(w.event == 1);
  const cuprof::event_wait e = waited(t, 3);
  CHECK(t.names.str(sync_of(t, 3)->name) == "Event Sync");
  CHECK(e.stream == 101);
  CHECK(e.record_correlation == 1);
  CHECK(e.event == w.event);
}

TEST_CASE("event waits: the event's latest record that started before the wait, also once its handle is reused") {
  record_store store(raw_name);
  const std::uint64_t ev = 0x7f0010, other = 0x7f0020;
  event_record(store, ev, 101, 100, 1);
  event_record(store, ev, 103, 150, 2);  // recorded again: the wait waits for this one
  event_wait(store, ev, 102, 200, 3);
  // The event destroyed, a new one created with the same handle, recorded elsewhere.
  event_record(store, ev, 105, 300, 4);
  event_record(store, other, 107, 310, 5);
  event_record(store, ev, 109, 320, 6, /*result*/ 400);  // failed: recorded nothing
  event_wait(store, ev, 102, 400, 7);
  event_wait(store, other, 102, 410, 8);
  event_record(store, ev, 111, 500, 9);  // after the waits: none of theirs
  cuprof::trace t;
  store.take(t, 0, 1000, cuprof::detail::tick_converter{});
  const cuprof::event_wait first = waited(t, 3), second = waited(t, 7), third = waited(t, 8);
  CHECK(first.stream == 103);
  CHECK(first.record_correlation == 2);
  CHECK(second.stream == 105);
  CHECK(second.record_correlation == 4);
  CHECK(third.stream == 107);
  CHECK(third.record_correlation == 5);
  CHECK(first.event == second.event);  // one number per handle
  CHECK(third.event != first.event);
}

TEST_CASE("event waits: an event not recorded in the window is not resolved; a wait taken later keeps its event") {
  record_store store(raw_name);
  const std::uint64_t ev = 0x7f0010, never = 0x7f0030, late = 0x7f0040;
  event_record(store, ev, 101, 500, 1);     // window 1
  event_wait(store, ev, 102, 1500, 2);      // window 2: its record is in the window before
  event_wait(store, never, 102, 1600, 3);   // never recorded
  event_record(store, late, 103, 1700, 4);  // window 2, staged while window 1 is taken
  event_wait(store, late, 102, 1800, 5);
  cuprof::trace one;
  store.take(one, 0, 999, cuprof::detail::tick_converter{});
  CHECK(calls_named(one, "cudaEventRecord") == 1);
  CHECK(one.event_waits.empty());
  cuprof::trace two;
  store.take(two, 1000, 2000, cuprof::detail::tick_converter{});
  const cuprof::event_wait before = waited(two, 2), unknown = waited(two, 3), resolved = waited(two, 5);
  CHECK(before.stream == no_index);  // -1 in the trace, as Kineto writes it
  CHECK(before.record_correlation == no_index);
  CHECK(before.event != no_index);
  CHECK(unknown.stream == no_index);
  CHECK(unknown.record_correlation == no_index);
  CHECK(resolved.stream == 103);
  CHECK(resolved.record_correlation == 4);
  const json doc = json::parse(cuprof::chrome_trace_json(two));
  std::size_t unresolved = 0;
  for (const json& e : doc["traceEvents"])
    if (e.value("cat", "") == "cuda_sync" && e["args"]["wait_on_stream"] == -1) {
      CHECK(e["args"]["wait_on_cuda_event_record_corr_id"] == -1);
      ++unresolved;
    }
  CHECK(unresolved == 2);
}

TEST_CASE("event waits in a whole window: producer, event record, another stream's wait, consumer, the CPU's event sync") {
  // Three steps as tests/gpu/stream_wait.cu makes them, written as a trace:
  // kept (synthetic_stream_wait.json) for scripts/test-hta, whose critical
  // path analysis finds the sync edges through the waits.
  record_store store(raw_name);
  cuprof::trace t;
  const std::uint64_t produced = 0x7f00a0, consumed = 0x7f00b0;
  constexpr std::uint32_t a = 13, b = 14;
  constexpr std::uint64_t step_ns = 4000000;
  std::uint32_t corr = 100;
  for (std::uint64_t s = 0; s < 3; ++s) {
    const std::uint64_t t0 = 1000000 + s * step_ns;
    const std::uint32_t step = span(t, ("ProfilerStep#" + std::to_string(s + 1)).c_str(), t0, t0 + step_ns - 100000, no_index);
    t.spans[step].is_step = true;
    span(t, "produce_consume", t0 + 10000, t0 + step_ns - 200000, step);
    runtime(store, 211, t0 + 20000, t0 + 25000, ++corr);
    kernel(store, "producer", t0 + 30000, t0 + 1530000, corr, a);
    event_record(store, produced, a, t0 + 30000, ++corr);
    event_wait(store, produced, b, t0 + 35000, ++corr);
    runtime(store, 211, t0 + 40000, t0 + 45000, ++corr);
    kernel(store, "consumer", t0 + 1535000, t0 + 1600000, corr, b);
    event_record(store, consumed, b, t0 + 50000, ++corr);
    cuprof::detail::cupti::call_record sync = call_of(api_domain::runtime, 137, t0 + 55000, t0 + 1605000, ++corr);
    sync.sync_kind = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE;
    sync.context = 1;
    sync.event = consumed;
    store.add_call(sync);
  }
  store.take(t, 0, 20000000, cuprof::detail::tick_converter{});
  cuprof::attribute(t);
  t.meta.pid = 4242;
  t.meta.process_name = "stream_wait";
  t.meta.devices.push_back({});
  t.meta.devices[0].name = "synthetic";
  t.meta.cuda_status.clear();
  std::size_t waits = 0;
  for (const cuprof::gpu_activity& g : t.gpu) {
    const cuprof::event_wait* w = t.wait_of(g);
    if (!w) continue;
    ++waits;
    REQUIRE(g.api != no_index);
    CHECK(t.api_calls[g.api].correlation == g.correlation);
    // Each waits for the record made by the call just before it: the producer's stream's, or the consumer's.
    if (g.subkind == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT) {
      CHECK(w->stream == a);
      CHECK(w->record_correlation == g.correlation - 1);
      CHECK(t.lane_of(g).stream == b);
    } else {
      CHECK(w->stream == b);
      CHECK(w->record_correlation == g.correlation - 1);
    }
  }
  CHECK(waits == 6);
  const std::string text = cuprof::chrome_trace_json(t);
  keep_trace("synthetic_stream_wait.json", text);
  const json doc = json::parse(text);
  std::size_t written = 0;
  for (const json& e : doc["traceEvents"])
    if (e.value("cat", "") == "cuda_sync" && e["args"].contains("wait_on_stream")) ++written;
  CHECK(written == 6);
}

// The recorder reads the event of these calls, and an event record's stream, from
// their parameters (the driver's take the same handles in the same places).
static_assert(offsetof(cudaEventRecord_v3020_params, event) == 0 &&
                  offsetof(cudaEventRecord_v3020_params, stream) == sizeof(void*) &&
                  offsetof(cudaEventRecord_ptsz_v7000_params, stream) == sizeof(void*) &&
                  offsetof(cudaEventRecordWithFlags_v11010_params, stream) == sizeof(void*) &&
                  offsetof(cudaStreamWaitEvent_v3020_params, event) == sizeof(void*) &&
                  offsetof(cudaEventSynchronize_v3020_params, event) == 0,
              "an event call's parameters moved");

TEST_CASE("call_recorder: event records and waits from the callbacks, runtime and driver forms") {
  cuprof::detail::cupti::call_recorder& recorder = process_recorder();
  constexpr auto runtime_api = CUPTI_CB_DOMAIN_RUNTIME_API;
  constexpr auto driver_api = CUPTI_CB_DOMAIN_DRIVER_API;
  for (const auto& [domain, cbid, ptsz] :
       {std::tuple{runtime_api, 135, false}, std::tuple{runtime_api, 242, true}, std::tuple{runtime_api, 370, false},
        std::tuple{driver_api, 119, false}, std::tuple{driver_api, 441, true}})
    recorder.set_event_record(domain, CUpti_CallbackId(cbid), true, ptsz);
  recorder.set_synchronization(runtime_api, 147, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, false);
  recorder.set_synchronization(runtime_api, 137, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE, false);
  recorder.set_synchronization(driver_api, 295, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, false);
  recorder.set_synchronization(driver_api, 121, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE, false);
  recorder.set_stream_id_lookup(&fake_stream_id);
  record_store store(raw_name);
  recorder.start_recording(0);
  const auto handle = [](std::uintptr_t v) { return reinterpret_cast<void*>(v); };
  struct two_handles {
    void* first;
    void* second;
    unsigned flags;
  };
  const two_handles record_a{handle(0xe1), handle(0x0a), 0}, wait_b{handle(0x0b), handle(0xe1), 0};
  const two_handles sync_e1{handle(0xe1), nullptr, 0};
  // cudaEventRecord(e1, A), which makes the driver call cuEventRecord: one record, the runtime call's.
  traced_call(
      recorder, runtime_api, 135, 10, 0,
      [&] {
        traced_call(
            recorder, driver_api, 119, 11, 0, [] {}, &record_a);
      },
      &record_a);
  traced_call(
      recorder, runtime_api, 147, 12, 0, [] {}, &wait_b, 3);  // cudaStreamWaitEvent(B, e1)
  traced_call(
      recorder, runtime_api, 137, 13, 0, [] {}, &sync_e1, 3);  // cudaEventSynchronize(e1)
  // cudaEventRecord_ptsz(e2, 0): the thread's default stream; cudaEventRecordWithFlags(e3, A).
  const two_handles record_e2{handle(0xe2), nullptr, 0}, wait_e2{handle(0x0b), handle(0xe2), 0};
  const two_handles record_e3{handle(0xe3), handle(0x0a), 1}, wait_e3{handle(0x0b), handle(0xe3), 0};
  traced_call(
      recorder, runtime_api, 242, 14, 0, [] {}, &record_e2);
  traced_call(
      recorder, runtime_api, 147, 15, 0, [] {}, &wait_e2, 3);
  traced_call(
      recorder, runtime_api, 370, 16, 0, [] {}, &record_e3);
  traced_call(
      recorder, runtime_api, 147, 17, 0, [] {}, &wait_e3, 3);
  // The driver's own: cuEventRecord(e4, C), a failed cuEventRecord_ptsz(e4, A), cuStreamWaitEvent(B, e4), cuEventSynchronize(e4).
  const two_handles record_e4{handle(0xe4), handle(0x0c), 0}, record_e4_failed{handle(0xe4), handle(0x0a), 0};
  const two_handles wait_e4{handle(0x0b), handle(0xe4), 0}, sync_e4{handle(0xe4), nullptr, 0};
  traced_call(
      recorder, driver_api, 119, 20, 0, [] {}, &record_e4);
  traced_call(
      recorder, driver_api, 441, 21, 400, [] {}, &record_e4_failed);
  traced_call(
      recorder, driver_api, 295, 22, 0, [] {}, &wait_e4, 3);
  traced_call(
      recorder, driver_api, 121, 23, 0, [] {}, &sync_e4, 3);
  recorder.drain_into(store);
  cuprof::trace t;
  store.take(t, 0, whole_time, cuprof::detail::tick_converter{});
  CHECK(calls_named(t, "cudaEventRecord") == 2);  // the _ptsz one too; the nested cuEventRecord folded
  CHECK(calls_named(t, "cuEventRecord") == 2);    // cuEventRecord_ptsz too: failed, still shown
  const cuprof::event_wait w = waited(t, 12);
  CHECK(t.lane_of(*sync_of(t, 12)).stream == 100 + 0x0b);
  CHECK(w.stream == 100 + 0x0a);
  CHECK(w.record_correlation == 10);
  const cuprof::event_wait s = waited(t, 13);
  CHECK(s.stream == 100 + 0x0a);
  CHECK(s.record_correlation == 10);
  CHECK(s.event == w.event);
  CHECK(waited(t, 15).stream == 2);  // a null stream in a _ptsz call: the thread's default stream
  CHECK(waited(t, 15).record_correlation == 14);
  CHECK(waited(t, 17).stream == 100 + 0x0a);
  CHECK(waited(t, 17).record_correlation == 16);
  const cuprof::event_wait dw = waited(t, 22), ds = waited(t, 23);
  CHECK(t.lane_of(*sync_of(t, 22)).stream == 100 + 0x0b);
  CHECK(dw.stream == 100 + 0x0c);  // the failed record recorded nothing
  CHECK(dw.record_correlation == 20);
  CHECK(ds.stream == 100 + 0x0c);
  CHECK(ds.record_correlation == 20);
  CHECK(t.names.str(sync_of(t, 23)->name) == "Event Sync");
  // The other tests share the recorder: as it was.
  for (const auto& [domain, cbid] : {std::pair{runtime_api, 135}, std::pair{runtime_api, 242}, std::pair{runtime_api, 370},
                                     std::pair{driver_api, 119}, std::pair{driver_api, 441}})
    recorder.set_event_record(domain, CUpti_CallbackId(cbid), false, false);
  for (const auto& [domain, cbid] :
       {std::pair{runtime_api, 147}, std::pair{runtime_api, 137}, std::pair{driver_api, 295}, std::pair{driver_api, 121}})
    recorder.set_synchronization(domain, CUpti_CallbackId(cbid), 0, false);
  recorder.set_stream_id_lookup(nullptr);
}

TEST_CASE("without a CUDA driver, CUDA tracing is off with a reason and the CPU side still records") {
  void* libcuda = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (libcuda) {
    ::dlclose(libcuda);
    MESSAGE("a CUDA driver is present: skipped (this test covers machines without one)");
    return;
  }
  cuprof::profile prof;  // default: cpu | cuda
  prof.start();
  CHECK(prof.running());
  CHECK_FALSE(prof.cuda_status().empty());
  { CUPROF_SCOPE("cpu_side"); }
  prof.stop();
  CHECK(count_spans(prof.last_trace(), "cpu_side") == 1);
  CHECK(prof.last_trace().meta.cuda_status == prof.cuda_status());
  const json doc = json::parse(cuprof::chrome_trace_json(prof.last_trace()));
  CHECK(doc["cuprof"]["cuda_status"] == prof.cuda_status());
}

TEST_CASE("without a CUDA driver, GPU metrics asked for change nothing: one reason, the CPU side records, no metrics") {
  void* libcuda = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (libcuda) {
    ::dlclose(libcuda);
    MESSAGE("a CUDA driver is present: skipped (this test covers machines without one)");
    return;
  }
  cuprof::profile_options opts;
  opts.gpu_metrics = cuprof::gpu_metrics_options{};
  cuprof::profile prof(opts);
  prof.start();
  CHECK_FALSE(prof.cuda_status().empty());
  { CUPROF_SCOPE("cpu_side"); }
  prof.stop();
  CHECK(count_spans(prof.last_trace(), "cpu_side") == 1);
  CHECK(prof.last_trace().gpu_metrics.empty());
  const json doc = json::parse(cuprof::chrome_trace_json(prof.last_trace()));
  CHECK_FALSE(doc["cuprof"].contains("gpu_metrics"));
}

TEST_CASE("the PM sampling API from a library that is not CUPTI: one clear reason") {
  const scoped_env saved("CUPROF_CUPTI_LIBRARY");
  ::setenv("CUPROF_CUPTI_LIBRARY", "libz.so.1", 1);
  cuprof::detail::cupti::pm_library pm;
  const std::string why = pm.load();
  CAPTURE(why);
  CHECK(why.find("no PM sampling API") != std::string::npos);
  const bool bound = pm.enable != nullptr;
  CHECK_FALSE(bound);
}

TEST_CASE("a PM sampling refusal says why in the user's terms") {
  using cuprof::detail::cupti::pm_refusal;
  const cuprof::detail::cupti::pm_library pm;  // not loaded: results are said by number
  CHECK(pm_refusal(pm, "cuptiPmSamplingEnable", CUPTI_ERROR_INSUFFICIENT_PRIVILEGES).find("RmProfilingAdminOnly") !=
        std::string::npos);
  CHECK(pm_refusal(pm, "cuptiPmSamplingEnable", CUPTI_ERROR_NOT_SUPPORTED).find("does not support PM sampling") !=
        std::string::npos);
  CHECK(pm_refusal(pm, "cuptiPmSamplingEnable", CUPTI_ERROR_INVALID_OPERATION).find("another tool") != std::string::npos);
  CHECK(pm_refusal(pm, "cuptiPmSamplingGetCounterAvailability", CUPTI_ERROR_HARDWARE_BUSY).find("another tool") !=
        std::string::npos);
  CHECK(pm_refusal(pm, "cuptiPmSamplingStart", CUPTI_ERROR_UNKNOWN).rfind("cuptiPmSamplingStart: CUPTI error", 0) == 0);
}

// --- libcupti not loadable ----------------------------------------------------------

TEST_CASE("CUPROF_CUPTI_LIBRARY that cannot be loaded, or is not CUPTI: one clear reason, nothing else tried") {
  const scoped_env saved("CUPROF_CUPTI_LIBRARY");
  ::setenv("CUPROF_CUPTI_LIBRARY", "/nonexistent/libcupti.so.13", 1);
  {
    cuprof::detail::cupti::cupti_library lib;
    const std::string why = lib.load();
    CAPTURE(why);
    CHECK(why.rfind("CUPROF_CUPTI_LIBRARY=/nonexistent/libcupti.so.13 could not be loaded (", 0) == 0);
    const bool bound = lib.get_version != nullptr;
    CHECK_FALSE(bound);
  }
  ::setenv("CUPROF_CUPTI_LIBRARY", "libz.so.1", 1);  // loads, but is not CUPTI
  {
    cuprof::detail::cupti::cupti_library lib;
    const std::string why = lib.load();
    CAPTURE(why);
    CHECK(why.find("lacks CUPTI 13 entry points") != std::string::npos);
  }
}

}  // TEST_SUITE("cupti")
