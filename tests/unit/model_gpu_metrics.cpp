// GPU hardware metrics (include/cuprof/model/gpu_metrics.hpp): a kernel's
// averages over the samples of its GPU, the Chrome trace's counters, kernel
// args and cuprof block (docs/trace-format.md, "GPU metrics"), and the
// per-name averages of key_averages() and the table's metric columns.

#include <cuprof/cuprof.hpp>
#include <cuprof/model/gpu_metrics.hpp>
#include <cuprof/output/trace_event_writer.hpp>
#include <cuprof/output/trace_layout.hpp>

#include "support/cli.hpp"
#include "support/files.hpp"
#include "support/trace_contract.hpp"
#include "support/traces.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <regex>
#include <string>
#include <utility>
#include <vector>

using json = nlohmann::json;
using namespace cuprof_test;

namespace {

using cuprof::detail::average_metrics;
using cuprof::detail::gpu_metric;
using cuprof::detail::gpu_metric_series;
using cuprof::detail::kernel_metric_averages;

const double no_value = std::numeric_limits<double>::quiet_NaN();

// A series of back-to-back samples of `interval` ns from `start`, one row of
// values per sample.
gpu_metric_series series_of(std::uint32_t device, std::uint64_t start, std::uint64_t interval, std::vector<gpu_metric> metrics,
                            const std::vector<std::vector<double>>& rows) {
  gpu_metric_series s;
  s.device = device;
  s.interval_ns = interval;
  s.metrics = std::move(metrics);
  for (std::size_t i = 0; i < rows.size(); ++i) s.add(start + i * interval, start + (i + 1) * interval, rows[i].data());
  return s;
}

std::vector<gpu_metric> two_metrics() { return {{"a__x.avg", "A %"}, {"b__y.avg", "B %"}}; }

// Four samples of 10 ns over [0, 40): A is 100, 20, 30, 0; B is NaN in the second.
gpu_metric_series four_samples() { return series_of(0, 0, 10, two_metrics(), {{100, 1}, {20, no_value}, {30, 3}, {0, 4}}); }

}  // namespace

