// The one translation unit of the cuprof::runtime target: cuprof's session,
// CUPTI backend, trace writer and CUPROF_TRACE autostart, compiled once for a
// program whose files then include cuprof's headers at the cost of
// declarations (the target gives them CUPROF_COMPILED_RUNTIME).
#undef CUPROF_COMPILED_RUNTIME  // builds that pass their users' flags to this file too
#define CUPROF_IMPLEMENTATION
#include <cuprof/cuprof.hpp>
