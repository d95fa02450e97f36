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

std::string format_rate(double v, const char* unit) {
  const char* prefix[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (v >= 1000 && i < 5) v /= 1000, ++i;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f %s%s", v, prefix[i], unit);
  return buf;
}

}  // namespace cuprof::detail
