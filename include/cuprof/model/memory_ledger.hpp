// The memory in use, from CUPTI's allocation, free and memory-pool records:
// what each memory event's totals say (torch's "Total Allocated" and "Total
// Reserved"), by device and for the host. Pure bookkeeping over the model's
// memory events, apart from CUPTI's structs (cupti/activity_converter.hpp
// stages them), so that tests drive it directly.
#pragma once

#include "event.hpp"

#include <cstdint>
#include <map>
#include <unordered_map>

namespace cuprof::detail {

// A staged allocation, free or change of a memory pool's size (CUPTI's
// MEMORY2 and MEMORY_POOL records), time in ticks.
struct staged_memory {
  enum class op : std::uint8_t { allocate, release, pool_size };
  std::uint64_t ticks = 0;
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::uint64_t pool = 0;       // the memory pool it comes from (its address), 0: none
  std::uint64_t pool_size = 0;  // that pool's size after it
  std::uint32_t correlation = 0;
  std::uint32_t device = 0;
  op what = op::allocate;
  std::uint8_t memory_kind = 0;  // CUPTI's
};

// The memory in use, from the allocations and frees seen since recording
// began: a window's totals count from there, whatever window they fall in.
class memory_ledger {
 public:
  // Applies one record; fills the event's bytes, totals, device, kind and
  // flags (the rest is the caller's). Returns false for a record that is no
  // event (a free of nothing, or a pool change that changes nothing).
  bool apply(const staged_memory& r, memory_event& e) {
    const bool host = r.memory_kind == memory_kind_pinned || r.memory_kind == memory_kind_pageable;
    e.device = host ? -1 : std::int32_t(r.device);
    e.memory_kind = r.memory_kind;
    e.address = r.address;
    e.flags = r.pool ? memory_from_pool : 0;
    bool is_event = true;
    switch (r.what) {
      case staged_memory::op::allocate: {
        auto [it, added] = live_.try_emplace(r.address, live{r.bytes, e.device, r.pool != 0});
        if (!added) unlink(it->second);  // freed before the profile saw it: replaced
        it->second = live{r.bytes, e.device, r.pool != 0};
        totals& t = totals_[e.device];
        t.allocated += r.bytes;
        if (!r.pool) t.direct += r.bytes;
        e.bytes = std::int64_t(r.bytes);
        break;
      }
      case staged_memory::op::release: {
        auto it = live_.find(r.address);
        // A free of memory allocated before recording began counts what CUPTI says it freed.
        const live freed = it != live_.end() ? it->second : live{r.bytes, e.device, r.pool != 0};
        if (it != live_.end()) live_.erase(it);
        e.device = freed.device;
        unlink(freed);
        e.bytes = -std::int64_t(freed.bytes);
        break;
      }
      case staged_memory::op::pool_size: is_event = false; break;
    }
    if (r.pool) is_event = resize_pool(r.pool, e.device, r.pool_size) || is_event;
    const totals& t = totals_[e.device];
    e.total_allocated = t.allocated;
    e.total_reserved = t.direct + t.pools;
    return is_event;
  }

 private:
  struct live {
    std::uint64_t bytes = 0;
    std::int32_t device = 0;
    bool pooled = false;
  };
  struct totals {
    std::uint64_t allocated = 0;  // every live allocation
    std::uint64_t direct = 0;     // those not from a pool
    std::uint64_t pools = 0;      // what the device's pools hold
  };
  static void take_away(std::uint64_t& total, std::uint64_t bytes) { total = bytes < total ? total - bytes : 0; }
  void unlink(const live& l) {
    totals& t = totals_[l.device];
    take_away(t.allocated, l.bytes);
    if (!l.pooled) take_away(t.direct, l.bytes);
  }
  // Returns whether the pool's size changed.
  bool resize_pool(std::uint64_t pool, std::int32_t device, std::uint64_t size) {
    std::uint64_t& held = pool_sizes_[pool];
    if (held == size) return false;
    totals& t = totals_[device];
    take_away(t.pools, held);
    t.pools += size;
    held = size;
    return true;
  }
  std::unordered_map<std::uint64_t, live> live_;  // by address: one virtual address space for host and devices
  std::unordered_map<std::uint64_t, std::uint64_t> pool_sizes_;
  std::map<std::int32_t, totals> totals_;  // by device, -1 the host
};

}  // namespace cuprof::detail
