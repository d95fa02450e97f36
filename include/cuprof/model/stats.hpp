// Distributions: min, median, p95 and max of a set of durations. Averages hide
// the slow outlier a trace shows; these columns show it in the table.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace cuprof {

struct distribution {
  std::uint64_t count = 0;
  std::uint64_t min_ns = 0;
  std::uint64_t median_ns = 0;  // the middle value; the mean of the two middle ones for an even count
  std::uint64_t p95_ns = 0;     // nearest rank: the smallest value with at least 95% of values at or below it
  std::uint64_t max_ns = 0;
  std::uint64_t total_ns = 0;
};

// Takes the samples by value: they are sorted.
inline distribution summarize(std::vector<std::uint64_t> samples) {
  distribution d;
  if (samples.empty()) return d;
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  d.count = n;
  d.min_ns = samples.front();
  d.max_ns = samples.back();
  d.median_ns = n % 2 ? samples[n / 2] : samples[n / 2 - 1] + (samples[n / 2] - samples[n / 2 - 1]) / 2;
  const std::size_t rank = (95 * n + 99) / 100;  // ceil(0.95 n), at least 1
  d.p95_ns = samples[std::max<std::size_t>(rank, 1) - 1];
  for (std::uint64_t v : samples) d.total_ns += v;
  return d;
}

// The median of a set of values (0 for none).
inline std::uint64_t median_of(std::vector<std::uint64_t> samples) { return summarize(std::move(samples)).median_ns; }

}  // namespace cuprof
