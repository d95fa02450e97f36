// What one captured native call stack costs the calling thread
// (profile_options::with_stack), at a few depths: the unwind alone with each
// unwinder (glibc's backtrace(), libunwind's unw_backtrace), and cuprof's
// capture of a stack seen before (unwind, hash, lookup in the thread's table),
// the steady state of a loop that launches from the same lines.
//
//   bench/run stacks [--build BUILD] [ITERATIONS]
#include <cuprof/collect/native_stack.hpp>

#include <dlfcn.h>
#include <execinfo.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

using cuprof::detail::capture_stack;
using cuprof::detail::max_stack_frames;
using cuprof::detail::stack_hash;
using cuprof::detail::thread_stacks;
using cuprof::detail::unwind_function;

thread_stacks table;
volatile std::uint32_t sink;

// cuprof's hot path for a stack its thread has kept: the capture, the hash, the lookup.
CUPROF_NOINLINE void captured(unwind_function unwind) {
  std::uint64_t frames[max_stack_frames];
  const std::size_t n = capture_stack(unwind, frames);
  const std::uint64_t h = stack_hash(frames, n);
  std::uint32_t id = table.find(h, frames, n);
  if (id == thread_stacks::none) {
    id = table.count();
    table.add(h, frames, n);
  }
  sink = id;
}

CUPROF_NOINLINE void unwound(unwind_function unwind) {
  void* frames[max_stack_frames];
  sink = std::uint32_t(unwind(frames, int(max_stack_frames)));
}

// `depth` frames of the program's own under the capture.
template <class F>
CUPROF_NOINLINE int at_depth(int depth, F&& f) {
  if (depth == 0) {
    f();
    return 0;
  }
  const int r = at_depth(depth - 1, f);
  asm volatile("" ::: "memory");  // not a tail call: each level is a frame
  return r + 1;
}

template <class F>
double ns_per_call(int iterations, int depth, F&& f) {
  at_depth(depth, f);  // warm: the unwinder's caches, the table's entry
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) at_depth(depth, f);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / iterations;
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 100000;
  unwind_function libunwind = nullptr;
  if (void* lib = ::dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL))
    libunwind = reinterpret_cast<unwind_function>(::dlsym(lib, "unw_backtrace"));
  const unwind_function chosen = cuprof::detail::stack_unwinder();
  std::printf("unwinder cuprof uses: %s\n", chosen == &cuprof::detail::glibc_backtrace ? "glibc backtrace()" : "libunwind");
  std::printf("%-8s %14s %16s %18s\n", "depth", "backtrace() ns", "unw_backtrace ns", "cuprof capture ns");
  for (int depth : {8, 24, 56}) {
    const double glibc = ns_per_call(iterations / 10, depth, [] { unwound(&cuprof::detail::glibc_backtrace); });
    const double unw = libunwind ? ns_per_call(iterations, depth, [&] { unwound(libunwind); }) : 0;
    const double ours = ns_per_call(iterations, depth, [&] { captured(chosen); });
    std::printf("%-8d %14.0f %16.0f %18.0f\n", depth, glibc, unw, ours);
  }
}
