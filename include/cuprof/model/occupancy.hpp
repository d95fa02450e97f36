// A kernel's estimated achieved occupancy from its launch configuration and
// the device's limits, written to the trace as Kineto writes it.
#pragma once

#include "event.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace cuprof::detail {

// Estimated achieved occupancy as Kineto reports it: resident warps per SM
// over the SM's warp capacity, limited by threads, registers, shared memory
// and the block count the grid actually provides.
struct occupancy_estimate {
  double blocks_per_sm = 0;
  double warps_per_sm = 0;
  int percent = 0;
};

inline occupancy_estimate estimate_occupancy(const kernel_details& k, const device_info* dev) {
  occupancy_estimate e;
  if (!dev || dev->num_sms <= 0) return e;
  const double blocks = double(k.grid[0]) * k.grid[1] * k.grid[2];
  const std::uint64_t threads = std::uint64_t(k.block[0]) * k.block[1] * k.block[2];
  const int warp = dev->warp_size > 0 ? dev->warp_size : 32;
  const std::uint64_t warps_per_block = (threads + warp - 1) / warp;
  e.blocks_per_sm = blocks / dev->num_sms;
  e.warps_per_sm = e.blocks_per_sm * double(warps_per_block);
  if (threads == 0 || dev->max_threads_per_multiprocessor <= 0) return e;
  std::uint64_t limit = dev->max_blocks_per_multiprocessor > 0 ? std::uint64_t(dev->max_blocks_per_multiprocessor) : 32;
  limit = std::min<std::uint64_t>(limit, std::uint64_t(dev->max_threads_per_multiprocessor) / (warps_per_block * warp));
  if (k.registers_per_thread > 0 && dev->regs_per_multiprocessor > 0)
    limit = std::min<std::uint64_t>(
        limit, std::uint64_t(dev->regs_per_multiprocessor) / (std::uint64_t(k.registers_per_thread) * warps_per_block * warp));
  const std::uint64_t smem = std::uint64_t(k.static_shared_memory) + k.dynamic_shared_memory;
  if (smem > 0 && dev->shared_mem_per_multiprocessor > 0)
    limit = std::min<std::uint64_t>(limit, std::uint64_t(dev->shared_mem_per_multiprocessor) / smem);
  const double resident_blocks = std::min(double(limit), std::max(1.0, std::ceil(e.blocks_per_sm)));
  const double max_warps = double(dev->max_threads_per_multiprocessor) / warp;
  e.percent = int(std::min(100.0, 100.0 * resident_blocks * double(warps_per_block) / max_warps));
  return e;
}

}  // namespace cuprof::detail
