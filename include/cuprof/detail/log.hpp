// cuprof's messages: one line each, on stderr, prefixed "cuprof: ".
// Warnings always print. Information is two lines, one when CUDA tracing
// starts and one per trace written; CUPROF_QUIET=1 silences them.
#pragma once

#include "env.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

namespace cuprof::detail {

inline void log_line(const std::string& message) { std::fprintf(stderr, "cuprof: %s\n", message.c_str()); }

// Each distinct line once per process: settings are read again at every
// window or message, and a bad one is worth one warning.
inline void log_line_once(const std::string& message) {
  static std::mutex mutex;
  static auto* printed = new std::set<std::string>;  // outlives exit handlers that log
  std::lock_guard<std::mutex> lock(mutex);
  if (printed->insert(message).second) log_line(message);
}

// The value of a setting read from the environment, its problem reported once.
template <class T>
T use_setting(const env_setting<T>& setting) {
  if (!setting.problem.empty()) log_line_once(setting.problem);
  return setting.value;
}

inline bool quiet() { return use_setting(read_switch("CUPROF_QUIET", std::getenv("CUPROF_QUIET"), false)); }

inline void log_info(const std::string& message) {
  if (!quiet()) log_line(message);
}

}  // namespace cuprof::detail
