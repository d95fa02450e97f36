// libFuzzer harness: cuprof's environment variables (ranks, CUPROF_MAX_RECORDS,
// CUPROF_QUIET, CUPROF_CUPTI_LIBRARY and CUDA_HOME, the CUPROF_TRACE
// configuration). The input is NUL-separated fields; see tests/fuzz/targets.hpp.
#define CUPROF_IMPLEMENTATION  // each harness is a program: cuprof's runtime (the writer) is compiled here
#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cuprof_fuzz::env_config(data, size);
  return 0;
}
