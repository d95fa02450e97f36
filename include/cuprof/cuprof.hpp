// cuprof: torch.profiler for C++ and CUDA. The one header to include.
//
//   #include <cuprof/cuprof.hpp>
//   CUPROF_SCOPE("matmul_add");                   // record_function
//   cuprof::profile prof; prof.start(); ... prof.stop();
//   prof.export_chrome_trace("trace.json");       // Perfetto, chrome://tracing, HTA
//   std::puts(prof.key_averages().table("cuda_time_total", 15).c_str());
#pragma once

#ifdef CUPROF_DISABLE
#include "detail/disabled_api.hpp"  // macros and empty stubs only
#else
#include "config.hpp"
#include "error.hpp"
#include "model/attribution.hpp"
#include "model/event.hpp"
#include "output/chrome_trace.hpp"
#include "output/table.hpp"
#include "profile.hpp"
#include "record_function.hpp"
#include "schedule.hpp"
#include "trace_handler.hpp"
// CUPROF_TRACE's profile starts during static initialisation of the TU that
// compiles the runtime (config.hpp).
#if defined(CUPROF_IMPLEMENTATION) && !defined(CUPROF_NO_AUTOSTART)
#include "detail/autostart.hpp"
namespace cuprof::detail {
inline const bool environment_profile_started = start_environment_profile();
}
#endif
#endif  // CUPROF_DISABLE
