// "synchronization": CPU-blocking synchronize calls that take at least
// sync_share of Self CPU time, and how much GPU work ran while they waited.
#include "context.hpp"

#include <cuprof/model/api_vocabulary.hpp>

#include <algorithm>
#include <map>

namespace cuprof::detail::insight_rules {

void synchronizations(context& c) {
  const trace& t = c.t;
  if (!c.in.self_cpu_ns) return;
  std::map<std::string, std::pair<std::uint64_t, std::vector<std::uint32_t>>> by_name;
  for (std::uint32_t i = 0; i < t.api_calls.size(); ++i) {
    const api_call& a = t.api_calls[i];
    const std::string& name = t.names.str(t.name_of(a));
    if (!is_cpu_blocking_synchronization(name)) continue;
    by_name[name].first += a.end_ns - a.start_ns;
    by_name[name].second.push_back(i);
  }
  for (const auto& entry : by_name) {
    const double share = double(entry.second.first) / double(c.in.self_cpu_ns);
    if (share < c.o.sync_share) continue;
    finding f;
    f.kind = "synchronization";
    f.headline = entry.first + ": " + us_text(entry.second.first) + " in " + std::to_string(entry.second.second.size()) +
                 (entry.second.second.size() == 1 ? " call, " : " calls, ") + percent_text(share) + " of Self CPU time";
    // How much GPU work ran while the CPU waited (overlap with the busy union).
    std::uint64_t covered = 0, waited = 0;
    for (std::uint32_t i : entry.second.second) {
      const api_call& a = t.api_calls[i];
      waited += a.end_ns - a.start_ns;
      auto it = std::lower_bound(c.busy_union.begin(), c.busy_union.end(), a.start_ns,
                                 [](const std::pair<std::uint64_t, std::uint64_t>& x, std::uint64_t v) { return x.second <= v; });
      for (; it != c.busy_union.end() && it->first < a.end_ns; ++it)
        covered += std::min(it->second, a.end_ns) - std::max(it->first, a.start_ns);
    }
    const double busy = waited ? double(covered) / double(waited) : 0.0;
    f.details.push_back("the GPU was busy " + percent_text(busy) + " of that wait (" + us_text(covered) + " of work)" +
                        (busy >= 0.5 ? ": the CPU waits for GPU work, its duration is the GPU's, not a CPU cost"
                                     : ": a long wait covering little GPU work, the GPU idles before or during it"));
    f.where = c.where_call(t.api_calls[entry.second.second[0]]);
    f.cause = f.kind + ": " + entry.first;
    f.cost_ns = waited;
    f.cost_of = cost_base::cpu_time;
    f.saving_ns = waited - covered;
    f.estimate = "the wait while the GPU had no work: the wait minus the GPU work that ran during it";
    c.add(std::move(f));
  }
}

}  // namespace cuprof::detail::insight_rules
