// Correlation id -> index lookups for collection and attribution.
#pragma once

#include "event.hpp"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cuprof::detail {

// Maps correlation ids (or any ids a trace numbers as it goes, External ids)
// to small values, the first entry of an id winning: an array over the ids'
// range when they are dense, as they are (CUPTI numbers API calls in order),
// a hash map otherwise.
//
// Dense ids whose values grow with them (a thread's calls, numbered in call
// order) take about a byte an id: a value per block of 64 ids, and per id its
// value less its block's lowest. Values that spread further within a block
// (calls of threads interleaved) take 4 bytes an id. A window of a million
// launches has two ids a launch (the runtime call's and its driver call's):
// 2 MB instead of 8 while the trace is built.
class correlation_index {
 public:
  void build(const std::vector<std::pair<std::uint32_t, std::uint32_t>>& entries) {
    build_from([&](auto&& add) {
      for (const auto& e : entries) add(e.first, e.second);
    });
  }
  // The same from a generator, `entries(add)` calling add(correlation, value)
  // for each entry, the same ones each time: it is called several times
  // (bounds, then values), so that a million calls' entries need no list of
  // pairs besides.
  template <class Entries>
  void build_from(const Entries& entries) {
    std::size_t count = 0;
    std::uint32_t lo = 0, hi = 0;
    entries([&](std::uint32_t corr, std::uint32_t) {
      lo = count ? std::min(lo, corr) : corr;
      hi = count ? std::max(hi, corr) : corr;
      ++count;
    });
    build_from(lo, hi, count, entries);
  }
  // The same when the caller knows the entries' lowest and highest ids and
  // their count.
  template <class Entries>
  void build_from(std::uint32_t lo, std::uint32_t hi, std::size_t count, const Entries& entries) {
    std::vector<std::uint32_t>().swap(flat_);
    std::vector<std::uint8_t>().swap(offsets_);
    std::vector<std::uint32_t>().swap(block_base_);
    sparse_.clear();
    lo_ = lo, hi_ = hi;
    if (!count) return;
    dense_ = std::uint64_t(hi_ - lo_) <= 16 * std::uint64_t(count) + 4096;
    if (dense_) {
      if (!build_compact(entries)) build_flat(entries);
    } else {
      sparse_.reserve(count);
      entries([&](std::uint32_t corr, std::uint32_t value) { sparse_.emplace(corr, value); });
    }
  }
  std::uint32_t find(std::uint32_t corr) const {
    if (!dense_) {
      auto it = sparse_.find(corr);
      return it == sparse_.end() ? no_index : it->second;
    }
    if (corr < lo_ || corr > hi_) return no_index;
    const std::size_t i = corr - lo_;
    if (!offsets_.empty()) return offsets_[i] == no_offset ? no_index : block_base_[i / block_ids] + offsets_[i];
    return flat_.empty() ? no_index : flat_[i];
  }
  bool empty() const { return flat_.empty() && offsets_.empty() && sparse_.empty(); }
  std::uint32_t lowest() const { return lo_; }
  std::uint32_t highest() const { return hi_; }
  // Whether dense ids took the byte-an-id form (for tests and benchmarks).
  bool compact() const { return !offsets_.empty(); }

 private:
  static constexpr std::size_t block_ids = 64;
  static constexpr std::uint8_t no_offset = 0xFF;

  template <class Entries>
  bool build_compact(const Entries& entries) {
    const std::size_t ids = std::size_t(hi_ - lo_) + 1;
    block_base_.assign(ids / block_ids + 1, no_index);
    entries([&](std::uint32_t corr, std::uint32_t value) {
      std::uint32_t& base = block_base_[(corr - lo_) / block_ids];
      base = std::min(base, value);
    });
    offsets_.assign(ids, no_offset);
    bool fits = true;
    entries([&](std::uint32_t corr, std::uint32_t value) {
      const std::size_t i = corr - lo_;
      if (!fits || offsets_[i] != no_offset) return;  // the first entry of an id wins
      const std::uint32_t offset = value - block_base_[i / block_ids];
      if (offset >= no_offset) fits = false;
      else offsets_[i] = std::uint8_t(offset);
    });
    if (!fits) {
      std::vector<std::uint8_t>().swap(offsets_);
      std::vector<std::uint32_t>().swap(block_base_);
    }
    return fits;
  }

  template <class Entries>
  void build_flat(const Entries& entries) {
    flat_.assign(std::size_t(hi_ - lo_) + 1, no_index);
    entries([&](std::uint32_t corr, std::uint32_t value) {
      std::uint32_t& slot = flat_[corr - lo_];
      if (slot == no_index) slot = value;  // the first entry of an id wins, as emplace below
    });
  }

  bool dense_ = true;
  std::uint32_t lo_ = 0, hi_ = 0;
  std::vector<std::uint32_t> flat_;
  std::vector<std::uint8_t> offsets_;      // per id: its value less its block's base; no_offset: none
  std::vector<std::uint32_t> block_base_;  // per block of block_ids ids: its lowest value
  std::unordered_map<std::uint32_t, std::uint32_t> sparse_;
};

}  // namespace cuprof::detail
