// Small helpers shared by the cuprof examples: error checks, argument parsing,
// the no-GPU check, the torch-style end of a profiling session, device
// buffers, random bf16 data, a bf16 elementwise map kernel and a row-major
// bf16 GEMM.
#pragma once

// Built by hand, each example is one file that compiles cuprof's runtime and,
// with it, CUPROF_TRACE's trace-at-exit (base/config.hpp). cuprof's CMake
// project links them to the cuprof::runtime target instead, which compiles the
// runtime once for every example and the injection library.
#ifndef CUPROF_COMPILED_RUNTIME
#define CUPROF_IMPLEMENTATION
#endif
#include <cuprof/cuprof.hpp>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

using bf16 = __nv_bfloat16;

// ---------------------------------------------------------------------------
// Error checks: print file:line and the error string, then exit 1.
#define CUDA_CHECK(expr) ::ex::check_cuda((expr), #expr, __FILE__, __LINE__)
#define CUBLAS_CHECK(expr) ::ex::check_cublas((expr), #expr, __FILE__, __LINE__)

namespace ex {

inline void check_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", file, line, expr, cudaGetErrorString(e), cudaGetErrorName(e));
  std::exit(1);
}

inline void check_cublas(cublasStatus_t s, const char* expr, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, expr, cublasGetStatusString(s));
  std::exit(1);
}

// ---------------------------------------------------------------------------
// Command line: `--name value` options and `--name` flags. Call done() after
// reading every option: it answers --help and rejects anything left over.
class args {
 public:
  args(int argc, char** argv, const char* usage) : usage_(usage), rest_(argv + 1, argv + argc) {}

  bool flag(std::string_view name) {
    auto it = std::find(rest_.begin(), rest_.end(), name);
    if (it == rest_.end()) return false;
    rest_.erase(it);
    return true;
  }

  std::string text(std::string_view name, std::string fallback) {
    auto it = std::find(rest_.begin(), rest_.end(), name);
    if (it == rest_.end()) return fallback;
    if (it + 1 == rest_.end()) fail("missing value after " + std::string(name));
    std::string value = *(it + 1);
    rest_.erase(it, it + 2);
    return value;
  }

  int integer(std::string_view name, int fallback, int min = 1) {
    std::string s = text(name, std::to_string(fallback));
    char* end = nullptr;
    long v = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || v < min || v > (1L << 30))
      fail(std::string(name) + " wants an integer >= " + std::to_string(min) + ", got '" + s + "'");
    return int(v);
  }

  std::string choice(std::string_view name, const char* fallback, std::initializer_list<const char*> options) {
    std::string v = text(name, fallback);
    for (const char* o : options)
      if (v == o) return v;
    fail("unknown " + std::string(name) + " '" + v + "'");
    return v;
  }

  void done() {
    if (flag("--help") || flag("-h")) {
      std::printf("%s", usage_);
      std::exit(0);
    }
    if (!rest_.empty()) fail("unknown argument '" + rest_.front() + "'");
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    std::fprintf(stderr, "%s\n%s", why.c_str(), usage_);
    std::exit(2);
  }

  const char* usage_;
  std::vector<std::string> rest_;
};

// ---------------------------------------------------------------------------
// True when a CUDA device can be used. Otherwise says so once: the example
// then runs only its CPU side (scopes, profiler, table, trace) and exits 0.
inline bool cuda_device_available(const char* example) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("%s: no CUDA device, running the CPU side only\n", example);
    return false;
  }
  return true;
}

// Profiler options for an example: CPU scopes always, CUDA activity only
// when there is a device to trace; `gpu_metrics_us`: the GPU's hardware
// metrics too (the default set), sampled every that many microseconds.
inline cuprof::profile_options profile_options(bool gpu, int gpu_metrics_us = 0) {
  cuprof::profile_options opts;
  opts.activities = gpu ? (cuprof::activity::cpu | cuprof::activity::cuda) : cuprof::activity::cpu;
  if (gpu && gpu_metrics_us > 0) opts.gpu_metrics = cuprof::gpu_metrics_options{{}, double(gpu_metrics_us)};
  return opts;
}

