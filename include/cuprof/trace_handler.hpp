// Ready-made on_trace_ready handlers.
#pragma once

#include "detail/process_info.hpp"
#include "error.hpp"
#include "profile.hpp"

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>

namespace cuprof {

// torch.profiler.tensorboard_trace_handler: writes each window's trace to
// <dir>/<worker>.<ns>.pt.trace.json[.gz], worker defaulting to <host>_<pid>.
inline std::function<void(profile&)> tensorboard_trace_handler(std::string dir, std::string worker_name = {},
                                                               bool use_gzip = false) {
  return [dir = std::move(dir), worker_name = std::move(worker_name), use_gzip](profile& p) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw error("cannot create trace directory '" + dir + "': " + ec.message());
    const std::string worker =
        worker_name.empty() ? detail::host_name() + "_" + std::to_string(::getpid()) : worker_name;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
    p.export_chrome_trace(dir + "/" + worker + "." + std::to_string(ns) + ".pt.trace.json" + (use_gzip ? ".gz" : ""));
  };
}

}  // namespace cuprof
