// Kernels of known character, each long enough for many PM samples (100 us at
// the default interval), for the GPU metrics check (tests/gpu/gpu_check_metrics.py).
// Not instrumented with cuprof: traced with `cuprof run --gpu-metrics`, and
// measured as it is by Nsight Compute. The families (--only's names), with
// their sizes and one launch's time on an H200:
//   gemm       cuBLAS bf16 GEMM of 4096 x 4096 (the examples' matmul_add at
//              --size 4096): tensor- and compute-bound. 8 back to back a launch:
//              about 155 us alone is less than two samples
//   gelu       GELU over 256 Mi floats: a long elementwise kernel (about 0.7 ms)
//   copy       float4 copy of 1 GiB: DRAM-bound (about 0.55 ms)
//   reduce     sum of 256 Mi floats, 8 passes (8 GiB read): DRAM-bound (about 2 ms)
//   transpose  16384 x 16384 floats through shared memory, 3 passes (6 GiB
//              moved): DRAM- and shared-memory-bound (about 2 ms)
//   fma        4 FMA chains of 65536 steps per thread in registers, one full
//              wave: compute-bound, SM throughput near 100 % (about 2.1 ms)
//   chase      a warp per SM, each thread 3000 dependent loads along a random
//              cycle through 256 MiB: latency-bound, little SM or DRAM (about 2 ms)
//   atomic     8192 atomicAdds per thread of a full grid onto 4096 counters:
//              L2 atomics under contention (1 to 3 ms by estimate)
// Every kernel but cuBLAS's records its launch's span on the GPU's own clock
// (%globaltimer: the first block's start, the last block's end, one atomic
// per block each): the clock CUPTI seems to stamp PM samples with, so the
// check can tell where the samples should lie against the trace's kernels.
//
//   metrics_kernels [--reps N] [--idle-ms M] [--only a,b,...] [--back-to-back]
//                   [--timer-out PATH]
//     --reps N        each family N times (default 5)
//     --idle-ms M     M ms (default 0) of an idle GPU first: sampling starts
//                     some time after the context does
//     --only a,b      these families alone (default all)
//     --back-to-back  each round launches every family once with nothing
//                     between them (a device sync ends the round), the FMA
//                     between the chase and the copy: edges where SM
//                     throughput jumps, for the placement check.
//                     Default: each family's runs in turn, each followed by a
//                     device sync and 1 ms, so that kernels do not touch
//     --timer-out P   after the run, one JSON object a line per launch:
//                     {"kernel":F,"launch":I,"gt_start":NS,"gt_end":NS},
//                     I counting F's launches from 0
// Results are checked (exit 1 if wrong); stdout is one line that is the same
// run after run, traced or not.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#define CHECK(x)                                                            \
  do {                                                                      \
    if ((x) != 0) {                                                         \
      std::fprintf(stderr, "%s failed at %s:%d\n", #x, __FILE__, __LINE__); \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)

// One launch's span on %globaltimer. start begins at ~0 so that atomicMin takes the first block's.
struct gt_span {
  unsigned long long start, end;
};

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ bool first_thread() { return threadIdx.x == 0 && threadIdx.y == 0; }

__device__ __forceinline__ void block_started(gt_span* spans, int slot) {
  if (first_thread()) atomicMin(&spans[slot].start, globaltimer());
}

// After every thread of the block is done: the block's end, not thread 0's.
__device__ __forceinline__ void block_ended(gt_span* spans, int slot) {
  __syncthreads();
  if (first_thread()) atomicMax(&spans[slot].end, globaltimer());
}

__global__ void metrics_gelu(const float* x, float* y, size_t n, gt_span* spans, int slot) {
  block_started(spans, slot);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
  }
  block_ended(spans, slot);
}

__global__ void metrics_copy(const float4* x, float4* y, size_t n, gt_span* spans, int slot) {
  block_started(spans, slot);
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) y[i] = x[i];
  block_ended(spans, slot);
}

// Each pass reads all of x: 1 GiB, far more than the 50 MB L2, so every pass comes from DRAM.
__global__ void metrics_reduce(const float4* x, size_t n, int passes, double* sums, gt_span* spans, int slot) {
  block_started(spans, slot);
  float acc = 0;
  for (int p = 0; p < passes; ++p)
#pragma unroll 4
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
      const float4 v = x[i];
      acc += (v.x + v.y) + (v.z + v.w);
    }
  for (int o = 16; o > 0; o /= 2) acc += __shfl_down_sync(0xffffffffu, acc, o);
  __shared__ float warp_sums[32];
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    double block_sum = 0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) block_sum += warp_sums[w];
    atomicAdd(&sums[slot], block_sum);
  }
  block_ended(spans, slot);
}

