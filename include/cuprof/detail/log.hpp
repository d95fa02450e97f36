// cuprof's messages: one line each, on stderr, prefixed "cuprof: ".
// Warnings always print. Information is two lines, one when CUDA tracing
// starts and one per trace written; CUPROF_QUIET=1 silences them.
#pragma once

#include "env.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace cuprof::detail {

inline void log_line(const std::string& message) { std::fprintf(stderr, "cuprof: %s\n", message.c_str()); }

inline bool quiet() {
  return parse_env_flag(std::getenv("CUPROF_QUIET"));
}

inline void log_info(const std::string& message) {
  if (!quiet()) log_line(message);
}

}  // namespace cuprof::detail
