// cuprof's runtime: every definition compiled once per program, listed here.
// cuprof.hpp includes this file in the one translation unit that defines
// CUPROF_IMPLEMENTATION (src/runtime.cpp for the cuprof::runtime target);
// everywhere else cuprof's headers are declarations (base/config.hpp).
#pragma once

#include "chrome_trace_impl.hpp"   // output/chrome_trace.hpp's export functions
#include "control_endpoint.hpp"    // `cuprof trigger`'s endpoint in a running process
#include "profile_impl.hpp"        // profile.hpp's session
#include "stacks_impl.hpp"         // profile.hpp's export_stacks
#include "trace_handler_impl.hpp"  // trace_handler.hpp's handlers

// CUPROF_TRACE's profile starts during static initialisation of this file's
// translation unit, unless the module is the injection library, which starts
// it from CUDA's injection entry point (autostart.hpp), or CUPROF_NO_AUTOSTART
// is defined.
#ifndef CUPROF_NO_AUTOSTART
#include "autostart.hpp"
namespace cuprof::detail {
inline const bool environment_profile_started = !started_by_injection() && start_environment_profile();
}
#endif
