// Windows back to back: schedule(wait 0, warmup 0, active 2, repeat 3), each
// step a few kernels, so that a window ends at the step where the next one
// starts while its GPU records are still on their way. Each window must hand
// over its own steps' kernels (tests/gpu/gpu_check_capture.py). Each step
// outlasts the worker's flush period, so that its calls are in the record
// store when the window ends.
//   schedule_windows     prints "window N kernels=K" per window; exit 1 unless each has its 16
#define CUPROF_IMPLEMENTATION
#include <cuprof/cuprof.hpp>

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <thread>

__global__ void spin(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    for (int k = 0; k < 64; ++k) x[i] = x[i] * 0.999f + 1.0f;
}

int main() {
  const int n = 1 << 22;
  float* x = nullptr;
  if (cudaMalloc(&x, n * sizeof(float)) != cudaSuccess) return std::fprintf(stderr, "cudaMalloc failed\n"), 1;
  constexpr std::size_t per_window = 2 * 8;  // active steps x launches per step
  int windows = 0, short_windows = 0;
  cuprof::profile_options opts;
  opts.schedule = cuprof::schedule(/*wait*/ 0, /*warmup*/ 0, /*active*/ 2, /*repeat*/ 3);
  opts.on_trace_ready = [&](cuprof::profile& p) {
    std::size_t kernels = 0;
    for (const cuprof::gpu_activity& g : p.last_trace().gpu) kernels += g.kind == cuprof::gpu_kind::kernel;
    std::printf("window %d kernels=%zu\n", ++windows, kernels);
    short_windows += kernels != per_window;
  };
  cuprof::profile prof(opts);
  prof.start();
  for (int step = 0; step < 6; ++step) {
    // Longer than the worker's 100 ms flush period: the calls reach the record store during the step.
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    for (int k = 0; k < 8; ++k) spin<<<(n + 255) / 256, 256>>>(x, n);  // still running when the step ends
    prof.step();
  }
  prof.stop();
  cudaFree(x);
  std::printf("windows=%d short=%d\n", windows, short_windows);
  return windows == 3 && short_windows == 0 ? 0 : 1;
}
