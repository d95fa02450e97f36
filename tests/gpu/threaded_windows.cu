// Worker threads launching kernels nonstop, each on its own stream, while the
// main thread opens and closes profiling windows in one of the ways cuprof
// offers: what every window must hold is known from outside the profiler
// (tests/gpu/gpu_check_windows.py).
//
//   threaded_windows --mode M [--threads T] [--out DIR] [options]
//
// Worker I (0 <= I < T <= 8) launches spin<I> (a kernel of its own name) on
// its own non-blocking stream, counts each launch once it returned, and
// synchronizes its stream every 64 launches. Around every window boundary the
// main thread prints
//   MARK <label> <c0> ... <cT-1> | <c0> ... <cT-1>
// each worker's count read before and after the boundary call: a worker's
// launches inside a window lie between (close.before - open.after) and
// (close.after - open.before). A short busy wait separates each reading from
// the call (--guard-us), because the profiler may place the boundary slightly
// before the call (a step mark's lead) and a launch in progress at the
// boundary is counted only when it returns.
//
// Modes (the windows each makes; the check runs `cuprof run` with the flags given):
//   schedule     cuprof::profile with schedule(1, 1, 2, 3), 13 steps of 40 ms,
//                each window exported to DIR/schedule_<k>.json; MARK "step <n>"
//                around step() (n: the step number after it)
//   cuda         3 x cudaProfilerStart/Stop, MARK "start <i>"/"stop <i>"
//                (--capture-range cuda --capture-range-end repeat)
//   nvtx         3 x nvtxRangePushA("capture")/nvtxRangePop, marks as cuda
//                (--capture-range nvtx:capture --capture-range-end repeat)
//   nvtx-domain  the same ranges in NVTX domain "app" (nvtx:capture@app)
//   nvtx-mixed   the first range in the default domain, the others in "app" (nvtx:capture)
//   start-step   10 NVTX ranges "step <n>" of 40 ms, MARK "step <n>" around the
//                previous one's pop and its push (--start-step 3 --steps 3)
//   slow         30 such steps, steps 10 and 20 120 ms longer (--slow-steps 2x);
//                prints "slowed=10,20"
//   trigger      runs --run-s seconds, writes --ready-file once every worker
//                launched (for `cuprof trigger PID --duration S`); no marks
//
// Exit status 0 when every CUDA call succeeded, 1 otherwise, 2 on bad usage.
#define CUPROF_IMPLEMENTATION
#include <cuprof/cuprof.hpp>

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

// Outside any namespace: the trace names it "void spin<I>(float*, int)".
template <int I>
__global__ void spin(float* x, int n) {
  // A dependent chain: a few microseconds that the compiler cannot shorten.
  float v = x[threadIdx.x];
  for (int k = 0; k < n; ++k) v = v * 0.999f + 1.0f;
  x[threadIdx.x] = v;
}

namespace {

constexpr int max_workers = 8;
constexpr int sync_every = 64;
constexpr int block = 256;

void launch(int worker, cudaStream_t s, float* x, int n) {
  switch (worker) {
    case 0: spin<0><<<1, block, 0, s>>>(x, n); break;
    case 1: spin<1><<<1, block, 0, s>>>(x, n); break;
    case 2: spin<2><<<1, block, 0, s>>>(x, n); break;
    case 3: spin<3><<<1, block, 0, s>>>(x, n); break;
    case 4: spin<4><<<1, block, 0, s>>>(x, n); break;
    case 5: spin<5><<<1, block, 0, s>>>(x, n); break;
    case 6: spin<6><<<1, block, 0, s>>>(x, n); break;
    case 7: spin<7><<<1, block, 0, s>>>(x, n); break;
  }
}

// One cache line per counter: the workers do not slow each other down.
struct alignas(64) worker_count {
  std::atomic<std::uint64_t> launches{0};
};

struct options {
  std::string mode;
  int threads = 4;
  std::string out = ".";
  double run_s = 4;
  std::string ready_file;
  int guard_us = 500;
  int kernel_iters = 2000;
  int step_ms = 40;
};

std::array<worker_count, max_workers> counts;
std::atomic<bool> stop_workers{false};
std::atomic<int> failed_workers{0};

void worker(int index, float* x, int iters) {
  cudaStream_t s = nullptr;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    failed_workers.fetch_add(1);
    return;
  }
  std::uint64_t n = 0;
  while (!stop_workers.load(std::memory_order_relaxed)) {
    launch(index, s, x, iters);
    counts[std::size_t(index)].launches.fetch_add(1, std::memory_order_release);
    if (++n % sync_every) continue;
    // A launch that failed (its configuration) shows in cudaGetLastError, not in the synchronize.
    cudaError_t e = cudaStreamSynchronize(s);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) {
      std::fprintf(stderr, "worker %d: %s\n", index, cudaGetErrorString(e));
      failed_workers.fetch_add(1);
      break;
    }
  }
  if (cudaStreamSynchronize(s) != cudaSuccess || cudaStreamDestroy(s) != cudaSuccess) failed_workers.fetch_add(1);
}

