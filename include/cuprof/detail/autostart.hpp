// Trace at shutdown without code: with CUPROF_TRACE=<path> in the environment,
// any program that includes cuprof.hpp profiles from before main() to exit,
// then writes the trace to <path> and prints the table to stderr
// (CUPROF_TABLE=0 silences it; CUPROF_ACTIVITIES=cpu records the CPU only).
#pragma once

#include "../profile.hpp"
#include "log.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace cuprof::detail {

inline profile*& environment_profile() {
  static profile* p = nullptr;
  return p;
}

inline void finish_environment_profile() {
  profile* p = environment_profile();
  if (!p) return;
  environment_profile() = nullptr;
  const char* path = std::getenv("CUPROF_TRACE");
  try {
    p->stop();
    p->export_chrome_trace(path ? path : "cuprof.pt.trace.json");
    const char* table = std::getenv("CUPROF_TABLE");
    if (!table || std::strcmp(table, "0") != 0)
      std::fprintf(stderr, "%s", p->key_averages().table("self_cuda_time_total", 30).c_str());
  } catch (const std::exception& e) {
    log_line(std::string("could not write the trace: ") + e.what());
  }
  // The profile is left allocated: other exit handlers may still run scopes.
}

inline bool start_environment_profile() {
#ifdef CUPROF_DISABLE
  return false;
#endif
  const char* path = std::getenv("CUPROF_TRACE");
  if (!path || !*path || environment_profile()) return false;
  profile_options options;
  const char* activities = std::getenv("CUPROF_ACTIVITIES");
  if (activities && std::strcmp(activities, "cpu") == 0) options.activities = activity::cpu;
  environment_profile() = new profile(options);
  environment_profile()->start();
  std::atexit(finish_environment_profile);
  return true;
}

inline const bool g_environment_profile_started = start_environment_profile();

}  // namespace cuprof::detail
