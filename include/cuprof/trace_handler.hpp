// Ready-made on_trace_ready handlers.
#pragma once

#ifdef CUPROF_DISABLE
#include "detail/disabled_api.hpp"
#else

#include "config.hpp"
#include "profile.hpp"

#include <functional>
#include <string>

namespace cuprof {

// torch.profiler.tensorboard_trace_handler: writes each window's trace to
// <dir>/<worker>.<ns>.pt.trace.json[.gz], worker defaulting to <host>_<pid>.
std::function<void(profile&)> tensorboard_trace_handler(std::string dir, std::string worker_name = {},
                                                        bool use_gzip = false, export_options options = {});

}  // namespace cuprof

// The handlers' code, where the runtime is compiled (see config.hpp).
#ifdef CUPROF_IMPLEMENTATION
#include "detail/trace_handler_impl.hpp"
#endif
#endif  // CUPROF_DISABLE
