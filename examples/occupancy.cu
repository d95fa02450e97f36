// The "occupancy query before a launch" pattern of "Profiling in PyTorch
// (Part 1)", written out by hand. On the article's A100 every cuBLAS GEMM
// shows cudaOccupancyMaxActiveBlocksPerMultiprocessor before its launch
// (cuBLAS sizing its grid); on an H200 with cuBLAS 13 it does not. Here our
// own code plans its launch the same way: cudaOccupancyMaxPotentialBlockSize
// picks a block size, cudaOccupancyMaxActiveBlocksPerMultiprocessor says how
// many such blocks fit on one SM, and the grid is exactly one full wave.
#include "common.cuh"

#include <optional>

static const char* const usage =
    R"(usage: occupancy [--elements N] [--steps N] [--trace PATH]
  --elements N  length of the vectors (default 16777216)
  --steps N     iterations to profile (default 5; no schedule, plain start/stop)
  --trace PATH  Chrome trace to write (default traces/occupancy.json)
)";

// y = a * x + y. A grid-stride loop is correct for any grid size, so the grid
// can be sized to what the GPU holds at once rather than to the data.
__global__ void axpy_kernel(float a, const float* x, float* y, std::size_t n) { GRID_STRIDE_LOOP(i, n) y[i] = a * x[i] + y[i]; }

struct launch_plan {
  int block = 0;          // threads per block, from cudaOccupancyMaxPotentialBlockSize
  int blocks_per_sm = 0;  // from cudaOccupancyMaxActiveBlocksPerMultiprocessor
  int grid = 0;           // blocks_per_sm * SMs: one full wave
};

struct axpy {
  ex::device_array<float> x, y;
  int sm_count = 0;

  explicit axpy(std::size_t n) : x(n), y(n) {
    CUDA_CHECK(cudaMemset(x.get(), 0, n * sizeof(float)));
    CUDA_CHECK(cudaMemset(y.get(), 0, n * sizeof(float)));
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  }

  launch_plan plan_and_launch() const {
    launch_plan p;
    int min_grid = 0;  // the grid the runtime suggests; we compute our own below
    CUDA_CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &p.block, axpy_kernel));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&p.blocks_per_sm, axpy_kernel, p.block, 0));
    p.grid = p.blocks_per_sm * sm_count;
    axpy_kernel<<<p.grid, p.block>>>(2.0f, x.get(), y.get(), x.size());
    CUDA_CHECK(cudaGetLastError());
    return p;
  }
};

int main(int argc, char** argv) try {
  ex::args args(argc, argv, usage);
  const int elements = args.integer("--elements", 1 << 24);
  const int steps = args.integer("--steps", 5);
  const std::string trace = args.text("--trace", "traces/occupancy.json");
  args.done();

  const bool gpu = ex::cuda_device_available("occupancy");
  std::optional<axpy> work;
  if (gpu) work.emplace(std::size_t(elements));

  launch_plan plan;
  cuprof::profile prof(ex::profile_options(gpu));  // no schedule: everything between start and stop is recorded
  prof.start();
  for (int i = 0; i < steps; ++i) {
    CUPROF_SCOPE("plan_and_launch");
    if (work) plan = work->plan_and_launch();
  }
  // Wait for the kernels inside the window, so the trace shows the sync (a
  // cuda_sync record and its cudaDeviceSynchronize call) covering their tail.
  if (gpu) CUDA_CHECK(cudaDeviceSynchronize());
  prof.stop();
  ex::report(prof, trace);

  if (gpu)
    std::printf("plan: block=%d blocks_per_sm=%d sms=%d grid=%d\n", plan.block, plan.blocks_per_sm, work->sm_count, plan.grid);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "occupancy: %s\n", e.what());
  return 1;
}
