// Where a GPU's metric samples sit against its kernels (align_to_kernels in
// include/cuprof/model/gpu_metrics.hpp): synthetic samples of synthetic
// kernels, stamped off by known offsets as PM sampling stamped them on an
// H200, are shifted back; a kernel's averages are then its own. Nothing moves
// without long kernels, with flat values, or when the offset is out of reach.

#include <cuprof/model/gpu_metrics.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace {

using cuprof::detail::align_to_kernels;
using cuprof::detail::average_metrics;
using cuprof::detail::gpu_metric_series;
using cuprof::detail::metric_alignment;

using interval = std::pair<std::uint64_t, std::uint64_t>;

constexpr std::uint64_t us = 1000;
constexpr std::uint64_t epoch = 1'700'000'000'000'000'000ull;  // the trace's clock: epoch ns
constexpr double high = 80;                                    // metric 0 while a kernel runs (metric 1: 50)

// Kernels of [min_len, max_len] with gaps of [min_gap, max_gap], from `first`.
std::vector<interval> make_kernels(std::mt19937_64& rng, int count, std::uint64_t min_len = 300 * us,
                                   std::uint64_t max_len = 3000 * us, std::uint64_t min_gap = 50 * us,
                                   std::uint64_t max_gap = 1500 * us, std::uint64_t first = epoch + 10'000 * us) {
  std::uniform_int_distribution<std::uint64_t> len(min_len, max_len), gap(min_gap, max_gap);
  std::vector<interval> k;
  std::uint64_t t = first;
  for (int i = 0; i < count; ++i) {
    const std::uint64_t l = len(rng);
    k.push_back({t, t + l});
    t += l + gap(rng);
  }
  return k;
}

// Samples every `interval_ns` from 5 ms before the first kernel to 5 ms after
// the last, at a phase of their own, stamped `offset` off the time they
// measured (negative: earlier, as on the H200). Metric 0 reads `high` x the busy
// fraction, metric 1 50 x, both with noise; metric 2 is NaN in every 7th
// sample; metric 3 is always 0 (ignored). `period_ns` > interval_ns leaves
// gaps between the samples.
gpu_metric_series make_series(std::mt19937_64& rng, const std::vector<interval>& kernels, std::int64_t offset,
                              std::uint64_t interval_ns = 20 * us, double noise = 1.0, std::uint64_t period_ns = 0) {
  gpu_metric_series s;
  s.interval_ns = interval_ns;
  s.metrics = {{"m0", "m0"}, {"m1", "m1"}, {"m2", "m2"}, {"m3", "m3"}};
  std::normal_distribution<double> jitter(0, noise);
  const std::uint64_t from = kernels.front().first - 5000 * us + 7 * us, to = kernels.back().second + 5000 * us;
  std::size_t i = 0;
  for (std::uint64_t t = from; t + interval_ns <= to; t += std::max(period_ns, interval_ns), ++i) {
    // Walk only the kernels near t: the series can be long.
    const auto it = std::lower_bound(kernels.begin(), kernels.end(), interval{t, 0},
                                     [](const interval& a, const interval& b) { return a.second <= b.first; });
    std::uint64_t covered = 0;
    for (auto k = it; k != kernels.end() && k->first < t + interval_ns; ++k) {
      const std::uint64_t x = std::max(t, k->first), y = std::min(t + interval_ns, k->second);
      if (y > x) covered += y - x;
    }
    const double f = double(covered) / double(interval_ns);
    const double v[4] = {std::max(0.0, high * f + jitter(rng)), std::max(0.0, 50 * f + jitter(rng)),
                         i % 7 == 0 ? std::nan("") : std::max(0.0, 30 * f + jitter(rng)), 0.0};
    s.add(std::uint64_t(std::int64_t(t) + offset), std::uint64_t(std::int64_t(t + interval_ns) + offset), v);
  }
  return s;
}

// The worst relative error of metric 0's average over the kernels longer than
// 4 intervals (those whose averages use samples wholly inside them).
double worst_kernel_error(const gpu_metric_series& s, const std::vector<interval>& kernels) {
  double worst = 0;
  for (const auto& k : kernels) {
    if (k.second - k.first <= 4 * s.interval_ns) continue;
    const double v = average_metrics(s, k.first, k.second).values[0];
    worst = std::max(worst, v == v ? std::fabs(v - high) / high : 1.0);
  }
  return worst;
}

}  // namespace

TEST_CASE("align_to_kernels finds the samples' offset and the kernels' averages are theirs after") {
  for (const std::int64_t offset : {-460'000, -120'000, 250'000, 0, -337'123}) {
    CAPTURE(offset);
    std::mt19937_64 rng(std::uint64_t(offset + 1'000'000));
    const auto kernels = make_kernels(rng, 60);
    gpu_metric_series s = make_series(rng, kernels, offset);
    if (offset != 0) CHECK(worst_kernel_error(s, kernels) > 0.1);  // off as on the H200
    s.gaps.push_back({s.start_ns[0] + 1'000'000, s.start_ns[0] + 1'500'000, cuprof::detail::metric_gap_cause::overflow});
    const std::uint64_t gap_start = s.gaps[0].start_ns;
    const metric_alignment a = align_to_kernels(s, kernels);
    CHECK(a.applied);
    CHECK(std::llabs(a.shift_ns + offset) <= std::int64_t(s.interval_ns / 2));
    CHECK(std::int64_t(s.gaps[0].start_ns - gap_start) == a.shift_ns);  // the gap moved with the samples
    CHECK(a.correlation > 0.9);
    CHECK(a.correlation >= a.correlation_unshifted);
    CHECK(worst_kernel_error(s, kernels) < 0.02);
  }
}

