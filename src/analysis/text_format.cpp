#include "text_format.hpp"

#include <cuprof/output/table.hpp>

#include <cstdio>

namespace cuprof::detail {

std::string us_text(double ns) { return format_time_us(ns / 1000.0); }

std::string fixed_text(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string percent_text(double share) { return fixed_text(share * 100.0, 1) + "%"; }

std::string ratio_text(double r) { return fixed_text(r, r < 10 ? 1 : 0) + "x"; }

std::string signed_percent_text(double a, double b) {
  if (a == 0) return b == 0 ? "+0.0%" : "new";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", (b - a) * 100.0 / a);
  return buf;
}

}  // namespace cuprof::detail
