// libminimal_cupti_inject.so: the minimal CUPTI tracer (minimal_cupti_tracer.hpp)
// loaded into an unmodified program, the floor `cuprof run` is compared with
// in bench/real_work.py:
//   CUDA_INJECTION64_PATH=.../libminimal_cupti_inject.so MINIMAL_CUPTI_ACTIVITY=kernel,memcpy,memset PROGRAM
// Records are only counted, never written: what is left is what CUPTI itself
// costs for that activity set.
#include "minimal_cupti_tracer.hpp"

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  const char* kinds = std::getenv("MINIMAL_CUPTI_ACTIVITY");
  bench::minimal_cupti_tracer::start(bench::minimal_cupti_tracer::parse_kinds(kinds ? kinds : "kernel,memcpy,memset"));
  return 1;
}
