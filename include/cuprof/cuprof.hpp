// cuprof: torch.profiler for C++ and CUDA. The one header to include.
//
//   #include <cuprof/cuprof.hpp>
//   CUPROF_SCOPE("matmul_add");                   // record_function
//   cuprof::profile prof; prof.start(); ... prof.stop();
//   prof.export_chrome_trace("trace.json");       // Perfetto, chrome://tracing, HTA
//   std::puts(prof.key_averages().table("cuda_time_total", 15).c_str());
#pragma once

// A C file gets nothing: a build that forces this header into every file
// (`nvcc -include`, a compiler wrapper) also compiles the program's C files.
#ifdef __cplusplus
#ifdef CUPROF_DISABLE
#include "disabled_api.hpp"  // macros and empty stubs only
#else
#include "base/config.hpp"
#include "base/error.hpp"
#include "model/attribution.hpp"
#include "model/event.hpp"
#include "output/chrome_trace.hpp"
#include "output/key_averages.hpp"
#include "profile.hpp"
#include "record_function.hpp"
#include "schedule.hpp"
#include "trace_handler.hpp"
// The runtime's definitions, in the one file that compiles them
// (base/config.hpp): the only place that tests CUPROF_IMPLEMENTATION.
#ifdef CUPROF_IMPLEMENTATION
#include "runtime/runtime.hpp"
#endif
#endif  // CUPROF_DISABLE
#endif  // __cplusplus
