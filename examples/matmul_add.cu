// Mirrors 01_matmul_add.py from "Profiling in PyTorch (Part 1)":
// out = x @ w + b in bf16, as one cuBLAS GEMM (aten::mm, or aten::bmm with
// --batched) followed by a hand-written elementwise add kernel (aten::add).
#include "common.cuh"

#include <optional>

static const char* const usage =
    R"(usage: matmul_add [--size N] [--batched] [--warmup] [--steps N] [--compare-events] [--gpu-metrics [--gpu-metrics-interval US]] [--trace PATH]
  --size N          x, w and b are N x N bf16 matrices (default 64; the article also uses 4096)
  --batched         a batch of 8 matrices, one strided batched GEMM (torch's aten::bmm)
  --warmup          run 3 untraced iterations before the profiler starts
  --steps N         profiler steps (default 5) under schedule(wait=1, warmup=1, active=3, repeat=1)
  --compare-events  afterwards, time the GEMM 5 times with CUDA events and print the median
                    as cuda_event_gemm_us=<us>
  --gpu-metrics     also sample the GPU's hardware metrics (SM, DRAM, tensor pipe, occupancy)
  --gpu-metrics-interval US   their sampling period with --gpu-metrics (default 200)
  --trace PATH      Chrome trace to write (default traces/matmul_add_<N>_bf16_<cold|warm>[_bmm].json)
)";

struct add_op {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// The tensors of the article's script and the two operations of fn(x, w, b).
struct matmul_add {
  int n, batch;
  ex::device_array<bf16> x, w, b, xw, out;
  cublasHandle_t handle = nullptr;

  matmul_add(int size, int batch_count)
      : n(size), batch(batch_count), x(elements()), w(elements()), b(elements()), xw(elements()), out(elements()) {
    ex::fill_uniform(x, 1);
    ex::fill_uniform(w, 2);
    ex::fill_uniform(b, 3);
    CUBLAS_CHECK(cublasCreate(&handle));
  }
  ~matmul_add() { cublasDestroy(handle); }

  std::size_t elements() const { return std::size_t(batch) * n * n; }

  // xw = x @ w
  void matmul() const {
    if (batch == 1) return ex::gemm(handle, n, n, n, x.get(), w.get(), false, xw.get());
    // Row-major per matrix, so as in ex::gemm the column-major operands swap.
    const float alpha = 1.0f, beta = 0.0f;
    const long long stride = (long long)n * n;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, w.get(), CUDA_R_16BF, n, stride,
                                            x.get(), CUDA_R_16BF, n, stride, &beta, xw.get(), CUDA_R_16BF, n, stride, batch,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  // out = xw + b
  void add() const { ex::map(add_op{}, out.get(), xw.get(), b.get(), elements()); }
};

// The article's step(): record_function("matmul_add") around fn(x, w, b).
// Without a GPU (p == nullptr) only the scopes run.
static void step(const matmul_add* p) {
  CUPROF_SCOPE("matmul_add");
  {
    CUPROF_SCOPE("matmul");
    if (p) p->matmul();
  }
  {
    CUPROF_SCOPE("add");
    if (p) p->add();
  }
}

// Median of 5 CUDA-event timings of one matmul() (cuBLAS: the GEMM kernel,
// plus any small memset it issues), in microseconds. The 5 are queued back to
// back and synchronized once. When the GEMM takes longer than its launch (4096),
// the GPU is still busy from the second on when a start event executes, so the
// time is the GPU's own. A small GEMM (64) finishes before the host can launch
// the next one, so its events mostly time the host's launch latency.
static float event_timed_gemm_us(const matmul_add& p) {
  constexpr int reps = 5;
  cudaEvent_t start[reps], stop[reps];
  for (int i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventCreate(&start[i]));
    CUDA_CHECK(cudaEventCreate(&stop[i]));
  }
  for (int i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventRecord(start[i]));
    p.matmul();
    CUDA_CHECK(cudaEventRecord(stop[i]));
  }
  CUDA_CHECK(cudaEventSynchronize(stop[reps - 1]));
  std::vector<float> us;
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start[i], stop[i]));
    us.push_back(ms * 1000.0f);
    CUDA_CHECK(cudaEventDestroy(start[i]));
    CUDA_CHECK(cudaEventDestroy(stop[i]));
  }
  std::sort(us.begin(), us.end());
  return us[reps / 2];
}

int main(int argc, char** argv) try {
  ex::args args(argc, argv, usage);
  const int size = args.integer("--size", 64);
  const bool batched = args.flag("--batched");
  const bool warmup = args.flag("--warmup");
  const int steps = args.integer("--steps", 5);
  const bool compare_events = args.flag("--compare-events");
  const int gpu_metrics_us =
      args.flag("--gpu-metrics") ? args.integer("--gpu-metrics-interval", int(cuprof::gpu_metrics_options{}.interval_us)) : 0;
  const std::string trace = args.text("--trace", "traces/matmul_add_" + std::to_string(size) + "_bf16_" +
                                                     (warmup ? "warm" : "cold") + (batched ? "_bmm" : "") + ".json");
  args.done();

  const bool gpu = ex::cuda_device_available("matmul_add");
  std::optional<matmul_add> problem;
  if (gpu) problem.emplace(size, batched ? 8 : 1);
  const matmul_add* p = problem ? &*problem : nullptr;

  if (warmup) {  // cuBLAS heuristics, workspace and module loading happen here, not in the trace
    for (int i = 0; i < 3; ++i) step(p);
    if (gpu) CUDA_CHECK(cudaDeviceSynchronize());
  }

  cuprof::profile_options opts = ex::profile_options(gpu, gpu_metrics_us);
  opts.schedule = cuprof::schedule(/*wait*/ 1, /*warmup*/ 1, /*active*/ 3, /*repeat*/ 1);
  cuprof::profile prof(opts);
  prof.start();
  for (int i = 0; i < steps; ++i) {
    step(p);
    prof.step();
  }
  prof.stop();
  ex::report(prof, trace);

  if (gpu && compare_events) std::printf("cuda_event_gemm_us=%.3f\n", event_timed_gemm_us(*p));
  if (gpu) CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "matmul_add: %s\n", e.what());
  return 1;
}
