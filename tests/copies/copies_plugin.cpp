// A plugin the program dlopens with RTLD_LOCAL, with cuprof's whole runtime.
#define CUPROF_IMPLEMENTATION  // each copy has CUPROF_TRACE's autostart: one must win
#include <cuprof/cuprof.hpp>

extern "C" __attribute__((visibility("default"))) void copies_plugin_work() { CUPROF_SCOPE("plugin_scope"); }