std::vector<std::uint64_t> read_counts(int threads) {
  std::vector<std::uint64_t> c(static_cast<std::size_t>(threads));
  for (int i = 0; i < threads; ++i) c[std::size_t(i)] = counts[std::size_t(i)].launches.load(std::memory_order_seq_cst);
  return c;
}

void busy_wait_us(int us) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < until) {}
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// The boundary call with each worker's count read before and after it.
void boundary(const options& o, const std::string& label, const std::function<void()>& call) {
  const std::vector<std::uint64_t> before = read_counts(o.threads);
  busy_wait_us(o.guard_us);
  call();
  busy_wait_us(o.guard_us);
  const std::vector<std::uint64_t> after = read_counts(o.threads);
  std::string line = "MARK " + label;
  for (const std::uint64_t c : before) line += " " + std::to_string(c);
  line += " |";
  for (const std::uint64_t c : after) line += " " + std::to_string(c);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

struct app_domain {
  nvtxDomainHandle_t handle = nullptr;
  void push() const {
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = "capture";
    nvtxDomainRangePushEx(handle, &a);
  }
  void pop() const { nvtxDomainRangePop(handle); }
};

int run_schedule(const options& o) {
  constexpr int steps = 13;
  const cuprof::schedule sched(/*wait*/ 1, /*warmup*/ 1, /*active*/ 2, /*repeat*/ 3);
  // The windows as torch.profiler's semantics give them: recorded steps [a, b)
  // open at the step() that enters a and close at the one that enters b.
  for (int n = 0, open = -1, k = 0; n <= steps + 1; ++n) {
    const bool rec =
        n <= steps && (sched(n) == cuprof::profiler_action::record || sched(n) == cuprof::profiler_action::record_and_save);
    const bool was = sched(n - 1) == cuprof::profiler_action::record_and_save;
    if (open >= 0 && (!rec || was)) {
      std::printf("schedule window %d: steps [%d, %d), marks \"step %d\" to \"step %d\"\n", ++k, open, n, open, n);
      open = -1;
    }
    if (rec && open < 0) open = n;
  }
  int written = 0, failed = 0;
  cuprof::profile_options opts;
  opts.schedule = sched;
  opts.on_trace_ready = [&](cuprof::profile& p) {
    const std::string path = o.out + "/schedule_" + std::to_string(++written) + ".json";
    try {
      p.export_chrome_trace(path);
      std::printf("window %d written to %s\n", written, path.c_str());
    } catch (const std::exception& e) {
      ++failed;
      std::fprintf(stderr, "window %d: %s\n", written, e.what());
    }
  };
  cuprof::profile prof(opts);
  prof.start();
  for (int n = 1; n <= steps; ++n) {
    sleep_ms(o.step_ms);
    boundary(o, "step " + std::to_string(n), [&] { prof.step(); });
  }
  prof.stop();
  std::printf("schedule: %d steps, %d windows written\n", steps, written);
  return failed ? 1 : 0;
}

// Three windows the program marks: open(i) and close(i) around 150 ms of work.
int run_ranges(const options& o, const std::function<void(int)>& open, const std::function<void(int)>& close) {
  for (int i = 1; i <= 3; ++i) {
    sleep_ms(100);
    boundary(o, "start " + std::to_string(i), [&] { open(i); });
    sleep_ms(150);
    boundary(o, "stop " + std::to_string(i), [&] { close(i); });
  }
  std::printf("%s: 3 ranges\n", o.mode.c_str());
  return 0;
}

// NVTX steps "step <n>": the previous step's pop and the next one's push are one boundary.
int run_steps(const options& o, int steps, const std::vector<int>& slow, int slow_extra_ms) {
  std::string slowed;
  for (int n = 0; n < steps; ++n) {
    const std::string name = "step " + std::to_string(n);
    boundary(o, name, [&] {
      if (n > 0) nvtxRangePop();
      nvtxRangePushA(name.c_str());
    });
    sleep_ms(o.step_ms);
    for (const int s : slow)
      if (s == n) {
        sleep_ms(slow_extra_ms);
        slowed += (slowed.empty() ? "" : ",") + std::to_string(n);
      }
  }
  boundary(o, "end", [] { nvtxRangePop(); });
  std::printf("%s: %d steps\n", o.mode.c_str(), steps);
  if (!slow.empty()) std::printf("slowed=%s\n", slowed.c_str());
  return 0;
}

int run_trigger(const options& o) {
  if (!o.ready_file.empty()) {
    if (FILE* f = std::fopen(o.ready_file.c_str(), "w")) {
      std::fprintf(f, "ready\n");
      std::fclose(f);
    } else {
      std::fprintf(stderr, "cannot write %s\n", o.ready_file.c_str());
      return 1;
    }
  }
  std::printf("trigger: running %.1f s\n", o.run_s);
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::duration<double>(o.run_s));
  return 0;
}

