// A C++ loop whose steps are NVTX ranges "step N", each a few small kernels
// and a device synchronize, with a known slow step every 50th (a 30 ms host
// sleep inside the step): what `cuprof run --slow-steps` must keep, and only
// that (tests/gpu/gpu_check_capture.py). Not instrumented with cuprof.
//
//   slow_steps [--steps N] [--every K] [--sleep-ms M]
// Prints the steps it slowed down: "slowed=50,100,150".
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

__global__ void scale(float* x, int n, float a) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * a + 1.0f;
}

int main(int argc, char** argv) {
  int steps = 200, every = 50, sleep_ms = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--every")) every = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--sleep-ms")) sleep_ms = std::atoi(argv[i + 1]);
  }
  const int n = 1 << 20;
  float* x = nullptr;
  if (cudaMalloc(&x, n * sizeof(float)) != cudaSuccess) return std::fprintf(stderr, "cudaMalloc failed\n"), 1;
  cudaMemset(x, 0, n * sizeof(float));
  std::string slowed;
  for (int s = 0; s < steps; ++s) {
    const std::string name = "step " + std::to_string(s);
    nvtxRangePushA(name.c_str());
    for (int k = 0; k < 4; ++k) scale<<<(n + 255) / 256, 256>>>(x, n, 0.5f);
    cudaDeviceSynchronize();
    if (s > 0 && s % every == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
      slowed += (slowed.empty() ? "" : ",") + std::to_string(s);
    }
    nvtxRangePop();
  }
  cudaFree(x);
  std::printf("steps=%d\nslowed=%s\n", steps, slowed.c_str());
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
