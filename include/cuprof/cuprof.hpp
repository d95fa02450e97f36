// cuprof: torch.profiler for C++ and CUDA. The one header to include.
//
//   #include <cuprof/cuprof.hpp>
//   CUPROF_SCOPE("matmul_add");                   // record_function
//   cuprof::profile prof; prof.start(); ... prof.stop();
//   prof.export_chrome_trace("trace.json");       // Perfetto, chrome://tracing, HTA
//   std::puts(prof.key_averages().table("cuda_time_total", 15).c_str());
#pragma once

#include "config.hpp"
#include "error.hpp"
#include "record_function.hpp"
#include "schedule.hpp"
#include "event.hpp"
#include "trace.hpp"
#include "chrome_trace.hpp"
#include "table.hpp"
#include "profile.hpp"
#include "trace_handler.hpp"
// CUPROF_TRACE's profile starts from the TU that holds the runtime: every TU
// that includes this header in header-only use, the runtime target's TU with
// CUPROF_COMPILED_RUNTIME, none under CUPROF_DISABLE.
#if !defined(CUPROF_DISABLE) && (!defined(CUPROF_COMPILED_RUNTIME) || defined(CUPROF_RUNTIME_IMPLEMENTATION))
#include "detail/autostart.hpp"
#endif