const char* usage =
    "usage: threaded_windows --mode schedule|cuda|nvtx|nvtx-domain|nvtx-mixed|start-step|slow|trigger\n"
    "                        [--threads T (1-8, default 4)] [--out DIR (default .)]\n"
    "                        [--run-s S (trigger, default 4)] [--ready-file PATH (trigger)]\n"
    "                        [--guard-us U (default 500)] [--kernel-iters N (default 2000)]\n"
    "                        [--step-ms M (default 40)]\n";

bool parse(int argc, char** argv, options& o, bool& help) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      help = true;
      return false;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "threaded_windows: %s needs a value\n", a.c_str());
      return false;
    }
    const char* v = argv[++i];
    char* end = nullptr;
    // A count (whole) or, for --run-s, seconds: a number from lo to hi, else -1.
    const auto number = [&](double lo, double hi, bool whole = true) {
      const double d = std::strtod(v, &end);
      if (end == v || *end || !(d >= lo && d <= hi) || (whole && d != double(static_cast<long long>(d)))) {
        std::fprintf(stderr, "threaded_windows: %s %s: a%s number from %g to %g is needed\n", a.c_str(), v, whole ? " whole" : "",
                     lo, hi);
        return -1.0;
      }
      return d;
    };
    double d = 0;
    if (a == "--mode") o.mode = v;
    else if (a == "--out") o.out = v;
    else if (a == "--ready-file") o.ready_file = v;
    else if (a == "--threads") {
      if ((d = number(1, max_workers)) < 0) return false;
      o.threads = int(d);
    } else if (a == "--run-s") {
      if ((d = number(0, 3600, false)) < 0) return false;
      o.run_s = d;
    } else if (a == "--guard-us") {
      if ((d = number(0, 1e6)) < 0) return false;
      o.guard_us = int(d);
    } else if (a == "--kernel-iters") {
      if ((d = number(1, 1e8)) < 0) return false;
      o.kernel_iters = int(d);
    } else if (a == "--step-ms") {
      if ((d = number(1, 1e5)) < 0) return false;
      o.step_ms = int(d);
    } else {
      std::fprintf(stderr, "threaded_windows: unknown option %s\n", a.c_str());
      return false;
    }
  }
  static const char* modes[] = {"schedule", "cuda", "nvtx", "nvtx-domain", "nvtx-mixed", "start-step", "slow", "trigger"};
  for (const char* m : modes)
    if (o.mode == m) return true;
  std::fprintf(stderr, "threaded_windows: --mode %s: unknown mode\n", o.mode.empty() ? "(none)" : o.mode.c_str());
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  bool help = false;
  if (!parse(argc, argv, o, help)) {
    std::fputs(usage, help ? stdout : stderr);
    return help ? 0 : 2;
  }
  // CUDA first: NVTX's domains and ranges must reach a profiler already attached.
  if (cudaSetDevice(0) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
    std::fprintf(stderr, "threaded_windows: no CUDA device: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  float* buffers = nullptr;
  if (cudaMalloc(&buffers, sizeof(float) * block * max_workers) != cudaSuccess ||
      cudaMemset(buffers, 0, sizeof(float) * block * max_workers) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
    std::fprintf(stderr, "threaded_windows: allocation failed\n");
    return 1;
  }
  std::vector<std::thread> workers;
  for (int i = 0; i < o.threads; ++i) workers.emplace_back(worker, i, buffers + block * i, o.kernel_iters);
  // Every worker launching before the first window: each window must see them all.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    bool all = true;
    for (const std::uint64_t c : read_counts(o.threads)) all = all && c > 0;
    if (all || failed_workers.load() || std::chrono::steady_clock::now() > deadline) break;
    sleep_ms(1);
  }
  bool started = failed_workers.load() == 0;
  for (const std::uint64_t c : read_counts(o.threads)) started = started && c > 0;
  if (!started) {
    std::fprintf(stderr, "threaded_windows: not every worker could launch\n");
    stop_workers.store(true);
    for (std::thread& t : workers) t.join();
    return 1;
  }

  int status = 0;
  app_domain app;
  if (o.mode == "nvtx-domain" || o.mode == "nvtx-mixed") app.handle = nvtxDomainCreateA("app");
  if (o.mode == "schedule") {
    status = run_schedule(o);
  } else if (o.mode == "cuda") {
    status = run_ranges(
        o, [](int) { cudaProfilerStart(); }, [](int) { cudaProfilerStop(); });
  } else if (o.mode == "nvtx") {
    status = run_ranges(
        o, [](int) { nvtxRangePushA("capture"); }, [](int) { nvtxRangePop(); });
  } else if (o.mode == "nvtx-domain") {
    status = run_ranges(
        o, [&](int) { app.push(); }, [&](int) { app.pop(); });
  } else if (o.mode == "nvtx-mixed") {
    status = run_ranges(
        o, [&](int i) { i == 1 ? (void)nvtxRangePushA("capture") : app.push(); },
        [&](int i) { i == 1 ? (void)nvtxRangePop() : app.pop(); });
  } else if (o.mode == "start-step") {
    status = run_steps(o, 10, {}, 0);
  } else if (o.mode == "slow") {
    status = run_steps(o, 30, {10, 20}, 120);
  } else {
    status = run_trigger(o);
  }

  stop_workers.store(true);
  for (std::thread& t : workers) t.join();
  const std::vector<std::uint64_t> total = read_counts(o.threads);
  std::string per_worker;
  std::uint64_t sum = 0;
  for (const std::uint64_t c : total) {
    per_worker += (per_worker.empty() ? "" : ",") + std::to_string(c);
    sum += c;
  }
  std::printf("mode=%s threads=%d launches=%llu per_worker=%s\n", o.mode.c_str(), o.threads, static_cast<unsigned long long>(sum),
              per_worker.c_str());
  const bool freed = cudaFree(buffers) == cudaSuccess;
  if (failed_workers.load() || !freed) {
    std::fprintf(stderr, "threaded_windows: %d workers failed\n", failed_workers.load());
    return 1;
  }
  return status;
}
