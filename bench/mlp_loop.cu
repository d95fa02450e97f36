// The C++ side of the training-loop benchmark (bench/training_loop.py): the shape of
// bench/train_step.py's work without Python, a 9-layer MLP forward (width
// 1024, batch 64, bf16) in cuBLAS, a bias+ReLU kernel after each GEMM, every
// step synchronized and timed. Built twice: mlp_loop has a CUPROF_SCOPE per
// layer (traced with CUPROF_TRACE); mlp_loop_plain has cuprof compiled out
// (CUPROF_DISABLE): the untraced baseline, and an unmodified program for
// `cuprof run`.
// Prints key=value lines: steps_timed, steps_total, step_us_median,
// step_us_p10, step_us_p90, timed_loop_ms.
//
// --metrics-ab R: what GPU metrics add to a window, within one process (the
// process-to-process spread of a step is larger than the effect). R rounds,
// each of four blocks of --steps steps: untraced, a window of cuprof::profile
// without GPU metrics, untraced, a window with them (the default set and
// interval); the windows' order swaps every round. Prints ab_* lines: per
// round, each window's median step less the median of the untraced block
// before it, and their difference (metrics less plain), as medians with p10
// and p90 over the rounds.
#include "../examples/common.cuh"

#include <chrono>
#include <cmath>
#include <deque>

static const char* const usage =
    R"(usage: mlp_loop [--steps N] [--warmup N] [--layers N] [--width N] [--batch N]
  --steps N    timed steps (default 2000)
  --warmup N   untimed steps first (default 200)
  --layers N   Linear+ReLU layers (default 9; the last has no ReLU)
  --width N    features in and out of every layer (default 1024)
  --batch N    rows (default 64)
  --metrics-ab R  R rounds of untraced / window / untraced / window with GPU metrics
)";

// The q-quantile of sorted values (the nearest rank).
static double quantile(const std::vector<double>& sorted, double q) {
  return sorted.empty() ? 0.0 : sorted[std::size_t(q * double(sorted.size() - 1) + 0.5)];
}

static double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return quantile(v, 0.5);
}

static std::string spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.1f (%.1f, %.1f)", quantile(v, 0.5), quantile(v, 0.1), quantile(v, 0.9));
  return buf;
}

// y[r][c] += bias[c], then ReLU: nn.Linear's bias and the activation after it.
__global__ void bias_relu_kernel(bf16* y, const bf16* bias, std::size_t n, std::size_t width, bool relu) {
  GRID_STRIDE_LOOP(i, n) {
    const float v = __bfloat162float(y[i]) + __bfloat162float(bias[i % width]);
    y[i] = __float2bfloat16(relu ? fmaxf(v, 0.0f) : v);
  }
}

struct mlp {
  int batch, width;
  std::deque<ex::device_array<bf16>> weights, biases;  // weights are [out x in], as nn.Linear's; a deque never moves them
  ex::device_array<bf16> a, b;                         // activations, used in turn
  cublasHandle_t handle = nullptr;

  mlp(int layers, int batch_rows, int features) : batch(batch_rows), width(features), a(std::size_t(batch) * width), b(a.size()) {
    for (int l = 0; l < layers; ++l) {
      weights.emplace_back(std::size_t(width) * width);
      biases.emplace_back(std::size_t(width));
      ex::fill_uniform(weights.back(), 2 * l + 1);
      ex::fill_uniform(biases.back(), 2 * l + 2);
    }
    ex::fill_uniform(a, 0);
    CUBLAS_CHECK(cublasCreate(&handle));
  }
  ~mlp() { cublasDestroy(handle); }

  void forward() {
    const ex::device_array<bf16>* in = &a;
    const ex::device_array<bf16>* out = &b;
    for (std::size_t l = 0; l < weights.size(); ++l) {
      CUPROF_SCOPE("linear_bias_relu");
      ex::gemm(handle, batch, width, width, in->get(), weights[l].get(), /*b_transposed*/ true, out->get());
      ex::launch_grid_stride(bias_relu_kernel, out->size(), out->get(), biases[l].get(), out->size(), std::size_t(width),
                             l + 1 < weights.size());
      std::swap(in, out);
    }
  }
};

