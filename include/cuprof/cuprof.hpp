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
#include "detail/autostart.hpp"
