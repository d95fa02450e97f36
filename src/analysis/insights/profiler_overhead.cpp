// "profiler overhead": CUPTI's own work inside the recorded window.
#include "context.hpp"

#include <algorithm>
#include <limits>
#include <map>

namespace cuprof::detail::insight_rules {

void profiler_overhead(context& c) {
  const trace& t = c.t;
  if (t.overhead.empty()) return;
  std::map<std::string, std::pair<std::size_t, std::uint64_t>> overhead;
  std::uint64_t first = std::numeric_limits<std::uint64_t>::max();
  for (const overhead_span& o : t.overhead) {
    auto& e = overhead[t.names.str(o.name)];
    ++e.first;
    e.second += o.end_ns - o.start_ns;
    first = std::min(first, o.start_ns);
  }
  finding f;
  f.kind = "profiler overhead";
  std::string list;
  for (const auto& o : overhead)
    list += (list.empty() ? "" : ", ") + o.first + " " + us_text(o.second.second) +
            (o.second.first > 1 ? " (" + std::to_string(o.second.first) + ")" : "");
  f.headline = "CUPTI's own work in the window: " + list;
  f.details.push_back(
      "gaps it causes are the profiler's, not your code's; a schedule with warmup steps moves the "
      "first buffer request out of the recorded window");
  f.where = "CUPTI Overhead lane, first at " + ts_text(c.in, first);
  for (const auto& o : overhead) f.cost_ns += o.second.second;
  f.cost_of = cost_base::window;
  f.estimate = "the profiler's own work, not your code's";
  c.add(std::move(f));
}

}  // namespace cuprof::detail::insight_rules
