// Threads that keep making CUDA calls until destroyed, as PyTorch's threads
// do: two getters, a launch and a sync on a stream of their own, in a loop.
// The other threads of `launch_bench --mode stop_between_windows` and of
// tests/gpu/cupti_finalize_race.cu (docs/reliability.md, stopping a profile while
// other threads use CUDA).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace bench {

__global__ void busy_thread_kernel() {}

class busy_cuda_threads {
 public:
  explicit busy_cuda_threads(int count) {
    for (int i = 0; i < count; ++i) threads_.emplace_back([this] { run(); });
  }
  ~busy_cuda_threads() {
    quit_.store(true);
    for (std::thread& t : threads_) t.join();
  }
  busy_cuda_threads(const busy_cuda_threads&) = delete;
  busy_cuda_threads& operator=(const busy_cuda_threads&) = delete;

  std::uint64_t loops() const { return loops_.load(); }

 private:
  void run() {
    cudaStream_t stream = nullptr;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return;
    while (!quit_.load(std::memory_order_relaxed)) {
      int device = 0;
      (void)cudaGetDevice(&device);
      (void)cudaGetLastError();
      busy_thread_kernel<<<1, 32, 0, stream>>>();
      (void)cudaStreamSynchronize(stream);
      loops_.fetch_add(1, std::memory_order_relaxed);
    }
    (void)cudaStreamDestroy(stream);
  }

  std::atomic<bool> quit_{false};
  std::atomic<std::uint64_t> loops_{0};
  std::vector<std::thread> threads_;
};

}  // namespace bench
