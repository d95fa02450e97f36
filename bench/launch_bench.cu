// GPU-side targets of docs/performance.md, one mode per process so the
// driver (bench/per_event.py: bench/run per-event --gpu) can interleave modes over repetitions:
//   untraced      empty-kernel launches, nothing attached
//   cupti         the minimal CUPTI tracer (bench/minimal_cupti_tracer.hpp): kernels, runtime
//   cupti_driver  the same with the DRIVER domain too, the activity set cuprof needs
//   cuprof        cuprof tracing everything: kernels, runtime and driver calls, flows, attribution
//   cuprof_idle   cuprof running a schedule whose steps are all outside active windows
//   cuprof_after_window  cuprof after its schedule's one window (its first step): the
//                 shown calls' callbacks stay on, ignored, as between any two windows
//   cuprof_cycles cuprof with a repeating schedule, each cycle's trace written to disk (memory bound)
//   cupti_idle    a CUPTI subscriber with no activity enabled: the anchor for cuprof_idle
// Reliability modes (tests/gpu/gpu_check.py, docs/reliability.md):
//   burst         a cold profile (no warm-up session) around `launches` launches with no
//                 syncs in between; --trace PATH writes the trace (prints dropped=, kernels=),
//                 --lean-trace PATH the same with trace_detail::lean (lean_export_ns=)
//   after_stop    the launch loop timed --reps times before the first start(), then a
//                 profiled loop, then --reps times after stop(): before_ns=, after_ns= (medians)
//   after_stop_threaded  after_stop where a second thread also launches during the profile
//                 (then waits, alive and idle, while the loops are timed): cuprof leaves
//                 CUPTI loaded rather than finalizing it, which could crash such a thread
//   after_stop_cupti  the same around the minimal CUPTI tracer with cuprof's activity kinds
//                 (MINIMAL_CUPTI_CALLBACKS adds call callbacks), unsubscribed but not
//                 finalized: what cuprof's cuptiFinalize at stop() spares the program
//   fork          --forks children forked during a traced loop while a thread runs scopes;
//                 each child runs CPU-only scopes and _exit(0)s: forks=, children_ok=,
//                 children_hung=; --trace PATH writes the parent's trace
//   stop_between_windows  --reps profiles one after another, each recording one step of a
//                 schedule and then stepping outside any window (the call callbacks off)
//                 before stop() releases CUPTI, while --threads threads keep making CUDA
//                 calls, as PyTorch's threads do: rounds=, rounds_with_kernels=, thread_loops=
// --getters N (any mode): before each launch, N times cudaGetDevice and
// cudaGetLastError, the calls PyTorch makes around each kernel and cuprof does
// not show: what a tracer costs the calls it does not record.
// Prints key=value lines: loop_ns (the launch loop, batch syncs included),
// launch_ns (host time in the launch calls only), collect_ns (profiler start
// to a stopped profiler whose trace is ready), events, rss_*_kb (burst also
// prints the peak before stop() and after it, rss_peak_recording_kb and
// rss_peak_stopped_kb, and rss_stopped_kb, what stays once the trace is built).
#include "busy_cuda_threads.cuh"
#include "minimal_cupti_tracer.hpp"

#define CUPROF_IMPLEMENTATION  // one-file program: cuprof's runtime is compiled here
#include <cuprof/cuprof.hpp>

#include <cuda_runtime.h>

#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

__global__ void empty_kernel() {}

namespace {

std::uint64_t now_ns() {
  return std::uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
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

int getters_per_launch = 0;

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
      for (int i = 0; i < batch; ++i) {
        for (int g = 0; g < getters_per_launch; ++g) {
          int device = 0;
          (void)cudaGetDevice(&device);
          (void)cudaGetLastError();
        }
        empty_kernel<<<1, 32>>>();
      }
    }
    t.launch_ns += now_ns() - b0;
    check(cudaStreamSynchronize(0), "sync");
    on_batch();
  }
  t.loop_ns = now_ns() - t0;
  return t;
}

