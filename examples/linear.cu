// Mirrors 02_linear.py from "Profiling in PyTorch (Part 2)": nn.Linear,
// y = x @ W^T + b in bf16, with W stored [out_dim x in_dim] as torch stores it.
// Three ways to add the bias, so their traces can be compared:
//   epilogue  one cublasLt matmul with CUBLASLT_EPILOGUE_BIAS: a single kernel
//   separate  a GEMM, then a bias-add kernel (the matmul + add of Part 1)
//   addmm     torch's addmm pattern: a device-to-device cudaMemcpyAsync seeds
//             y with the broadcast bias, then a GEMM with beta = 1 adds x @ W^T
#include "common.cuh"

#include <cublasLt.h>

#include <optional>

static const char* const usage =
    R"(usage: linear [--batch N] [--in-dim N] [--out-dim N] [--variant epilogue|separate|addmm] [--trace PATH]
  --batch N       rows of x (default 1024)
  --in-dim N      in_features (default 32)
  --out-dim N     out_features (default 64)
  --variant V     how the bias is added (default addmm):
                    epilogue  cublasLt matmul with a bias epilogue, one kernel
                    separate  GEMM, then a bias-add kernel
                    addmm     DtoD memcpy of the bias into y, then GEMM with beta=1
  --trace PATH    Chrome trace to write (default traces/linear_<variant>.json)
  Runs 5 steps under schedule(wait=1, warmup=1, active=3, repeat=1).
)";

enum class variant { epilogue, separate, addmm };

// y[r][c] += bias[c] for a row-major y with `cols` columns.
__global__ void bias_add_kernel(bf16* y, const bf16* bias, std::size_t n, std::size_t cols) {
  GRID_STRIDE_LOOP(i, n) y[i] = __hadd(y[i], bias[i % cols]);
}

// y = x . W^T + bias as one cublasLt matmul whose epilogue adds the bias.
// Planned once (layouts and heuristic); run() is just the cublasLtMatmul call.
class lt_linear_bias {
 public:
  lt_linear_bias(int batch, int in, int out, const bf16* bias) : workspace_(workspace_bytes) {
    CUBLAS_CHECK(cublasLtCreate(&lt_));
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    // Column-major views of the row-major tensors: W is [in x out] used
    // transposed, x is [in x batch], y is [out x batch]. The epilogue adds
    // bias[r] to row r of this y, which is column r of the row-major y.
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&w_, CUDA_R_16BF, in, out, in));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&x_, CUDA_R_16BF, in, batch, in));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&y_, CUDA_R_16BF, out, batch, out));

    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::size_t bytes = workspace_bytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof(bytes)));
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt_, desc_, w_, x_, y_, y_, pref, 1, &algo_, &found));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (found == 0) CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED);
  }
  ~lt_linear_bias() {
    cublasLtMatrixLayoutDestroy(y_);
    cublasLtMatrixLayoutDestroy(x_);
    cublasLtMatrixLayoutDestroy(w_);
    cublasLtMatmulDescDestroy(desc_);
    cublasLtDestroy(lt_);
  }
  lt_linear_bias(const lt_linear_bias&) = delete;
  lt_linear_bias& operator=(const lt_linear_bias&) = delete;

  void run(const bf16* x, const bf16* w, bf16* y) const {
    const float alpha = 1.0f, beta = 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(lt_, desc_, &alpha, w, w_, x, x_, &beta, y, y_, y, y_, &algo_.algo, workspace_.get(),
                                workspace_.size(), /*stream*/ 0));
  }

 private:
  static constexpr std::size_t workspace_bytes = 4 << 20;

  template <class T>
  void set(cublasLtMatmulDescAttributes_t attr, T value) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, attr, &value, sizeof(value)));
  }

  cublasLtHandle_t lt_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t w_ = nullptr, x_ = nullptr, y_ = nullptr;
  cublasLtMatmulHeuristicResult_t algo_{};
  ex::device_array<char> workspace_;
};

