// Moved to model/attribution.hpp; this path stays for existing code.
#pragma once

#ifdef CUPROF_DISABLE
#include "detail/disabled_api.hpp"
#else
#include "model/attribution.hpp"
#endif