TEST_SUITE("model_gpu_metrics") {

TEST_CASE("average_metrics: the samples wholly inside a kernel, alone, time-weighted") {
  const gpu_metric_series s = four_samples();
  // [5, 35): [10, 20) and [20, 30) are inside; the samples across its ends measure its neighbours.
  const kernel_metric_averages a = average_metrics(s, 5, 35);
  CHECK_FALSE(a.too_short);
  CHECK(a.samples == 2);
  REQUIRE(a.values.size() == 2);
  CHECK(a.values[0] == doctest::Approx(25.0));  // (20 + 30) / 2, not the overlap-weighted 33.3
  CHECK(a.values[1] == doctest::Approx(3.0));   // B had no value in [10, 20): the other sample alone
  // Exactly one sample's extent.
  const kernel_metric_averages one = average_metrics(s, 20, 30);
  CHECK(one.samples == 1);
  CHECK(one.values[0] == doctest::Approx(30.0));
}

TEST_CASE("average_metrics: no sample inside, the overlapping ones weighted by their overlap") {
  const gpu_metric_series s = four_samples();
  // [15, 27): 5 ns of [10, 20) at 20, 7 ns of [20, 30) at 30.
  const kernel_metric_averages a = average_metrics(s, 15, 27);
  CHECK_FALSE(a.too_short);
  CHECK(a.samples == 2);
  CHECK(a.values[0] == doctest::Approx((5 * 20.0 + 7 * 30.0) / 12));
  CHECK(a.values[1] == doctest::Approx(3.0));  // NaN left out, weight and all
}

TEST_CASE("average_metrics: a kernel shorter than the interval uses no sample") {
  const gpu_metric_series s = four_samples();
  const kernel_metric_averages a = average_metrics(s, 12, 18);
  CHECK(a.too_short);
  CHECK(a.samples == 0);
  REQUIRE(a.values.size() == 2);
  CHECK(std::isnan(a.values[0]));
  CHECK(std::isnan(a.values[1]));
  // Without a known interval a short kernel takes what overlaps it.
  gpu_metric_series unknown = s;
  unknown.interval_ns = 0;
  const kernel_metric_averages b = average_metrics(unknown, 12, 18);
  CHECK_FALSE(b.too_short);
  CHECK(b.samples == 1);
  CHECK(b.values[0] == doctest::Approx(20.0));
}

TEST_CASE("average_metrics: NaN everywhere, before and after the samples, empty series, no time") {
  const gpu_metric_series all_nan = series_of(0, 0, 10, two_metrics(), {{no_value, no_value}, {no_value, 2}});
  const kernel_metric_averages n = average_metrics(all_nan, 0, 20);
  CHECK(n.samples == 2);  // the samples were used; they had no value for A
  CHECK(std::isnan(n.values[0]));
  CHECK(n.values[1] == doctest::Approx(2.0));

  const gpu_metric_series s = four_samples();
  for (const auto& [start, end] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{{100, 200}, {40, 60}}) {
    CAPTURE(start);
    const kernel_metric_averages after = average_metrics(s, start, end);
    CHECK_FALSE(after.too_short);
    CHECK(after.samples == 0);
    CHECK(std::isnan(after.values[0]));
  }
  const gpu_metric_series late = series_of(0, 1000, 10, two_metrics(), {{1, 1}});
  const kernel_metric_averages before = average_metrics(late, 0, 500);
  CHECK(before.samples == 0);
  CHECK(std::isnan(before.values[1]));

  gpu_metric_series empty;
  empty.interval_ns = 10;
  empty.metrics = two_metrics();
  const kernel_metric_averages e = average_metrics(empty, 0, 100);
  CHECK(e.samples == 0);
  CHECK(e.values.size() == 2);
  CHECK(std::isnan(e.values[0]));

  const kernel_metric_averages zero = average_metrics(s, 20, 20);  // 0 ns (a kernel CUPTI could not time)
  CHECK(zero.samples == 0);
  CHECK_FALSE(zero.too_short);
}

TEST_CASE("average_metrics: an entry holding a value over several intervals counts as their samples") {
  // A trace written with held values reads back one entry per run of equal
  // values; a kernel's averages and sample count must be what the samples
  // themselves gave: a kernel inside one run must not read as one sample.
  const std::vector<std::vector<double>> rows = {{50, 1}, {50, 1}, {50, 1}, {80, 2}, {80, 2}, {10, 3},
                                                 {10, 3}, {10, 3}, {10, 3}, {60, 4}, {60, 4}, {60, 4}};
  const gpu_metric_series each = series_of(0, 1000, 10, two_metrics(), rows);
  gpu_metric_series held;
  held.interval_ns = 10;
  held.metrics = two_metrics();
  for (std::size_t i = 0; i < rows.size();) {
    std::size_t j = i;
    while (j < rows.size() && rows[j] == rows[i]) ++j;
    held.add(1000 + i * 10, 1000 + j * 10, rows[i].data());
    i = j;
  }
  REQUIRE(held.size() == 4);
  // Every kernel from 990 to 1130 in 1 ns steps, 10 ns long or more.
  int compared = 0;
  for (std::uint64_t a = 990; a <= 1130; ++a)
    for (std::uint64_t b = a + 10; b <= 1135; ++b) {
      const kernel_metric_averages x = average_metrics(each, a, b), y = average_metrics(held, a, b);
      CAPTURE(a);
      CAPTURE(b);
      REQUIRE(y.samples == x.samples);
      for (std::size_t m = 0; m < 2; ++m) {
        REQUIRE(std::isnan(y.values[m]) == std::isnan(x.values[m]));
        if (!std::isnan(x.values[m])) REQUIRE(y.values[m] == doctest::Approx(x.values[m]));
      }
      ++compared;
    }
  CHECK(compared > 9000);
  // A kernel of 30 ns inside the run of four 10s: three samples, not one.
  CHECK(average_metrics(held, 1050, 1090).samples == 4);
  CHECK(average_metrics(held, 1055, 1090).samples == 3);
  // An entry a little longer or shorter than whole intervals (the GPU's own
  // timing) rounds to the nearest count; a series without an interval keeps one sample per entry.
  gpu_metric_series jitter;
  jitter.interval_ns = 10;
  jitter.metrics = two_metrics();
  jitter.add(0, 31, rows[0].data());
  jitter.add(31, 39, rows[3].data());
  CHECK(average_metrics(jitter, 0, 31).samples == 3);
  CHECK(average_metrics(jitter, 0, 40).samples == 4);
  jitter.interval_ns = 0;
  CHECK(average_metrics(jitter, 0, 40).samples == 2);
}

TEST_CASE("add(): a value no metric can take is left out as none and counted; a percentage may overshoot 100 a little") {
  const std::vector<gpu_metric> metrics = {{"dram__throughput.avg.pct_of_peak_sustained_elapsed", "DRAM throughput %"},
                                           {"sm__warps_active_realtime.avg.pct_of_peak_sustained_active", "occupancy"},
                                           {"user__bytes.sum", "bytes"}};
  CHECK(cuprof::detail::is_percentage(metrics[0]));
  CHECK(cuprof::detail::is_percentage(metrics[1]));  // by its name
  CHECK_FALSE(cuprof::detail::is_percentage(metrics[2]));
  const double inf = std::numeric_limits<double>::infinity();
  const gpu_metric_series s = series_of(0, 0, 10, metrics,
                                        {{393, -50, 5000},       // 393 % of peak, -50 % occupancy: broken; 5000 bytes: fine
                                         {104.9, 0, -1},         // within the margin; 0; no count is negative
                                         {inf, no_value, 1e12},  // inf broken; NaN is none, not broken
                                         {1230, 100, -inf}});
  CHECK(s.out_of_range == 6);
  CHECK(std::isnan(s.value(0, 0)));
  CHECK(std::isnan(s.value(0, 1)));
  CHECK(s.value(0, 2) == 5000);
  CHECK(s.value(1, 0) == doctest::Approx(104.9));
  CHECK(std::isnan(s.value(1, 2)));
  CHECK(s.value(2, 2) == 1e12);
  CHECK(s.value(3, 1) == 100);
  // The broken values reach no kernel's average: only 104.9 of DRAM's, in the second sample.
  const kernel_metric_averages a = average_metrics(s, 0, 40);
  CHECK(a.values[0] == doctest::Approx(104.9));
  CHECK(a.values[1] == doctest::Approx(50.0));  // the second sample's 0 and the fourth's 100
}

TEST_CASE("gaps: unlisted stretches between samples are the GPU's skips; a kernel without samples says why") {
  using cuprof::detail::gpu_metric_gap;
  using cuprof::detail::metric_gap_cause;
  using cuprof::detail::unsampled_reason;
  // Samples over [0, 30), then [60, 80) and [200, 210): 30 to 60 lost to an overflow (listed), 80 to 200 not listed.
  gpu_metric_series s = series_of(0, 0, 10, two_metrics(), {{1, 1}, {2, 2}, {3, 3}});
  const double v[] = {4, 4};
  s.add(60, 70, v);
  s.add(70, 80, v);
  s.add(200, 210, v);
  s.gaps.push_back({30, 60, metric_gap_cause::overflow});
  const std::vector<gpu_metric_gap> found = cuprof::detail::unlisted_gaps(s);
  REQUIRE(found.size() == 1);
  CHECK(found[0].start_ns == 80);
  CHECK(found[0].end_ns == 200);
  CHECK(found[0].cause == metric_gap_cause::skipped);
  // 5 ns between samples is no gap: less than half an interval.
  gpu_metric_series close = series_of(0, 0, 10, two_metrics(), {{1, 1}});
  close.add(15, 25, v);
  CHECK(cuprof::detail::unlisted_gaps(close).empty());

  gpu_metric_series listed = s;
  CHECK(cuprof::detail::list_unlisted_gaps(listed) == 12);  // 120 ns at 10 ns a sample
  REQUIRE(listed.gaps.size() == 2);
  CHECK(listed.gaps[1].start_ns == 80);
  CHECK(cuprof::detail::list_unlisted_gaps(listed) == 0);  // all listed now

  CHECK(unsampled_reason(listed, 35, 55).find("overflowed") != std::string::npos);
  CHECK(unsampled_reason(listed, 100, 150) == "not sampled: the GPU took no sample and reported no overflow");
  CHECK(unsampled_reason(s, 100, 150) == "not sampled: between two samples further apart than the interval");
  CHECK(unsampled_reason(s, 100, 150, &listed.gaps) == unsampled_reason(listed, 100, 150));
  CHECK(unsampled_reason(listed, 300, 400) == "not sampled: after the GPU's last sample in the window");
  const gpu_metric_series late = series_of(0, 1000, 10, two_metrics(), {{1, 1}});
  CHECK(unsampled_reason(late, 0, 500).find("before the GPU's first sample") != std::string::npos);
  CHECK(unsampled_reason(gpu_metric_series{}, 0, 500) == "not sampled: no sample on this GPU in the window");
  CHECK(unsampled_reason(listed, 5, 25).empty());  // sampled
}

TEST_CASE("the default set: SM, DRAM and tensor pipe; occupancy and the others named keep cuprof's labels") {
  const std::vector<gpu_metric> all = cuprof::detail::labelled_gpu_metrics();
  const std::vector<gpu_metric> defaults = cuprof::detail::default_gpu_metrics();
  REQUIRE(all.size() == 4);
  REQUIRE(defaults.size() == 3);
  CHECK(defaults[0].label == cuprof::detail::metric_label_sm);
  CHECK(defaults[1].label == cuprof::detail::metric_label_dram);
  CHECK(defaults[2].label == cuprof::detail::metric_label_tensor);
  const gpu_metric occupancy = cuprof::detail::named_gpu_metric("sm__warps_active_realtime.avg.pct_of_peak_sustained_active");
  CHECK(occupancy.label == cuprof::detail::metric_label_occupancy);
  const gpu_metric other = cuprof::detail::named_gpu_metric("lts__t_bytes.sum");
  CHECK(other.name == "lts__t_bytes.sum");
  CHECK(other.label == "lts__t_bytes.sum");
}

TEST_CASE("metrics_of: every series' metrics, each label once, in the order first met") {
  std::vector<gpu_metric_series> series(2);
  series[0].metrics = two_metrics();
  series[1].metrics = {{"b__y.avg", "B %"}, {"c__z.sum", "c__z.sum"}};
  const std::vector<gpu_metric> all = cuprof::detail::metrics_of(series);
  REQUIRE(all.size() == 3);
  CHECK(all[0].label == "A %");
  CHECK(all[1].label == "B %");
  CHECK(all[2].label == "c__z.sum");
  CHECK(all[2].name == "c__z.sum");
  CHECK(cuprof::detail::metrics_of({}).empty());
}

// ---------------------------------------------------------------- the trace

namespace {

constexpr std::uint64_t interval = 10000;  // 10 us
const std::string quoted_label = "my \"metric\"";

// The writer's fixture (support/trace_contract.hpp) with its GPU 0 sampled
// every 10 us over its first 300 us but for [100, 150) us (samples lost):
// SM i, DRAM 100 - i, tensor 50.126 (none in the first sample), occupancy
// 25, a metric of the user's named with a quote, i / 3. GPU 1, which ran
// nothing, is sampled once.
struct sampled_fixture : fixture {
  sampled_fixture() {
    std::vector<gpu_metric> metrics = cuprof::detail::labelled_gpu_metrics();
    metrics.push_back({"user__metric.sum", quoted_label});
    gpu_metric_series s;
    s.device = 0;
    s.interval_ns = interval;
    s.dropped = 5;
    s.metrics = metrics;
    for (std::uint64_t i = 0; i < 30; ++i) {
      if (i >= 10 && i < 15) continue;
      const double v[] = {double(i), 100.0 - double(i), i == 0 ? no_value : 50.126, 25.0, double(i) / 3};
      s.add(epoch + i * interval, epoch + (i + 1) * interval, v);
    }
    t.gpu_metrics.push_back(s);
    gpu_metric_series other;
    other.device = 1;
    other.interval_ns = interval;
    other.dropped = 2;
    other.metrics = metrics;
    const double v[] = {1, 2, 3, 4, 5};
    other.add(epoch, epoch + interval, v);
    t.gpu_metrics.push_back(other);
  }
  std::size_t values() const {  // finite values: one counter event each
    std::size_t n = 0;
    for (const gpu_metric_series& s : t.gpu_metrics)
      for (double v : s.values) n += std::isfinite(v);
    return n;
  }
};

const json* kernel_named(const json& events, const std::string& name) {
  for (const json& e : events)
    if (e.value("ph", "") == "X" && e.value("cat", "") == "kernel" && e.value("name", "") == name) return &e;
  return nullptr;
}

}  // namespace

TEST_CASE("chrome trace: a counter per metric where its value moves, on its GPU's process, after the other events") {
  sampled_fixture f;
  const std::string text = cuprof::chrome_trace_json(f.t, "metrics");
  keep_trace("writer_gpu_metrics.json", text);
  const json doc = check_contract(text);
  const json& ev = doc["traceEvents"];
  const std::uint64_t base_ns = doc["baseTimeNanoseconds"];

  std::size_t counters = 0, last_other = 0, first_counter = ev.size();
  std::map<std::pair<std::uint64_t, std::string>, std::vector<std::int64_t>> tracks;  // (pid, name) -> ts, ns
  for (std::size_t i = 0; i < ev.size(); ++i) {
    const json& e = ev[i];
    if (e.value("cat", "") != "gpu_metric") {
      if (e["ph"] != "M") last_other = i;
      continue;
    }
    ++counters;
    first_counter = std::min(first_counter, i);
    CHECK(e["ph"] == "C");
    CHECK(e["tid"] == 0);
    REQUIRE(e["args"].size() == 1);
    REQUIRE(e["args"]["value"].is_number());
    tracks[{e["pid"], e["name"]}].push_back(ns_of(e["ts"]));
  }
  CHECK(last_other < first_counter);  // a section of their own, last, as the memory counters before them
  // Every metric a track on each GPU sampled, in time order; the first sample's tensor value was NaN.
  CHECK(tracks.size() == 10);
  const std::vector<std::int64_t>& sm = tracks[{0, "SM throughput %"}];
  REQUIRE(sm.size() == 25);  // a point more each sample: every one written
  CHECK(sm.front() == std::int64_t(epoch - base_ns));
  CHECK(std::is_sorted(sm.begin(), sm.end()));
  CHECK(sm[10] - sm[9] == std::int64_t(6 * interval));  // the lost samples: a gap, nothing written in it
  // Tensor (50.126) and occupancy (25) do not move: written where a stretch of samples starts and ends.
  const auto at = [&](std::initializer_list<std::uint64_t> samples) {
    std::vector<std::int64_t> ts;
    for (std::uint64_t i : samples) ts.push_back(std::int64_t(epoch + i * interval - base_ns));
    return ts;
  };
  CHECK(tracks[{0, "Tensor pipe active %"}] == at({1, 9, 15, 29}));  // none at 0: NaN there
  CHECK(tracks[{0, "Achieved occupancy %"}] == at({0, 9, 15, 29}));
  CHECK(tracks[{0, quoted_label}].size() == 25);  // escaped in the file, read back whole; i / 3 moves by 1/3 a sample
  CHECK(tracks[{1, "DRAM throughput %"}].size() == 1);
  CHECK(counters == 25 + 25 + 4 + 4 + 25 + 5);

  // Values with two decimals; the second sample is 500.01 ms after the base, a whole day.
  CHECK(
      text.find(
          R"({"ph":"C","cat":"gpu_metric","name":"Tensor pipe active %","pid":0,"tid":0,"ts":500010,"args":{"value":50.13}})") !=
      std::string::npos);
  CHECK(text.find(R"("name":"my \"metric\"","pid":0,"tid":0,"ts":500010,"args":{"value":0.33}})") != std::string::npos);
  // GPU 1 ran nothing and still has its process, named as GPU 0's.
  REQUIRE(find_meta(ev, "process_labels", 1, 0));
  CHECK((*find_meta(ev, "process_labels", 1, 0))["args"]["labels"] == "GPU 1");
}

TEST_CASE("chrome trace: kernels carry their averages and samples used, short ones a note, lean traces too") {
  sampled_fixture f;
  for (const cuprof::trace_detail detail : {cuprof::trace_detail::kineto, cuprof::trace_detail::lean}) {
    CAPTURE(int(detail));
    const std::string text = cuprof::chrome_trace_json(f.t, "metrics", {detail});
    const json doc = check_contract(text);
    const json& ev = doc["traceEvents"];

    // gemm, [20, 40) us: the samples at 20 and 30 us.
    const json* gemm = kernel_named(ev, "gemm");
    REQUIRE(gemm);
    const json& a = (*gemm)["args"];
    CHECK(a["SM throughput %"] == doctest::Approx(2.5));
    CHECK(a["DRAM throughput %"] == doctest::Approx(97.5));
    CHECK(a["Tensor pipe active %"] == doctest::Approx(50.13));
    CHECK(a["Achieved occupancy %"] == doctest::Approx(25.0));
    CHECK(a[quoted_label] == doctest::Approx(0.83));
    CHECK(a["metric samples"] == 2);
    CHECK_FALSE(a.contains("metric note"));
    CHECK(text.find(R"("SM throughput %":2.50,)") != std::string::npos);

    // nvjet, [210, 260) us: past the samples (they end at 300 us).
    const json* nvjet = kernel_named(ev, "nvjet");
    REQUIRE(nvjet);
    CHECK((*nvjet)["args"]["metric samples"] == 5);
    CHECK((*nvjet)["args"]["SM throughput %"] == doctest::Approx(23.0));

    // A graph node of 1 us, shorter than the 10 us interval: no averages, and why.
    const json* node = kernel_named(ev, "graph_node_a");
    REQUIRE(node);
    CHECK((*node)["args"]["metric samples"] == 0);
    CHECK((*node)["args"]["metric note"] == "shorter than the sampling interval");
    CHECK_FALSE((*node)["args"].contains("SM throughput %"));

    // The orphan, [500, 501) us, is short too; copies and memsets get nothing.
    for (const json& e : ev)
      if (e.value("cat", "") == "gpu_memcpy" || e.value("cat", "") == "gpu_memset")
        CHECK_FALSE(e["args"].contains("metric samples"));
  }
}

TEST_CASE("chrome trace: a kernel in a gap of lost samples averages what overlaps it; one CUPTI could not time has none") {
  sampled_fixture f;
  // [95, 125) us: no sample inside (100 to 150 us were lost); 5 us of the one at 90 us (SM 9).
  f.gpu("in_the_gap", 95000, 125000, 77);
  cuprof::gpu_activity& unknown = f.gpu("untimed", 130000, 130000, 78);
  unknown.flags |= cuprof::gpu_timing_unknown;
  const json doc = check_contract(cuprof::chrome_trace_json(f.t));
  const json* gap = kernel_named(doc["traceEvents"], "in_the_gap");
  REQUIRE(gap);
  CHECK((*gap)["args"]["metric samples"] == 1);
  CHECK((*gap)["args"]["SM throughput %"] == doctest::Approx(9.0));
  const json* untimed = kernel_named(doc["traceEvents"], "untimed");
  REQUIRE(untimed);
  CHECK_FALSE((*untimed)["args"].contains("metric samples"));
}

TEST_CASE("chrome trace: a counter is written where its value moves by more than a step; read back, values hold to the next") {
  fixture f;
  gpu_metric_series s;
  s.device = 0;
  s.interval_ns = interval;
  s.metrics = {{"a__x.avg.pct_of_peak_sustained_elapsed", "A %"}, {"b__y.sum", "B"}};
  // A, a percentage (step 0.5): 10, 10.3, ... up 0.3 a sample. B (step 0.5 % of its largest, 2000: 10): 1000, 1004, 1006, then 2000.
  const double b_values[] = {1000, 1004, 1006, 2000, 2000, 2000, 2000, 2000};
  for (std::uint64_t i = 0; i < 8; ++i) {
    const double v[] = {10 + 0.3 * double(i), b_values[i]};
    s.add(epoch + i * interval, epoch + (i + 1) * interval, v);
  }
  f.t.gpu_metrics.push_back(s);
  const std::string text = cuprof::chrome_trace_json(f.t);
  const json doc = check_contract(text);
  std::map<std::string, std::vector<std::uint64_t>> at;  // samples written, by track
  std::map<std::string, std::vector<double>> values;
  const std::uint64_t base_ns = doc["baseTimeNanoseconds"];
  for (const json& e : doc["traceEvents"])
    if (e.value("cat", "") == "gpu_metric") {
      at[e["name"]].push_back((std::uint64_t(ns_of(e["ts"])) + base_ns - epoch) / interval);
      values[e["name"]].push_back(e["args"]["value"]);
    }
  // A moves 0.6 from the last written every second sample; the last sample ends the stretch.
  CHECK(at["A %"] == std::vector<std::uint64_t>{0, 2, 4, 6, 7});
  REQUIRE(values["A %"].size() == 5);
  CHECK(values["A %"][1] == doctest::Approx(10.6));
  CHECK(values["A %"][4] == doctest::Approx(12.1));
  CHECK(at["B"] == std::vector<std::uint64_t>{0, 3, 7});  // 1004 and 1006 within 10 of 1000
  CHECK(doc["cuprof"]["gpu_metrics"]["held_values"] == true);

  // Read back: the union of the tracks' times, each value held until its track's next event, the last an interval long.
  const cuprof::loaded_trace lt = cuprof::parse_trace(text, "t");
  REQUIRE(lt.t.gpu_metrics.size() == 1);
  const gpu_metric_series& r = lt.t.gpu_metrics[0];
  const std::vector<std::uint64_t> starts = {0, 2, 3, 4, 6, 7}, ends = {2, 3, 4, 6, 7, 8};
  const std::vector<double> a_held = {10, 10.6, 10.6, 11.2, 11.8, 12.1}, b_held = {1000, 1000, 2000, 2000, 2000, 2000};
  REQUIRE(r.size() == starts.size());
  for (std::size_t i = 0; i < r.size(); ++i) {
    CAPTURE(i);
    CHECK(r.start_ns[i] == epoch + starts[i] * interval);
    CHECK(r.end_ns[i] == epoch + ends[i] * interval);
    CHECK(r.value(i, 0) == doctest::Approx(a_held[i]));
    CHECK(r.value(i, 1) == doctest::Approx(b_held[i]));
  }
  // Every original sample's value is within a step of what is read back at its time.
  for (std::uint64_t i = 0; i < 8; ++i) {
    const kernel_metric_averages back = average_metrics(r, epoch + i * interval, epoch + (i + 1) * interval);
    CHECK(std::fabs(back.values[0] - s.value(i, 0)) <= 0.5);
    CHECK(std::fabs(back.values[1] - s.value(i, 1)) <= 10);
  }
  // Written again, the same events.
  const std::string again = cuprof::chrome_trace_json(lt.t);
  const auto counters = [](const std::string& t) {
    std::vector<std::string> lines;
    const json doc = json::parse(t);  // the events are the document's: it must outlive the loop
    for (const json& e : doc["traceEvents"])
      if (e.value("cat", "") == "gpu_metric") lines.push_back(e.dump());
    return lines;
  };
  CHECK(counters(again) == counters(text));
}

TEST_CASE("chrome trace: gaps and alignment in the cuprof block; a kernel without samples says why; read back") {
  using cuprof::detail::metric_gap_cause;
  sampled_fixture f;
  // GPU 0's samples miss [100, 150) us (not listed: the GPU's skip) and, listed, [300, 400) us to an overflow.
  f.t.gpu_metrics[0].gaps.push_back({epoch + 30 * interval, epoch + 40 * interval, metric_gap_cause::overflow});
  f.t.gpu_metrics[0].shift_ns = -123456;
  f.t.gpu_metrics[0].aligned = true;
  f.gpu("in_the_skip", 102000, 140000, 81);  // [102, 140) us
  f.gpu("in_the_overflow", 320000, 380000, 82);
  const std::string text = cuprof::chrome_trace_json(f.t);
  const json doc = check_contract(text);
  const json& g = doc["cuprof"]["gpu_metrics"];
  REQUIRE(g["alignment"].size() == 2);
  CHECK(g["alignment"][0] == json({{"device", 0}, {"shift_ns", -123456}, {"aligned", true}}));
  CHECK(g["alignment"][1] == json({{"device", 1}, {"shift_ns", 0}, {"aligned", false}}));
  REQUIRE(g["gaps"].size() == 2);
  CHECK(g["gaps"][0] == json({{"device", 0}, {"ts", 500100}, {"dur", 50}, {"cause", "skipped"}}));
  CHECK(g["gaps"][1] == json({{"device", 0}, {"ts", 500300}, {"dur", 100}, {"cause", "overflow"}}));
  const json* skip = kernel_named(doc["traceEvents"], "in_the_skip");
  REQUIRE(skip);
  CHECK((*skip)["args"]["metric samples"] == 0);
  CHECK((*skip)["args"]["metric note"] == "not sampled: the GPU took no sample and reported no overflow");
  const json* overflow = kernel_named(doc["traceEvents"], "in_the_overflow");
  REQUIRE(overflow);
  CHECK((*overflow)["args"]["metric note"] ==
        "not sampled: the GPU's sample buffer overflowed (decoding fell behind); sampling restarted");

  const cuprof::loaded_trace lt = cuprof::parse_trace(text, "t");
  REQUIRE(lt.t.gpu_metrics.size() == 2);
  const gpu_metric_series& r = lt.t.gpu_metrics[0];
  CHECK(r.shift_ns == -123456);
  CHECK(r.aligned);
  REQUIRE(r.gaps.size() == 2);
  CHECK(r.gaps[0].start_ns == epoch + 10 * interval);
  CHECK(r.gaps[0].end_ns == epoch + 15 * interval);
  CHECK(r.gaps[0].cause == metric_gap_cause::skipped);
  CHECK(r.gaps[1].start_ns == epoch + 30 * interval);
  CHECK(r.gaps[1].end_ns == epoch + 40 * interval);
  CHECK(r.gaps[1].cause == metric_gap_cause::overflow);
  // Nothing holds across the skip: the sample before it is one interval long.
  std::size_t before = 0;
  while (before + 1 < r.size() && r.start_ns[before + 1] < epoch + 10 * interval) ++before;
  CHECK(r.end_ns[before] == epoch + 10 * interval);
  CHECK(cuprof::parse_trace(cuprof::chrome_trace_json(lt.t), "again").t.gpu_metrics[0].gaps.size() == 2);
}

TEST_CASE("chrome trace: the cuprof block's gpu_metrics; none without samples") {
  sampled_fixture f;
  const json doc = json::parse(cuprof::chrome_trace_json(f.t));
  const json& g = doc["cuprof"]["gpu_metrics"];
  CHECK(g["interval_ns"] == interval);
  CHECK(g["dropped"] == 7);  // both GPUs'
  CHECK(g["devices"] == json::array({0, 1}));
  REQUIRE(g["metrics"].size() == 5);
  CHECK(g["metrics"][0]["name"] == "TriageCompute.sm__throughput.avg.pct_of_peak_sustained_elapsed");
  CHECK(g["metrics"][0]["label"] == "SM throughput %");
  CHECK(g["metrics"][4]["name"] == "user__metric.sum");
  CHECK(g["metrics"][4]["label"] == quoted_label);

  fixture plain;
  const std::string text = cuprof::chrome_trace_json(plain.t);
  CHECK(text.find("gpu_metric") == std::string::npos);
  CHECK(text.find("metric samples") == std::string::npos);
}

TEST_CASE("chrome trace: blocks cut through the samples make the one-block document") {
  sampled_fixture f;
  const auto document = [&](std::size_t block_items) {
    const cuprof::detail::chrome_trace_layout layout(f.t, "blocks", block_items);
    return cuprof::detail::chrome_trace_writer(layout).document();
  };
  const std::string whole = document(std::numeric_limits<std::size_t>::max());
  for (std::size_t items : {1, 3, 7}) {
    CAPTURE(items);
    CHECK(document(items) == whole);
  }
}

// ---------------------------------------------------------------- the table

namespace {

// Kernel "k" three times on GPU 0: [0, 20) us over samples at 10%, [100, 140)
// us over samples at 40%, and 5 us, shorter than the 10 us interval; "other"
// on GPU 1, not sampled; a copy on GPU 0. B has values only from 100 us on.
cuprof::trace table_trace(bool sampled) {
  builder b;
  b.gpu("k", 0, 20000, 1);
  b.gpu("k", 100000, 140000, 2);
  b.gpu("k", 200000, 205000, 3);
  b.gpu("other", 0, 50000, 4, cuprof::gpu_kind::kernel, 1);
  b.transfer(b.gpu("Memcpy HtoD (Pinned -> Device)", 300000, 310000, 5, cuprof::gpu_kind::memcpy), 4096, 1);
  if (sampled) {
    std::vector<std::vector<double>> rows;
    for (int i = 0; i < 30; ++i) rows.push_back({i < 2 ? 10.0 : 40.0, i < 10 ? no_value : 7.0});
    b.t.gpu_metrics.push_back(series_of(0, 0, interval, two_metrics(), rows));
  }
  return b.t;
}

}  // namespace

TEST_CASE("key_averages: a kernel name's metrics weighted by its kernels' durations, short ones left out") {
  const cuprof::event_averages avg = cuprof::key_averages(table_trace(true));
  CHECK(avg.metric_labels() == std::vector<std::string>{"A %", "B %"});
  const cuprof::event_average* k = avg.find("k", cuprof::row_kind::gpu_work);
  REQUIRE(k);
  CHECK(k->count == 3);
  CHECK(k->sampled == 2);
  REQUIRE(k->metrics.size() == 2);
  CHECK(k->metrics[0] == doctest::Approx((10.0 * 20 + 40.0 * 40) / 60));  // 30, not the plain mean 25
  CHECK(k->metrics[1] == doctest::Approx(7.0));  // the first kernel had no B: its time is not in B's weight
  const cuprof::event_average* other = avg.find("other", cuprof::row_kind::gpu_work);
  REQUIRE(other);
  CHECK(other->metrics.empty());  // its GPU was not sampled
  CHECK(other->sampled == 0);
  const cuprof::event_average* copy = avg.find("Memcpy HtoD (Pinned -> Device)", cuprof::row_kind::gpu_work);
  REQUIRE(copy);
  CHECK(copy->metrics.empty());

  const cuprof::event_averages plain = cuprof::key_averages(table_trace(false));
  CHECK(plain.metric_labels().empty());
  CHECK(plain.find("k", cuprof::row_kind::gpu_work)->metrics.empty());
}

TEST_CASE("key_averages: series whose metrics differ share columns by label") {
  cuprof::trace t = table_trace(true);
  t.gpu_metrics.push_back(
      series_of(1, 0, interval, {{"b__y.avg", "B %"}, {"c__z", "C"}}, {{60, 5}, {60, 5}, {60, 5}, {60, 5}, {60, 5}}));
  const cuprof::event_averages avg = cuprof::key_averages(t);
  CHECK(avg.metric_labels() == std::vector<std::string>{"A %", "B %", "C"});
  const cuprof::event_average* other = avg.find("other", cuprof::row_kind::gpu_work);
  REQUIRE(other);
  REQUIRE(other->metrics.size() == 3);
  CHECK(std::isnan(other->metrics[0]));
  CHECK(other->metrics[1] == doctest::Approx(60.0));
  CHECK(other->metrics[2] == doctest::Approx(5.0));
  CHECK(other->sampled == 1);
  CHECK(avg.find("k", cuprof::row_kind::gpu_work)->metrics.size() == 3);
}

TEST_CASE("table: metric columns only with table_options::metrics, values on kernel rows, '-' elsewhere") {
  const cuprof::event_averages avg = cuprof::key_averages(table_trace(true));
  const std::string torch = avg.table();
  CHECK(torch == cuprof::key_averages(table_trace(false)).table());  // off by default: the table is unchanged
  CHECK(torch.find("Sampled") == std::string::npos);

  cuprof::table_options o;
  o.metrics = true;
  const std::string table = avg.table(o);
  CHECK(table.find("           A %           B %       Sampled  ") != std::string::npos);
  std::map<std::string, std::string> lines;
  for (std::size_t at = 0; at < table.size();) {
    const std::size_t eol = table.find('\n', at);
    const std::string line = table.substr(at, eol - at);
    at = eol + 1;
    const std::size_t name = line.find_first_not_of(' ');
    if (name != std::string::npos) lines[line.substr(name, line.find("  ", name) - name)] = line;
  }
  CHECK(lines["k"].find("         30.00          7.00             2  ") != std::string::npos);
  CHECK(lines["other"].find("             -             -             -  ") != std::string::npos);
  CHECK(lines["Memcpy HtoD (Pinned -> Device)"].find("             -             -             -  ") != std::string::npos);
  // Without samples there are no columns to add.
  CHECK(cuprof::key_averages(table_trace(false)).table(o) == torch);
}

TEST_CASE("cuprof table --format csv|json: with metrics, a column per label and sampled, null where a row has none") {
  const cuprof::event_averages avg = cuprof::key_averages(table_trace(true));
  cuprof::table_options o;
  o.row_limit = -1;
  const cuprof::cli::record_table plain = cuprof::cli::table_records(avg, o);
  o.metrics = true;
  const cuprof::cli::record_table t = cuprof::cli::table_records(avg, o);
  const std::size_t first = plain.columns.size();
  REQUIRE(t.columns.size() == first + 3);
  CHECK(std::equal(plain.columns.begin(), plain.columns.end(), t.columns.begin()));
  CHECK(t.columns[first] == "A %");
  CHECK(t.columns[first + 1] == "B %");
  CHECK(t.columns[first + 2] == "sampled");
  std::map<std::string, const std::vector<cuprof::cli::cell>*> rows;
  for (const auto& row : t.rows) rows[row[0].text] = &row;
  REQUIRE(rows.count("k"));
  CHECK((*rows["k"])[first].text == "30.000");
  CHECK((*rows["k"])[first + 1].text == "7.000");
  CHECK((*rows["k"])[first + 2].text == "2");
  REQUIRE(rows.count("other"));
  for (std::size_t c = first; c < first + 3; ++c) CHECK((*rows["other"])[c].text == "null");
  CHECK(cuprof::cli::to_csv(t).find(",A %,B %,sampled\n") != std::string::npos);
}

TEST_CASE("table: a label is made terminal-safe and widens its column") {
  cuprof::trace t = table_trace(false);
  t.gpu_metrics.push_back(series_of(0, 0, interval, {{"x", "a long\nlabel of a metric"}}, {{1}, {1}, {1}}));
  cuprof::table_options o;
  o.metrics = true;
  const std::string table = cuprof::key_averages(t).table(o);
  CHECK(table.find("a long\\x0alabel of a metric  ") != std::string::npos);
  CHECK(table.find("a long\nlabel") == std::string::npos);
  CHECK(table.find("                      1.00  ") != std::string::npos);  // right-aligned to the label's width
}

TEST_CASE("table: with stats and stack grouping, each cell under its header") {
  builder b;
  const std::uint32_t call = b.call("cudaLaunchKernel", 0, 1000, 1);
  b.t.stack_frames = {b.t.names.intern("main (main.cpp:3)")};
  b.t.stacks.push_back({0, 1});
  b.t.call_stacks.assign(b.t.api_calls.size(), cuprof::no_index);
  b.t.call_stacks[call] = 0;
  b.gpu("k", 2000, 3000, 1);
  cuprof::attribute(b.t);
  cuprof::table_options o;
  o.stats = true;
  const std::string table = cuprof::key_averages(b.t, cuprof::group_by::name, 1).table(o);
  // Source Location is the last column: the frame starts where its dashes do, after the stats.
  CHECK(table.find("CUDA max  Source Location") != std::string::npos);
  const std::string separator = table.substr(0, table.find('\n'));
  const std::size_t column = separator.rfind("  ", separator.size() - 3) + 2;
  const std::size_t frame = table.find("main (main.cpp:3)");
  REQUIRE(frame != std::string::npos);
  CHECK(frame - (table.rfind('\n', frame) + 1) == column);
}

}  // TEST_SUITE("model_gpu_metrics")
