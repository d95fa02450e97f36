// Synthetic cuprof::traces for CPU-side benchmarks:
//   synthetic_trace: shaped like the matmul_add example's: per step a
//     ProfilerStep, three nested scopes, a memset + GEMM launch (runtime +
//     driver) and an elementwise launch, with their GPU records;
//   launch_loop_trace: shaped like launch_bench's traced loop (the output
//     1 M-launch trace): batches of empty-kernel launches in a scope, a stream
//     sync after each batch, with nanosecond jitter on every time as CUPTI's are.
#pragma once

#include <cuprof/cuprof.hpp>
#include <cuprof/cuprof.hpp>

#include <algorithm>
#include <cstdint>
#include <string>

namespace bench {

inline cuprof::trace synthetic_trace(std::size_t steps) {
  using namespace cuprof;
  trace t;
  const std::uint64_t base = 1795300000000000000ull;
  const name_id gemm = t.names.intern("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT");
  const name_id add = t.names.intern("void ex::map_kernel<add_op>(add_op, __nv_bfloat16*, __nv_bfloat16 const*)");
  const name_id memset_name = t.names.intern("Memset (Device)");
  const name_id scope_names[3] = {t.names.intern("matmul_add"), t.names.intern("matmul"), t.names.intern("add")};
  const name_id api_names[3] = {t.names.intern("cudaMemsetAsync"), t.names.intern("cuLaunchKernelEx"),
                                t.names.intern("cudaLaunchKernel")};
  t.meta.pid = 4242;
  t.meta.process_name = "matmul_add";
  t.meta.window_start_ns = base;
  t.meta.threads.push_back({4242, "matmul_add"});
  device_info d;
  d.name = "NVIDIA H200";
  d.num_sms = 132;
  d.max_threads_per_multiprocessor = 2048;
  d.regs_per_multiprocessor = 65536;
  d.shared_mem_per_multiprocessor = 233472;
  d.max_blocks_per_multiprocessor = 32;
  t.meta.devices.push_back(d);
  std::uint32_t correlation = 1;
  const std::uint32_t stream_7 = t.add_gpu_lane({0, 1, 7});
  for (std::size_t s = 0; s < steps; ++s) {
    const std::uint64_t t0 = base + s * 250000;
    const std::uint32_t first = std::uint32_t(t.spans.size());
    t.spans.push_back({t0, t0 + 240000, t.names.intern("ProfilerStep#" + std::to_string(s)), 4242, no_index, 0, true});
    t.spans.push_back({t0 + 1000, t0 + 230000, scope_names[0], 4242, first, 0, false});
    t.spans.push_back({t0 + 2000, t0 + 40000, scope_names[1], 4242, first + 1, 0, false});
    t.spans.push_back({t0 + 41000, t0 + 60000, scope_names[2], 4242, first + 1, 0, false});
    const std::uint64_t call_at[3] = {t0 + 3000, t0 + 12000, t0 + 42000};
    const std::uint32_t parent[3] = {first + 2, first + 2, first + 3};
    const name_id kernel_of[3] = {memset_name, gemm, add};
    for (int k = 0; k < 3; ++k) {
      api_call c;
      c.start_ns = call_at[k];
      c.end_ns = call_at[k] + 6000;
      c.kind = std::uint16_t(t.add_call_kind({api_names[k], 211, k == 1 ? api_domain::driver : api_domain::runtime, true}));
      c.tid = 4242;
      c.correlation = correlation;
      c.parent = parent[k];
      gpu_activity g;
      g.start_ns = t0 + 70000 + std::uint64_t(k) * 60000;
      g.end_ns = g.start_ns + (k == 1 ? 56000 : 900);
      g.name = kernel_of[k];
      g.correlation = correlation++;
      g.lane = stream_7;
      g.api = std::uint32_t(t.api_calls.size());
      g.kind = k == 0 ? gpu_kind::memset : gpu_kind::kernel;
      if (k == 0) t.set_bytes(g, 4);
      if (k) {
        kernel_details kd;
        kd.grid[0] = k == 1 ? 2 : 65536, kd.grid[1] = k == 1 ? 66 : 1, kd.grid[2] = 1;
        kd.block[0] = k == 1 ? 384 : 256, kd.block[1] = kd.block[2] = 1;
        kd.registers_per_thread = k == 1 ? 168 : 16;
        kd.dynamic_shared_memory = k == 1 ? 213188 : 0;
        g.details = std::uint32_t(t.kernels.size());
        t.kernels.push_back(kd);
      }
      t.api_calls.push_back(c);
      t.gpu.push_back(g);
    }
  }
  for (std::size_t i = 0; i < t.spans.size(); ++i) t.spans[i].id = std::uint32_t(i + 1);
  t.meta.window_end_ns = base + steps * 250000;
  return t;
}

// `launches` launches of empty_kernel<<<1, 32>>> in batches of `batch`, each
// batch in a "launch_batch" scope and followed by a cudaStreamSynchronize.
inline cuprof::trace launch_loop_trace(std::size_t launches, std::size_t batch = 256) {
  using namespace cuprof;
  trace t;
  const std::uint64_t base = 1795300000123456789ull;
  std::uint64_t rng = 88172645463325252ull;
  const auto jitter = [&](std::uint64_t range) {  // xorshift: deterministic, not round
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng % range;
  };
  const name_id kernel = t.names.intern("empty_kernel()"), scope = t.names.intern("launch_batch");
  const name_id launch = t.names.intern("cudaLaunchKernel"), sync = t.names.intern("cudaStreamSynchronize");
  const name_id stream_sync = t.names.intern(sync_kind_name(3));
  t.meta.pid = 4242;
  t.meta.process_name = "launch_bench";
  t.meta.window_start_ns = base;
  t.meta.threads.push_back({4242, "launch_bench"});
  device_info d;
  d.name = "NVIDIA H200";
  d.num_sms = 132;
  d.max_threads_per_multiprocessor = 2048;
  d.regs_per_multiprocessor = 65536;
  d.shared_mem_per_multiprocessor = 233472;
  d.max_blocks_per_multiprocessor = 32;
  t.meta.devices.push_back(d);
  kernel_details kd;
  kd.grid[0] = kd.grid[1] = kd.grid[2] = 1;
  kd.block[0] = 32, kd.block[1] = kd.block[2] = 1;
  kd.registers_per_thread = 4;
  t.kernels.push_back(kd);
  std::uint32_t correlation = 1;
  std::uint64_t now = base + 1000;
  const std::uint32_t stream_7 = t.add_gpu_lane({0, 1, 7});
  const auto gpu_record = [&](name_id name, gpu_kind kind, std::uint64_t start, std::uint64_t end) {
    gpu_activity g;
    g.start_ns = start;
    g.end_ns = end;
    g.name = name;
    g.correlation = correlation;
    g.lane = stream_7;
    g.api = std::uint32_t(t.api_calls.size() - 1);
    g.kind = kind;
    t.gpu.push_back(g);
  };
  const auto call = [&](name_id name, std::uint32_t cbid, std::uint64_t start, std::uint64_t end, std::uint32_t parent) {
    api_call c;
    c.start_ns = start;
    c.end_ns = end;
    c.kind = std::uint16_t(t.add_call_kind({name, std::uint16_t(cbid), api_domain::runtime, true}));
    c.tid = 4242;
    c.correlation = ++correlation;
    c.parent = parent;
    t.api_calls.push_back(c);
  };
  for (std::size_t done = 0; done < launches; done += batch) {
    const std::uint32_t span = std::uint32_t(t.spans.size());
    t.spans.push_back({now, 0, scope, 4242, no_index, span + 1, false});
    std::uint64_t gpu_free = now + 4000;
    for (std::size_t i = 0; i < batch && done + i < launches; ++i) {
      const std::uint64_t start = now + 300 + jitter(200);
      now = start + 1800 + jitter(900);
      call(launch, 211, start, now, span);
      const std::uint64_t begin = std::max(gpu_free, start + 3000 + jitter(1000));
      gpu_free = begin + 1200 + jitter(700);
      gpu_record(kernel, gpu_kind::kernel, begin, gpu_free);
      t.gpu.back().details = 0;
    }
    t.spans[span].end_ns = now + 200 + jitter(100);
    const std::uint64_t sync_start = t.spans[span].end_ns + 300 + jitter(200);
    now = std::max(gpu_free, sync_start) + 2000 + jitter(1500);
    call(sync, 131, sync_start, now, no_index);
    gpu_record(stream_sync, gpu_kind::sync, sync_start + 500, now - 400);
    t.gpu.back().subkind = 3;
  }
  t.meta.window_end_ns = now + 1000;
  return t;
}

}  // namespace bench
