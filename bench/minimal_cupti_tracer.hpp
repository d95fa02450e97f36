// The anchor cuprof is judged against: the least a CUPTI tracer can do.
// Activity for kernels and runtime calls, buffers malloc'ed on request,
// records only counted. Links libcupti directly (benchmarks only).
#pragma once

#include <cupti.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace bench {

class minimal_cupti_tracer {
 public:
  // with_driver: also the DRIVER domain, the activity set cuprof needs (cuBLAS
  // launches through the driver API); an anchor for what CUPTI itself costs.
  static void start(bool with_driver = false) {
    static bool registered = false;
    if (!registered) {
      check(cuptiActivityRegisterCallbacks(&requested, &completed), "cuptiActivityRegisterCallbacks");
      registered = true;
    }
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernel");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), "enable runtime");
    if (with_driver) check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER), "enable driver");
  }
  static void stop() {
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_DRIVER);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  }
  static std::uint64_t records() { return count().load(); }

 private:
  static std::atomic<std::uint64_t>& count() {
    static std::atomic<std::uint64_t> n{0};
    return n;
  }
  static void check(CUptiResult r, const char* what) {
    if (r == CUPTI_SUCCESS) return;
    std::fprintf(stderr, "minimal tracer: %s failed (%d)\n", what, int(r));
    std::exit(1);
  }
  static void CUPTIAPI requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
    *size = 8u << 20;
    *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(8, *size));
    *max_records = 0;
  }
  static void CUPTIAPI completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t, std::size_t valid) {
    CUpti_Activity* record = nullptr;
    std::uint64_t n = 0;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) ++n;
    count() += n;
    std::free(buffer);
  }
};

}  // namespace bench
