// The one translation unit of the cuprof::runtime target: cuprof's session,
// CUPTI backend, trace writer and CUPROF_TRACE autostart, compiled once for a
// program whose files then include cuprof's headers at the cost of
// declarations (CUPROF_COMPILED_RUNTIME, set by the target for its users).
#ifndef CUPROF_COMPILED_RUNTIME
#define CUPROF_COMPILED_RUNTIME
#endif
#define CUPROF_RUNTIME_IMPLEMENTATION
#include <cuprof/cuprof.hpp>