// n x n, n a multiple of 32; blocks of 32 x 8 threads, each moving whole
// 32 x 32 tiles in turn. The pass is the outer loop, so that a tile is not
// read again while it is still in L2.
__global__ void metrics_transpose(const float* x, float* y, int n, int passes, gt_span* spans, int slot) {
  block_started(spans, slot);
  __shared__ float tile[32][33];  // +1: a column read hits 32 different banks
  const int tiles = n / 32;
  const size_t total = size_t(tiles) * tiles;
  for (int p = 0; p < passes; ++p)
    for (size_t t = blockIdx.x; t < total; t += gridDim.x) {
      const size_t tx = t % tiles, ty = t / tiles;
      for (int j = 0; j < 32; j += 8)
        tile[threadIdx.y + j][threadIdx.x] = x[(ty * 32 + threadIdx.y + j) * n + tx * 32 + threadIdx.x];
      __syncthreads();
      for (int j = 0; j < 32; j += 8)
        y[(tx * 32 + threadIdx.y + j) * n + ty * 32 + threadIdx.x] = tile[threadIdx.x][threadIdx.y + j];
      __syncthreads();
    }
  block_ended(spans, slot);
}

// Four independent chains hide the FMA latency; b and c come as arguments so
// that nothing folds. Each chain tends to c / (1 - b); the sum is written so
// that the loop is kept.
__global__ void metrics_fma(float* out, int steps, float b, float c, gt_span* spans, int slot) {
  block_started(spans, slot);
  float a0 = threadIdx.x * 1e-3f, a1 = a0 + 0.25f, a2 = a0 + 0.5f, a3 = a0 + 0.75f;
#pragma unroll 16
  for (int k = 0; k < steps; ++k) {
    a0 = fmaf(a0, b, c);
    a1 = fmaf(a1, b, c);
    a2 = fmaf(a2, b, c);
    a3 = fmaf(a3, b, c);
  }
  out[blockIdx.x * size_t(blockDim.x) + threadIdx.x] = (a0 + a1) + (a2 + a3);
  block_ended(spans, slot);
}

// Each load's address is the previous load's value: one miss at a time per
// thread, 32 per SM, so DRAM latency and nothing else sets the time.
__global__ void metrics_chase(const unsigned* next, unsigned first_stride, int steps, unsigned* out, gt_span* spans, int slot) {
  block_started(spans, slot);
  const unsigned id = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned i = id * first_stride;
  for (int s = 0; s < steps; ++s) i = next[i];
  out[id] = i;
  block_ended(spans, slot);
}

// A warp's 32 lanes add to 32 neighbouring counters (one L2 line); each step
// moves to another of the 128 lines (97 is odd: all of them in turn), and
// every warp of the grid competes for the same lines.
__global__ void metrics_atomic(unsigned* counters, int steps, gt_span* spans, int slot) {
  block_started(spans, slot);
  const unsigned id = blockIdx.x * blockDim.x + threadIdx.x;
  for (int k = 0; k < steps; ++k) atomicAdd(&counters[(id + unsigned(k) * 32u * 97u) % 4096u], 1u);
  block_ended(spans, slot);
}

__global__ void metrics_fill(float* x, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] = float(i % 1000) * 1e-3f - 0.5f;
}

