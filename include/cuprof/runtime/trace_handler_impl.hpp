// The code of trace_handler.hpp's handlers, where the runtime is compiled.
#pragma once

#include "process_info.hpp"
#include "../base/error.hpp"
#include "../trace_handler.hpp"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>

namespace cuprof {

std::function<void(profile&)> tensorboard_trace_handler(std::string dir, std::string worker_name, bool use_gzip,
                                                        export_options options) {
  return [dir = std::move(dir), worker_name = std::move(worker_name), use_gzip, options](profile& p) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw error("cannot create trace directory '" + dir + "': " + ec.message());
    const std::string worker = worker_name.empty() ? detail::host_name() + "_" + std::to_string(::getpid()) : worker_name;
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    p.export_chrome_trace(dir + "/" + worker + "." + std::to_string(ns) + ".pt.trace.json" + (use_gzip ? ".gz" : ""), options);
  };
}

}  // namespace cuprof
