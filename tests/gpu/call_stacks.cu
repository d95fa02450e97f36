// with_stack on a GPU: a kernel launched from a known line and a cuBLAS GEMM
// called from a known line, for gpu_check_stacks.py to find in the trace's
// "Call stack" args and in export_stacks' folded text. Built with -g and the
// shared cudart, whose frames (as libcuda's and CUPTI's) are the profiler's,
// dropped from the top of each stack.
//   call_stacks TRACE.json   prints launch_line=N gemm_line=M
#define CUPROF_IMPLEMENTATION
#include <cuprof/cuprof.hpp>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

__global__ void scale_kernel(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.0f;
}

int launch_line = 0, gemm_line = 0;
volatile int launches = 0;

// The store after the launch keeps this function's frame: with the launch as
// its last statement the compiler makes it a tail call to the launch stub,
// and the stack would go from the stub straight to main.
__attribute__((noinline)) void launch_scale(float* x, int n) {
  launch_line = __LINE__ + 1;
  scale_kernel<<<(n + 255) / 256, 256>>>(x, n);
  launches = launches + 1;
}

__attribute__((noinline)) void gemm(cublasHandle_t h, const float* a, const float* b, float* c, int n) {
  const float one = 1.0f, zero = 0.0f;
  gemm_line = __LINE__ + 1;
  cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: call_stacks TRACE.json\n");
    return 2;
  }
  const int n = 256;
  float *a = nullptr, *b = nullptr, *c = nullptr;
  cudaMalloc(&a, n * n * sizeof(float));
  cudaMalloc(&b, n * n * sizeof(float));
  cudaMalloc(&c, n * n * sizeof(float));
  cublasHandle_t h;
  cublasCreate(&h);
  gemm(h, a, b, c, n);  // warm: cuBLAS loads its kernels before the window
  cudaDeviceSynchronize();

  cuprof::profile_options o;
  o.with_stack = true;
  cuprof::profile p(o, cuprof::start_now);
  for (int i = 0; i < 3; ++i) {
    launch_scale(a, n * n);
    gemm(h, a, b, c, n);
  }
  cudaDeviceSynchronize();
  p.stop();
  p.export_chrome_trace(argv[1]);
  p.export_stacks(std::string(argv[1]) + ".cuda.folded", "self_cuda_time_total");
  std::printf("launch_line=%d gemm_line=%d\n", launch_line, gemm_line);
  cublasDestroy(h);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 0;
}
