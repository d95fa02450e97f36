// "allocation in the loop": cudaMalloc, cudaFree and their kin outside stream
// order (is_synchronous_allocation) called in steps after the first, per call
// name: how many and their CPU time. Each may synchronize the device. Read
// from the calls' names, so it needs no memory tracking.
#include "context.hpp"

#include <cuprof/model/api_vocabulary.hpp>

#include <map>
#include <set>

namespace cuprof::detail::insight_rules {

void allocations_in_loop(context& c) {
  const trace& t = c.t;
  if (c.steps.size() < 2) return;  // no loop to be steady in
  struct calls_of_name {
    std::size_t count = 0;
    std::uint64_t cpu_ns = 0;
    std::set<std::uint32_t> steps;
    std::uint32_t first = no_index;
  };
  std::map<std::string, calls_of_name> by_name;
  for (std::uint32_t i = 0; i < t.api_calls.size(); ++i) {
    const api_call& a = t.api_calls[i];
    const std::string& name = t.names.str(t.name_of(a));
    if (!is_synchronous_allocation(name)) continue;
    const std::uint32_t step = c.step_of(a);
    if (step == no_index || step == c.steps[0]) continue;  // the first step may set up what the loop reuses
    calls_of_name& n = by_name[name];
    ++n.count;
    n.cpu_ns += a.end_ns - a.start_ns;
    n.steps.insert(step);
    if (n.first == no_index || a.start_ns < t.api_calls[n.first].start_ns) n.first = i;
  }
  const std::size_t later_steps = c.steps.size() - 1;
  for (const auto& [name, n] : by_name) {
    finding f;
    f.kind = "allocation in the loop";
    f.cause = f.kind + ": " + name;
    f.headline = name + ": " + std::to_string(n.count) + (n.count == 1 ? " call" : " calls") + " in " +
                 std::to_string(n.steps.size()) + " of the " + std::to_string(later_steps) + " steps after the first, " +
                 us_text(n.cpu_ns) + " of CPU time";
    f.details.push_back(
        "allocating or freeing outside stream order may synchronize the device (cudaFree and cudaFreeHost wait for its "
        "work): the CPU stalls and the GPU's queue drains each time");
    f.details.push_back(
        "allocate once before the loop and reuse the buffers, or use a caching or stream-ordered allocator "
        "(cudaMallocAsync); torch's caching allocator calls cudaMalloc only when its cache lacks a block (new shapes, "
        "fragmentation) and cudaFree when the cache is emptied");
    f.where = "first: " + c.where_call(t.api_calls[n.first]);
    f.cost_ns = n.cpu_ns;
    f.cost_of = cost_base::cpu_time;
    f.saving_ns = n.cpu_ns;
    f.estimate = "the calls' CPU time; the GPU's idle time while its queue drains comes on top";
    c.add(std::move(f));
  }
}

}  // namespace cuprof::detail::insight_rules
