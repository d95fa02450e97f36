// The public path of analysis/throughput.hpp.
#pragma once

#include "analysis/throughput.hpp"
