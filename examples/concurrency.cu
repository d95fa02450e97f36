// Real programs launch from many threads, on many streams, on several GPUs,
// through CUDA graphs, and annotate with NVTX. This example does all of it in
// one traced window, so the trace shows: one CPU lane per thread and one GPU
// lane per stream, each kernel charged to the scope of the thread that
// launched it; a graph's kernels as separate slices charged to the scope
// around cudaGraphLaunch; a region annotated only with NVTX (no cuprof scope)
// as a user_annotation that owns the kernel launched inside it.
//
//   concurrency [--threads 4] [--devices 1] [--iterations 20] [--trace PATH]
#include "common.cuh"

#include <nvtx3/nvToolsExt.h>

#include <thread>

static const char* usage =
    "usage: concurrency [--threads N] [--devices N] [--iterations N] [--trace PATH]\n"
    "  N CPU threads, each launching on its own stream (threads spread over --devices GPUs),\n"
    "  then a CUDA graph of 3 kernels and a region annotated with NVTX only.\n";

__global__ void scale(float* x, float a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * a + 1.0f;
}

namespace {

constexpr int elements = 1 << 20;

void launch_scale(float* x, cudaStream_t s) { scale<<<(elements + 255) / 256, 256, 0, s>>>(x, 1.0001f, elements); }

// One CPU thread: its own device buffer and stream, `iterations` scoped launches.
void worker(int index, int device, int iterations, bool gpu) {
  const std::string scope = "worker_" + std::to_string(index);
  cuprof::record_function thread_scope(scope);  // dynamic name: copied
  float* x = nullptr;
  cudaStream_t stream = nullptr;
  if (gpu) {
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaMalloc(&x, elements * sizeof(float)));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  for (int i = 0; i < iterations; ++i) {
    CUPROF_SCOPE("step");
    if (gpu) launch_scale(x, stream);
  }
  if (gpu) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaStreamDestroy(stream));
    CUDA_CHECK(cudaFree(x));
  }
}

// Three dependent kernels captured once, replayed in a scope.
void graph_replays(int replays, bool gpu) {
  float* x = nullptr;
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (gpu) {
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaMalloc(&x, elements * sizeof(float)));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < 3; ++k) launch_scale(x, stream);
    CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  }
  for (int r = 0; r < replays; ++r) {
    CUPROF_SCOPE("graph_step");
    if (gpu) CUDA_CHECK(cudaGraphLaunch(exec, stream));
  }
  if (gpu) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaStreamDestroy(stream));
    CUDA_CHECK(cudaFree(x));
  }
}

// Annotated the way existing code often is: NVTX only, no cuprof scope.
void nvtx_only_region(bool gpu) {
  float* x = nullptr;
  if (gpu) CUDA_CHECK(cudaMalloc(&x, elements * sizeof(float)));
  nvtxRangePushA("nvtx_only_region");
  if (gpu) launch_scale(x, nullptr);
  nvtxRangePop();
  if (gpu) {
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaFree(x));
  }
}

}  // namespace

int main(int argc, char** argv) try {
  ex::args args(argc, argv, usage);
  const int threads = args.integer("--threads", 4);
  const int iterations = args.integer("--iterations", 20);
  int devices = args.integer("--devices", 1);
  const std::string trace = args.text("--trace", "traces/concurrency.json");
  args.done();

  const bool gpu = ex::cuda_device_available("concurrency");
  int available = 0;
  if (gpu) CUDA_CHECK(cudaGetDeviceCount(&available));
  if (gpu && devices > available) {
    std::printf("concurrency: %d GPU(s) asked for, %d present; using %d\n", devices, available, available);
    devices = available;
  }
  if (gpu)
    for (int d = 0; d < devices; ++d) {  // contexts up before the window
      CUDA_CHECK(cudaSetDevice(d));
      CUDA_CHECK(cudaFree(nullptr));
    }

  cuprof::profile prof(ex::profile_options(gpu));
  prof.start();
  {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t, t % std::max(devices, 1), iterations, gpu);
    for (std::thread& th : pool) th.join();
  }
  graph_replays(5, gpu);
  nvtx_only_region(gpu);
  prof.stop();
  ex::report(prof, trace);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "concurrency: %s\n", e.what());
  return 1;
}