// The layer's tensors and the operations each variant is made of.
struct linear_layer {
  int batch, in, out;
  ex::device_array<bf16> x, w, bias, bias_rows, y;  // bias_rows: the bias broadcast to [batch x out]
  cublasHandle_t handle = nullptr;
  std::optional<lt_linear_bias> lt;

  linear_layer(int batch_size, int in_dim, int out_dim, variant v)
      : batch(batch_size),
        in(in_dim),
        out(out_dim),
        x(std::size_t(batch) * in),
        w(std::size_t(out) * in),
        bias(out),
        bias_rows(std::size_t(batch) * out),
        y(std::size_t(batch) * out) {
    ex::fill_uniform(x, 1);
    ex::fill_uniform(w, 2);
    ex::fill_uniform(bias, 3);
    CUDA_CHECK(cudaMemset(bias_rows.get(), 0, bias_rows.size() * sizeof(bf16)));  // bf16 zero is all-zero bits
    add_bias_to(bias_rows);
    CUBLAS_CHECK(cublasCreate(&handle));
    if (v == variant::epilogue) lt.emplace(batch, in, out, bias.get());
  }
  ~linear_layer() { cublasDestroy(handle); }

  void fused_bias_gemm() const { lt->run(x.get(), w.get(), y.get()); }
  void gemm(float beta) const { ex::gemm(handle, batch, out, in, x.get(), w.get(), /*b_transposed*/ true, y.get(), beta); }
  void bias_add() const { add_bias_to(y); }
  void bias_copy() const {
    CUDA_CHECK(cudaMemcpyAsync(y.get(), bias_rows.get(), y.size() * sizeof(bf16), cudaMemcpyDeviceToDevice));
  }

 private:
  void add_bias_to(const ex::device_array<bf16>& m) const {  // m is [batch x out]
    ex::launch_grid_stride(bias_add_kernel, m.size(), m.get(), bias.get(), m.size(), std::size_t(out));
  }
};

// One forward of the layer; without a GPU (l == nullptr) only the scopes run.
static void linear(const linear_layer* l, variant v) {
  CUPROF_SCOPE("linear");
  switch (v) {
    case variant::epilogue: {
      CUPROF_SCOPE("addmm");
      if (l) l->fused_bias_gemm();
      break;
    }
    case variant::separate: {
      {
        CUPROF_SCOPE("gemm");
        if (l) l->gemm(0.0f);
      }
      CUPROF_SCOPE("bias_add");
      if (l) l->bias_add();
      break;
    }
    case variant::addmm: {
      CUPROF_SCOPE("addmm");
      {
        CUPROF_SCOPE("bias_copy");
        if (l) l->bias_copy();
      }
      CUPROF_SCOPE("gemm");
      if (l) l->gemm(1.0f);
      break;
    }
  }
}

int main(int argc, char** argv) try {
  ex::args args(argc, argv, usage);
  const int batch = args.integer("--batch", 1024);
  const int in_dim = args.integer("--in-dim", 32);
  const int out_dim = args.integer("--out-dim", 64);
  const std::string name = args.choice("--variant", "addmm", {"epilogue", "separate", "addmm"});
  const std::string trace = args.text("--trace", "traces/linear_" + name + ".json");
  args.done();
  const variant v = name == "epilogue" ? variant::epilogue : name == "separate" ? variant::separate : variant::addmm;

  const bool gpu = ex::cuda_device_available("linear");
  std::optional<linear_layer> layer;
  if (gpu) layer.emplace(batch, in_dim, out_dim, v);
  const linear_layer* l = layer ? &*layer : nullptr;

  cuprof::profile_options opts = ex::profile_options(gpu);
  opts.schedule = cuprof::schedule(/*wait*/ 1, /*warmup*/ 1, /*active*/ 3, /*repeat*/ 1);
  cuprof::profile prof(opts);
  prof.start();
  for (int i = 0; i < 5; ++i) {
    linear(l, v);
    prof.step();
  }
  prof.stop();
  ex::report(prof, trace);

  if (gpu) CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "linear: %s\n", e.what());
  return 1;
}
