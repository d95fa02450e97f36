// libFuzzer harness: the trace reader of the `cuprof` command (JSON and gzip
// bytes), and the table, insights, diff and writer on whatever it accepts.
// Built and run by tests/fuzz/run; see tests/fuzz/targets.hpp.
#define CUPROF_IMPLEMENTATION  // each harness is a program: cuprof's runtime (the writer) is compiled here
#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cuprof_fuzz::trace_reader(data, size);
  return 0;
}
