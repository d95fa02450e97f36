// A library that only annotates: it includes the scopes header, none of the runtime.
#include <cuprof/record_function.hpp>

extern "C" __attribute__((visibility("default"))) void copies_scopes_work() { CUPROF_SCOPE("lib_scopes_scope"); }