namespace {

enum family { k_gemm, k_gelu, k_copy, k_reduce, k_transpose, k_fma, k_chase, k_atomic, k_families };
const char* const family_names[k_families] = {"gemm", "gelu", "copy", "reduce", "transpose", "fma", "chase", "atomic"};
const char* const family_sizes[k_families] = {"gemm 4096 bf16",      "gelu 256Mi",  "copy 1GiB",        "reduce 8x1GiB",
                                              "transpose 3x16384^2", "fma 4x65536", "chase 3000 steps", "atomic 4096 counters"};
// Back to back, the FMA (SM near 100 %) lies between the chase and the copy
// (SM a few %): both its edges are steps the samples must show.
const family back_to_back_order[k_families] = {k_gemm, k_gelu, k_transpose, k_reduce, k_atomic, k_chase, k_fma, k_copy};

constexpr size_t elems = size_t(256) << 20;  // x and y: 1 GiB of floats each
constexpr int transpose_n = 16384;           // transpose_n^2 == elems
constexpr int reduce_passes = 8, transpose_passes = 3, fma_steps = 65536, chase_steps = 3000, atomic_steps = 8192;
constexpr float fma_b = 0.999f, fma_c = 0.001f;
// The chase's array: 64 Mi indices, one used in every 8 (one per 32-byte
// sector, so that every step is a sector of its own), its 8 Mi slots one
// random cycle: 256 MiB to miss in, and 8 Mi random draws on the host.
constexpr unsigned chase_elems = 64u << 20, chase_spacing = 8, chase_slots = chase_elems / chase_spacing;
constexpr unsigned atomic_counters = 4096;

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "metrics_kernels: %s\nusage: metrics_kernels [--reps N] [--idle-ms M] [--only a,b,...] [--back-to-back] "
               "[--timer-out PATH]\n",
               why);
  std::exit(2);
}

int family_of(const std::string& name) {
  for (int f = 0; f < k_families; ++f)
    if (name == family_names[f]) return f;
  usage(("no family " + name).c_str());
}

