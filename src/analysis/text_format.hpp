// How the analyses (insights, diff, throughput) write numbers in their text:
// durations in torch's units, shares, ratios, changes and rates. us_text and signed_percent_text
// are declared in cuprof/analysis.hpp too, for the `cuprof` command.
#pragma once

#include <string>

namespace cuprof::detail {

std::string us_text(double ns);

std::string fixed_text(double v, int decimals);

std::string percent_text(double share);  // 0.125 -> "12.5%"

std::string ratio_text(double r);  // "2.5x"; whole numbers from 10x on

// From a to b, as "+12.5%"; "new" when a is 0 and b is not.
std::string signed_percent_text(double a, double b);

// "1.1 PFLOP/s", "412.3 GB/s": one decimal, SI prefixes up to P.
std::string format_rate(double v, const char* unit);

}  // namespace cuprof::detail
