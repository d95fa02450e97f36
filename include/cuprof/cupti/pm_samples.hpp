// One device's GPU metric samples from their evaluation until a window takes
// them: the series as CUPTI stamped it, the stretches left unsampled with
// their cause, and which clock the stamps are on. No CUPTI call, so the rules
// (which sample is no measurement, where a gap goes, what a window takes and
// what stays for the next) are tested on the CPU with synthetic samples.
#pragma once

#include "../collect/clock.hpp"
#include "../model/gpu_metrics.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace cuprof::detail::cupti {

// Samples lost before the next one: whether, and why.
struct pm_lost_samples {
  bool lost = false;
  metric_gap_cause cause = metric_gap_cause::late;
};

// A sample's times as CUPTI stamped them.
struct pm_sample_times {
  std::uint64_t start, end;
};

// The samples a decode brings: those since the last decode began, and the
// half as many again that come while it runs (decoding a sample costs up to
// three quarters of the default interval on an H200 under long GEMMs). `since_ns`
// counts up to a second: a first decode, or one after a pause, is no estimate.
inline std::size_t samples_a_decode_brings(std::uint64_t since_ns, std::uint64_t interval_ns) {
  return std::size_t(std::min<std::uint64_t>(since_ns, 1000000000) / std::max<std::uint64_t>(interval_ns, 1) * 3 / 2);
}

// Whether the decoder hands its image (`held` of `capacity` samples) to the
// evaluator before decoding into it: once it holds `handoff_at` samples (room_ms
// of room left), or earlier when the decode may bring more than the room left. A
// decode that fills its image loses the samples past it, and a decoder slowed by
// its own decodes comes back later each time than room_ms allows.
inline bool hands_off_before_decode(std::size_t held, std::size_t capacity, std::size_t handoff_at, std::size_t brings) {
  return held > 0 && (held >= handoff_at || capacity - std::min(capacity, held) < brings);
}

class pm_sample_log {
 public:
  void set_metrics(const std::vector<gpu_metric>& metrics) { raw_.metrics = metrics; }

  // The stamps' clock, learnt from the first one seen (`t`) and the clocks
  // read when it was decoded: CUPTI stamps in epoch ns, or in cuprof's ticks
  // once its timestamp callback is applied.
  void learn_clock(std::uint64_t t, std::uint64_t epoch_now, std::uint64_t ticks_now) {
    if (!clock_) clock_ = near(t, epoch_now) ? epoch_ns : near(t, ticks_now) ? ticks : epoch_ns;
  }
  std::uint64_t to_epoch(std::uint64_t t, const tick_converter& clock) const {
    return clock_ == ticks ? clock.to_epoch_ns(t) : t;
  }

  // Samples the hardware lost without saying how many (a buffer overflow).
  void count_dropped(std::uint64_t n) { dropped_ += n; }

  // An image's evaluated samples (`values`: the metrics of each in turn), in
  // order. `fresh_start`: the first is the first since sampling started;
  // `gap_before`: samples were lost before it. Past `max_kept` samples kept
  // (`kept_total`, every device's), a sample is dropped and its time listed.
  void add(const pm_sample_times* samples, const double* values, std::size_t n, bool fresh_start, pm_lost_samples gap_before,
           std::uint64_t interval_ns, std::size_t& kept_total, std::size_t max_kept, std::uint64_t decoded_epoch,
           std::uint64_t decoded_ticks) {
    const std::size_t nm = raw_.metrics.size();
    bool first = fresh_start;
    for (std::size_t i = 0; i < n; ++i) {
      const pm_sample_times& si = samples[i];
      // The first sample after a start runs from the configuration, not from
      // the previous sample: far longer than the interval, it is no
      // measurement. A later long sample (the hardware skipped triggers) is
      // one, over its whole length.
      const bool skip = si.end <= si.start || (first && si.end - si.start > 4 * interval_ns);
      first = false;
      if (skip) continue;
      learn_clock(si.end, decoded_epoch, decoded_ticks);
      if (gap_before.lost) {
        if (last_end_ && si.start > last_end_) add_gap(last_end_, si.start, gap_before.cause);
        gap_before = {};
      }
      last_end_ = si.end;
      if (kept_total >= max_kept) {
        ++dropped_;
        add_gap(si.start, si.end, metric_gap_cause::sample_cap);
        continue;
      }
      raw_.add_unchecked(si.start, si.end, values + i * nm);
      ++kept_total;
    }
  }

  // What falls in [from_ns, to_ns] (epoch ns), for device `device`; older
  // samples and gaps are dropped, later ones stay for the next window.
  gpu_metric_series take(std::uint32_t device, std::uint64_t interval_ns, std::uint64_t from_ns, std::uint64_t to_ns,
                         const tick_converter& clock, std::size_t& kept_total) {
    gpu_metric_series s;
    s.device = device;
    s.interval_ns = interval_ns;
    s.metrics = raw_.metrics;
    s.dropped = std::exchange(dropped_, 0);
    const std::size_t nm = s.metrics.size();
    gpu_metric_series kept;
    kept.metrics = raw_.metrics;
    for (std::size_t i = 0; i < raw_.size(); ++i) {
      const std::uint64_t a = to_epoch(raw_.start_ns[i], clock), b = to_epoch(raw_.end_ns[i], clock);
      if (b <= from_ns) continue;  // before the window: nobody's
      if (a >= to_ns) {
        kept.add_unchecked(raw_.start_ns[i], raw_.end_ns[i], &raw_.values[i * nm]);
        continue;
      }
      s.add(a, b, &raw_.values[i * nm]);
    }
    // Gaps in the window go with it; one running past its end stays for the next.
    std::vector<gpu_metric_gap> later;
    for (const gpu_metric_gap& g : gaps_) {
      const std::uint64_t a = to_epoch(g.start_ns, clock), b = to_epoch(g.end_ns, clock);
      if (b > from_ns && a < to_ns) s.gaps.push_back({a, b, g.cause});
      if (b > to_ns) later.push_back(g);
    }
    gaps_ = std::move(later);
    // A stretch the hardware left unsampled (seen on an H200 now and then,
    // with no overflow reported) counts as the samples it is missing.
    s.dropped += list_unlisted_gaps(s);
    kept_total -= raw_.size() - kept.size();
    raw_ = std::move(kept);
    return s;
  }

 private:
  enum stamp_clock { not_known, epoch_ns, ticks };

  // A gap, merged with the last when it continues it for the same cause.
  void add_gap(std::uint64_t start, std::uint64_t end, metric_gap_cause cause) {
    if (!gaps_.empty() && gaps_.back().cause == cause && gaps_.back().end_ns >= start) {
      gaps_.back().end_ns = std::max(gaps_.back().end_ns, end);
      return;
    }
    gaps_.push_back({start, end, cause});
  }

  // Within a minute of `reference`: which clock a timestamp was taken on.
  static bool near(std::uint64_t t, std::uint64_t reference) {
    const std::uint64_t minute = 60000000000ull;
    return t > reference ? t - reference < minute : reference - t < minute;
  }

  gpu_metric_series raw_;             // timestamps as CUPTI gave them
  std::vector<gpu_metric_gap> gaps_;  // likewise
  std::uint64_t last_end_ = 0;        // the last sample's end, for a gap after it
  stamp_clock clock_ = not_known;
  std::uint64_t dropped_ = 0;
};

}  // namespace cuprof::detail::cupti
