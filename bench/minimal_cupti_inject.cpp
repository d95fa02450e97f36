// libminimal_cupti_inject.so: the minimal CUPTI tracer (minimal_cupti_tracer.hpp)
// loaded into an unmodified program, the floor `cuprof run` is compared with
// in bench/training_loop.py (bench/run training-loop) and bench/api_cost.py:
//   CUDA_INJECTION64_PATH=.../libminimal_cupti_inject.so MINIMAL_CUPTI_ACTIVITY=kernel,memcpy,memset PROGRAM
// Records are only counted, never written: what is left is what CUPTI itself
// costs for that activity set.
//
// MINIMAL_CUPTI_WINDOW=DELAY,DURATION,PATH records only in a window, as
// `cuprof run --delay --duration` does: DELAY seconds after CUDA starts, for
// DURATION seconds; then CUPTI is released (so that torch.profiler can attach
// after it) and PATH gets {"window_start_ns":S,"window_end_ns":E} in Unix-epoch
// ns (train_step.py --mode paired reads it as it reads a cuprof trace's header).
#include "minimal_cupti_tracer.hpp"

#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

std::uint64_t epoch_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return std::uint64_t(ts.tv_sec) * 1000000000ull + std::uint64_t(ts.tv_nsec);
}

void record_window(std::vector<CUpti_ActivityKind> kinds, double delay_s, double duration_s, std::string path) {
  std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
  const std::uint64_t start = epoch_ns();
  bench::minimal_cupti_tracer::start(kinds);
  std::this_thread::sleep_for(std::chrono::duration<double>(duration_s));
  bench::minimal_cupti_tracer::stop();
  const std::uint64_t end = epoch_ns();
  cuptiFinalize();
  const std::string partial = path + ".partial";
  if (FILE* f = std::fopen(partial.c_str(), "w")) {
    std::fprintf(f, "{\"window_start_ns\":%llu,\"window_end_ns\":%llu,\"records\":%llu}\n", (unsigned long long)start,
                 (unsigned long long)end, (unsigned long long)bench::minimal_cupti_tracer::records());
    std::fclose(f);
    std::rename(partial.c_str(), path.c_str());
  }
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  const char* kinds = std::getenv("MINIMAL_CUPTI_ACTIVITY");
  const auto parsed = bench::minimal_cupti_tracer::parse_kinds(kinds ? kinds : "kernel,memcpy,memset");
  const char* window = std::getenv("MINIMAL_CUPTI_WINDOW");
  if (!window) {
    bench::minimal_cupti_tracer::start(parsed);
    return 1;
  }
  double delay_s = 0, duration_s = 0;
  int used = 0;
  if (std::sscanf(window, "%lf,%lf,%n", &delay_s, &duration_s, &used) != 2 || !window[used]) {
    std::fprintf(stderr, "minimal tracer: MINIMAL_CUPTI_WINDOW wants DELAY,DURATION,PATH, got '%s'\n", window);
    std::exit(1);
  }
  std::thread(&record_window, parsed, delay_s, duration_s, std::string(window + used)).detach();
  return 1;
}
