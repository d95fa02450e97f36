// Ready-made on_trace_ready handlers.
#pragma once

#ifdef CUPROF_DISABLE
#include "disabled_api.hpp"
#else

#include "base/config.hpp"
#include "profile.hpp"

#include <functional>
#include <string>

namespace cuprof {

// torch.profiler.tensorboard_trace_handler: writes each window's trace to
// <dir>/<worker>.<ns>.pt.trace.json[.gz], worker defaulting to <host>_<pid>.
std::function<void(profile&)> tensorboard_trace_handler(std::string dir, std::string worker_name = {}, bool use_gzip = false,
                                                        export_options options = {});

}  // namespace cuprof

#endif  // CUPROF_DISABLE
