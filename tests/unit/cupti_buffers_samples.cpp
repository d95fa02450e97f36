// The tracer's and the PM sampler's pure parts, with no CUPTI and no GPU:
// the activity buffers CUPTI writes into (cupti/activity_buffers.hpp) and a
// device's metric samples until a window takes them (cupti/pm_samples.hpp).

#include <cuprof/cupti/activity_buffers.hpp>
#include <cuprof/cupti/pm_samples.hpp>

#include <doctest/doctest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

using cuprof::detail::gpu_metric;
using cuprof::detail::gpu_metric_gap;
using cuprof::detail::gpu_metric_series;
using cuprof::detail::metric_gap_cause;
using cuprof::detail::tick_converter;
using cuprof::detail::cupti::activity_buffers;
using cuprof::detail::cupti::hands_off_before_decode;
using cuprof::detail::cupti::pm_lost_samples;
using cuprof::detail::cupti::pm_sample_log;
using cuprof::detail::cupti::pm_sample_times;
using cuprof::detail::cupti::samples_a_decode_brings;

namespace {

constexpr std::uint64_t interval = 100000;                    // 100 us
constexpr std::uint64_t epoch = 1700000000ull * 1000000000u;  // samples stamped in epoch ns

pm_sample_log one_metric_log() {
  pm_sample_log log;
  log.set_metrics({gpu_metric{"sm__throughput.avg.pct_of_peak_sustained_elapsed", "SM throughput %"}});
  return log;
}

// Samples back to back from `start`, one interval each, valued 10, 11, ...
struct samples {
  std::vector<pm_sample_times> times;
  std::vector<double> values;
  samples(std::uint64_t start, int n, double first_value = 10) {
    for (int i = 0; i < n; ++i) {
      times.push_back({start + std::uint64_t(i) * interval, start + std::uint64_t(i + 1) * interval});
      values.push_back(first_value + i);
    }
  }
};

}  // namespace

TEST_SUITE("cupti_buffers_samples") {
TEST_CASE("activity buffers: the lowest free slot first, each handed back once, refused and counted when all are out") {
  auto pool = std::make_unique<activity_buffers>();
  std::uint8_t* a = pool->request();
  std::uint8_t* b = pool->request();
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a != b);
  CHECK(pool->with_cupti_now() == 2);
  std::memset(a, 0x5A, 100);  // records CUPTI wrote
  pool->complete(a, 100);
  CHECK(pool->with_cupti_now() == 1);
  std::vector<std::size_t> seen;
  pool->take_completed([&](std::uint8_t* records, std::size_t valid) {
    CHECK(records == a);
    CHECK(std::all_of(records, records + valid, [](std::uint8_t x) { return x == 0x5A; }));
    seen.push_back(valid);
  });
  CHECK(seen == std::vector<std::size_t>{100});
  pool->take_completed([&](std::uint8_t*, std::size_t valid) { seen.push_back(valid); });
  CHECK(seen.size() == 1);  // taken once
  // The freed slot is the lowest again: its buffer comes back, zeroed.
  std::uint8_t* again = pool->request();
  CHECK(again == a);
  CHECK(std::all_of(again, again + 100, [](std::uint8_t x) { return x == 0; }));
  // Every slot out: the next request gets nothing, and is counted.
  std::set<std::uint8_t*> out{again, b};
  for (std::size_t i = 2; i < activity_buffers::max_buffers; ++i) {
    std::uint8_t* p = pool->request();
    REQUIRE(p);
    out.insert(p);
  }
  CHECK(out.size() == activity_buffers::max_buffers);
  CHECK(pool->request() == nullptr);
  CHECK(pool->refused() == 1);
  CHECK(pool->with_cupti_now() == activity_buffers::max_buffers);
  // All handed back and parsed: trim() keeps kept_when_idle mapped, and a buffer still with CUPTI is never unmapped.
  for (std::uint8_t* p : out)
    if (p != b) pool->complete(p, 0);
  pool->take_completed([](std::uint8_t*, std::size_t) {});
  pool->trim();
  CHECK(pool->mapped_now() == activity_buffers::kept_when_idle + 1);
  CHECK(pool->with_cupti_now() == 1);
}

