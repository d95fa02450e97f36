// An executable, a shared library that only annotates, a shared library with
// cuprof's runtime, and a dlopen'ed plugin with cuprof's runtime: four copies
// of cuprof's headers in one process, which must make one session and one
// trace (tests/copies/check_copies.py runs and checks it).
//   copies_main autostart PLUGIN                  (CUPROF_TRACE set by the caller)
//   copies_main library_profile PLUGIN TRACE      (the library's own profile)
//   copies_main clearenv PLUGIN TRACE             (the same, the environment cleared before the plugin is opened)
#define CUPROF_IMPLEMENTATION  // each copy has CUPROF_TRACE's autostart: one must win
#include <cuprof/cuprof.hpp>

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" void copies_scopes_work();
extern "C" void copies_runtime_work();
extern "C" void copies_runtime_start();
extern "C" void copies_runtime_stop_and_export(const char* path);

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const bool clear_environment = std::strcmp(argv[1], "clearenv") == 0;
  const bool library_profile = clear_environment || std::strcmp(argv[1], "library_profile") == 0;
  if (library_profile && argc < 4) return 2;
  // A program may clear its environment, where cuprof's copies find the
  // process's state, before it opens a plugin with cuprof.
  if (clear_environment) ::clearenv();
  void* plugin = ::dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  if (!plugin) {
    std::fprintf(stderr, "dlopen: %s\n", ::dlerror());
    return 3;
  }
  auto plugin_work = reinterpret_cast<void (*)()>(::dlsym(plugin, "copies_plugin_work"));
  if (!plugin_work) return 4;
  if (library_profile) copies_runtime_start();
  {
    CUPROF_SCOPE("exe_scope");
    copies_scopes_work();
    copies_runtime_work();
    plugin_work();
  }
  // The plugin goes away before the trace is written: what it recorded stays.
  ::dlclose(plugin);
  if (library_profile) copies_runtime_stop_and_export(argv[3]);
  return 0;
}
