// Three kernels of known character, long enough for PM samples, for
// the GPU metrics check (tests/gpu/gpu_check_metrics.py): a cuBLAS bf16 GEMM of
// 4096 x 4096 (the examples' matmul_add at --size 4096: compute-bound), a GELU
// over 256 Mi floats (a long elementwise kernel) and a float4 copy of 1 GiB
// (DRAM-bound). Not instrumented with cuprof: traced with
// `cuprof run --gpu-metrics`, and measured as it is by Nsight Compute.
//
//   metrics_kernels [--reps N] [--idle-ms M]   each kernel N times (default 5),
//                                  a device sync and 1 ms between them (the GEMM
//                                  runs 8 times back to back each time: 160 us
//                                  alone is less than two samples at 100 us),
//                                  after M ms (default 0) of an idle GPU
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#define CHECK(x)                                                            \
  do {                                                                      \
    if ((x) != 0) {                                                         \
      std::fprintf(stderr, "%s failed at %s:%d\n", #x, __FILE__, __LINE__); \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)

__global__ void metrics_gelu(const float* x, float* y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
  }
}

__global__ void metrics_copy(const float4* x, float4* y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) y[i] = x[i];
}

__global__ void metrics_fill(float* x, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] = float(i % 1000) * 1e-3f - 0.5f;
}

int main(int argc, char** argv) {
  int reps = 5, idle_ms = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--idle-ms")) idle_ms = std::atoi(argv[i + 1]);
  }
  const int n = 4096;
  const size_t elems = size_t(256) << 20;  // 1 GiB of floats
  __nv_bfloat16 *a = nullptr, *b = nullptr, *c = nullptr;
  float *x = nullptr, *y = nullptr;
  CHECK(cudaMalloc(&a, size_t(n) * n * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&b, size_t(n) * n * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&c, size_t(n) * n * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&x, elems * sizeof(float)));
  CHECK(cudaMalloc(&y, elems * sizeof(float)));
  CHECK(cudaMemset(a, 0, size_t(n) * n * sizeof(__nv_bfloat16)));
  CHECK(cudaMemset(b, 0, size_t(n) * n * sizeof(__nv_bfloat16)));
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int grid = sms * 16;
  metrics_fill<<<grid, 256>>>(x, elems);
  cublasHandle_t handle;
  CHECK(cublasCreate(&handle));
  const float alpha = 1.0f, beta = 0.0f;
  const auto gemm = [&] {
    CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, b, CUDA_R_16BF, n, a, CUDA_R_16BF, n, &beta, c,
                       CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  gemm();  // cuBLAS's first call sets up; outside the measured ones
  CHECK(cudaDeviceSynchronize());
  std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
  for (int kernel = 0; kernel < 3; ++kernel)
    for (int r = 0; r < reps; ++r) {
      if (kernel == 0)
        for (int g = 0; g < 8; ++g) gemm();
      else if (kernel == 1) metrics_gelu<<<grid, 256>>>(x, y, elems);
      else metrics_copy<<<grid, 256>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y), elems / 4);
      CHECK(cudaGetLastError());
      CHECK(cudaDeviceSynchronize());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  cublasDestroy(handle);
  cudaFree(a), cudaFree(b), cudaFree(c), cudaFree(x), cudaFree(y);
  std::printf("metrics_kernels: %d reps of gemm 4096 bf16, gelu 256Mi, copy 1GiB\n", reps);
  return 0;
}
