// cuprof's messages: one line each, on stderr, prefixed "cuprof: ".
// Warnings always print; information only with CUPROF_VERBOSE=1.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace cuprof::detail {

inline void log_line(const std::string& message) { std::fprintf(stderr, "cuprof: %s\n", message.c_str()); }

inline bool verbose() {
  static const bool on = [] {
    const char* v = std::getenv("CUPROF_VERBOSE");
    return v && *v && *v != '0';
  }();
  return on;
}

inline void log_info(const std::string& message) {
  if (verbose()) log_line(message);
}

}  // namespace cuprof::detail
