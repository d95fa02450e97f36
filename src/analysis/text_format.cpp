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

std::string bytes_text(std::uint64_t b) {
  if (b >= (1ull << 30) && b % (1ull << 30) == 0) return std::to_string(b >> 30) + " GiB";
  if (b >= (1ull << 20) && b % (1ull << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= (1ull << 10) && b % (1ull << 10) == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + (b == 1 ? " byte" : " bytes");
}

std::string memory_text(std::uint64_t b) {
  if (b < 1024) return std::to_string(b) + (b == 1 ? " byte" : " bytes");
  const char* unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int i = 0;
  double v = double(b) / 1024.0;
  while (v >= 1024.0 && i < 5) v /= 1024.0, ++i;
  if (v >= 1023.95 && i < 5) v /= 1024.0, ++i;  // would print as 1024.0 of this unit
  std::string text = fixed_text(v, 1);
  if (text.size() > 2 && text.compare(text.size() - 2, 2, ".0") == 0) text.resize(text.size() - 2);
  return text + " " + unit[i];
}

}  // namespace cuprof::detail
