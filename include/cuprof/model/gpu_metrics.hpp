// GPU hardware metrics sampled by CUPTI's PM sampling: each GPU's samples as
// recorded, and a kernel's averages over the samples its run overlaps.
//
// A sample is GPU-wide: it covers every kernel running in its interval, so a
// kernel's averages are its own only when it ran alone on its GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
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

// The default set: one PM sampling pass on Hopper (GH100), as percentages of
// peak. `TriageCompute.sm__throughput` is the single-pass form of
// sm__throughput (the plain metric needs 19 passes there).
inline std::vector<gpu_metric> default_gpu_metrics() {
  return {{"TriageCompute.sm__throughput.avg.pct_of_peak_sustained_elapsed", metric_label_sm},
          {"dram__throughput.avg.pct_of_peak_sustained_elapsed", metric_label_dram},
          {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed", metric_label_tensor},
          {"sm__warps_active_realtime.avg.pct_of_peak_sustained_active", metric_label_occupancy}};
}

// The samples of one GPU, in time order, on the trace's clock (epoch ns).
struct gpu_metric_series {
  std::uint32_t device = 0;
  std::uint64_t interval_ns = 0;    // the period asked for
  std::uint64_t dropped = 0;        // samples lost (hardware buffer overflow, memory cap)
  std::int64_t shift_ns = 0;        // moved by this to lie on the kernels' clock (align_to_kernels)
  bool aligned = false;             // shift_ns was found in the data; false: as CUPTI stamped them
  std::vector<gpu_metric> metrics;  // the columns of `values`
  std::vector<std::uint64_t> start_ns, end_ns;
  std::vector<double> values;  // sample-major: values[i * metrics.size() + m]; NaN where CUPTI gave none

  std::size_t size() const { return start_ns.size(); }
  double value(std::size_t sample, std::size_t metric) const { return values[sample * metrics.size() + metric]; }
  void add(std::uint64_t start, std::uint64_t end, const double* v) {
    start_ns.push_back(start);
    end_ns.push_back(end);
    values.insert(values.end(), v, v + metrics.size());
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

// Time-weighted averages over [start, end). Samples wholly inside the kernel
// are used when there are any: a sample across the kernel's start or end also
// measures its neighbour or the idle GPU. A kernel no sample fits in uses the
// samples it overlaps, each weighted by the overlap.
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
  for (std::size_t i = first; i < s.size() && s.start_ns[i] < end; ++i)
    if (s.start_ns[i] >= start && s.end_ns[i] <= end) any_inside = true;
  std::vector<double> sum(nm, 0.0), weight(nm, 0.0);
  for (std::size_t i = first; i < s.size() && s.start_ns[i] < end; ++i) {
    const bool inside = s.start_ns[i] >= start && s.end_ns[i] <= end;
    if (any_inside && !inside) continue;
    const std::uint64_t a = s.start_ns[i] > start ? s.start_ns[i] : start;
    const std::uint64_t b = s.end_ns[i] < end ? s.end_ns[i] : end;
    if (b <= a) continue;
    ++r.samples;
    for (std::size_t m = 0; m < nm; ++m) {
      const double v = s.value(i, m);
      if (v != v) continue;
      sum[m] += v * double(b - a);
      weight[m] += double(b - a);
    }
  }
  for (std::size_t m = 0; m < nm; ++m)
    if (weight[m] > 0) r.values[m] = sum[m] / weight[m];
  return r;
}

}  // namespace cuprof::detail
