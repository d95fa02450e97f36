// How the analyses (insights, diff, throughput) write numbers in their text:
// durations in torch's units, shares, ratios, changes and rates. us_text and signed_percent_text
// are declared in cuprof/analysis.hpp too, for the `cuprof` command.
#pragma once

#include <cstdint>
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

// A byte count exactly: "128 KiB" where it is a whole number of KiB, MiB or
// GiB, else "1000000 bytes" (a copy's size, as the program asked for it).
std::string bytes_text(std::uint64_t b);

// A byte count to one decimal in binary units: "48.5 MiB", "1 GiB", "512 bytes"
// (memory in use, where the exact count says nothing more).
std::string memory_text(std::uint64_t b);

}  // namespace cuprof::detail
