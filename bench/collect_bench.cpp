// The work cuprof adds off the application threads, per traced launch:
// draining the recorded calls and converting CUPTI records, selecting the
// window, attribution. Fed with synthetic callbacks and records shaped like an
// empty-kernel launch loop (a runtime call, the driver call it makes, the
// kernel), so it runs on the CPU machine.
// Also the memory this takes at its peak, staged records and the trace built
// from them together (CUPTI's buffers are not part of it), per launch: the
// staged records once converted (what recording holds), the peak while the
// trace is built from them, and the trace alone at the end. The total is given
// as wall time and as this thread's CPU time (the fairer figure on a shared machine).
//   collect_bench [launches]
#include <cuprof/cupti/call_recorder.hpp>
#include <cuprof/cupti/record_store.hpp>
#include <cuprof/cuprof.hpp>

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

// One call of the launch loop as CUPTI's callbacks report it: entry, what
// the call does inside (a nested driver call), exit.
template <class Inside>
void traced_call(cuprof::detail::cupti::call_recorder& recorder, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                 std::uint32_t correlation, Inside&& inside) {
  std::uint64_t per_call = 0;
  int result = 0;
  CUpti_CallbackData d;
  std::memset(static_cast<void*>(&d), 0, sizeof d);
  d.correlationData = &per_call;
  d.correlationId = correlation;
  d.functionReturnValue = &result;
  d.callbackSite = CUPTI_API_ENTER;
  recorder.on_call(domain, cbid, d);
  inside();
  d.callbackSite = CUPTI_API_EXIT;
  recorder.on_call(domain, cbid, d);
}

}  // namespace

int main(int argc, char** argv) {
  const std::uint32_t launches = argc > 1 ? std::uint32_t(std::atol(argv[1])) : 200000;
  std::vector<CUpti_ActivityKernel10> kernels(launches);
  std::vector<std::uint64_t> launched_at(launches);           // ticks: the calls are stamped with cuprof's clock
  const long rss_inputs_kb = status_kb("VmRSS:");             // the synthetic records stay resident throughout
  auto* recorder = new cuprof::detail::cupti::call_recorder;  // one per process, never destroyed (as the tracer's)
  recorder->start_recording(0);
  cuprof::detail::cupti::record_store store(raw_name);
  // As while tracing: the program's thread records its calls (not timed: that is in-loop cost), the
  // worker drains them into the store with the kernels' records (timed), a batch at a time.
  constexpr std::uint32_t batch = 4096;
  double convert = 0, cpu = 0;
  for (std::uint32_t first = 0; first < launches; first += batch) {
    const std::uint32_t last = std::min(launches, first + batch);
    for (std::uint32_t i = first; i < last; ++i) {
      launched_at[i] = cuprof::detail::now_ticks();
      // cudaLaunchKernel and the cuLaunchKernel it makes; the kernel carries the runtime call's id
      traced_call(*recorder, CUPTI_CB_DOMAIN_RUNTIME_API, 211, 2 * i + 1,
                  [&] { traced_call(*recorder, CUPTI_CB_DOMAIN_DRIVER_API, 307, 2 * i + 2, [] {}); });
      CUpti_ActivityKernel10& k = kernels[i];
      std::memset(&k, 0, sizeof k);
      k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
      k.start = cuprof::detail::now_ticks(), k.end = k.start + 1000, k.streamId = 7, k.correlationId = 2 * i + 1;
      k.gridX = k.gridY = k.gridZ = 1, k.blockX = 32, k.blockY = k.blockZ = 1;
      k.name = "_Z12empty_kernelv";
    }
    const double cpu_before = thread_cpu_seconds();
    const auto c0 = std::chrono::steady_clock::now();
    recorder->drain_into(store);
    for (std::uint32_t i = first; i < last; ++i) store.add(reinterpret_cast<const CUpti_Activity*>(&kernels[i]));
    convert += seconds_since(c0);
    cpu += thread_cpu_seconds() - cpu_before;
  }
  const long staged_kb = status_kb("VmRSS:") - rss_inputs_kb;  // what recording holds, CUPTI's buffers aside
  const std::uint64_t window_start = launched_at.front(), window_end = kernels.back().end;
  const double cpu0 = thread_cpu_seconds();
  auto c0 = std::chrono::steady_clock::now();
  const bool complete = store.window_complete(window_start, window_end);
  const double check = seconds_since(c0);
  cuprof::trace t;
  // One scope per 256 launches, as launch_bench has.
  for (std::uint32_t b = 0; b < launches; b += 256)
    t.spans.push_back({launched_at[b], (b + 256 < launches ? launched_at[b + 256] : window_end) - 1, 0,
                       cuprof::detail::current_tid(), cuprof::no_index, b / 256 + 1, false});
  c0 = std::chrono::steady_clock::now();
  store.take(t, window_start, window_end, cuprof::detail::tick_converter{});
  const double take = seconds_since(c0);
  c0 = std::chrono::steady_clock::now();
  cuprof::attribute(t);
  const double attribute = seconds_since(c0);
  cpu += thread_cpu_seconds() - cpu0;
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