std::uint64_t median(std::vector<std::uint64_t> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Waits for a child at most `seconds`; kills it if it is still running. Its
// exit status, 128 + signal, or -1 when it had to be killed (a hang).
int wait_or_kill(pid_t child, double seconds) {
  const std::uint64_t until = now_ns() + std::uint64_t(seconds * 1e9);
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(child, &status, WNOHANG);
    if (r == child) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0) return -2;
    if (now_ns() > until) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "untraced";
  long launches = 200000;
  int batch = 256;
  std::string trace_path;       // burst, fork
  std::string lean_trace_path;  // burst
  int reps = 7;                 // after_stop
  int forks = 20;               // fork
  int threads = 3;              // stop_between_windows
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mode")) mode = argv[i + 1];
    else if (!std::strcmp(argv[i], "--launches")) launches = std::atol(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--batch")) batch = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--trace")) trace_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--lean-trace")) lean_trace_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--forks")) forks = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--getters")) getters_per_launch = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
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
    if (cuptiSubscribe(
            &subscriber, [](void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}, nullptr) != CUPTI_SUCCESS)
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
    std::vector<std::uint32_t> ids;
    for (const cuprof::gpu_activity& g : tr.gpu) ids.push_back(g.correlation);
    std::sort(ids.begin(), ids.end());
    std::printf("distinct_correlations=%zu\n", std::size_t(std::unique(ids.begin(), ids.end()) - ids.begin()));
  } else if (mode == "cuprof_idle") {
    cuprof::profile_options o;
    o.schedule = cuprof::schedule(/*wait*/ 1, /*warmup*/ 1, /*active*/ 1, /*repeat*/ 1, /*skip_first*/ 1 << 30);
    cuprof::profile prof(o);
    prof.start();
    t = launch_loop(launches, batch, [&] { prof.step(); });
    prof.stop();
  } else if (mode == "cuprof_after_window") {
    cuprof::profile_options o;
    o.schedule = cuprof::schedule(/*wait*/ 0, /*warmup*/ 0, /*active*/ 1, /*repeat*/ 1);
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
  } else if (mode == "burst") {
    // As a program would do it: no warm-up session, launches back to back
    // (the launch queue throttles them), one window.
    cuprof::profile prof;
    const std::uint64_t c0 = now_ns();
    prof.start();
    const std::uint64_t l0 = now_ns();
    {
      CUPROF_SCOPE("burst");
      for (long i = 0; i < launches; ++i) empty_kernel<<<1, 32>>>();
    }
    t.launch_ns = t.loop_ns = now_ns() - l0;
    // Where the peak is reached: while recording (CUPTI's buffers, the staged
    // records) or while stop() builds the trace.
    std::printf("rss_peak_recording_kb=%ld\n", status_kb("VmHWM:"));
    prof.stop();
    collect_ns = now_ns() - c0;
    std::printf("rss_peak_stopped_kb=%ld\n", status_kb("VmHWM:"));
    std::printf("rss_stopped_kb=%ld\n", status_kb("VmRSS:"));  // what stays once the trace is built: the export starts there
    const cuprof::trace& tr = prof.last_trace();
    events = tr.api_calls.size() + tr.gpu.size() + tr.spans.size();
    dropped = tr.meta.dropped_gpu_records;
    kernels = std::size_t(std::count_if(tr.gpu.begin(), tr.gpu.end(),
                                        [](const cuprof::gpu_activity& g) { return g.kind == cuprof::gpu_kind::kernel; }));
    if (!trace_path.empty()) {
      const std::uint64_t e0 = now_ns();
      const cuprof::export_result r = prof.export_chrome_trace(trace_path);
      std::printf("export_ns=%llu\ntrace_events=%llu\n", (unsigned long long)(now_ns() - e0), (unsigned long long)r.events);
    }
    if (!lean_trace_path.empty()) {
      const std::uint64_t e0 = now_ns();
      prof.export_chrome_trace(lean_trace_path, {cuprof::trace_detail::lean});
      std::printf("lean_export_ns=%llu\n", (unsigned long long)(now_ns() - e0));
    }
  } else if (mode == "after_stop" || mode == "after_stop_threaded" || mode == "after_stop_cupti") {
    // The same loop before any profiler started and after one stopped.
    std::vector<std::uint64_t> before, after;
    launch_loop(launches, batch, [] {});  // clocks up
    for (int r = 0; r < reps; ++r) before.push_back(launch_loop(launches, batch, [] {}).loop_ns);
    std::atomic<int> helper_state{0};  // after_stop_threaded: 1 launch, 2 done launching, 3 quit
    std::thread helper;
    if (mode == "after_stop_threaded")
      helper = std::thread([&] {
        while (helper_state.load() == 0) std::this_thread::yield();
        launch_loop(launches / 4, batch, [] {});
        helper_state.store(2);
        while (helper_state.load() != 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      });
    if (mode != "after_stop_cupti") {
      cuprof::profile prof;
      prof.start();
      helper_state.store(1);
      t = launch_loop(launches, batch, [] {});
      while (helper.joinable() && helper_state.load() != 2) std::this_thread::yield();
      prof.stop();
      events = prof.last_trace().api_calls.size() + prof.last_trace().gpu.size();
    } else {
      bench::minimal_cupti_tracer::start(bench::minimal_cupti_tracer::parse_kinds("kernel,memcpy,memset,overhead,marker"));
      t = launch_loop(launches, batch, [] {});
      bench::minimal_cupti_tracer::stop();
      events = bench::minimal_cupti_tracer::records();
    }
    for (int r = 0; r < reps; ++r) after.push_back(launch_loop(launches, batch, [] {}).loop_ns);
    helper_state.store(3);
    if (helper.joinable()) helper.join();
    std::printf("before_ns=%llu\nafter_ns=%llu\nreps=%d\n", (unsigned long long)median(before), (unsigned long long)median(after),
                reps);
    std::printf("before_all_ns=");
    for (std::uint64_t v : before) std::printf("%llu,", (unsigned long long)v);
    std::printf("\nafter_all_ns=");
    for (std::uint64_t v : after) std::printf("%llu,", (unsigned long long)v);
    std::printf("\n");
  } else if (mode == "fork") {
    // A traced run that forks: a thread keeps entering scopes, the main thread
    // launches, and children (CPU only: CUDA is not usable after fork) run
    // scopes and leave with _exit(0). None may hang; the parent's trace stays whole.
    cuprof::profile prof;
    std::atomic<bool> stop{false};
    std::thread scopes([&] {
      for (std::uint64_t i = 1; !stop.load(std::memory_order_relaxed); ++i) {
        cuprof::record_function r(std::string(64, 's'));
        CUPROF_SCOPE("scope_thread");
        if (i % 16 == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    });
    int ok = 0, hung = 0, failed = 0;
    prof.start();
    const long per_fork = std::max(1L, launches / std::max(1, forks));
    for (int f = 0; f < forks; ++f) {
      t = launch_loop(per_fork, batch, [] {});
      std::fflush(nullptr);
      const pid_t child = fork();
      if (child < 0) return 4;
      if (child == 0) {
        for (int k = 0; k < 5000; ++k) {
          CUPROF_SCOPE("child_scope");
          cuprof::record_function r(std::string(100, 'c'));
        }
        _exit(0);
      }
      const int rc = wait_or_kill(child, 20);
      (rc == 0 ? ok : rc == -1 ? hung : failed) += 1;
    }
    prof.stop();
    stop.store(true);
    scopes.join();
    const cuprof::trace& tr = prof.last_trace();
    events = tr.api_calls.size() + tr.gpu.size() + tr.spans.size();
    dropped = tr.meta.dropped_gpu_records;
    kernels = std::size_t(std::count_if(tr.gpu.begin(), tr.gpu.end(),
                                        [](const cuprof::gpu_activity& g) { return g.kind == cuprof::gpu_kind::kernel; }));
    if (!trace_path.empty()) prof.export_chrome_trace(trace_path);
    std::printf("forks=%d\nchildren_ok=%d\nchildren_hung=%d\nchildren_failed=%d\n", forks, ok, hung, failed);
  } else if (mode == "stop_between_windows") {
    // stop() while other threads are inside CUDA calls throughout: a
    // cuptiFinalize there races them inside libcupti (CUPTI alone does it too:
    // tests/gpu/cupti_finalize_race.cu), so cuprof must not finalize here.
    bench::busy_cuda_threads others(threads);
    int with_kernels = 0;
    for (int r = 0; r < reps; ++r) {
      cuprof::profile_options o;
      o.schedule = cuprof::schedule(/*wait*/ 0, /*warmup*/ 0, /*active*/ 1, /*repeat*/ 1);  // then no window
      cuprof::profile prof(o);
      prof.start();
      t = launch_loop(launches, batch, [&] { prof.step(); });
      prof.stop();
      const cuprof::trace& tr = prof.last_trace();
      with_kernels += std::any_of(tr.gpu.begin(), tr.gpu.end(),
                                  [](const cuprof::gpu_activity& g) { return g.kind == cuprof::gpu_kind::kernel; });
    }
    std::printf("rounds=%d\nrounds_with_kernels=%d\nthread_loops=%llu\n", reps, with_kernels, (unsigned long long)others.loops());
  } else {
    std::fprintf(stderr, "launch_bench: unknown mode %s\n", mode.c_str());
    return 2;
  }
  std::printf("mode=%s\nlaunches=%ld\nloop_ns=%llu\nlaunch_ns=%llu\ncollect_ns=%llu\nevents=%llu\n", mode.c_str(), launches,
              (unsigned long long)t.loop_ns, (unsigned long long)t.launch_ns, (unsigned long long)collect_ns,
              (unsigned long long)events);
  std::printf("dropped=%llu\nkernels=%zu\n", (unsigned long long)dropped, kernels);
  std::printf("rss_before_kb=%ld\nrss_after_kb=%ld\nrss_peak_kb=%ld\n", rss_before, status_kb("VmRSS:"), status_kb("VmHWM:"));
  return 0;
}
