// The same scope loop as scope_bench.cpp, compiled with CUPROF_DISABLE: what a
// scope costs when compiled out (target: nothing).
#define CUPROF_DISABLE
#include <cuprof/record_function.hpp>

#include <cstdint>

void scopes_compiled_out(std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) {
    CUPROF_SCOPE("compiled_out");
    asm volatile("" ::: "memory");
  }
}
