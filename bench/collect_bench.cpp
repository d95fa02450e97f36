// The work cuprof adds off the application threads, per traced launch:
// converting CUPTI records, selecting the window, attribution. Fed with
// synthetic records shaped like an empty-kernel launch loop (a runtime call,
// the driver call it makes, the kernel), so it runs on the CPU machine.
// Also the memory this takes at its peak, staged records and the trace built
// from them together (CUPTI's buffers are not part of it), per launch: the
// staged records once converted (what recording holds), the peak while the
// trace is built from them, and the trace alone at the end. The total is given
// as wall time and as this thread's CPU time (the fairer figure on a shared machine).
//   collect_bench [launches]
#include <cuprof/detail/cupti/records.hpp>
#include <cuprof/trace.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

namespace {

// A /proc/self/status field in kB (VmRSS, VmHWM).
long status_kb(const char* key) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  const std::size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, key, n) == 0) kb = std::atol(line + n);
  std::fclose(f);
  return kb;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// This thread's CPU time: what the work cost, without the time a loaded
// machine kept it waiting for a core.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

std::string raw_name(cuprof::api_domain d, std::uint32_t cbid) {
  if (d == cuprof::api_domain::runtime) return cbid == 211 ? "cudaLaunchKernel_v7000" : "cudaStreamSynchronize_v3020";
  return cbid == 307 ? "cuLaunchKernel" : "cuKernelGetName";
}

}  // namespace

int main(int argc, char** argv) {
  const std::uint32_t launches = argc > 1 ? std::uint32_t(std::atol(argv[1])) : 200000;
  std::vector<CUpti_ActivityAPI> calls;
  std::vector<CUpti_ActivityKernel10> kernels;
  calls.reserve(2u * launches);
  kernels.reserve(launches);
  const std::uint64_t t0 = 1000000;
  for (std::uint32_t i = 0; i < launches; ++i) {
    const std::uint64_t at = t0 + std::uint64_t(i) * 5000;
    CUpti_ActivityAPI rt;
    std::memset(&rt, 0, sizeof rt);
    rt.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    rt.cbid = 211, rt.start = at, rt.end = at + 4000, rt.threadId = 7, rt.correlationId = 2 * i + 1;
    CUpti_ActivityAPI drv = rt;
    drv.kind = CUPTI_ACTIVITY_KIND_DRIVER;
    drv.cbid = 307, drv.start = at + 500, drv.end = at + 3500, drv.correlationId = 2 * i + 2;
    calls.push_back(rt);
    calls.push_back(drv);
    CUpti_ActivityKernel10 k;
    std::memset(&k, 0, sizeof k);
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = at + 6000, k.end = at + 7000, k.streamId = 7, k.correlationId = rt.correlationId;
    k.gridX = k.gridY = k.gridZ = 1, k.blockX = 32, k.blockY = k.blockZ = 1;
    k.name = "_Z12empty_kernelv";
    kernels.push_back(k);
  }
  const long rss_inputs_kb = status_kb("VmRSS:");  // the synthetic records stay resident throughout
  cuprof::detail::cupti::record_store store(raw_name);
  const double cpu0 = thread_cpu_seconds();
  auto c0 = std::chrono::steady_clock::now();
  for (std::uint32_t i = 0; i < launches; ++i) {
    store.add(reinterpret_cast<const CUpti_Activity*>(&calls[2 * i]));
    store.add(reinterpret_cast<const CUpti_Activity*>(&calls[2 * i + 1]));
    store.add(reinterpret_cast<const CUpti_Activity*>(&kernels[i]));
  }
  const double convert = seconds_since(c0);
  const long staged_kb = status_kb("VmRSS:") - rss_inputs_kb;  // what recording holds, CUPTI's buffers aside
  c0 = std::chrono::steady_clock::now();
  const bool complete = store.window_complete(t0, t0 + std::uint64_t(launches) * 5000);
  const double check = seconds_since(c0);
  cuprof::trace t;
  // One scope per 256 launches, as launch_bench has.
  for (std::uint32_t b = 0; b < launches; b += 256)
    t.spans.push_back({t0 + std::uint64_t(b) * 5000, t0 + std::uint64_t(b + 256) * 5000 - 1, 0, 7, cuprof::no_index,
                       b / 256 + 1, false});
  c0 = std::chrono::steady_clock::now();
  store.take(t, t0, t0 + std::uint64_t(launches) * 5000, cuprof::detail::tick_converter{});
  const double take = seconds_since(c0);
  c0 = std::chrono::steady_clock::now();
  cuprof::attribute(t);
  const double attribute = seconds_since(c0);
  const double cpu = thread_cpu_seconds() - cpu0;
  std::printf("collect_launches=%u complete=%d api=%zu gpu=%zu\n", launches, int(complete), t.api_calls.size(), t.gpu.size());
  std::printf("collect_convert_ns_per_launch=%.1f\n", convert * 1e9 / launches);
  std::printf("collect_window_check_ns_per_launch=%.1f\n", check * 1e9 / launches);
  std::printf("collect_take_ns_per_launch=%.1f\n", take * 1e9 / launches);
  std::printf("collect_attribute_ns_per_launch=%.1f\n", attribute * 1e9 / launches);
  std::printf("collect_total_ns_per_launch=%.1f\n", (convert + check + take + attribute) * 1e9 / launches);
  std::printf("collect_total_cpu_ns_per_launch=%.1f\n", cpu * 1e9 / launches);
  std::printf("collect_staged_bytes_per_launch=%.0f\n", double(staged_kb) * 1024.0 / launches);
  std::printf("collect_peak_bytes_per_launch=%.0f\n", double(status_kb("VmHWM:") - rss_inputs_kb) * 1024.0 / launches);
  std::printf("collect_trace_bytes_per_launch=%.0f\n", double(status_kb("VmRSS:") - rss_inputs_kb) * 1024.0 / launches);
}
