// libcuprof_inject.so: cuprof for programs that do not include it.
//
//   CUDA_INJECTION64_PATH=/path/libcuprof_inject.so ./program    (or: cuprof run -- ./program)
//
// The CUDA driver loads this library during cuInit and calls
// InitializeInjection; it starts the environment's profile (CUPROF_TRACE and
// friends, see detail/autostart.hpp), which writes the trace and the table at
// exit. It is the header compiled once, nothing more.
#define CUPROF_NO_AUTOSTART  // started from InitializeInjection, not at load time
#include <cuprof/cuprof.hpp>

#include <mutex>

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& inside = cuprof::detail::cupti::tracer::inside_cuda_init();
    inside = true;
    cuprof::detail::start_environment_profile(/*injected=*/true);
    inside = false;
  });
  return 1;  // non-zero: loaded; a CUPTI failure is reported and the program runs on
}