// Sattolo's shuffle: one cycle through every slot, so no thread's walk closes early.
std::vector<unsigned> chase_cycle() {
  std::vector<unsigned> order(chase_slots);
  for (unsigned s = 0; s < chase_slots; ++s) order[s] = s;
  std::mt19937 rng(12345);
  for (unsigned s = chase_slots - 1; s > 0; --s) std::swap(order[s], order[(std::uint64_t(rng()) * s) >> 32]);
  std::vector<unsigned> next(chase_elems, 0);
  for (unsigned s = 0; s < chase_slots; ++s) next[s * chase_spacing] = order[s] * chase_spacing;
  return next;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5, idle_ms = 0;
  bool back_to_back = false;
  bool selected[k_families] = {};
  bool any_selected = false;
  const char* timer_out = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--back-to-back") {
      back_to_back = true;
      continue;
    }
    if (i + 1 >= argc) usage(("no value for " + arg).c_str());
    const char* value = argv[++i];
    if (arg == "--reps") reps = std::atoi(value);
    else if (arg == "--idle-ms") idle_ms = std::atoi(value);
    else if (arg == "--timer-out") timer_out = value;
    else if (arg == "--only") {
      std::string list = value;
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        selected[family_of(list.substr(at, comma - at))] = any_selected = true;
        at = comma + 1;
      }
    } else usage(("unknown option " + arg).c_str());
  }
  if (!any_selected)
    for (bool& s : selected) s = true;

  const int n = 4096;
  __nv_bfloat16 *a = nullptr, *b = nullptr, *c = nullptr;
  float *x = nullptr, *y = nullptr, *fma_out = nullptr;
  unsigned *chase_next = nullptr, *chase_out = nullptr, *counters = nullptr;
  double* sums = nullptr;
  gt_span* spans = nullptr;
  CHECK(cudaMalloc(&a, size_t(n) * n * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&b, size_t(n) * n * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&c, size_t(n) * n * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&x, elems * sizeof(float)));
  CHECK(cudaMalloc(&y, elems * sizeof(float)));
  CHECK(cudaMemset(a, 0, size_t(n) * n * sizeof(__nv_bfloat16)));
  CHECK(cudaMemset(b, 0, size_t(n) * n * sizeof(__nv_bfloat16)));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int grid = sms * 16;  // the GELU's and the copy's
  // The new kernels run one wave of resident blocks: they start together and
  // end together, so their edges in the samples are sharp.
  const auto full_wave = [&](const void* kernel, int threads) {
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
    return sms * per_sm;
  };
  const int reduce_grid = full_wave(reinterpret_cast<const void*>(metrics_reduce), 256);
  const int transpose_grid = full_wave(reinterpret_cast<const void*>(metrics_transpose), 256);
  const int fma_grid = full_wave(reinterpret_cast<const void*>(metrics_fma), 256);
  const int atomic_grid = full_wave(reinterpret_cast<const void*>(metrics_atomic), 256);
  const int chase_threads = sms * 32;
  CHECK(cudaMalloc(&fma_out, size_t(fma_grid) * 256 * sizeof(float)));
  CHECK(cudaMalloc(&chase_out, chase_threads * sizeof(unsigned)));
  CHECK(cudaMalloc(&counters, atomic_counters * sizeof(unsigned)));
  CHECK(cudaMemset(counters, 0, atomic_counters * sizeof(unsigned)));
  std::vector<unsigned> next;
  const unsigned first_stride = chase_slots / chase_threads * chase_spacing;
  if (selected[k_chase]) {
    next = chase_cycle();
    CHECK(cudaMalloc(&chase_next, chase_elems * sizeof(unsigned)));
    CHECK(cudaMemcpy(chase_next, next.data(), chase_elems * sizeof(unsigned), cudaMemcpyHostToDevice));
  }
  // A slot per launch of every family but cuBLAS's, in launch order.
  std::vector<int> slot_family, slot_launch;
  int launches[k_families] = {};
  const int slots = reps * (k_families - 1);
  CHECK(cudaMalloc(&sums, slots * sizeof(double)));
  CHECK(cudaMemset(sums, 0, slots * sizeof(double)));
  CHECK(cudaMalloc(&spans, slots * sizeof(gt_span)));
  std::vector<gt_span> spans_init(slots, gt_span{~0ull, 0});
  CHECK(cudaMemcpy(spans, spans_init.data(), slots * sizeof(gt_span), cudaMemcpyHostToDevice));

  metrics_fill<<<grid, 256>>>(x, elems);
  cublasHandle_t handle;
  CHECK(cublasCreate(&handle));
  const float alpha = 1.0f, beta = 0.0f;
  const auto launch = [&](int f) {
    if (f == k_gemm) {
      for (int g = 0; g < 8; ++g)
        CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, b, CUDA_R_16BF, n, a, CUDA_R_16BF, n, &beta, c,
                           CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      return;
    }
    const int slot = int(slot_family.size());
    slot_family.push_back(f);
    slot_launch.push_back(launches[f]++);
    switch (f) {
      case k_gelu: metrics_gelu<<<grid, 256>>>(x, y, elems, spans, slot); break;
      case k_copy:
        metrics_copy<<<grid, 256>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y), elems / 4, spans, slot);
        break;
      case k_reduce:
        metrics_reduce<<<reduce_grid, 256>>>(reinterpret_cast<const float4*>(x), elems / 4, reduce_passes, sums, spans, slot);
        break;
      case k_transpose:
        metrics_transpose<<<transpose_grid, dim3(32, 8)>>>(x, y, transpose_n, transpose_passes, spans, slot);
        break;
      case k_fma: metrics_fma<<<fma_grid, 256>>>(fma_out, fma_steps, fma_b, fma_c, spans, slot); break;
      case k_chase: metrics_chase<<<sms, 32>>>(chase_next, first_stride, chase_steps, chase_out, spans, slot); break;
      case k_atomic: metrics_atomic<<<atomic_grid, 256>>>(counters, atomic_steps, spans, slot); break;
    }
    CHECK(cudaGetLastError());
  };
  launch(k_gemm);  // cuBLAS's first call sets up; outside the measured ones
  CHECK(cudaDeviceSynchronize());
  std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
  if (back_to_back)
    for (int r = 0; r < reps; ++r) {
      for (family f : back_to_back_order)
        if (selected[f]) launch(f);
      CHECK(cudaDeviceSynchronize());
    }
  else
    for (int f = 0; f < k_families; ++f)
      for (int r = 0; r < reps && selected[f]; ++r) {
        launch(f);
        CHECK(cudaDeviceSynchronize());
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }

  // The results, checked against what the host knows.
  bool ok = true;
  std::vector<double> sum(slots);
  CHECK(cudaMemcpy(sum.data(), sums, slots * sizeof(double), cudaMemcpyDeviceToHost));
  double want = 0, magnitude = 0;
  for (size_t i = 0; i < 1000; ++i) {
    const double v = double(float(i) * 1e-3f - 0.5f);
    want += v * double(elems / 1000 + (i < elems % 1000)), magnitude += std::fabs(v) * double(elems / 1000);
  }
  for (size_t s = 0; s < slot_family.size(); ++s)
    if (slot_family[s] == k_reduce && std::fabs(sum[s] - reduce_passes * want) > 1e-6 * reduce_passes * magnitude) {
      std::fprintf(stderr, "metrics_reduce: sum %.6g, want %.6g\n", sum[s], reduce_passes * want);
      ok = false;
    }
  if (launches[k_fma]) {
    float got = 0;
    CHECK(cudaMemcpy(&got, fma_out, sizeof(float), cudaMemcpyDeviceToHost));
    if (std::fabs(got - 4 * fma_c / (1 - fma_b)) > 0.01f) {
      std::fprintf(stderr, "metrics_fma: %g, want %g\n", got, 4 * fma_c / (1 - fma_b));
      ok = false;
    }
  }
  if (launches[k_chase]) {
    std::vector<unsigned> got(chase_threads);
    CHECK(cudaMemcpy(got.data(), chase_out, chase_threads * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (unsigned id : {0u, unsigned(chase_threads - 1)}) {
      unsigned i = id * first_stride;
      for (int s = 0; s < chase_steps; ++s) i = next[i];
      if (got[id] != i) {
        std::fprintf(stderr, "metrics_chase: thread %u ended at %u, want %u\n", id, got[id], i);
        ok = false;
      }
    }
  }
  std::vector<unsigned> count(atomic_counters);
  CHECK(cudaMemcpy(count.data(), counters, atomic_counters * sizeof(unsigned), cudaMemcpyDeviceToHost));
  unsigned long long added = 0;
  for (unsigned v : count) added += v;
  const unsigned long long adds = 256ull * atomic_grid * atomic_steps * launches[k_atomic];
  if (added != adds) {
    std::fprintf(stderr, "metrics_atomic: %llu adds, want %llu\n", added, adds);
    ok = false;
  }

  if (timer_out) {
    std::vector<gt_span> got(slots);
    CHECK(cudaMemcpy(got.data(), spans, slots * sizeof(gt_span), cudaMemcpyDeviceToHost));
    FILE* f = std::fopen(timer_out, "w");
    if (!f) {
      std::perror(timer_out);
      return 1;
    }
    for (size_t s = 0; s < slot_family.size(); ++s)
      std::fprintf(f, "{\"kernel\": \"%s\", \"launch\": %d, \"gt_start\": %llu, \"gt_end\": %llu}\n",
                   family_names[slot_family[s]], slot_launch[s], got[s].start, got[s].end);
    std::fclose(f);
  }
  cublasDestroy(handle);
  cudaFree(a), cudaFree(b), cudaFree(c), cudaFree(x), cudaFree(y), cudaFree(fma_out), cudaFree(chase_next);
  cudaFree(chase_out), cudaFree(counters), cudaFree(sums), cudaFree(spans);
  if (!ok) return 1;
  std::string done;
  for (int f = 0; f < k_families; ++f)
    if (selected[f]) done += std::string(done.empty() ? "" : ", ") + family_sizes[f];
  std::printf("metrics_kernels: %d reps%s of %s\n", reps, back_to_back ? " back to back" : "", done.c_str());
  return 0;
}
