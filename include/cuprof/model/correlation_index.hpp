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
// to small values, the first entry of an id winning: a flat array when the ids are dense,
// as they are (CUPTI numbers API calls in order), a hash map otherwise.
class correlation_index {
 public:
  void build(const std::vector<std::pair<std::uint32_t, std::uint32_t>>& entries) {
    build_from([&](auto&& add) {
      for (const auto& e : entries) add(e.first, e.second);
    });
  }
  // The same from a generator, `entries(add)` calling add(correlation, value)
  // for each entry, the same ones each time: it is called twice (bounds, then
  // values), so that a million calls' entries need no list of pairs besides.
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
  // their count: one call of `entries`.
  template <class Entries>
  void build_from(std::uint32_t lo, std::uint32_t hi, std::size_t count, const Entries& entries) {
    flat_.clear();
    sparse_.clear();
    lo_ = lo, hi_ = hi;
    if (!count) return;
    dense_ = std::uint64_t(hi_ - lo_) <= 16 * std::uint64_t(count) + 4096;
    if (dense_) {
      flat_.assign(std::size_t(hi_ - lo_) + 1, no_index);
      entries([&](std::uint32_t corr, std::uint32_t value) {
        std::uint32_t& slot = flat_[corr - lo_];
        if (slot == no_index) slot = value;  // the first entry of an id wins, as emplace below
      });
    } else {
      sparse_.reserve(count);
      entries([&](std::uint32_t corr, std::uint32_t value) { sparse_.emplace(corr, value); });
    }
  }
  std::uint32_t find(std::uint32_t corr) const {
    if (dense_) return corr >= lo_ && corr <= hi_ && !flat_.empty() ? flat_[corr - lo_] : no_index;
    auto it = sparse_.find(corr);
    return it == sparse_.end() ? no_index : it->second;
  }
  bool empty() const { return flat_.empty() && sparse_.empty(); }
  std::uint32_t lowest() const { return lo_; }
  std::uint32_t highest() const { return hi_; }

 private:
  bool dense_ = true;
  std::uint32_t lo_ = 0, hi_ = 0;
  std::vector<std::uint32_t> flat_;
  std::unordered_map<std::uint32_t, std::uint32_t> sparse_;
};

}  // namespace cuprof::detail
