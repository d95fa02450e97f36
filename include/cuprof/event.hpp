// Moved to model/event.hpp; this path stays for existing code.
#pragma once

#ifdef CUPROF_DISABLE
#include "detail/disabled_api.hpp"
#else
#include "model/event.hpp"
#endif
