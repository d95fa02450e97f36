// libcuprof_probe.so: a cuprof session callable from another runtime through
// ctypes, for tests/gpu/gpu_check.py's "torch.profiler in the same process" case
// (tests/gpu/torch_then_cuprof.py): torch.profiler holds CUPTI, then this
// library starts a cuprof profile (CPU and CUDA) in the same process.
//
//   const char* cuprof_probe_run(int scopes)
//
// Records `scopes` scopes and returns a JSON object (valid until the next call):
// {"cuda_status": "...", "spans": N, "gpu_records": N, "api_calls": N}
// cuda_status is empty when cuprof traces CUDA, else why not (who holds CUPTI).
// Plain C++: it needs the CUDA headers cuprof includes, nothing CUDA-compiled.
#define CUPROF_IMPLEMENTATION  // the library is cuprof's runtime
#include <cuprof/cuprof.hpp>
#include <cuprof/output/json_text.hpp>

#include <string>

extern "C" __attribute__((visibility("default"))) const char* cuprof_probe_run(int scopes) {
  static std::string result;
  try {
    cuprof::profile prof;  // cpu | cuda
    prof.start();
    for (int i = 0; i < scopes; ++i) {
      CUPROF_SCOPE("probe_scope");
    }
    prof.stop();
    const cuprof::trace& t = prof.last_trace();
    result = "{\"cuda_status\": \"" + cuprof::detail::json_escaped(prof.cuda_status()) +
             "\", \"spans\": " + std::to_string(t.spans.size()) + ", \"gpu_records\": " + std::to_string(t.gpu.size()) +
             ", \"api_calls\": " + std::to_string(t.api_calls.size()) + "}";
  } catch (const std::exception& e) {
    result = "{\"error\": \"" + cuprof::detail::json_escaped(e.what()) + "\"}";
  }
  return result.c_str();
}
