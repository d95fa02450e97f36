// Correlation id -> index lookups for collection and attribution.
#pragma once

#include "event.hpp"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cuprof::detail {

// Maps correlation ids to small values: a flat array when the ids are dense,
// as they are (CUPTI numbers API calls in order), a hash map otherwise.
class correlation_index {
 public:
  void build(const std::vector<std::pair<std::uint32_t, std::uint32_t>>& entries) {
    flat_.clear();
    sparse_.clear();
    if (entries.empty()) return;
    lo_ = hi_ = entries.front().first;
    for (const auto& e : entries) lo_ = std::min(lo_, e.first), hi_ = std::max(hi_, e.first);
    dense_ = std::uint64_t(hi_ - lo_) <= 16 * std::uint64_t(entries.size()) + 4096;
    if (dense_) {
      flat_.assign(std::size_t(hi_ - lo_) + 1, no_index);
      for (const auto& e : entries) flat_[e.first - lo_] = e.second;
    } else {
      sparse_.reserve(entries.size());
      for (const auto& e : entries) sparse_.emplace(e.first, e.second);
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
