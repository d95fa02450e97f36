// Moved to output/chrome_trace.hpp; this path stays for existing code.
#pragma once

#ifdef CUPROF_DISABLE
#include "detail/disabled_api.hpp"
#else
#include "output/chrome_trace.hpp"
#endif
