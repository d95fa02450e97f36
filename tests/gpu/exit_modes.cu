// Ends the way its argument says, with GPU work in flight, so that
// tests/gpu/gpu_check.py can check that the trace written at exit holds every
// record (docs/reliability.md, "How a traced program ends"):
//
//   exit_modes return|exit_thread|device_reset|driver_context|sigterm
//
// Each mode launches `launches` kernels named mark_kernel and one HtoD copy,
// prints one line, and ends without waiting for the GPU unless the mode says.
// Built with cuprof included (CUPROF_TRACE), with cuprof compiled out (traced
// by `cuprof run`), and with the static CUDA runtime.
#define CUPROF_IMPLEMENTATION  // CUPROF_TRACE's trace at exit
#include <cuprof/cuprof.hpp>

#include <cuda.h>
#include <cuda_runtime.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

constexpr int launches = 100;

__global__ void mark_kernel(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 0.5f + 1.0f;
}

static void launch_work() {
  const int n = 1 << 20;
  float* x = nullptr;
  static float host[1024];
  cudaMalloc(&x, n * sizeof(float));
  cudaMemcpy(x, host, sizeof host, cudaMemcpyHostToDevice);
  for (int i = 0; i < launches; ++i) mark_kernel<<<(n + 255) / 256, 256>>>(x, n);
  std::printf("exit_modes: launched %d kernels\n", launches);
  std::fflush(stdout);
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "return";
  if (!std::strcmp(mode, "return")) {
    launch_work();
    return 0;  // kernels may still run: the exit path must wait for them
  }
  if (!std::strcmp(mode, "exit_thread")) {
    std::thread([] {
      launch_work();
      std::exit(3);
    }).join();
  }
  if (!std::strcmp(mode, "device_reset")) {
    launch_work();
    cudaDeviceReset();  // the context and its records are gone before exit
    return 0;
  }
  if (!std::strcmp(mode, "driver_context")) {
    cuInit(0);
    CUdevice dev;
    CUcontext ctx;
    cuDeviceGet(&dev, 0);
    CUctxCreateParams params{};
    cuCtxCreate(&ctx, &params, 0, dev);  // the runtime uses the current context
    launch_work();
    cuCtxSynchronize();
    cuCtxDestroy(ctx);
    return 0;
  }
  if (!std::strcmp(mode, "sigterm")) {
    launch_work();
    std::raise(SIGTERM);  // as `kill` would: the trace is written, then the program ends by the signal
    return 9;
  }
  std::fprintf(stderr, "exit_modes: unknown mode '%s'\n", mode);
  return 2;
}
