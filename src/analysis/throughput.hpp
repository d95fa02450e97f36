// What throughput.cpp shares with the text that shows its rates.
#pragma once

#include <string>

namespace cuprof::detail {

// "1.1 PFLOP/s", "412.3 GB/s": one decimal, SI prefixes up to P.
std::string format_rate(double v, const char* unit);

}  // namespace cuprof::detail