// What 01_matmul_add.py does after its `with profile(...)` block: print the
// table (sorted by CUDA total, 15 rows) and export the Chrome trace.
inline void report(cuprof::profile& prof, const std::string& trace_path) {
  std::printf("%s", prof.key_averages().table("cuda_time_total", 15).c_str());
  std::filesystem::path parent = std::filesystem::path(trace_path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  prof.export_chrome_trace(trace_path);
  std::printf("trace: %s\n", trace_path.c_str());
}

// ---------------------------------------------------------------------------
// An owning device allocation of n elements.
template <class T>
class device_array {
 public:
  explicit device_array(std::size_t n) : size_(n) { CUDA_CHECK(cudaMalloc(&ptr_, n * sizeof(T))); }
  ~device_array() { cudaFree(ptr_); }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;

  T* get() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return size_; }

 private:
  T* ptr_ = nullptr;
  std::size_t size_;
};

// for (i = this thread's first element; i < n; i += all threads of the grid)
#define GRID_STRIDE_LOOP(i, n) \
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < (n); i += std::size_t(gridDim.x) * blockDim.x)

// Launches a grid-stride kernel for `items` work items on the default stream,
// 256 threads per block, and checks the launch.
template <class... Params, class... Args>
void launch_grid_stride(void (*kernel)(Params...), std::size_t items, Args... args) {
  const unsigned threads = 256;
  const unsigned blocks = unsigned(std::min<std::size_t>((items + threads - 1) / threads, 65535));
  kernel<<<blocks, threads>>>(args...);
  CUDA_CHECK(cudaGetLastError());
}

// Uniform values in [-1, 1) from a hash of (index, seed), like torch.rand*2-1.
__global__ void fill_uniform_kernel(bf16* out, std::size_t n, std::uint32_t seed) {
  GRID_STRIDE_LOOP(i, n) {
    std::uint32_t h = std::uint32_t(i) * 0x9E3779B1u ^ (seed * 0x85EBCA77u + std::uint32_t(i >> 32));
    h ^= h >> 16, h *= 0x7FEB352Du, h ^= h >> 15, h *= 0x846CA68Bu, h ^= h >> 16;
    out[i] = __float2bfloat16(float(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
}

inline void fill_uniform(const device_array<bf16>& a, std::uint32_t seed) {
  launch_grid_stride(fill_uniform_kernel, a.size(), a.get(), a.size(), seed);
}

struct alignas(16) bf16x8 {
  bf16 v[8];
};

// out[i] = op(a[i], b[i]) for i < n, computed in fp32 as torch does for bf16.
// Each thread moves 8 elements (16 bytes) per access, like torch's
// vectorized_elementwise_kernel; a scalar loop does the last n % 8. The
// pointers must be 16-byte aligned (cudaMalloc's are). A unary op passes
// b = nullptr and ignores its second argument.
template <class Op>
__global__ void map_kernel(Op op, bf16* out, const bf16* a, const bf16* b, std::size_t n) {
  const auto* a8 = reinterpret_cast<const bf16x8*>(a);
  const auto* b8 = reinterpret_cast<const bf16x8*>(b);
  auto* out8 = reinterpret_cast<bf16x8*>(out);
  GRID_STRIDE_LOOP(v, n / 8) {
    const bf16x8 x = a8[v];
    const bf16x8 y = b ? b8[v] : bf16x8{};
    bf16x8 r;
#pragma unroll
    for (int j = 0; j < 8; ++j) r.v[j] = __float2bfloat16(op(__bfloat162float(x.v[j]), __bfloat162float(y.v[j])));
    out8[v] = r;
  }
  GRID_STRIDE_LOOP(t, n % 8) {
    const std::size_t i = n / 8 * 8 + t;
    out[i] = __float2bfloat16(op(__bfloat162float(a[i]), b ? __bfloat162float(b[i]) : 0.0f));
  }
}

template <class Op>
void map(Op op, bf16* out, const bf16* a, const bf16* b, std::size_t n) {
  launch_grid_stride(map_kernel<Op>, (n + 7) / 8, op, out, a, b, n);
}

// Row-major bf16 GEMM with fp32 accumulation: C[m x n] = A[m x k] . B + beta * C,
// where B is [k x n], or [n x k] used transposed when b_transposed (the layout
// of nn.Linear's weight, so torch's "tn" kernels). cuBLAS is column-major, so
// this computes C^T = B^T . A^T: the operands swap places.
inline void gemm(cublasHandle_t handle, int m, int n, int k, const bf16* a, const bf16* b, bool b_transposed, bf16* c,
                 float beta = 0.0f) {
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasGemmEx(handle, b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b, CUDA_R_16BF,
                            b_transposed ? k : n, a, CUDA_R_16BF, k, &beta, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

}  // namespace ex
