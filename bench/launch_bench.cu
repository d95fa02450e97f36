// GPU-side targets of docs/performance.md, one mode per process so the
// driver (bench/run_benchmarks.py) can interleave modes over repetitions:
//   untraced      empty-kernel launches, nothing attached
//   cupti         the minimal CUPTI tracer (bench/minimal_cupti_tracer.hpp): kernels, runtime
//   cupti_driver  the same with the DRIVER domain too, the activity set cuprof needs
//   cuprof        cuprof tracing everything: kernels, runtime and driver calls, flows, attribution
//   cuprof_idle   cuprof running a schedule whose steps are all outside active windows
//   cuprof_cycles cuprof with a repeating schedule, each cycle's trace written to disk (memory bound)
//   cupti_idle    a CUPTI subscriber with no activity enabled: the anchor for cuprof_idle
// Prints key=value lines: loop_ns (the launch loop, batch syncs included),
// launch_ns (host time in the launch calls only), collect_ns (profiler start
// to a stopped profiler whose trace is ready), events, rss_*_kb.
#include "minimal_cupti_tracer.hpp"

#include <cuprof/cuprof.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

__global__ void empty_kernel() {}

namespace {

std::uint64_t now_ns() {
  return std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now().time_since_epoch())
                           .count());
}

long status_kb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::atol(line.c_str() + std::strlen(key));
  return -1;
}

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "launch_bench: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

struct loop_times {
  std::uint64_t loop_ns = 0;
  std::uint64_t launch_ns = 0;
};

// `launches` empty kernels in batches of `batch` (below the launch-queue
// depth), a stream sync after each; `on_batch` runs between batches.
template <class OnBatch>
loop_times launch_loop(long launches, int batch, OnBatch on_batch) {
  loop_times t;
  const std::uint64_t t0 = now_ns();
  for (long done = 0; done < launches; done += batch) {
    const std::uint64_t b0 = now_ns();
    {
      CUPROF_SCOPE("launch_batch");
      for (int i = 0; i < batch; ++i) empty_kernel<<<1, 32>>>();
    }
    t.launch_ns += now_ns() - b0;
    check(cudaStreamSynchronize(0), "sync");
    on_batch();
  }
  t.loop_ns = now_ns() - t0;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "untraced";
  long launches = 200000;
  int batch = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mode")) mode = argv[i + 1];
    else if (!std::strcmp(argv[i], "--launches")) launches = std::atol(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--batch")) batch = std::atoi(argv[i + 1]);
  }
  check(cudaFree(nullptr), "init");
  launch_loop(4096, batch, [] {});  // module load, first-launch costs

  loop_times t;
  std::uint64_t collect_ns = 0, events = 0, dropped = 0;
  std::size_t kernels = 0;
  const long rss_before = status_kb("VmRSS:");
  if (mode == "untraced") {
    t = launch_loop(launches, batch, [] {});
  } else if (mode == "cupti" || mode == "cupti_driver") {
    const bool with_driver = mode == "cupti_driver";
    bench::minimal_cupti_tracer::start(with_driver);  // warm: CUPTI's one-off start-up out of the timing
    launch_loop(4096, batch, [] {});
    bench::minimal_cupti_tracer::stop();
    const std::uint64_t before = bench::minimal_cupti_tracer::records();
    const std::uint64_t c0 = now_ns();
    bench::minimal_cupti_tracer::start(with_driver);
    t = launch_loop(launches, batch, [] {});
    bench::minimal_cupti_tracer::stop();
    collect_ns = now_ns() - c0;
    events = bench::minimal_cupti_tracer::records() - before;
  } else if (mode == "cupti_idle") {
    CUpti_SubscriberHandle subscriber;
    if (cuptiSubscribe(&subscriber, [](void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}, nullptr) !=
        CUPTI_SUCCESS)
      return 3;
    t = launch_loop(launches, batch, [] {});
  } else if (mode == "cuprof") {
    {
      cuprof::profile warm;  // CUPTI's one-off start-up out of the timing, as for the minimal tracer
      warm.start();
      launch_loop(4096, batch, [] {});
      warm.stop();
    }
    cuprof::profile prof;
    const std::uint64_t c0 = now_ns();
    prof.start();
    t = launch_loop(launches, batch, [] {});
    prof.stop();
    collect_ns = now_ns() - c0;
    const cuprof::trace& tr = prof.last_trace();
    events = tr.api_calls.size() + tr.gpu.size() + tr.spans.size();
    dropped = tr.meta.dropped_gpu_records;
    kernels = std::size_t(std::count_if(tr.gpu.begin(), tr.gpu.end(),
                                        [](const cuprof::gpu_activity& g) { return g.kind == cuprof::gpu_kind::kernel; }));
  } else if (mode == "cuprof_idle") {
    cuprof::profile_options o;
    o.schedule = cuprof::schedule(/*wait*/ 1, /*warmup*/ 1, /*active*/ 1, /*repeat*/ 1, /*skip_first*/ 1 << 30);
    cuprof::profile prof(o);
    prof.start();
    t = launch_loop(launches, batch, [&] { prof.step(); });
    prof.stop();
  } else if (mode == "cuprof_cycles") {
    cuprof::profile_options o;
    // 40 batches a step, 10 recorded steps a cycle (about 100k launches), forever.
    o.schedule = cuprof::schedule(/*wait*/ 0, /*warmup*/ 1, /*active*/ 10);
    o.on_trace_ready = [&](cuprof::profile& p) {
      const cuprof::trace& tr = p.last_trace();
      events += tr.api_calls.size() + tr.gpu.size() + tr.spans.size();
      p.export_chrome_trace("/tmp/cuprof_cycle.json");  // finished cycles go to disk
    };
    cuprof::profile prof(o);
    int batches = 0;
    prof.start();
    t = launch_loop(launches, batch, [&] {
      if (++batches % 40 == 0) prof.step();
    });
    prof.stop();
  } else {
    std::fprintf(stderr, "launch_bench: unknown mode %s\n", mode.c_str());
    return 2;
  }
  std::printf("mode=%s\nlaunches=%ld\nloop_ns=%llu\nlaunch_ns=%llu\ncollect_ns=%llu\nevents=%llu\n", mode.c_str(),
              launches, (unsigned long long)t.loop_ns, (unsigned long long)t.launch_ns,
              (unsigned long long)collect_ns, (unsigned long long)events);
  std::printf("dropped=%llu\nkernels=%zu\n", (unsigned long long)dropped, kernels);
  std::printf("rss_before_kb=%ld\nrss_after_kb=%ld\nrss_peak_kb=%ld\n", rss_before, status_kb("VmRSS:"),
              status_kb("VmHWM:"));
  return 0;
}
