// Moved to analysis/trace_reader.hpp; this path stays for existing code.
#pragma once

#include "analysis/trace_reader.hpp"
