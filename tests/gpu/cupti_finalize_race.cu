// CUPTI alone, no cuprof: does cuptiFinalize corrupt the heap when other
// threads are inside CUDA calls? (docs/reliability.md: it does, so cuprof
// finalizes only when no other thread made a CUDA call)
//
//   cupti_finalize_race finalize|all_calls|at_call_exit|unsubscribe [rounds] [threads]
//
// Each round does what a profiler's start and stop do: subscribe, enable the
// runtime API's callbacks and kernel activity, launch 10,240 kernels, switch
// the callbacks and the activity off, flush, and let CUPTI go:
//   finalize      unsubscribe, then finalize from this thread between two CUDA calls
//   all_calls     finalize still subscribed, every runtime and driver call's callback on
//   at_call_exit  finalize from the exit callback of a call this thread makes
//                 (cuDriverGetVersion), as cupti_activity.h recommends
//   unsubscribe   unsubscribe only
// Other threads launch and sync throughout. Prints rounds=N, how many
// finalizes ran in the callback, and the threads' loop count; a corrupted
// heap aborts.
#include "../../bench/busy_cuda_threads.cuh"

#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

__global__ void empty_kernel() {}

namespace {

std::atomic<unsigned long long> records{0};
thread_local bool finalizes_at_call_exit = false;
std::atomic<bool> finalized_in_callback{false};

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 1u << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) records.fetch_add(1);
  std::free(buffer);
}

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  const auto& call = *static_cast<const CUpti_CallbackData*>(data);
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API && cbid == CUPTI_DRIVER_TRACE_CBID_cuDriverGetVersion &&
      call.callbackSite == CUPTI_API_EXIT && finalizes_at_call_exit) {
    finalizes_at_call_exit = false;
    cuptiFinalize();
    finalized_in_callback.store(true);
  }
}

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "cupti_finalize_race: %s failed\n", what);
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "finalize" && mode != "all_calls" && mode != "at_call_exit" && mode != "unsubscribe") {
    std::fprintf(stderr, "usage: cupti_finalize_race finalize|all_calls|at_call_exit|unsubscribe [rounds] [threads]\n");
    return 2;
  }
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 20;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 3;
  check(cudaFree(nullptr) == cudaSuccess, "cudaFree");

  bench::busy_cuda_threads others(threads);

  int in_callback = 0;
  for (int r = 0; r < rounds; ++r) {
    CUpti_SubscriberHandle subscriber = nullptr;
    check(cuptiSubscribe(&subscriber, &on_callback, nullptr) == CUPTI_SUCCESS, "cuptiSubscribe");
    if (r == 0 || mode != "unsubscribe")  // a finalize forgets them
      check(cuptiActivityRegisterCallbacks(&buffer_requested, &buffer_completed) == CUPTI_SUCCESS,
            "cuptiActivityRegisterCallbacks");
    check(cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API) == CUPTI_SUCCESS, "cuptiEnableDomain");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS, "cuptiActivityEnable");
    for (int batch = 0; batch < 40; ++batch) {
      for (int i = 0; i < 256; ++i) empty_kernel<<<1, 32>>>();
      check(cudaStreamSynchronize(0) == cudaSuccess, "cudaStreamSynchronize");
    }
    cuptiEnableDomain(0, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    check(cudaDeviceSynchronize() == cudaSuccess, "cudaDeviceSynchronize");
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (mode == "at_call_exit") {
      cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuDriverGetVersion);
      finalized_in_callback.store(false);
      finalizes_at_call_exit = true;
      int version = 0;
      cuDriverGetVersion(&version);
      finalizes_at_call_exit = false;
      in_callback += finalized_in_callback.load();
    } else {
      if (mode == "all_calls") {  // and still subscribed when finalizing
        cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API);
        cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
      } else {
        cuptiUnsubscribe(subscriber);
      }
      if (mode != "unsubscribe") cuptiFinalize();
    }
  }
  std::printf("mode=%s\nrounds=%d\nfinalized_in_callback=%d\nrecords=%llu\nthread_loops=%llu\n", mode.c_str(), rounds,
              in_callback, records.load(), others.loops());
  return 0;
}
