// "compute-bound kernel", "tensor-bound kernel", "memory-bound kernel",
// "latency-bound kernel": what a kernel's hardware counters (trace::gpu_metrics,
// averaged over its runs: kernel_summary::counters) say limits it, against
// insights_options' thresholds. Kernels with fewer samples than
// metric_min_samples (shorter than the sampling interval) are not judged. Each
// finding costs the kernel's GPU time and estimates no saving: the counters
// say what would make the kernel faster, not by how much.
#include "context.hpp"

#include <cuprof/model/occupancy.hpp>

#include <algorithm>

namespace cuprof::detail::insight_rules {

namespace {

struct bound_words {
  const char* kind;
  const char* meaning;
  const char* estimate;
};

bound_words words_of(counter_bound b) {
  switch (b) {
    case counter_bound::tensor:
      return {"tensor-bound kernel",
              "the tensor cores are busy most of its time: it runs near what the GPU's matrix units do; faster needs less "
              "work or a lower precision (fp8), not fewer bytes moved",
              "none estimated: its tensor cores are already busy"};
    case counter_bound::compute:
      return {"compute-bound kernel",
              "the SMs' pipelines, not DRAM, limit it: faster needs less arithmetic (tensor cores, a lower precision, "
              "a better algorithm), not fewer bytes moved",
              "none estimated: its SMs are already busy"};
    case counter_bound::memory:
      return {"memory-bound kernel",
              "DRAM bandwidth, not arithmetic, limits it: faster needs fewer bytes moved (fusing it with the kernels "
              "around it, a lower precision, better reuse through the caches)",
              "none estimated: the counters give its bandwidth, not the bytes a fused or smaller kernel would move"};
    default:
      return {"latency-bound kernel",
              "neither the SMs nor DRAM are near their peaks and few warps are resident: the kernel waits (on memory, on "
              "dependencies) with too few warps to hide it; a bigger grid, or fewer registers or less shared memory per "
              "block, keeps more warps in flight",
              "none estimated: the counters say it is short of warps, not what more of them would gain"};
  }
}

}  // namespace

void kernel_bounds(context& c) {
  if (c.t.gpu_metrics.empty()) return;
  const trace& t = c.t;
  // Per bound, the kernels it holds, the longest in total first.
  std::vector<std::uint32_t> rows;
  for (std::uint32_t k = 0; k < c.in.kernels.size(); ++k)
    if (c.in.kernels[k].kind == gpu_kind::kernel && c.bound_of(c.in.kernels[k].counters) != counter_bound::none)
      rows.push_back(k);
  std::stable_sort(rows.begin(), rows.end(), [&](std::uint32_t a, std::uint32_t b) {
    return c.in.kernels[a].duration.total_ns > c.in.kernels[b].duration.total_ns;
  });
  std::size_t shown[5] = {};
  for (std::uint32_t k : rows) {
    const kernel_summary& ks = c.in.kernels[k];
    const counter_bound b = c.bound_of(ks.counters);
    if (shown[int(b)]++ >= c.o.max_items) continue;
    const bound_words w = words_of(b);
    const std::string name = shorten(ks.name, 90);
    finding f;
    f.kind = w.kind;
    f.cause = f.kind + ": " + ks.name;
    f.headline = name + ": " + counters_text(ks.counters, b) + "; " + std::to_string(ks.duration.count) +
                 (ks.duration.count == 1 ? " call: " : " calls: ") + us_text(ks.duration.total_ns);
    f.details.push_back(w.meaning);
    f.details.push_back(
        "its counters: " + counters_text(ks.counters, b, true) + ", sampled every " + us_text(ks.counters.interval_ns) +
        (ks.counters.too_short
             ? "; " + std::to_string(ks.counters.too_short) + " of its calls were shorter than that and are not in them"
             : std::string()) +
        "; the samples are GPU-wide: work running alongside it counts too");
    const gpu_activity& first = t.gpu[c.instances[k].front()];
    if (b == counter_bound::latency && first.details != no_index) {
      const kernel_details& d = t.kernels[first.details];
      const device_info* dev = find_device(t, t.lane_of(first).device);
      const occupancy_estimate e = estimate_occupancy(d, dev);
      if (dev && dev->num_sms > 0)
        f.details.push_back("its launch: grid " + std::to_string(d.grid[0]) + "x" + std::to_string(d.grid[1]) + "x" +
                            std::to_string(d.grid[2]) + ", block " + std::to_string(d.block[0]) + "x" +
                            std::to_string(d.block[1]) + "x" + std::to_string(d.block[2]) + ": " +
                            fixed_text(e.blocks_per_sm, 2) + " blocks per SM on " + std::to_string(dev->num_sms) +
                            " SMs, estimated occupancy " + std::to_string(e.percent) + "% (from the launch configuration)");
    }
    f.where = c.where_gpu(first);
    f.cost_ns = ks.duration.total_ns;
    f.cost_of = cost_base::gpu_time;
    f.estimate = w.estimate;
    c.add(std::move(f));
  }
}

}  // namespace cuprof::detail::insight_rules
