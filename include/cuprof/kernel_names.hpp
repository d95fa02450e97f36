// Moved to analysis/kernel_names.hpp; this path stays for existing code.
#pragma once

#include "analysis/kernel_names.hpp"
