// Moved to model/stats.hpp; this path stays for existing code.
#pragma once

#include "model/stats.hpp"
