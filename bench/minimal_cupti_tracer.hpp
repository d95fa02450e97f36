// The anchor cuprof is judged against: the least a CUPTI tracer can do.
// Activity of the kinds asked for (kernels and runtime calls by default),
// buffers malloc'ed on request, records only counted. Links libcupti directly
// (benchmarks only).
#pragma once

#include <cupti.h>

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace bench {

class minimal_cupti_tracer {
 public:
  // with_driver: also the DRIVER domain, the activity set cuprof needs (cuBLAS
  // launches through the driver API); an anchor for what CUPTI itself costs.
  static void start(bool with_driver = false) {
    std::vector<CUpti_ActivityKind> kinds = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME};
    if (with_driver) kinds.push_back(CUPTI_ACTIVITY_KIND_DRIVER);
    start(kinds);
  }
  static void start(const std::vector<CUpti_ActivityKind>& kinds) {
    static bool registered = false;
    if (!registered) {
      check(cuptiActivityRegisterCallbacks(&requested, &completed), "cuptiActivityRegisterCallbacks");
      registered = true;
    }
    for (CUpti_ActivityKind kind : kinds) check(cuptiActivityEnable(kind), "cuptiActivityEnable");
    enabled() = kinds;
    if (const char* only = std::getenv("MINIMAL_CUPTI_ONLY_CALLS")) keep_only_calls(only);
    if (const char* calls = std::getenv("MINIMAL_CUPTI_CALLBACKS")) record_by_callback(calls);
  }

  // MINIMAL_CUPTI_CALLBACKS=runtime:211,driver:307: these calls recorded by the
  // callback API instead of activity records: a timestamp at entry and exit,
  // kept in a thread-local ring with the call's correlation id, the least a
  // callback-based recorder does (what such a design of cuprof would pay).
  static void record_by_callback(const std::string& list) {
    if (!subscriber() && cuptiSubscribe(&subscriber(), &on_call, nullptr) != CUPTI_SUCCESS) {
      std::fprintf(stderr, "minimal tracer: cuptiSubscribe failed\n");
      std::exit(1);
    }
    for (const auto& [domain, cbid] : parse_calls(list, "MINIMAL_CUPTI_CALLBACKS"))
      cuptiEnableCallback(1, subscriber(), domain == "runtime" ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, cbid);
  }

  // MINIMAL_CUPTI_ONLY_CALLS=runtime:211,driver:307: of the API domains named,
  // only these callback ids keep their activity records (the way cuprof keeps
  // only the calls it shows): what one kind of record costs, apart from the rest.
  // "runtime:211,driver:307" as (domain, callback id) pairs; `variable` names it in the error.
  static std::vector<std::pair<std::string, std::uint32_t>> parse_calls(const std::string& list, const char* variable) {
    std::vector<std::pair<std::string, std::uint32_t>> calls;
    for (const std::string& item : split_commas(list)) {
      const std::size_t colon = item.find(':');
      const std::string domain = item.substr(0, colon);
      const std::uint32_t cbid =
          colon == std::string::npos ? 0 : std::uint32_t(std::strtoul(item.c_str() + colon + 1, nullptr, 10));
      if ((domain != "runtime" && domain != "driver") || cbid == 0) {
        std::fprintf(stderr, "minimal tracer: %s wants runtime:CBID or driver:CBID, got '%s'\n", variable, item.c_str());
        std::exit(1);
      }
      calls.emplace_back(domain, cbid);
    }
    return calls;
  }

  // "a,b,c" to its items ("" to one empty item).
  static std::vector<std::string> split_commas(const std::string& list) {
    std::vector<std::string> items;
    for (std::size_t from = 0; from <= list.size();) {
      const std::size_t comma = std::min(list.find(',', from), list.size());
      items.push_back(list.substr(from, comma - from));
      from = comma + 1;
    }
    return items;
  }

  static void keep_only_calls(const std::string& list) {
    std::vector<std::uint32_t> runtime, driver;
    for (const auto& [domain, cbid] : parse_calls(list, "MINIMAL_CUPTI_ONLY_CALLS"))
      (domain == "runtime" ? runtime : driver).push_back(cbid);
    const auto keeps = [](const std::vector<std::uint32_t>& ids, std::uint32_t id) {
      return std::find(ids.begin(), ids.end(), id) != ids.end();
    };
    if (!runtime.empty())
      for (std::uint32_t id = 1; id < CUPTI_RUNTIME_TRACE_CBID_SIZE; ++id) cuptiActivityEnableRuntimeApi(id, keeps(runtime, id));
    if (!driver.empty())
      for (std::uint32_t id = 1; id < CUPTI_DRIVER_TRACE_CBID_SIZE; ++id) cuptiActivityEnableDriverApi(id, keeps(driver, id));
  }
  static void stop() {
    for (CUpti_ActivityKind kind : enabled()) cuptiActivityDisable(kind);
    if (subscriber()) {
      cuptiUnsubscribe(subscriber());
      subscriber() = nullptr;
    }
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  }
  static std::uint64_t records() { return count().load(); }

  // "kernel,memcpy,memset,runtime,driver" (also synchronization, overhead,
  // marker, external_correlation: cuprof's whole set) to activity kinds.
  static std::vector<CUpti_ActivityKind> parse_kinds(const std::string& list) {
    static const struct {
      const char* name;
      CUpti_ActivityKind kind;
    } names[] = {{"kernel", CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL},
                 {"memcpy", CUPTI_ACTIVITY_KIND_MEMCPY},
                 {"memset", CUPTI_ACTIVITY_KIND_MEMSET},
                 {"runtime", CUPTI_ACTIVITY_KIND_RUNTIME},
                 {"driver", CUPTI_ACTIVITY_KIND_DRIVER},
                 {"synchronization", CUPTI_ACTIVITY_KIND_SYNCHRONIZATION},
                 {"overhead", CUPTI_ACTIVITY_KIND_OVERHEAD},
                 {"marker", CUPTI_ACTIVITY_KIND_MARKER},
                 {"external_correlation", CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION}};
    std::vector<CUpti_ActivityKind> kinds;
    for (const std::string& name : split_commas(list)) {
      bool known = false;
      for (const auto& n : names)
        if (name == n.name) kinds.push_back(n.kind), known = true;
      if (!known) {
        std::fprintf(stderr, "minimal tracer: unknown activity kind '%s'\n", name.c_str());
        std::exit(1);
      }
    }
    return kinds;
  }

 private:
  static CUpti_SubscriberHandle& subscriber() {
    static CUpti_SubscriberHandle h = nullptr;
    return h;
  }
  struct call_stamp {
    std::uint64_t start_ns, end_ns;
    std::uint32_t correlation, cbid;
  };
  static constexpr std::uint32_t ring_size = 4096;
  static call_stamp* thread_ring() {
    thread_local call_stamp ring[ring_size];
    return ring;
  }
  static void CUPTIAPI on_call(void*, CUpti_CallbackDomain, CUpti_CallbackId cbid, const void* data) {
    thread_local std::uint32_t next = 0;
    const auto* d = static_cast<const CUpti_CallbackData*>(data);
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const std::uint64_t now = std::uint64_t(ts.tv_sec) * 1000000000ull + std::uint64_t(ts.tv_nsec);
    if (d->callbackSite == CUPTI_API_ENTER) {
      *d->correlationData = now;
      return;
    }
    thread_ring()[next++ % ring_size] = {*d->correlationData, now, d->correlationId, cbid};
    count().fetch_add(1, std::memory_order_relaxed);
  }
  static std::atomic<std::uint64_t>& count() {
    static std::atomic<std::uint64_t> n{0};
    return n;
  }
  static std::vector<CUpti_ActivityKind>& enabled() {
    static std::vector<CUpti_ActivityKind> kinds;
    return kinds;
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