TEST_CASE("activity buffers: a parsed buffer is zero again for CUPTI, its slot index kept, its pages past the first given back") {
  const std::size_t size = activity_buffers::buffer_header + activity_buffers::buffer_bytes;
  void* mapped = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mapped != MAP_FAILED);
  auto* memory = static_cast<std::uint8_t*>(mapped);
  const std::size_t slot = 17;
  std::memcpy(memory, &slot, sizeof slot);
  std::memset(memory + activity_buffers::buffer_header, 0xAB, activity_buffers::buffer_bytes);  // records CUPTI wrote
  activity_buffers::clear_for_reuse(memory);
  std::size_t kept_slot = 0;
  std::memcpy(&kept_slot, memory, sizeof kept_slot);
  CHECK(kept_slot == slot);
  const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
  const std::size_t pages = (size + page - 1) / page;
  std::vector<unsigned char> resident(pages);
  REQUIRE(mincore(memory, size, resident.data()) == 0);
  std::size_t resident_after_first = 0;
  for (std::size_t i = 1; i < pages; ++i) resident_after_first += resident[i] & 1;
  CHECK(resident_after_first == 0);
  const std::uint8_t* records = memory + activity_buffers::buffer_header;
  CHECK(std::all_of(records, records + activity_buffers::buffer_bytes, [](std::uint8_t b) { return b == 0; }));
  munmap(mapped, size);
}

TEST_CASE("pm samples: the first after a start is no measurement when long, a later long one is; empty ones are none") {
  pm_sample_log log = one_metric_log();
  std::size_t kept = 0;
  std::vector<pm_sample_times> t{{epoch, epoch + 50 * interval},  // from the configuration to the first trigger
                                 {epoch + 50 * interval, epoch + 51 * interval},
                                 {epoch + 51 * interval, epoch + 51 * interval},   // no time
                                 {epoch + 51 * interval, epoch + 60 * interval}};  // the hardware skipped triggers
  const std::vector<double> v{1, 2, 3, 4};
  log.add(t.data(), v.data(), t.size(), true, {}, interval, kept, 1000, epoch, 0);
  CHECK(kept == 2);
  const gpu_metric_series s = log.take(0, interval, epoch, epoch + 100 * interval, tick_converter{}, kept);
  REQUIRE(s.size() == 2);
  CHECK(s.value(0, 0) == 2);
  CHECK(s.value(1, 0) == 4);
  CHECK(s.start_ns[1] == epoch + 51 * interval);
  CHECK(kept == 0);
}

TEST_CASE("pm samples: lost samples become a gap with their cause, merged while it goes on; past the cap, dropped and listed") {
  pm_sample_log log = one_metric_log();
  std::size_t kept = 0;
  samples a(epoch, 3);
  log.add(a.times.data(), a.values.data(), 3, false, {}, interval, kept, 5, epoch, 0);
  samples b(epoch + 10 * interval, 2);  // after an overflow
  log.add(b.times.data(), b.values.data(), 2, false, pm_lost_samples{true, metric_gap_cause::overflow}, interval, kept, 5, epoch,
          0);
  CHECK(kept == 5);
  samples c(epoch + 12 * interval, 3);  // over the cap: dropped, one gap for the three
  log.add(c.times.data(), c.values.data(), 3, false, {}, interval, kept, 5, epoch, 0);
  CHECK(kept == 5);
  const gpu_metric_series s = log.take(2, interval, epoch, epoch + 20 * interval, tick_converter{}, kept);
  CHECK(s.device == 2);
  CHECK(s.interval_ns == interval);
  CHECK(s.size() == 5);
  CHECK(s.dropped == 3);
  REQUIRE(s.gaps.size() == 2);
  CHECK(s.gaps[0].cause == metric_gap_cause::overflow);
  CHECK(s.gaps[0].start_ns == epoch + 3 * interval);
  CHECK(s.gaps[0].end_ns == epoch + 10 * interval);
  CHECK(s.gaps[1].cause == metric_gap_cause::sample_cap);
  CHECK(s.gaps[1].start_ns == epoch + 12 * interval);
  CHECK(s.gaps[1].end_ns == epoch + 15 * interval);
  CHECK(kept == 0);
}

