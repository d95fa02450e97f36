// GPU hardware metrics sampled by CUPTI's PM sampling: each GPU's samples as
// recorded, and a kernel's averages over the samples its run overlaps.
//
// A sample is GPU-wide: it covers every kernel running in its interval, so a
// kernel's averages are its own only when it ran alone on its GPU.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cuprof::detail {

// One metric: CUPTI's name and what the trace and tables call it.
struct gpu_metric {
  std::string name;   // e.g. "dram__throughput.avg.pct_of_peak_sustained_elapsed"
  std::string label;  // e.g. "DRAM throughput %"
};

// The default set's labels: the tables, insights and verdicts find the
// metrics by these. A metric the user names is labelled by its CUPTI name.
inline constexpr const char* metric_label_sm = "SM throughput %";
inline constexpr const char* metric_label_dram = "DRAM throughput %";
inline constexpr const char* metric_label_tensor = "Tensor pipe active %";
inline constexpr const char* metric_label_occupancy = "Achieved occupancy %";

// The metrics cuprof has labels for, as percentages of peak, each in one PM
// sampling pass on Hopper (GH100) with the others. `TriageCompute.sm__throughput`
// is the single-pass form of sm__throughput (the plain metric needs 19
// passes there). Named by the user, they get their labels too.
inline std::vector<gpu_metric> labelled_gpu_metrics() {
  return {{"TriageCompute.sm__throughput.avg.pct_of_peak_sustained_elapsed", metric_label_sm},
          {"dram__throughput.avg.pct_of_peak_sustained_elapsed", metric_label_dram},
          {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed", metric_label_tensor},
          {"sm__warps_active_realtime.avg.pct_of_peak_sustained_active", metric_label_occupancy}};
}

// The default set: the first three. CUPTI's decoding of the four together
// needed more than one core at times under a PyTorch loop of FP32 GEMMs
// (H200) and fell behind, losing stretches of samples at any interval; any
// three kept up (55 to 100 us of one core a sample at 200 us, 225 at most).
// Occupancy is there for the naming.
inline std::vector<gpu_metric> default_gpu_metrics() {
  std::vector<gpu_metric> m = labelled_gpu_metrics();
  m.pop_back();
  return m;
}

// A metric the user names: its label if cuprof has one for it, else its CUPTI name.
inline gpu_metric named_gpu_metric(const std::string& name) {
  for (const gpu_metric& m : labelled_gpu_metrics())
    if (m.name == name) return m;
  return {name, name};
}

// Whether a metric is a percentage: CUPTI's ".pct" forms, and a label that
// says "%" (the default set's, a trace's).
inline bool is_percentage(const gpu_metric& m) {
  return m.name.find(".pct") != std::string::npos || (!m.label.empty() && m.label.back() == '%');
}

// Percentages of peak read over an interval overshoot 100 a little (the
// interval's edges are not the counters' exactly); past this margin a value
// is broken, not high.
inline constexpr double percentage_margin = 5;

// A value a metric can take: finite, not below 0, and for a percentage not
// above 100 + percentage_margin. Anything else (393 % of peak DRAM, -50 %
// occupancy, inf) is a broken sample: dropped and counted, never averaged,
// tabled or judged.
inline bool plausible_metric_value(const gpu_metric& m, double v) {
  return std::isfinite(v) && v >= 0 && (!is_percentage(m) || v <= 100 + percentage_margin);
}

// Why a stretch of a GPU's time within a window has no samples. A kernel
// there says so in its args, and the trace lists the stretch: a user must be
// able to tell a kernel the GPU was not sampled during from one cuprof skipped.
enum class metric_gap_cause : std::uint8_t {
  overflow,    // the hardware buffer filled before it was decoded; sampling restarted
  sample_cap,  // the samples kept reached CUPROF_GPU_METRICS_MAX_SAMPLES
  skipped,     // the GPU took no sample for a while and said nothing of it
  late,        // the decoder came so late that its image could not hold every sample waiting
};

inline std::string_view describe(metric_gap_cause c) {
  switch (c) {
    case metric_gap_cause::overflow: return "the GPU's sample buffer overflowed (decoding fell behind); sampling restarted";
    case metric_gap_cause::sample_cap: return "the samples kept reached CUPROF_GPU_METRICS_MAX_SAMPLES";
    case metric_gap_cause::skipped: return "the GPU took no sample and reported no overflow";
    case metric_gap_cause::late: return "cuprof's decoding came late and the samples waiting overflowed its buffer";
  }
  return "unknown";
}

// A stretch [start_ns, end_ns) without samples, on the series' clock.
struct gpu_metric_gap {
  std::uint64_t start_ns = 0, end_ns = 0;
  metric_gap_cause cause = metric_gap_cause::skipped;
};

// The samples of one GPU, in time order, on the trace's clock (epoch ns).
struct gpu_metric_series {
  std::uint32_t device = 0;
  std::uint64_t interval_ns = 0;    // the period asked for
  std::uint64_t dropped = 0;        // samples lost (hardware buffer overflow, memory cap)
  std::uint64_t out_of_range = 0;   // values add() left out: not plausible_metric_value()
  std::int64_t shift_ns = 0;        // moved by this to lie on the kernels' clock (align_to_kernels)
  bool aligned = false;             // shift_ns was found in the data; false: as CUPTI stamped them
  std::vector<gpu_metric> metrics;  // the columns of `values`
  std::vector<std::uint64_t> start_ns, end_ns;
  std::vector<double> values;        // sample-major: values[i * metrics.size() + m]; NaN where CUPTI gave none
  std::vector<gpu_metric_gap> gaps;  // in time order, none overlapping a sample

  std::size_t size() const { return start_ns.size(); }
  double value(std::size_t sample, std::size_t metric) const { return values[sample * metrics.size() + metric]; }
  // One sample as CUPTI gave it: the decoder's buffer, checked when a window takes it (add()).
  void add_unchecked(std::uint64_t start, std::uint64_t end, const double* v) {
    start_ns.push_back(start);
    end_ns.push_back(end);
    values.insert(values.end(), v, v + metrics.size());
  }
  // One sample; a value no metric can take is kept as NaN (none) and counted.
  void add(std::uint64_t start, std::uint64_t end, const double* v) {
    start_ns.push_back(start);
    end_ns.push_back(end);
    for (std::size_t m = 0; m < metrics.size(); ++m) {
      const bool none = v[m] != v[m];
      const bool kept = none || plausible_metric_value(metrics[m], v[m]);
      out_of_range += !kept;
      values.push_back(kept ? v[m] : __builtin_nan(""));
    }
  }
};

// The metrics of several series, each label once, in the order first met:
// the columns of a table and the trace's list. One profile samples every GPU
// with one set; the union keeps columns right where series differ.
inline std::vector<gpu_metric> metrics_of(const std::vector<gpu_metric_series>& series) {
  std::vector<gpu_metric> all;
  for (const gpu_metric_series& s : series)
    for (const gpu_metric& m : s.metrics) {
      bool known = false;
      for (const gpu_metric& a : all) known |= a.label == m.label;
      if (!known) all.push_back(m);
    }
  return all;
}

// A kernel's averages. `samples` counts the samples used; none are used for a
// kernel shorter than the sampling interval (`too_short`): a sample longer than
// the kernel mostly measures what ran around it.
struct kernel_metric_averages {
  std::uint32_t samples = 0;
  bool too_short = false;
  std::vector<double> values;  // per metric; NaN where no sample had a value
};

// The samples one entry of a series stands for. A trace written with held
// values keeps one entry for a run of samples whose values did not move, so
// an entry may span several intervals: its samples are the cells
// [start + j * interval, start + (j + 1) * interval), the last one ending at
// the entry's end, as many as the entry holds intervals (rounded; at least
// one). An entry of a live series, or any series without an interval, is one
// sample. Working on cells keeps a kernel's sample count and the choice of
// samples inside it the same whether its trace held values or not, without
// expanding the entries.
struct metric_cells {
  std::uint64_t start = 0, end = 0, interval = 0;
  std::uint64_t count = 1;

  metric_cells(std::uint64_t s, std::uint64_t e, std::uint64_t iv) : start(s), end(e), interval(iv) {
    if (interval == 0 || e <= s) return;
    count = (e - s) / interval + ((e - s) % interval >= interval / 2 ? 1 : 0);
    if (count == 0) count = 1;
  }
  // Boundary j of the cells, 0 <= j <= count: cell j is [at(j), at(j + 1)).
  std::uint64_t at(std::uint64_t j) const { return j >= count ? end : start + j * interval; }
  // The first boundary at or after x (count + 1 when x is past the end).
  std::uint64_t up(std::uint64_t x) const {
    if (x <= start) return 0;
    if (x > end) return count + 1;
    if (count == 1) return 1;
    const std::uint64_t j = (x - start + interval - 1) / interval;
    return j >= count ? count : j;
  }
  // The number of the last boundary at or before x; x must be >= start.
  std::uint64_t down(std::uint64_t x) const {
    if (x >= end) return count;
    if (count == 1) return 0;
    const std::uint64_t j = (x - start) / interval;
    return j >= count ? count - 1 : j;
  }
  // The cells wholly inside [a, b): [first, last) of them (empty when first >= last).
  std::pair<std::uint64_t, std::uint64_t> inside(std::uint64_t a, std::uint64_t b) const {
    if (b <= start || a >= end) return {0, 0};
    return {up(a), down(b)};
  }
  // How many cells [a, b) overlaps.
  std::uint64_t overlapped(std::uint64_t a, std::uint64_t b) const {
    if (b <= start || a >= end || b <= a) return 0;
    const std::uint64_t first = a <= start ? 0 : (count == 1 ? 0 : std::min(count - 1, (a - start) / interval));
    const std::uint64_t last = count == 1 ? 0 : std::min(count - 1, (b - start + interval - 1) / interval - 1);
    return last >= first ? last - first + 1 : 0;
  }
};

// Time-weighted averages over [start, end). Samples wholly inside the kernel
// are used when there are any: a sample across the kernel's start or end also
// measures its neighbour or the idle GPU. A kernel no sample fits in uses the
// samples it overlaps, each weighted by the overlap. Samples are cells of the
// series' entries (metric_cells), so a held trace gives what the live series did.
inline kernel_metric_averages average_metrics(const gpu_metric_series& s, std::uint64_t start, std::uint64_t end) {
  kernel_metric_averages r;
  const std::size_t nm = s.metrics.size();
  r.values.assign(nm, __builtin_nan(""));
  if (end <= start || s.size() == 0) return r;
  if (s.interval_ns && end - start < s.interval_ns) {
    r.too_short = true;
    return r;
  }
  // First sample ending after `start` (samples are in time order and do not overlap).
  std::size_t lo = 0, hi = s.size();
  while (lo < hi) {
    const std::size_t mid = (lo + hi) / 2;
    if (s.end_ns[mid] <= start) lo = mid + 1;
    else hi = mid;
  }
  const std::size_t first = lo;
  bool any_inside = false;
  for (std::size_t i = first; i < s.size() && s.start_ns[i] < end && !any_inside; ++i) {
    const auto in = metric_cells(s.start_ns[i], s.end_ns[i], s.interval_ns).inside(start, end);
    any_inside = in.first < in.second;
  }
  std::vector<double> sum(nm, 0.0), weight(nm, 0.0);
  std::uint64_t used = 0;
  for (std::size_t i = first; i < s.size() && s.start_ns[i] < end; ++i) {
    const metric_cells c(s.start_ns[i], s.end_ns[i], s.interval_ns);
    std::uint64_t a = 0, b = 0;
    if (any_inside) {
      const auto in = c.inside(start, end);
      if (in.first >= in.second) continue;
      a = c.at(in.first), b = c.at(in.second);
      used += in.second - in.first;
    } else {
      a = s.start_ns[i] > start ? s.start_ns[i] : start;
      b = s.end_ns[i] < end ? s.end_ns[i] : end;
      if (b <= a) continue;
      used += c.overlapped(start, end);
    }
    for (std::size_t m = 0; m < nm; ++m) {
      const double v = s.value(i, m);
      if (v != v) continue;
      sum[m] += v * double(b - a);
      weight[m] += double(b - a);
    }
  }
  r.samples = used > 0xffffffffu ? 0xffffffffu : std::uint32_t(used);
  for (std::size_t m = 0; m < nm; ++m)
    if (weight[m] > 0) r.values[m] = sum[m] / weight[m];
  return r;
}

// Whether samples i - 1 and i of a series have time between them: more than
// half an interval (PM samples follow each other exactly).
inline bool samples_apart(const gpu_metric_series& s, std::size_t i) {
  return s.start_ns[i] > s.end_ns[i - 1] + s.interval_ns / 2;
}

// The stretches between samples that none of the series' gaps covers, as
// gaps the GPU skipped.
inline std::vector<gpu_metric_gap> unlisted_gaps(const gpu_metric_series& s) {
  std::vector<gpu_metric_gap> found;
  for (std::size_t i = 1; i < s.size(); ++i) {
    if (!samples_apart(s, i)) continue;
    const std::uint64_t a = s.end_ns[i - 1], b = s.start_ns[i];
    const auto covers = [&](const gpu_metric_gap& g) { return g.start_ns < b && g.end_ns > a; };
    if (std::none_of(s.gaps.begin(), s.gaps.end(), covers)) found.push_back({a, b, metric_gap_cause::skipped});
  }
  return found;
}

// The series' gaps with those unlisted_gaps() finds, in time order: then they
// say all its time without samples. Returns the samples the added ones miss,
// at the interval.
inline std::uint64_t list_unlisted_gaps(gpu_metric_series& s) {
  std::uint64_t missed = 0;
  for (const gpu_metric_gap& g : unlisted_gaps(s)) {
    s.gaps.push_back(g);
    if (s.interval_ns) missed += (g.end_ns - g.start_ns) / s.interval_ns;
  }
  std::sort(s.gaps.begin(), s.gaps.end(),
            [](const gpu_metric_gap& x, const gpu_metric_gap& y) { return x.start_ns < y.start_ns; });
  return missed;
}

// Why a kernel [start, end) at least an interval long has no samples: the
// gap it falls in (of `gaps`, the series' own by default), or where it lies
// against the samples. Empty when a sample overlaps it.
inline std::string unsampled_reason(const gpu_metric_series& s, std::uint64_t start, std::uint64_t end,
                                    const std::vector<gpu_metric_gap>* gaps = nullptr) {
  for (const gpu_metric_gap& g : gaps ? *gaps : s.gaps)
    if (g.start_ns < end && g.end_ns > start) return "not sampled: " + std::string(describe(g.cause));
  if (s.size() == 0) return "not sampled: no sample on this GPU in the window";
  if (end <= s.start_ns.front())
    return "not sampled: before the GPU's first sample (sampling starts once the GPU has a context and is set up)";
  if (start >= s.end_ns.back()) return "not sampled: after the GPU's last sample in the window";
  std::size_t lo = 0, hi = s.size();
  while (lo < hi) {
    const std::size_t mid = (lo + hi) / 2;
    if (s.end_ns[mid] <= start) lo = mid + 1;
    else hi = mid;
  }
  if (lo < s.size() && s.start_ns[lo] < end) return {};
  return "not sampled: between two samples further apart than the interval";
}

// Where a series' samples sit against the kernels. PM sampling stamps its
// samples on a clock of its own: on an H200 they came a few hundred us before
// the kernels they measured (CUPTI's activity records), by an amount that
// differed from run to run (-120 us to -460 us seen). Left so, a 550 us copy
// kernel averaged 11 % DRAM throughput instead of 81 %; the offset is found
// from the data: the shift under which the samples' activity best follows the
// times the GPU ran kernels.
struct metric_alignment {
  std::int64_t shift_ns = 0;  // added to every sample's start and end when applied; else the best found, or 0
  double correlation = 0;     // at shift_ns
  double correlation_unshifted = 0;
  bool applied = false;  // false: not confident, samples left as they were

  // Below this correlation the activity does not follow the kernels well
  // enough to say where they are (other processes, metrics blind to the work).
  static constexpr double min_correlation = 0.5;
  // A shift further than a sample from 0 must beat the unshifted samples by
  // this much: else both fit about as well (a periodic workload) and the
  // samples are left where they were.
  static constexpr double min_gain = 0.05;
  // Alignment needs edges to line up: at least this many busy stretches (the
  // union of the kernels) longer than `stretch_intervals` samples. Kernels
  // shorter than a few samples blur into their neighbours at any shift.
  static constexpr int min_stretches = 3;
  static constexpr std::uint64_t stretch_intervals = 4;
  // The most samples scored per shift: past it, sample_runs runs of
  // contiguous samples evenly spaced over the span. This bounds a long
  // trace's search (~0.17 s for 500k samples and 100k kernels).
  static constexpr std::size_t max_samples = 200000;
  static constexpr std::size_t sample_runs = 25;
  // The coarse pass's grid, cells at most (see align_to_kernels): 16 MB.
  static constexpr std::size_t max_grid_cells = 4 * 1024 * 1024;
};

// The shift under which the samples' activity best follows the kernels, and
// the samples shifted by it when that is clear. `busy`: the [start, end) of
// the kernels that ran on the series' GPU, in any order, overlapping or not.
//
// A sample's activity is the mean over metrics of its value over the metric's
// maximum in the series (NaN skipped; metrics all 0 or NaN ignored); its busy
// fraction under a shift d is how much of [start + d, end + d) the kernels'
// union covers. The score is the Pearson correlation of the two over the
// samples within the kernels' span +- max_shift_ns (max_samples of them at
// most), at shifts every sampling interval (the median sample length when
// interval_ns is 0) over [-max_shift_ns, max_shift_ns], then every interval / 20
// near the best (in two levels). The best is applied when
//   - the correlation there is >= min_correlation and enough long busy
//     stretches lie within reach of the samples (see metric_alignment);
//   - it is not at the edge of the search: a best at +-max_shift_ns may be the
//     slope of a peak further out, so nothing is applied;
//   - it is within a sample of 0 (the unshifted samples' own peak, refined:
//     applied, shift 0 included), or beats the unshifted correlation by
//     min_gain. A distant shift that fits barely better than none (a periodic
//     workload, off by about a period or not at all) is ambiguous: nothing is
//     applied.
// When nothing is applied, shift_ns and correlation still tell the best found
// (0 when the search did not run: no kernels, too few long stretches, flat
// values). Ties go to the shift nearest 0. Samples must be in time order (the
// series' invariant); a start shifted before 0 is clamped to 0.
inline metric_alignment align_to_kernels(gpu_metric_series& s, std::vector<std::pair<std::uint64_t, std::uint64_t>> busy,
                                         std::int64_t max_shift_ns = 2'000'000) {
  metric_alignment r;
  const std::size_t n = s.size(), nm = s.metrics.size();
  if (n < 2 || nm == 0 || max_shift_ns < 0 || s.values.size() < n * nm) return r;

  // The kernels' union: sorted, disjoint stretches.
  busy.erase(std::remove_if(busy.begin(), busy.end(), [](const auto& b) { return b.second <= b.first; }), busy.end());
  if (busy.empty()) return r;
  std::sort(busy.begin(), busy.end());
  std::size_t m = 0;
  for (const auto& b : busy) {
    if (m > 0 && b.first <= busy[m - 1].second) busy[m - 1].second = std::max(busy[m - 1].second, b.second);
    else busy[m++] = b;
  }
  busy.resize(m);

  std::uint64_t step = s.interval_ns;
  if (step == 0) {
    std::vector<std::uint64_t> lengths;
    lengths.reserve(n);
    for (std::size_t i = 0; i < n; ++i)
      if (s.end_ns[i] > s.start_ns[i]) lengths.push_back(s.end_ns[i] - s.start_ns[i]);
    if (lengths.empty()) return r;
    std::nth_element(lengths.begin(), lengths.begin() + std::ptrdiff_t(lengths.size() / 2), lengths.end());
    step = lengths[lengths.size() / 2];
  }
  if (step == 0) return r;
  const std::uint64_t reach = std::uint64_t(max_shift_ns);
  const auto sub = [](std::uint64_t a, std::uint64_t b) { return a > b ? a - b : 0; };

  // Long stretches the samples can be shifted onto.
  int stretches = 0;
  for (const auto& b : busy)
    if (b.second - b.first > metric_alignment::stretch_intervals * step && b.second + reach > s.start_ns[0] &&
        b.first < s.end_ns[n - 1] + reach)
      ++stretches;
  if (stretches < metric_alignment::min_stretches) return r;

  // The samples that can meet a kernel under some shift (and their idle
  // neighbours, which score the gaps): those within the kernels' span +- the reach.
  const std::uint64_t lo = sub(busy.front().first, reach + step), hi = busy.back().second + reach + step;
  const std::size_t i0 = std::size_t(std::upper_bound(s.end_ns.begin(), s.end_ns.end(), lo) - s.end_ns.begin());
  const std::size_t i1 = std::size_t(std::lower_bound(s.start_ns.begin(), s.start_ns.end(), hi) - s.start_ns.begin());
  if (i1 <= i0) return r;
  // Past max_samples, `sample_runs` runs of contiguous samples evenly spaced
  // over the span: runs rather than every k-th sample keep the coarse pass's
  // grid (below) as small as the samples.
  const std::size_t window = i1 - i0, cap = metric_alignment::max_samples;
  const std::size_t runs = window > cap ? metric_alignment::sample_runs : 1, run_len = window > cap ? cap / runs : window;

  std::vector<double> top(nm, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t mi = 0; mi < nm; ++mi) {
      const double v = s.value(i, mi);
      if (v == v && v > top[mi]) top[mi] = v;
    }

  // On a clock relative to `origin`, so that any shift stays in range.
  const std::uint64_t origin = std::min(busy.front().first, s.start_ns[i0]);
  std::vector<std::int64_t> t0, t1;
  std::vector<double> act, inv_len;
  t0.reserve(runs * run_len);
  t1.reserve(runs * run_len);
  act.reserve(runs * run_len);
  inv_len.reserve(runs * run_len);
  for (std::size_t run = 0; run < runs; ++run) {
    const std::size_t first = i0 + (runs == 1 ? 0 : run * (window - run_len) / (runs - 1));
    for (std::size_t i = first; i < first + run_len; ++i) {
      if (s.end_ns[i] <= s.start_ns[i]) continue;
      double sum = 0;
      int k = 0;
      for (std::size_t mi = 0; mi < nm; ++mi) {
        const double v = s.value(i, mi);
        if (top[mi] > 0 && v == v) {
          sum += v / top[mi];
          ++k;
        }
      }
      if (k == 0) continue;
      t0.push_back(std::int64_t(s.start_ns[i] - origin));
      t1.push_back(std::int64_t(s.end_ns[i] - origin));
      act.push_back(sum / k);
      inv_len.push_back(1.0 / double(s.end_ns[i] - s.start_ns[i]));
    }
  }
  const std::size_t ns = act.size();
  if (ns < 3) return r;
  // Activity centred: the correlation is then sum(a * b) / sqrt(saa * (sbb - sb * sb / ns)).
  double mean = 0;
  for (double a : act) mean += a;
  mean /= double(ns);
  double saa = 0;
  for (double& a : act) {
    a -= mean;
    saa += a * a;
  }
  if (!(saa > 1e-12 * double(ns))) return r;  // constant activity: nothing to follow
  const auto correlation = [&](double sb, double sbb, double sab) {
    const double vb = sbb - sb * sb / double(ns);
    return vb > 1e-12 * double(ns) ? sab / std::sqrt(saa * vb) : 0.0;
  };

  std::vector<std::int64_t> b0(m), b1(m), before(m + 1, 0);  // before[j]: busy time of stretches < j
  for (std::size_t j = 0; j < m; ++j) {
    b0[j] = std::int64_t(busy[j].first - origin);
    b1[j] = std::int64_t(busy[j].second - origin);
    before[j + 1] = before[j] + (b1[j] - b0[j]);
  }
  // Busy time in [0, t), `j` a cursor kept across calls: the times asked go
  // forward with the samples, so a pass over the samples walks the stretches once.
  const auto covered = [&](std::int64_t t, std::size_t& j) {
    while (j > 0 && b1[j - 1] > t) --j;
    while (j < m && b1[j] <= t) ++j;
    return before[j] + (j < m && t > b0[j] ? t - b0[j] : 0);
  };
  // The exact score at any shift.
  const auto score = [&](std::int64_t d) {
    std::size_t j0 = 0, j1 = 0;
    double sb = 0, sbb = 0, sab = 0;
    for (std::size_t k = 0; k < ns; ++k) {
      const double f = double(covered(t1[k] + d, j1) - covered(t0[k] + d, j0)) * inv_len[k];
      sb += f;
      sbb += f * f;
      sab += act[k] * f;
    }
    return correlation(sb, sbb, sab);
  };

  // The coarse pass, every `step` over the reach, on a grid of cells `step`
  // wide laid from each run's first sample: a sample is scored against the
  // busy fraction of the cell it starts nearest to, shifted by whole cells.
  // That is exact for samples one interval long on the interval's grid (as PM
  // samples are) and near it for the others; it makes a shift a gather instead
  // of a walk over the kernels, and the fine pass is exact. A grid much larger
  // than the samples (samples far apart) is not built: the exact score does.
  const std::int64_t g = std::int64_t(step), reach_steps = max_shift_ns / g;
  std::vector<std::size_t> cell(ns);
  std::vector<float> grid;
  bool use_grid = true;
  std::size_t walked = 0;  // the cursor over the stretches, across segments as they go forward
  for (std::size_t ka = 0; ka < ns && use_grid;) {
    // A segment: samples in order, no further apart than the reach's cells on
    // both sides (past that, padding each alone costs no more).
    std::size_t kb = ka + 1;
    while (kb < ns && t0[kb] >= t0[kb - 1] && t0[kb] - t0[kb - 1] <= 2 * (reach_steps + 1) * g) ++kb;
    const std::int64_t base = t0[ka] - reach_steps * g;
    const std::size_t offset = grid.size();
    for (std::size_t k = ka; k < kb; ++k) cell[k] = offset + std::size_t((t0[k] - base + g / 2) / g);
    const std::size_t cells = cell[kb - 1] - offset + std::size_t(reach_steps) + 2;
    if (grid.size() + cells > metric_alignment::max_grid_cells) use_grid = false;
    else {
      std::int64_t prev = covered(base, walked);
      for (std::size_t c = 0; c < cells; ++c) {
        const std::int64_t next = covered(base + std::int64_t(c + 1) * g, walked);
        grid.push_back(float(double(next - prev) / double(g)));
        prev = next;
      }
    }
    ka = kb;
  }
  const auto score_grid = [&](std::int64_t shift_cells) {
    double sb = 0, sbb = 0, sab = 0;
    for (std::size_t k = 0; k < ns; ++k) {
      const double f = grid[std::size_t(std::int64_t(cell[k]) + shift_cells)];  // cell[k] >= reach_steps
      sb += f;
      sbb += f * f;
      sab += act[k] * f;
    }
    return correlation(sb, sbb, sab);
  };

  std::int64_t best_d = 0;
  double best = -2;
  const auto consider = [&](std::int64_t d, double c) {
    if (c > best + 1e-12 || (c >= best - 1e-12 && std::llabs(d) < std::llabs(best_d))) {
      best = c;
      best_d = d;
    }
  };
  for (std::int64_t k = -reach_steps; k <= reach_steps; ++k) consider(k * g, use_grid ? score_grid(k) : score(k * g));
  // The fine pass, exact: every step / 4 within a step of the coarse best,
  // then every step / 20 within step / 4 of that. The score near its peak
  // falls about linearly with the distance to it, so the two levels find what
  // one pass every step / 20 would, at half the cost.
  const std::int64_t quarter = std::max<std::int64_t>(1, g / 4), fine = std::max<std::int64_t>(1, g / 20);
  r.correlation_unshifted = score(0);
  const std::int64_t coarse_best = best_d;
  best = -2;
  best_d = 0;
  consider(0, r.correlation_unshifted);
  for (std::int64_t d = std::max(-max_shift_ns, coarse_best - g); d <= std::min(max_shift_ns, coarse_best + g); d += quarter)
    if (d != 0) consider(d, score(d));
  const std::int64_t centre = best_d;
  for (std::int64_t d = std::max(-max_shift_ns, centre - quarter); d <= std::min(max_shift_ns, centre + quarter); d += fine)
    if (d != 0) consider(d, score(d));
  r.shift_ns = best_d;
  r.correlation = best;

  if (best < metric_alignment::min_correlation) return r;
  if (std::llabs(best_d) + fine > max_shift_ns && best_d != 0) return r;  // at the edge: maybe a slope
  if (std::llabs(best_d) > g && best < r.correlation_unshifted + metric_alignment::min_gain) return r;  // ambiguous
  r.applied = true;
  if (best_d == 0) return r;
  const auto move = [&](std::uint64_t t) { return best_d < 0 ? sub(t, std::uint64_t(-best_d)) : t + std::uint64_t(best_d); };
  for (std::size_t i = 0; i < n; ++i) {
    s.start_ns[i] = move(s.start_ns[i]);
    s.end_ns[i] = move(s.end_ns[i]);
  }
  for (gpu_metric_gap& gap : s.gaps) gap.start_ns = move(gap.start_ns), gap.end_ns = move(gap.end_ns);
  return r;
}

}  // namespace cuprof::detail
