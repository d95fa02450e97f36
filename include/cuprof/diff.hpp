// Moved to analysis/diff.hpp; this path stays for existing code.
#pragma once

#include "analysis/diff.hpp"
