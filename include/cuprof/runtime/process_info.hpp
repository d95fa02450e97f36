// Who wrote the trace: process, host, and the rank when launched by torchrun,
// MPI or Slurm (so multi-rank tools can load one file per rank).
#pragma once

#include "../base/env.hpp"
#include "../base/process_state.hpp"
#include "../model/event.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace cuprof::detail {

// Why the program's NVTX ranges (its steps, CUPROF_STEP_RANGE) cannot reach
// cuprof, which sees them through CUPTI's NVTX hook; empty when they can.
inline std::string why_nvtx_unseen() {
  process_state& p = process();
  if (p.tracer.load(std::memory_order_acquire)) return {};
  const std::string failure = p.tracer_failure;
  return "NVTX ranges reach cuprof through CUPTI, and CUDA tracing " +
         (failure.empty() ? std::string("was not started") : "is off: " + failure);
}

inline std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

inline std::string process_name() {
  std::ifstream comm("/proc/self/comm");
  std::string name;
  std::getline(comm, name);
  return name.empty() ? "process" : name;
}

// The name of a thread of this process from /proc (empty once it exited).
inline std::string thread_name_of_tid(std::uint32_t tid) {
  std::ifstream comm("/proc/self/task/" + std::to_string(tid) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name;
}

inline int env_int(std::initializer_list<const char*> names, int fallback) {
  for (const char* n : names) {
    if (const std::optional<int> x = parse_env_int(std::getenv(n))) return *x;
  }
  return fallback;
}

// Whether a launcher gave this process a rank (torchrun, MPI, Slurm).
inline bool launched_with_rank() {
  for (const char* n : {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (parse_env_int(std::getenv(n))) return true;
  return false;
}

inline int process_rank() { return env_int({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, 0); }
inline int process_world_size() { return env_int({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, 1); }

inline void fill_process_info(trace_metadata& meta) {
  meta.pid = std::uint32_t(::getpid());
  meta.process_name = process_name();
  meta.host_name = host_name();
  meta.rank = process_rank();
  meta.world_size = process_world_size();
}

}  // namespace cuprof::detail