TEST_CASE("pm samples: a window takes what it overlaps; older ones go, later ones and a gap running on stay for the next") {
  pm_sample_log log = one_metric_log();
  std::size_t kept = 0;
  samples a(epoch, 10);
  log.add(a.times.data(), a.values.data(), 10, false, {}, interval, kept, 1000, epoch, 0);
  samples b(epoch + 14 * interval, 4, 20);  // samples 10-13 lost
  log.add(b.times.data(), b.values.data(), 4, false, pm_lost_samples{true, metric_gap_cause::late}, interval, kept, 1000, epoch,
          0);
  REQUIRE(kept == 14);

  // The window [2.5, 12] intervals: samples 2..9 (the one at 2 overlaps its start), the gap from 10 to 14.
  gpu_metric_series s = log.take(0, interval, epoch + 5 * interval / 2, epoch + 12 * interval, tick_converter{}, kept);
  CHECK(s.size() == 8);
  CHECK(s.value(0, 0) == 12);
  CHECK(s.value(7, 0) == 19);
  REQUIRE(s.gaps.size() == 1);
  CHECK(s.gaps[0].cause == metric_gap_cause::late);
  CHECK(kept == 4);  // b's samples wait for the next window; a's are gone

  // The next window gets the gap's rest (it ran past the first's end) and b's samples, nothing of a's.
  s = log.take(0, interval, epoch + 12 * interval, epoch + 30 * interval, tick_converter{}, kept);
  CHECK(s.size() == 4);
  CHECK(s.value(0, 0) == 20);
  REQUIRE(s.gaps.size() == 1);
  CHECK(s.gaps[0].end_ns == epoch + 14 * interval);
  CHECK(s.dropped == 0);
  CHECK(kept == 0);
}

TEST_CASE("pm samples: an unlisted stretch without samples is listed as skipped and counted; none for samples back to back") {
  pm_sample_log log = one_metric_log();
  std::size_t kept = 0;
  samples a(epoch, 3);
  samples b(epoch + 8 * interval, 2);  // 5 intervals of nothing, no overflow said
  log.add(a.times.data(), a.values.data(), 3, false, {}, interval, kept, 1000, epoch, 0);
  log.add(b.times.data(), b.values.data(), 2, false, {}, interval, kept, 1000, epoch, 0);
  const gpu_metric_series s = log.take(0, interval, epoch, epoch + 20 * interval, tick_converter{}, kept);
  REQUIRE(s.gaps.size() == 1);
  CHECK(s.gaps[0].cause == metric_gap_cause::skipped);
  CHECK(s.dropped == 5);
}

TEST_CASE("pm samples: stamps on cuprof's ticks (CUPTI's timestamp callback) are mapped to epoch ns; epoch stamps are not") {
  const std::uint64_t ticks_now = 5000000000ull;  // a tick counter far from the epoch's values
  const cuprof::detail::clock_sample anchor{ticks_now, 0, epoch};
  const tick_converter clock(anchor, anchor);  // one tick, one ns
  pm_sample_log on_ticks = one_metric_log();
  std::size_t kept = 0;
  samples a(ticks_now - 10 * interval, 5);
  on_ticks.add(a.times.data(), a.values.data(), 5, false, {}, interval, kept, 1000, epoch, ticks_now);
  gpu_metric_series s = on_ticks.take(0, interval, epoch - 10 * interval, epoch, clock, kept);
  REQUIRE(s.size() == 5);
  CHECK(s.start_ns[0] == epoch - 10 * interval);

  pm_sample_log on_epoch = one_metric_log();
  samples b(epoch - 10 * interval, 5);
  on_epoch.add(b.times.data(), b.values.data(), 5, false, {}, interval, kept, 1000, epoch, ticks_now);
  s = on_epoch.take(0, interval, epoch - 10 * interval, epoch, clock, kept);
  REQUIRE(s.size() == 5);
  CHECK(s.start_ns[0] == epoch - 10 * interval);
  CHECK(on_epoch.to_epoch(epoch, clock) == epoch);
  CHECK(on_ticks.to_epoch(ticks_now, clock) == epoch);
}

