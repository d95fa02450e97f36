// A library with cuprof's whole runtime, which can run a profile of its own.
#define CUPROF_IMPLEMENTATION  // each copy has CUPROF_TRACE's autostart: one must win
#include <cuprof/cuprof.hpp>

namespace {
cuprof::profile* library_profile = nullptr;
}

extern "C" __attribute__((visibility("default"))) void copies_runtime_work() { CUPROF_SCOPE("lib_runtime_scope"); }

extern "C" __attribute__((visibility("default"))) void copies_runtime_start() {
  library_profile = new cuprof::profile;
  library_profile->start();
}

extern "C" __attribute__((visibility("default"))) void copies_runtime_stop_and_export(const char* path) {
  library_profile->stop();
  library_profile->export_chrome_trace(path);
  delete library_profile;
}
