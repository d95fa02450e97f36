// "occupancy query": cudaOccupancy* calls on a thread before a launch: the
// launched kernel sizes its grid to the SM at run time.
#include "context.hpp"

#include <cuprof/model/api_vocabulary.hpp>

#include <algorithm>
#include <map>

namespace cuprof::detail::insight_rules {

void occupancy_queries(context& c) {
  const trace& t = c.t;
  std::vector<std::uint32_t> calls(t.api_calls.size());
  for (std::uint32_t i = 0; i < calls.size(); ++i) calls[i] = i;
  std::stable_sort(calls.begin(), calls.end(), [&](std::uint32_t a, std::uint32_t b) {
    const api_call& x = t.api_calls[a];
    const api_call& y = t.api_calls[b];
    return x.tid != y.tid ? x.tid < y.tid : x.start_ns < y.start_ns;
  });
  std::unordered_map<std::uint32_t, std::vector<std::uint32_t>> launched;  // call -> GPU records
  for (std::uint32_t i = 0; i < t.gpu.size(); ++i)
    if (t.gpu[i].api != no_index) launched[t.gpu[i].api].push_back(i);
  struct group {
    std::size_t launches = 0, queried = 0;
    std::map<std::string, std::size_t> queries;
    std::vector<std::uint64_t> query_durs;
    std::uint32_t first_query = no_index;
  };
  std::map<std::string, group> groups;
  std::vector<std::string> names;
  std::vector<std::uint32_t> pending;
  std::uint32_t tid = 0;
  for (std::uint32_t i : calls) {
    const api_call& a = t.api_calls[i];
    if (a.tid != tid) pending.clear(), tid = a.tid;
    const std::string& name = t.names.str(t.name_of(a));
    if (is_occupancy_query(name)) {
      pending.push_back(i);
      continue;
    }
    if (!is_kernel_launch(name)) continue;
    std::string kernel = name;
    if (auto it = launched.find(i); it != launched.end()) kernel = t.names.str(t.gpu[it->second[0]].name);
    auto [it, inserted] = groups.try_emplace(kernel);
    if (inserted) names.push_back(kernel);
    group& g = it->second;
    ++g.launches;
    if (!pending.empty()) {
      ++g.queried;
      for (std::uint32_t q : pending) {
        ++g.queries[t.names.str(t.name_of(t.api_calls[q]))];
        g.query_durs.push_back(t.api_calls[q].end_ns - t.api_calls[q].start_ns);
        if (g.first_query == no_index) g.first_query = q;
      }
    }
    pending.clear();
  }
  for (const std::string& kernel : names) {
    const group& g = groups[kernel];
    if (!g.queried) continue;
    finding f;
    f.kind = "occupancy query";
    std::string queries;
    for (const auto& q : g.queries) {
      const double per = double(q.second) / double(g.queried);
      queries +=
          (queries.empty() ? "" : " and ") + q.first + (per > 1.0 ? " x" + fixed_text(per, per == double(int(per)) ? 0 : 1) : "");
    }
    f.headline = shorten(kernel, 90) + ": " + queries + " before " + std::to_string(g.queried) + " of " +
                 std::to_string(g.launches) + " launches";
    f.details.push_back(us_text(median_of(g.query_durs)) +
                        " median per query: an adaptively launched kernel (a GEMM, conv or tuned kernel) sizing its "
                        "grid to the SM; kernels launched without one have a fixed footprint");
    const kernel_name_info k = decode_kernel_name(kernel);
    if (k.recognised()) f.details.push_back("kernel: " + k.summary());
    f.where = c.where_call(t.api_calls[g.first_query]);
    f.cause = f.kind + ": " + kernel;
    for (std::uint64_t d : g.query_durs) f.cost_ns += d;
    f.cost_of = cost_base::cpu_time;
    if (c.in.cpu_time_matters()) {
      f.saving_ns = f.cost_ns;
      f.estimate = "the queries' CPU time: a CUDA graph replays the launches without them";
    } else {
      f.estimate = "the queries' CPU time is hidden behind the GPU's work";
    }
    c.add(std::move(f));
  }
}

}  // namespace cuprof::detail::insight_rules