TEST_CASE("pm samples: a value no metric can take reaches a window as none, counted") {
  pm_sample_log log = one_metric_log();
  std::size_t kept = 0;
  samples a(epoch, 3);
  a.values = {50, 5000, -3};
  log.add(a.times.data(), a.values.data(), 3, false, {}, interval, kept, 1000, epoch, 0);
  const gpu_metric_series s = log.take(0, interval, epoch, epoch + 3 * interval, tick_converter{}, kept);
  REQUIRE(s.size() == 3);
  CHECK(s.value(0, 0) == 50);
  CHECK(std::isnan(s.value(1, 0)));
  CHECK(std::isnan(s.value(2, 0)));
  CHECK(s.out_of_range == 2);
}

}  // TEST_SUITE("cupti_buffers_samples")

TEST_CASE("pm samples: what a decode brings; an image goes to the evaluator at room_ms of room, or earlier for a late decoder") {
  constexpr std::uint64_t us = 1000, ms = 1000 * us;
  CHECK(samples_a_decode_brings(20 * ms, 200 * us) == 150);  // 100 since the last decode, 50 while it runs
  CHECK(samples_a_decode_brings(0, 200 * us) == 0);
  CHECK(samples_a_decode_brings(3600 * 1000 * ms, 200 * us) == 7500);  // no estimate past a second
  CHECK(samples_a_decode_brings(ms, 0) > 0);                           // no division by zero
  // An image of 216 samples, handed off at 108 (room_ms of room left).
  CHECK_FALSE(hands_off_before_decode(107, 216, 108, 50));
  CHECK(hands_off_before_decode(108, 216, 108, 50));
  CHECK(hands_off_before_decode(70, 216, 108, 150));  // 146 of room for 150 samples
  CHECK_FALSE(hands_off_before_decode(66, 216, 108, 150));
  CHECK_FALSE(hands_off_before_decode(0, 216, 108, 100000));  // an empty image: nothing to hand off
}

TEST_CASE("pm samples: a decoder whose decodes slow down and speed up never fills its image (a full image loses samples)") {
  // The decoder on a virtual clock: one sample every 200 us; a decode takes
  // every sample since the last one, at 60 to 150 us a sample (as on an H200
  // under long GEMMs), then the decoder sleeps 10 ms. A free image is always
  // at hand. Images hold 216 samples, handed off at 108 (40 and 25 ms).
  constexpr std::uint64_t interval = 200000, period = 10000000;
  constexpr std::size_t capacity = 216, handoff_at = 108;
  const auto fills = [&](bool with_estimate) {
    std::uint64_t now = 0, last = 0, decoded_until = 0, x = 1;
    std::size_t held = 0, filled = 0;
    for (int decode = 0; decode < 400; ++decode) {
      const std::size_t brings = with_estimate && decode ? samples_a_decode_brings(now - last, interval) : 0;
      last = now;
      if (hands_off_before_decode(held, capacity, handoff_at, brings)) held = 0;
      const std::size_t n = std::size_t((now - decoded_until) / interval);
      decoded_until += n * interval;
      if (held + n > capacity) {
        ++filled;
        held = capacity;
      } else {
        held += n;
      }
      x = (x * 1103515245 + 12345) % (std::uint64_t(1) << 31);
      const std::uint64_t cost = (60 + (x >> 16) % 91) * 1000;
      now += cost * n + period;
    }
    return filled;
  };
  CHECK(fills(false) > 0);  // handed off at room_ms only, as before: images filled
  CHECK(fills(true) == 0);
}
