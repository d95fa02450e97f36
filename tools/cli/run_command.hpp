// `cuprof run [options] -- PROGRAM [ARGS...]`: traces an unmodified CUDA
// program through the injection library. Builds the environment and the
// command; main() replaces the process with it (exec), so the program keeps
// its pid, its standard streams and its exit code.
#pragma once

#include <cuprof/base/env.hpp>
#include <cuprof/base/error.hpp>
#include <cuprof/base/text.hpp>
#include <cuprof/cuprof.hpp>
#include <cuprof/runtime/settings.hpp>

#include "common.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cuprof::cli {

inline const char* run_about =
    "usage: cuprof run [options] -- PROGRAM [ARGS...]\n"
    "\n"
    "Runs PROGRAM with cuprof injected (CUDA_INJECTION64_PATH): no rebuild, no code change.\n"
    "At exit the trace is written and the table printed to stderr.\n"
    "\n";

// The settings' options (detail::settings), then run's own: how cuprof run
// itself runs the program, no setting of the program's.
inline const command_options& run_options() {
  static const command_options options = [] {
    command_options o;
    for (const detail::setting& s : detail::settings)
      if (!s.option.empty()) o.push_back({s.option.substr(2), s.value, s.help});
    o.push_back({"no-nvtx", "", "do not capture the program's NVTX ranges"});
    o.push_back({"inject", "PATH", "the injection library (default: next to this executable, or ../lib)"});
    o.push_back({"dry-run", "", "print the environment and command instead of running them"});
    return o;
  }();
  return options;
}

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

inline int run_command(const invocation& c) {
  const auto& [args, out, err, plan, term] = c;
  std::size_t i = 2;
  std::string inject;
  bool nvtx = true, dry_run = false;
  std::vector<std::pair<const detail::setting*, std::string>> given;  // in the table's order, the last one given wins
  const auto set = [&](const detail::setting& s, std::string value) {
    for (auto& g : given)
      if (g.first == &s) return void(g.second = std::move(value));
    given.emplace_back(&s, std::move(value));
  };
  const auto value = [&](const std::string& name) -> std::string {
    if (i + 1 >= args.size()) throw usage_error("option " + name + " needs a value", "run");
    return args[++i];
  };
  for (; i < args.size() && args[i] != "--"; ++i) {
    const std::string& a = args[i];
    if (a == "--inject") inject = value(a);
    else if (a == "--no-nvtx") nvtx = false;
    else if (a == "--dry-run") dry_run = true;
    else {
      const detail::setting* s = nullptr;
      for (const detail::setting& o : detail::settings)
        if (!o.option.empty() && a.compare(0, o.option.size(), o.option) == 0 &&
            (a.size() == o.option.size() || (a[o.option.size()] == '=' && !o.value.empty())))
          s = &o;
      if (!s) throw usage_error("unknown option '" + a + "' (the program goes after --)", "run");
      if (a.size() > s->option.size()) set(*s, a.substr(s->option.size() + 1));
      else if (s->value.empty() || s->value[0] == '[') set(*s, std::string(s->flag_value));
      else set(*s, value(a));
    }
  }
  if (i + 1 >= args.size()) throw usage_error("missing the program to run after --", "run");
  std::sort(given.begin(), given.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  // What the environment reader would warn about, refused here before the program starts.
  const detail::environment_config checked = detail::read_settings([&](const char* variable) -> const char* {
    for (const auto& g : given)
      if (g.first->variable == variable) return g.second.c_str();
    return nullptr;
  });
  if (!checked.problems.empty()) throw usage_error(detail::as_options(checked.problems.front()), "run");
  const std::string library = find_injection_library(inject);
  if (library.empty()) throw error("cannot find libcuprof_inject.so (give it with --inject PATH or CUPROF_INJECT_LIBRARY)");
  if (const std::string why = not_an_injection_library(library); !why.empty())
    throw error("cannot inject '" + detail::terminal_safe(library) + "': " + why);
  plan = {};
  plan.environment.emplace_back("CUDA_INJECTION64_PATH", library);
  // Preloaded too, so that a program that never initialises CUDA (or runs
  // where there is no driver) still gets its trace and a line saying why.
  const char* preload = std::getenv("LD_PRELOAD");
  plan.environment.emplace_back("LD_PRELOAD", preload && *preload ? library + ":" + preload : library);
  // exec keeps the pid: the program owns the trace name, processes it starts get their own.
  plan.environment.emplace_back("CUPROF_ROOT_PID", std::to_string(::getpid()));
  if (given.empty() || given.front().first->variable != "CUPROF_TRACE")  // the table's first
    plan.environment.emplace_back("CUPROF_TRACE", "cuprof_%h_%p.pt.trace.json");
  for (const auto& [s, v] : given) plan.environment.emplace_back(std::string(s->variable), v);
  // NVTX reads this once, at the program's first NVTX call: it must be set
  // before the program starts. The injection library hands NVTX to the
  // libcupti cuprof traces with, also when the program brings its own copy
  // (PyTorch wheels do): a path to a libcupti file could be a second instance.
  if (nvtx && !std::getenv("NVTX_INJECTION64_PATH")) plan.environment.emplace_back("NVTX_INJECTION64_PATH", library);
  plan.command.assign(args.begin() + std::ptrdiff_t(i) + 1, args.end());
  if (dry_run) {
    for (const auto& [name, v] : plan.environment) out += name + "=" + v + "\n";
    for (const std::string& word : plan.command) out += word + (&word == &plan.command.back() ? "\n" : " ");
    plan = {};
  }
  return exit_ok;
}

}  // namespace cuprof::cli
