// Cross-stream dependencies for HTA's critical path: each step a producer
// kernel of about 1.5 ms on stream A, cudaEventRecord on A, cudaStreamWaitEvent
// of stream B on that event, a short consumer kernel on B, and the CPU waiting
// for the consumer with cudaEventSynchronize on an event recorded on B. The
// trace's "Stream Wait Event" and "Event Sync" records carry Kineto's wait_on_*
// args (the stream the event was recorded on, the recording call's correlation
// id), from which tests/hta_check.py's critical path analysis draws its
// sync-dependency edges.
//
//   stream_wait TRACE   profiled: steps 1 to 5 (ProfilerStep#N), the trace written to TRACE
//   stream_wait         plain: cuprof compiled in but not started
#define CUPROF_IMPLEMENTATION
#include <cuprof/cuprof.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                                     \
  do {                                                                                                  \
    const cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                            \
      std::fprintf(stderr, "stream_wait: %s: %s (line %d)\n", #call, cudaGetErrorString(e_), __LINE__); \
      std::exit(1);                                                                                     \
    }                                                                                                   \
  } while (0)

__device__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins for `ns` nanoseconds of the GPU's global timer, then writes: the work the consumer waits for.
__global__ void producer(float* x, std::uint64_t ns) {
  const std::uint64_t start = global_ns();
  while (global_ns() - start < ns) {}
  if (blockIdx.x == 0 && threadIdx.x == 0) x[0] += 1.0f;
}

__global__ void consumer(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[0] * float(i);
}

int main(int argc, char** argv) {
  const char* trace_path = argc > 1 ? argv[1] : nullptr;
  constexpr int steps = 5, n = 1 << 16;
  constexpr std::uint64_t producer_ns = 1500000;
  CHECK(cudaFree(nullptr));  // the context, before the window
  cudaStream_t a = nullptr, b = nullptr;
  CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  cudaEvent_t produced = nullptr, consumed = nullptr;
  CHECK(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&consumed, cudaEventDisableTiming));
  float *x = nullptr, *y = nullptr;
  CHECK(cudaMalloc(&x, sizeof(float)));
  CHECK(cudaMalloc(&y, n * sizeof(float)));
  CHECK(cudaMemset(x, 0, sizeof(float)));
  producer<<<1, 32, 0, a>>>(x, 1000);  // warm: the kernels loaded before the window
  consumer<<<(n + 255) / 256, 256, 0, b>>>(x, y, n);
  CHECK(cudaDeviceSynchronize());

  cuprof::profile_options options;
  // One window over every step (ProfilerStep#N spans, the annotation HTA's
  // critical path is asked for), closed by stop().
  options.schedule = cuprof::schedule(0, 0, 1000, 1);
  cuprof::profile prof(options);
  if (trace_path) prof.start();
  for (int step = 0; step < steps; ++step) {
    {
      CUPROF_SCOPE("produce_consume");
      producer<<<1, 32, 0, a>>>(x, producer_ns);
      CHECK(cudaEventRecord(produced, a));
      CHECK(cudaStreamWaitEvent(b, produced, 0));  // B waits for A's producer, the CPU does not
      consumer<<<(n + 255) / 256, 256, 0, b>>>(x, y, n);
      CHECK(cudaEventRecord(consumed, b));
      CHECK(cudaEventSynchronize(consumed));  // the CPU waits for B's consumer
    }
    prof.step();  // outside the scope: a step's boundary inside a scope would cut across it
  }
  CHECK(cudaDeviceSynchronize());
  if (trace_path) {
    prof.stop();
    prof.export_chrome_trace(trace_path);  // throws cuprof::error on failure
  }
  float first = 0;
  CHECK(cudaMemcpy(&first, x, sizeof first, cudaMemcpyDeviceToHost));
  std::printf("stream_wait: %d steps, x[0] = %.0f\n", steps, first);
  CHECK(cudaEventDestroy(produced));
  CHECK(cudaEventDestroy(consumed));
  CHECK(cudaStreamDestroy(a));
  CHECK(cudaStreamDestroy(b));
  CHECK(cudaFree(x));
  CHECK(cudaFree(y));
  std::printf("stream_wait: done\n");
  return 0;
}
