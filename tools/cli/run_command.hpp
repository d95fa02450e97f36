// `cuprof run [options] -- PROGRAM [ARGS...]`: traces an unmodified CUDA
// program through the injection library. Builds the environment and the
// command; main() replaces the process with it (exec), so the program keeps
// its pid, its standard streams and its exit code.
#pragma once

#include <cuprof/base/text.hpp>

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace cuprof::cli {

inline const char* run_help =
    "usage: cuprof run [options] -- PROGRAM [ARGS...]\n"
    "\n"
    "Runs PROGRAM with cuprof injected (CUDA_INJECTION64_PATH): no rebuild, no code change.\n"
    "At exit the trace is written and the table printed to stderr.\n"
    "\n"
    "  --output PATH       trace path; %p pid, %h host, %r rank, %n the capture range's number\n"
    "                      (default cuprof_%h_%p.pt.trace.json; a .gz suffix compresses)\n"
    "  --activities LIST   cpu, cuda or cpu,cuda (default)\n"
    "  --delay S           start recording S seconds after the program starts\n"
    "  --duration S        record for S seconds, then write the trace\n"
    "  --start-step N      open the window when the program's step N starts (from 0), on every\n"
    "                      rank alike: steps are NVTX ranges named \"step ...\" (any case) or\n"
    "                      \"ProfilerStep#...\", or NAME with --step-range NAME\n"
    "  --steps K           with --start-step: write the trace when step N+K starts\n"
    "  --step-range NAME   the NVTX range that marks a step (NAME alone or followed by a non-letter)\n"
    "  --capture-range R   record only inside the ranges the program marks: cuda (between its\n"
    "                      cudaProfilerStart and cudaProfilerStop, as torch.cuda.profiler.start()\n"
    "                      and stop() call them) or nvtx:MESSAGE[@DOMAIN] (inside that NVTX range;\n"
    "                      any domain unless one is named); outside them nothing records\n"
    "  --capture-range-end E  stop (default: the first range only), repeat (every range) or\n"
    "                      repeat:N (N ranges); each range its own trace, numbered where the\n"
    "                      path has %n (or .N before the extension)\n"
    "  --slow-steps SPEC   keep only the slow steps (NVTX step ranges as for --start-step), each with\n"
    "                      the steps around it, in a trace of its own (%n in --output its number,\n"
    "                      else .slow<n> before the extension): 2x (twice the median) or 50ms,\n"
    "                      then ,before=1,after=1,keep=5,ring=32,ring_mb=256 as wanted\n"
    "  --detail LEVEL      kineto (default: every arg torch.profiler writes) or lean (GPU records\n"
    "                      without launch configuration and without what their lane says: a\n"
    "                      quarter smaller, for long windows)\n"
    "  --memory            record every allocation and free (CUDA memory columns, a memory\n"
    "                      counter per device)\n"
    "  --gpu-metrics[=LIST] sample GPU hardware metrics (CUPTI PM sampling): SM and DRAM\n"
    "                      throughput and tensor pipe activity, or the CUPTI metrics LIST names\n"
    "                      (comma-separated; sm__warps_active_realtime.avg.pct_of_peak_sustained_active\n"
    "                      is achieved occupancy); a counter track per metric per GPU, each\n"
    "                      kernel's averages, `cuprof table --metrics`\n"
    "  --gpu-metrics-interval T  the sampling period (default 200us; ns, us or ms)\n"
    "  --stacks            capture the native call stack of each launch, copy, memset, sync,\n"
    "                      allocation and free (on the calls in the trace; cuprof stacks)\n"
    "  --trace-launcher    also trace the program itself when it uses no GPU but starts processes\n"
    "                      that do (torchrun, mpirun, a script): by default it writes nothing\n"
    "  --no-table          do not print the table\n"
    "  --no-nvtx           do not capture the program's NVTX ranges\n"
    "  --inject PATH       the injection library (default: next to this executable, or ../lib)\n"
    "  --dry-run           print the environment and command instead of running them\n";

struct launch_plan {
  std::vector<std::pair<std::string, std::string>> environment;
  std::vector<std::string> command;
};

inline std::string executable_dir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string path(buf, std::size_t(n));
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

inline std::string find_injection_library(const std::string& given) {
  std::vector<std::string> candidates;
  if (!given.empty()) candidates.push_back(given);
  else if (const char* env = std::getenv("CUPROF_INJECT_LIBRARY")) candidates.push_back(env);
  else {
    const std::string dir = executable_dir();
    for (const char* rel : {"/libcuprof_inject.so", "/../lib/libcuprof_inject.so", "/../lib64/libcuprof_inject.so"})
      candidates.push_back(dir + rel);
  }
  for (const std::string& c : candidates) {
    char resolved[4096];
    if (::realpath(c.c_str(), resolved) && ::access(resolved, R_OK) == 0) return resolved;
  }
  return {};
}

// Why `library` cannot be what CUDA_INJECTION64_PATH names (empty if it can):
// the driver dlopens it and calls its InitializeInjection, and a wrong file
// would only fail inside the program, or be ignored. Loaded here with lazy
// binding, locally, and let go again.
inline std::string not_an_injection_library(const std::string& library) {
  ::dlerror();
  void* handle = ::dlopen(library.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    return std::string("not a shared library this process can load (") + (why ? why : "dlopen failed") + ")";
  }
  const bool exports = ::dlsym(handle, "InitializeInjection") != nullptr;
  ::dlclose(handle);
  return exports ? std::string() : "a shared library, but it does not export InitializeInjection (not an injection library)";
}

// Replaces this process with the plan's program in its environment; returns
// only when that failed, with a line on stderr and the status a shell gives:
// 127 when the program was not found, 126 when it was found but cannot run
// (a directory, a file without execute permission, not an executable format).
inline int exec_plan(launch_plan& plan) {
  for (const auto& [name, value] : plan.environment) ::setenv(name.c_str(), value.c_str(), 1);
  std::vector<char*> argv;
  for (std::string& word : plan.command) argv.push_back(word.data());
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  const int why = errno;
  const std::string line = "cuprof: cannot run " + detail::terminal_safe(plan.command[0]) + ": " + std::strerror(why) + "\n";
  std::fputs(line.c_str(), stderr);
  return why == ENOENT ? 127 : 126;
}

}  // namespace cuprof::cli
