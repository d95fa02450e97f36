// Moved to analysis/insights.hpp; this path stays for existing code.
#pragma once

#include "analysis/insights.hpp"
