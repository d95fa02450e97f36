// Target 3 of docs/performance.md: what a scope costs, next to the two clock
// reads a timestamped scope needs (the floor), measured in the same run.
// Per-thread CPU time (CLOCK_THREAD_CPUTIME_ID), so 8 threads on 2 cores
// still measure the cost of one scope, not the wait for a core.
//   scope_bench [scopes per thread]
#define CUPROF_IMPLEMENTATION  // one-file program: cuprof's runtime is compiled here
#include <cuprof/cuprof.hpp>
#include <cuprof/record_function.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <thread>
#include <vector>

void scopes_compiled_out(std::uint64_t n);  // scope_bench_disabled.cpp

namespace {

std::uint64_t thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::uint64_t(ts.tv_sec) * 1000000000ull + std::uint64_t(ts.tv_nsec);
}

template <class Body>
double ns_per_iteration(std::uint64_t n, Body body) {
  const std::uint64_t t0 = thread_cpu_ns();
  body(n);
  return double(thread_cpu_ns() - t0) / double(n);
}

// Median over 5 runs of fn, each on `threads` threads; per-thread cost.
template <class Body>
double median_cost(int threads, std::uint64_t n, Body body) {
  std::vector<double> runs;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<double> per_thread(std::size_t(threads), 0.0);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { per_thread[std::size_t(t)] = ns_per_iteration(n, body); });
    for (auto& th : pool) th.join();
    std::sort(per_thread.begin(), per_thread.end());
    runs.push_back(per_thread[per_thread.size() / 2]);
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

void empty_loop(std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) asm volatile("" ::: "memory");
}
void tsc_reads(std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint64_t t = __builtin_ia32_rdtsc();
    asm volatile("" : : "r"(t) : "memory");
  }
}
void monotonic_reads(std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint64_t t = cuprof::detail::monotonic_ns();
    asm volatile("" : : "r"(t) : "memory");
  }
}
void scopes(std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) {
    CUPROF_SCOPE("bench_scope");
    asm volatile("" ::: "memory");
  }
}

// Three integer arguments, as a GEMM scope gives its sizes.
void scopes_with_args(std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) {
    CUPROF_SCOPE("bench_scope_args", {{"M", std::int64_t(i)}, {"N", 3072}, {"K", 768}});
    asm volatile("" ::: "memory");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::uint64_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1000000;
  const double loop = median_cost(1, n * 4, empty_loop);
  const double tsc = median_cost(1, n * 4, tsc_reads) - loop;
  const double mono = median_cost(1, n * 4, monotonic_reads) - loop;
  std::printf("clock_read_tsc_ns=%.2f\n", tsc);
  std::printf("clock_read_monotonic_ns=%.2f\n", mono);

  std::printf("scope_idle_ns=%.2f\n", median_cost(1, n * 4, scopes) - loop);
  std::printf("scope_compiled_out_ns=%.2f\n", median_cost(1, n * 4, scopes_compiled_out) - loop);

  cuprof::profile_options cpu_only;
  cpu_only.activities = cuprof::activity::cpu;
  for (int threads : {1, 2, 8}) {
    cuprof::profile prof(cpu_only);
    prof.start();
    const double cost = median_cost(threads, n, scopes) - loop;
    prof.stop();  // collects (and frees) what was recorded
    std::printf("scope_recording_%dthreads_ns=%.2f\n", threads, cost);
  }
  {
    cuprof::profile prof(cpu_only);
    prof.start();
    const double cost = median_cost(1, n, scopes_with_args) - loop;
    prof.stop();
    std::printf("scope_recording_3args_1thread_ns=%.2f\n", cost);
  }
  std::printf("scope_floor_ns=%.2f (two %s reads)\n", 2 * (cuprof::detail::process().use_tsc.load() ? tsc : mono),
              cuprof::detail::process().use_tsc.load() ? "TSC" : "CLOCK_MONOTONIC");
}