TEST_CASE("align_to_kernels: kernels in any order, overlapping, and samples of no stated interval") {
  std::mt19937_64 rng(42);
  const auto kernels = make_kernels(rng, 40);
  gpu_metric_series s = make_series(rng, kernels, -460'000);
  s.interval_ns = 0;  // the median sample length stands for it
  // Each kernel as two overlapping halves, plus a copy, shuffled.
  std::vector<interval> busy;
  for (const auto& k : kernels) {
    const std::uint64_t mid = k.first + (k.second - k.first) / 2;
    busy.push_back({k.first, mid + 5 * us});
    busy.push_back({mid - 5 * us, k.second});
    busy.push_back(k);
  }
  std::shuffle(busy.begin(), busy.end(), rng);
  const metric_alignment a = align_to_kernels(s, busy);
  CHECK(a.applied);
  CHECK(std::llabs(a.shift_ns - 460'000) <= 10'000);
  s.interval_ns = 20 * us;
  CHECK(worst_kernel_error(s, kernels) < 0.02);
}

TEST_CASE("align_to_kernels leaves the samples without kernels, with only short ones, or with flat values") {
  std::mt19937_64 rng(7);
  const auto kernels = make_kernels(rng, 60);
  const gpu_metric_series original = make_series(rng, kernels, -460'000);
  const auto unchanged = [&](const gpu_metric_series& s) {
    return s.start_ns == original.start_ns && s.end_ns == original.end_ns;
  };

  SUBCASE("no kernels") {
    gpu_metric_series s = original;
    const metric_alignment a = align_to_kernels(s, {});
    CHECK_FALSE(a.applied);
    CHECK(a.shift_ns == 0);
    CHECK(unchanged(s));
  }
  SUBCASE("only short kernels: 60 us ones, 3 samples each, nothing to line up") {
    std::mt19937_64 r2(8);
    const auto shorts = make_kernels(r2, 400, 20 * us, 60 * us, 50 * us, 500 * us);
    const gpu_metric_series base = make_series(r2, shorts, -460'000);
    gpu_metric_series s = base;
    const metric_alignment a = align_to_kernels(s, shorts);
    CHECK_FALSE(a.applied);
    CHECK((s.start_ns == base.start_ns && s.end_ns == base.end_ns));
  }
  SUBCASE("two long kernels are not enough") {
    gpu_metric_series s = original;
    const metric_alignment a = align_to_kernels(s, {kernels[0], kernels[1]});
    CHECK_FALSE(a.applied);
    CHECK(unchanged(s));
  }
  SUBCASE("kernels the samples cannot reach") {
    gpu_metric_series s = original;
    std::vector<interval> far = kernels;
    for (auto& k : far) k = {k.first + 1'000'000'000, k.second + 1'000'000'000};
    CHECK_FALSE(align_to_kernels(s, far).applied);
    CHECK(unchanged(s));
  }
  SUBCASE("constant values") {
    gpu_metric_series s = original;
    for (std::size_t i = 0; i < s.size(); ++i)
      for (std::size_t m = 0; m < s.metrics.size(); ++m) s.values[i * s.metrics.size() + m] = m == 2 ? 12.5 : 40.0;
    const gpu_metric_series flat = s;
    const metric_alignment a = align_to_kernels(s, kernels);
    CHECK_FALSE(a.applied);
    CHECK((s.start_ns == flat.start_ns && s.end_ns == flat.end_ns));
  }
  SUBCASE("values that do not follow the kernels (noise alone)") {
    gpu_metric_series s = original;
    std::uniform_real_distribution<double> u(0, 100);
    for (double& v : s.values) v = u(rng);
    const metric_alignment a = align_to_kernels(s, kernels);
    CHECK_FALSE(a.applied);
    CHECK(a.correlation < metric_alignment::min_correlation);
    CHECK(unchanged(s));
  }
}

TEST_CASE("align_to_kernels: a periodic workload off by a period") {
  // 600 us kernels every ms, the samples a whole period early: shifted by a
  // period, all kernels but the train's ends fit as well as they do unshifted.
  // With 40 kernels the ends make the difference (min_gain); with 100 they do
  // not, and the shift is ambiguous.
  for (const int count : {40, 100}) {
    CAPTURE(count);
    std::mt19937_64 rng(1);
    const auto kernels = make_kernels(rng, count, 600 * us, 600 * us, 400 * us, 400 * us);
    gpu_metric_series s = make_series(rng, kernels, -1'000'000);
    const gpu_metric_series base = s;
    const metric_alignment a = align_to_kernels(s, kernels);
    CHECK(a.shift_ns == 1'000'000);  // the best found either way
    CHECK(a.correlation > a.correlation_unshifted);
    if (count == 40) {
      CHECK(a.applied);
      CHECK(a.correlation - a.correlation_unshifted >= metric_alignment::min_gain);
      CHECK(worst_kernel_error(s, kernels) < 0.02);
    } else {
      CHECK_FALSE(a.applied);
      CHECK(a.correlation - a.correlation_unshifted < metric_alignment::min_gain);
      CHECK((s.start_ns == base.start_ns && s.end_ns == base.end_ns));
    }
  }
}

TEST_CASE("align_to_kernels: a weak fit is reported, not applied") {
  // Noise of 100 on values of 80: the peak is still where the offset puts it,
  // at a correlation of ~0.35, below min_correlation.
  std::mt19937_64 rng(13);
  const auto kernels = make_kernels(rng, 60);
  gpu_metric_series s = make_series(rng, kernels, -460'000, 20 * us, 100.0);
  const gpu_metric_series base = s;
  const metric_alignment a = align_to_kernels(s, kernels);
  CHECK_FALSE(a.applied);
  CHECK(a.correlation > 0.2);
  CHECK(a.correlation < metric_alignment::min_correlation);
  CHECK(std::llabs(a.shift_ns - 460'000) <= 10'000);  // the best found, for the caller to report
  CHECK((s.start_ns == base.start_ns && s.end_ns == base.end_ns));
}

TEST_CASE("align_to_kernels does not look past max_shift_ns") {
  std::mt19937_64 rng(11);
  const auto kernels = make_kernels(rng, 60);
  // Beyond the reach the best within it is a poor fit (-3 ms), or the slope of
  // the peak outside, at the search's edge (+2.1 ms: correlation ~0.8 there).
  SUBCASE("an offset beyond the reach is not applied") {
    for (const std::int64_t offset : {-3'000'000, 2'100'000, 2'300'000}) {
      CAPTURE(offset);
      gpu_metric_series s = make_series(rng, kernels, offset);
      const gpu_metric_series base = s;
      const metric_alignment a = align_to_kernels(s, kernels, 2'000'000);
      CHECK_FALSE(a.applied);
      CHECK(std::llabs(a.shift_ns) <= 2'000'000);
      CHECK((s.start_ns == base.start_ns && s.end_ns == base.end_ns));
    }
  }
  SUBCASE("the same offset within a wider reach is found") {
    gpu_metric_series s = make_series(rng, kernels, -3'000'000);
    const metric_alignment a = align_to_kernels(s, kernels, 4'000'000);
    CHECK(a.applied);
    CHECK(std::llabs(a.shift_ns - 3'000'000) <= 10'000);
  }
}

TEST_CASE("align_to_kernels: samples already aligned are applied at shift 0") {
  std::mt19937_64 rng(5);
  const auto kernels = make_kernels(rng, 60);
  gpu_metric_series s = make_series(rng, kernels, 0, 20 * us, 0.0);  // exact values: 0 is the peak
  const gpu_metric_series base = s;
  const metric_alignment a = align_to_kernels(s, kernels);
  CHECK(a.applied);
  CHECK(a.shift_ns == 0);
  CHECK(a.correlation == doctest::Approx(a.correlation_unshifted));
  CHECK((s.start_ns == base.start_ns && s.end_ns == base.end_ns));
}

TEST_CASE("align_to_kernels: samples far apart over a long span (the coarse pass without its grid)") {
  // 20 us samples every 3 ms over ~100 s: the grid would need ~5M cells of
  // 20 us (past max_grid_cells), so the coarse pass scores exactly instead.
  std::mt19937_64 rng(17);
  const auto kernels = make_kernels(rng, 2500, 20'000 * us, 60'000 * us, 300 * us, 3000 * us);
  gpu_metric_series s = make_series(rng, kernels, -460'000, 20 * us, 1.0, 3000 * us);
  CHECK((kernels.back().second - kernels.front().first) / s.interval_ns > metric_alignment::max_grid_cells);
  const metric_alignment a = align_to_kernels(s, kernels);
  CHECK(a.applied);
  CHECK(std::llabs(a.shift_ns - 460'000) <= 10'000);
}

TEST_CASE("align_to_kernels on a 10 s trace: 500k samples, 100k kernels") {
  std::mt19937_64 rng(3);
  const auto kernels = make_kernels(rng, 100'000, 5 * us, 150 * us, 2 * us, 48 * us);
  gpu_metric_series s = make_series(rng, kernels, -250'000);
  CHECK(s.size() > 500'000);
  const auto t = std::chrono::steady_clock::now();
  const metric_alignment a = align_to_kernels(s, kernels);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  MESSAGE("align_to_kernels: ", s.size(), " samples, ", kernels.size(), " kernels: ", seconds, " s");
  CHECK(a.applied);
  CHECK(std::llabs(a.shift_ns - 250'000) <= 10'000);
  // 0.11-0.17 s measured in a Release build, 2.4 s with AddressSanitizer: the
  // bound catches a search that walks the kernels per sample, not a slowdown.
  CHECK(seconds < 10.0);
}
