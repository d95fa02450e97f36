// "cold start": the first of a series of repeated scopes (steps, or a
// top-level scope called at least three times) much wider than the others.
// Only where CPU time matters (a compute-bound run hides it behind the GPU),
// and not when the schedule's warmup was used: torch numbers steps from 0
// across wait and warmup, so a first recorded ProfilerStep#N with N > 0 came
// after them.
#include "context.hpp"

#include <algorithm>
#include <limits>
#include <map>

namespace cuprof::detail::insight_rules {

void cold_start(context& c) {
  const trace& t = c.t;
  const insights_options& o = c.o;
  if (!c.in.cpu_time_matters() || c.in.first_step > 0) return;
  std::vector<std::vector<std::uint32_t>> series;
  if (c.steps.size() >= 3) {
    series.push_back(c.steps);
  } else {
    std::map<name_id, std::vector<std::uint32_t>> top;
    for (std::uint32_t i = 0; i < t.spans.size(); ++i)
      if (t.spans[i].parent == no_index) top[t.spans[i].name].push_back(i);
    for (auto& entry : top) {
      if (entry.second.size() < 3) continue;
      std::sort(entry.second.begin(), entry.second.end(),
                [&](std::uint32_t a, std::uint32_t b) { return t.spans[a].start_ns < t.spans[b].start_ns; });
      series.push_back(std::move(entry.second));
    }
  }
  constexpr std::uint64_t no_child = std::numeric_limits<std::uint64_t>::max();
  std::size_t reported = 0;
  for (const std::vector<std::uint32_t>& s : series) {
    if (reported >= o.max_items) break;
    const cpu_span& first = t.spans[s[0]];
    std::vector<std::uint64_t> rest;
    for (std::size_t i = 1; i < s.size(); ++i) rest.push_back(t.spans[s[i]].end_ns - t.spans[s[i]].start_ns);
    const std::uint64_t median = median_of(std::move(rest));
    const std::uint64_t dur = first.end_ns - first.start_ns;
    if (median == 0 || double(dur) < o.cold_factor * double(median) || dur - median < 5000) continue;
    finding f;
    f.kind = "cold start";
    const std::string name = t.names.str(first.name);
    const std::string others = first.is_step ? "the other steps" : "the other calls";
    f.headline = name + " took " + us_text(dur) + ", " + ratio_text(double(dur) / double(median)) + " the median of " + others +
                 " (" + us_text(median) + ")";
    f.where = (first.is_step ? name : c.scope_path(s[0])) + " at " + ts_text(c.in, first.start_ns);
    f.cause = f.kind + ": " + name;
    f.cost_ns = dur - median;
    f.cost_of = cost_base::window;
    f.saving_ns = f.cost_ns;
    f.estimate = "its time over the median of " + others + ", paid once per process";

    // Where the extra time went: the longest wait from entering a scope to its first child.
    std::vector<std::uint32_t> inside;
    for (std::uint32_t i = 0; i < t.spans.size(); ++i)
      for (std::uint32_t p = i; p != no_index; p = t.spans[p].parent)
        if (p == s[0]) {
          inside.push_back(i);
          break;
        }
    std::uint32_t worst = no_index;
    std::uint64_t worst_gap = 0;
    for (std::uint32_t i : inside) {
      if (c.first_child[i] == no_child) continue;
      const std::uint64_t gap = c.first_child[i] - t.spans[i].start_ns;
      if (gap > worst_gap) worst_gap = gap, worst = i;
    }
    if (worst != no_index) {
      std::vector<std::uint64_t> gaps;
      for (std::uint32_t i = 0; i < t.spans.size(); ++i) {
        if (t.spans[i].name != t.spans[worst].name || c.first_child[i] == no_child) continue;
        bool in_first = false;
        for (std::uint32_t p = i; p != no_index; p = t.spans[p].parent) in_first |= p == s[0];
        if (!in_first) gaps.push_back(c.first_child[i] - t.spans[i].start_ns);
      }
      std::string line = t.names.str(t.spans[worst].name) + ": " + us_text(worst_gap) + " from entering the scope to its first " +
                         (c.first_child_name[worst] < t.names.size() ? t.names.str(c.first_child_name[worst]) : "event");
      if (!gaps.empty()) line += " (median " + us_text(median_of(std::move(gaps))) + " in " + others + ")";
      f.details.push_back(line);
    }
    // The call that cost the most over its usual time.
    std::uint32_t slow = no_index;
    std::uint64_t slow_excess = 0, slow_median = 0;
    std::unordered_map<name_id, std::vector<std::uint64_t>> elsewhere;
    std::vector<std::uint32_t> calls_inside;
    for (std::uint32_t i = 0; i < t.api_calls.size(); ++i) {
      const api_call& a = t.api_calls[i];
      const bool in_first = a.tid == first.tid && a.start_ns >= first.start_ns && a.end_ns <= first.end_ns;
      if (in_first) calls_inside.push_back(i);
      else elsewhere[t.name_of(a)].push_back(a.end_ns - a.start_ns);
    }
    std::unordered_map<name_id, std::uint64_t> median_elsewhere;  // once per name: a step may hold many calls
    for (auto& entry : elsewhere) median_elsewhere.emplace(entry.first, median_of(std::move(entry.second)));
    for (std::uint32_t i : calls_inside) {
      const api_call& a = t.api_calls[i];
      auto it = median_elsewhere.find(t.name_of(a));
      if (it == median_elsewhere.end()) continue;
      const std::uint64_t m = it->second, d = a.end_ns - a.start_ns;
      if (d > m && d - m > slow_excess) slow_excess = d - m, slow = i, slow_median = m;
    }
    if (slow != no_index && slow_excess >= 2000)
      f.details.push_back("slowest call over its usual time: " + t.names.str(t.name_of(t.api_calls[slow])) + " " +
                          us_text(t.api_calls[slow].end_ns - t.api_calls[slow].start_ns) + " (median " + us_text(slow_median) +
                          " elsewhere)");
    std::map<std::string, std::uint64_t> overhead;
    for (const overhead_span& ov : t.overhead)
      if (ov.start_ns < first.end_ns && ov.end_ns > first.start_ns) overhead[t.names.str(ov.name)] += ov.end_ns - ov.start_ns;
    std::vector<std::pair<std::string, std::uint64_t>> by_time(overhead.begin(), overhead.end());
    std::stable_sort(by_time.begin(), by_time.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
    std::string list;
    for (const auto& ov : by_time) list += (list.empty() ? "" : ", ") + ov.first + " " + us_text(ov.second);
    if (!list.empty()) f.details.push_back("CUPTI overhead inside it: " + list);
    f.details.push_back(
        "usual causes: cuBLAS heuristics and workspace allocation, lazy module loading, first-touch allocations; "
        "warm up before profiling (or use the schedule's warmup)");
    c.add(std::move(f));
    ++reported;
  }
}

}  // namespace cuprof::detail::insight_rules