int main(int argc, char** argv) try {
  ex::args args(argc, argv, usage);
  const int steps = args.integer("--steps", 2000);
  const int warmup = args.integer("--warmup", 200, 0);
  const int layers = args.integer("--layers", 9);
  const int width = args.integer("--width", 1024);
  const int batch = args.integer("--batch", 64);
  const int ab_rounds = args.integer("--metrics-ab", 0, 0);
  args.done();
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "mlp_loop: no CUDA device\n");
    return 1;
  }

  mlp model(layers, batch, width);
  const auto step = [&] {
    model.forward();
    CUDA_CHECK(cudaStreamSynchronize(0));
  };
  for (int i = 0; i < warmup; ++i) step();
#ifdef CUPROF_DISABLE
  if (ab_rounds > 0) {
    std::fprintf(stderr, "mlp_loop: --metrics-ab needs cuprof (this is mlp_loop_plain, built with CUPROF_DISABLE)\n");
    return 2;
  }
#else
  if (ab_rounds > 0) {
    const auto block = [&] {
      std::vector<double> us;
      for (int i = 0; i < steps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        step();
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
      return median_of(us);
    };
    // A window's added step time: its median less the untraced block's just before it.
    std::size_t samples = 0;
    std::vector<double> untraced_us;
    const auto window_added = [&](bool metrics) {
      const double untraced = block();
      untraced_us.push_back(untraced);
      cuprof::profile_options o;
      if (metrics) o.gpu_metrics = cuprof::gpu_metrics_options{};
      cuprof::profile p(o);
      p.start();
      const double traced = block();
      p.stop();
      for (const auto& series : p.last_trace().gpu_metrics) samples += series.start_ns.size();
      return traced - untraced;
    };
    std::vector<double> plain, with_metrics, difference;
    for (int r = 0; r < ab_rounds; ++r) {
      double a = 0, b = 0;
      if (r % 2 == 0) a = window_added(false), b = window_added(true);
      else b = window_added(true), a = window_added(false);
      plain.push_back(a);
      with_metrics.push_back(b);
      difference.push_back(b - a);
    }
    // The mean difference with its 95% confidence interval (normal approximation over the rounds).
    double mean = 0, var = 0;
    for (double d : difference) mean += d / double(difference.size());
    for (double d : difference) var += (d - mean) * (d - mean) / double(std::max<std::size_t>(1, difference.size() - 1));
    const double half = 1.96 * std::sqrt(var / double(difference.size())), step_us = median_of(untraced_us);
    std::printf(
        "ab_rounds=%d\nab_steps_per_block=%d\nab_metric_samples=%zu\nab_untraced_step_us=%.1f\n"
        "ab_plain_added_us=%s\nab_metrics_added_us=%s\nab_metrics_minus_plain_us=%s\n"
        "ab_metrics_minus_plain_mean_us=%.1f (95%% CI %.1f, %.1f)\nab_metrics_minus_plain_pct=%.2f (95%% CI %.2f, %.2f)\n",
        ab_rounds, steps, samples, step_us, spread(plain).c_str(), spread(with_metrics).c_str(), spread(difference).c_str(), mean,
        mean - half, mean + half, 100 * mean / step_us, 100 * (mean - half) / step_us, 100 * (mean + half) / step_us);
    return 0;
  }
#endif
  std::vector<double> step_us;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    step_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  double total_us = 0;
  for (double t : step_us) total_us += t;
  std::sort(step_us.begin(), step_us.end());
  std::printf("steps_timed=%d\nsteps_total=%d\nstep_us_median=%.1f\nstep_us_p10=%.1f\nstep_us_p90=%.1f\ntimed_loop_ms=%.1f\n",
              steps, warmup + steps, quantile(step_us, 0.5), quantile(step_us, 0.1), quantile(step_us, 0.9), total_us / 1000);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "mlp_loop: %s\n", e.what());
  return 1;
}
