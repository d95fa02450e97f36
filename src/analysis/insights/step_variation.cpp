// "varies step to step" ("varies call to call" without steps): a kernel whose
// time differs from step to step; its distribution, the steps far above the
// median, and the time above the median.
#include "context.hpp"

#include <map>
#include <tuple>

namespace cuprof::detail::insight_rules {

void step_variation(context& c) {
  const trace& t = c.t;
  const insights_options& o = c.o;
  const bool by_step = c.steps.size() >= 3;
  for (std::size_t k = 0; k < c.in.kernels.size(); ++k) {
    const kernel_summary& ks = c.in.kernels[k];
    if (ks.kind != gpu_kind::kernel || ks.duration.count < 3) continue;
    // (step, or the record without steps; its time; its longest record)
    std::vector<std::tuple<std::uint32_t, std::uint64_t, std::uint32_t>> samples;
    if (by_step) {
      std::map<std::uint32_t, std::pair<std::uint64_t, std::uint32_t>> per_step;
      for (std::uint32_t i : c.instances[k]) {
        const std::uint32_t st = c.step_of(t.gpu[i]);
        if (st == no_index) continue;
        auto [it, inserted] = per_step.try_emplace(st, 0, i);
        it->second.first += t.gpu[i].end_ns - t.gpu[i].start_ns;
        const gpu_activity& longest = t.gpu[it->second.second];
        if (t.gpu[i].end_ns - t.gpu[i].start_ns > longest.end_ns - longest.start_ns) it->second.second = i;
      }
      for (std::uint32_t st : c.steps)
        if (auto it = per_step.find(st); it != per_step.end()) samples.emplace_back(st, it->second.first, it->second.second);
    } else {
      for (std::uint32_t i : c.instances[k]) samples.emplace_back(i, t.gpu[i].end_ns - t.gpu[i].start_ns, i);
    }
    if (samples.size() < 3) continue;
    std::vector<std::uint64_t> times;
    for (const auto& x : samples) times.push_back(std::get<1>(x));
    const distribution d = summarize(std::move(times));
    if (d.median_ns == 0 || double(d.max_ns) < o.variation_factor * double(d.median_ns) || d.max_ns - d.median_ns < 1000)
      continue;
    finding f;
    f.kind = by_step ? "varies step to step" : "varies call to call";
    f.cause = f.kind + ": " + ks.name;
    const std::string unit = by_step ? " steps" : " calls";
    f.headline = shorten(ks.name, 90) + (by_step ? " per step" : " per call") + ": min " + us_text(d.min_ns) + ", median " +
                 us_text(d.median_ns) + ", p95 " + us_text(d.p95_ns) + ", max " + us_text(d.max_ns) + " over " +
                 std::to_string(d.count) + unit;
    std::string slow;
    std::size_t listed = 0;
    std::uint32_t slowest = no_index;
    std::uint64_t slowest_time = 0;
    for (const auto& [at, time, longest] : samples) {
      if (time > d.median_ns) f.cost_ns += time - d.median_ns;
      if (time > slowest_time) slowest_time = time, slowest = longest;
      if (double(time) < o.variation_factor * double(d.median_ns) || listed >= o.max_items) continue;
      ++listed;
      slow += (slow.empty() ? "" : ", ") + (by_step ? c.step_name(at) + " " : std::string()) + us_text(time) + " (" +
              ratio_text(double(time) / double(d.median_ns)) + ")";
    }
    f.details.push_back("at least " + fixed_text(o.variation_factor, 2) + "x the median: " + slow);
    f.details.push_back(
        "the same kernel timing differently: clocks, power, contention, a cold cache or a profiler buffer "
        "request; read the distribution, not the mean");
    f.where = "slowest: " + c.where_gpu(t.gpu[slowest]);
    f.cost_of = cost_base::gpu_time;
    f.saving_ns = f.cost_ns;
    f.estimate = std::string("the time above the median, if every") + (by_step ? " step" : " call") + " ran at the median";
    c.add(std::move(f));
  }
}

}  // namespace cuprof::detail::insight_rules
