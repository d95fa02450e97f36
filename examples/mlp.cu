// Mirrors 03_simple_mlp.py from "Profiling in PyTorch (Part 2)": a GeGLU MLP
//   g = x @ Wg^T,  u = x @ Wu^T,  h = gelu_tanh(g),  m = h * u,  y = m @ Wd^T
// in bf16, the weights stored as nn.Linear(bias=False) stores them. The
// unfused variant runs the GeLU and the multiply as two elementwise kernels,
// as eager PyTorch does (3 GEMMs + 2 elementwise kernels per forward, and the
// [tokens x hidden] h makes a round trip through HBM); the fused variant runs
// one kernel that computes gelu(g) * u in registers, as torch.compile's
// Triton kernel does (3 GEMMs + 1).
#include "common.cuh"

#include <optional>

static const char* const usage =
    R"(usage: mlp [--batch N] [--seq N] [--dim N] [--hidden N] [--variant unfused|fused] [--gpu-metrics [--gpu-metrics-interval US]] [--trace PATH]
  --batch N     batch size (default 64)
  --seq N       sequence length (default 128); the GEMMs see batch*seq rows
  --dim N       model width (default 768)
  --hidden N    hidden width (default 3072)
  --variant V   unfused: a GeLU kernel, then a mul kernel; fused: one gelu*mul kernel (default unfused)
  --gpu-metrics also sample the GPU's hardware metrics (SM, DRAM, tensor pipe, occupancy)
  --gpu-metrics-interval US  their sampling period with --gpu-metrics (default 200)
  --trace PATH  Chrome trace to write (default traces/mlp_<variant>.json)
  Runs 5 steps under schedule(wait=1, warmup=1, active=3, repeat=1).
)";

// F.gelu(x, approximate="tanh")
__device__ float gelu_tanh(float x) {
  const float k = 0.7978845608f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

// The elementwise ops, run by ex::map_kernel (the functor names the kernel, as
// GeluCUDAKernelImpl and MulFunctor name torch's).
struct gelu_op {
  __device__ float operator()(float g, float) const { return gelu_tanh(g); }
};
struct mul_op {
  __device__ float operator()(float a, float b) const { return a * b; }
};
struct gelu_mul_op {  // h never leaves registers
  __device__ float operator()(float g, float u) const { return gelu_tanh(g) * u; }
};

struct geglu_mlp {
  int tokens, dim, hidden;
  ex::device_array<bf16> x, w_gate, w_up, w_down;  // weights are [out_features x in_features]
  ex::device_array<bf16> g, u, h, m, y;
  cublasHandle_t handle = nullptr;

  geglu_mlp(int token_count, int model_dim, int hidden_dim)
      : tokens(token_count),
        dim(model_dim),
        hidden(hidden_dim),
        x(std::size_t(tokens) * dim),
        w_gate(std::size_t(hidden) * dim),
        w_up(std::size_t(hidden) * dim),
        w_down(std::size_t(dim) * hidden),
        g(std::size_t(tokens) * hidden),
        u(g.size()),
        h(g.size()),
        m(g.size()),
        y(std::size_t(tokens) * dim) {
    ex::fill_uniform(x, 1);
    ex::fill_uniform(w_gate, 2);
    ex::fill_uniform(w_up, 3);
    ex::fill_uniform(w_down, 4);
    CUBLAS_CHECK(cublasCreate(&handle));
  }
  ~geglu_mlp() { cublasDestroy(handle); }

  // out[tokens x n] = in[tokens x k] @ w^T, as nn.Linear(k, n, bias=False)
  void linear(const ex::device_array<bf16>& in, const ex::device_array<bf16>& w, int k, int n,
              const ex::device_array<bf16>& out) const {
    ex::gemm(handle, tokens, n, k, in.get(), w.get(), /*b_transposed*/ true, out.get());
  }
  void gate_proj() const { linear(x, w_gate, dim, hidden, g); }
  void up_proj() const { linear(x, w_up, dim, hidden, u); }
  void down_proj() const { linear(m, w_down, hidden, dim, y); }

  void gelu() const { ex::map(gelu_op{}, h.get(), g.get(), nullptr, g.size()); }
  void mul() const { ex::map(mul_op{}, m.get(), h.get(), u.get(), g.size()); }
  void gelu_mul() const { ex::map(gelu_mul_op{}, m.get(), g.get(), u.get(), g.size()); }
};

// One forward; without a GPU (p == nullptr) only the scopes run. Each
// projection's scope carries its GEMM's sizes, which `cuprof insights` turns
// into achieved FLOP/s against the GPU's peak (torch's record_shapes, by hand).
static void forward(const geglu_mlp* p, int tokens, int dim, int hidden, bool fused) {
  CUPROF_SCOPE("mlp");
  {
    CUPROF_SCOPE("gate_proj", {{"M", tokens}, {"N", hidden}, {"K", dim}});
    if (p) p->gate_proj();
  }
  {
    CUPROF_SCOPE("up_proj", {{"M", tokens}, {"N", hidden}, {"K", dim}});
    if (p) p->up_proj();
  }
  if (fused) {
    CUPROF_SCOPE("gelu_mul");
    if (p) p->gelu_mul();
  } else {
    {
      CUPROF_SCOPE("gelu");
      if (p) p->gelu();
    }
    CUPROF_SCOPE("mul");
    if (p) p->mul();
  }
  CUPROF_SCOPE("down_proj", {{"M", tokens}, {"N", dim}, {"K", hidden}});
  if (p) p->down_proj();
}

int main(int argc, char** argv) try {
  ex::args args(argc, argv, usage);
  const int batch = args.integer("--batch", 64);
  const int seq = args.integer("--seq", 128);
  const int dim = args.integer("--dim", 768);
  const int hidden = args.integer("--hidden", 3072);
  const std::string name = args.choice("--variant", "unfused", {"unfused", "fused"});
  const int gpu_metrics_us =
      args.flag("--gpu-metrics") ? args.integer("--gpu-metrics-interval", int(cuprof::gpu_metrics_options{}.interval_us)) : 0;
  const std::string trace = args.text("--trace", "traces/mlp_" + name + ".json");
  args.done();
  const bool fused = name == "fused";

  const bool gpu = ex::cuda_device_available("mlp");
  std::optional<geglu_mlp> mlp;
  if (gpu) mlp.emplace(batch * seq, dim, hidden);
  const geglu_mlp* p = mlp ? &*mlp : nullptr;

  cuprof::profile_options opts = ex::profile_options(gpu, gpu_metrics_us);
  opts.schedule = cuprof::schedule(/*wait*/ 1, /*warmup*/ 1, /*active*/ 3, /*repeat*/ 1);
  cuprof::profile prof(opts);
  prof.start();
  for (int i = 0; i < 5; ++i) {
    forward(p, batch * seq, dim, hidden, fused);
    prof.step();
  }
  prof.stop();
  ex::report(prof, trace);

  if (gpu) CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mlp: %s\n", e.what());
  return 1;
}
