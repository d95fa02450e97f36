// "incomplete trace": records the profiler dropped, or GPU records whose
// launching call it never saw; every total undercounts.
#include "context.hpp"

namespace cuprof::detail::insight_rules {

void incomplete_trace(context& c) {
  const trace_metadata& m = c.t.meta;
  if (!m.dropped_gpu_records && !m.dropped_cpu_events && !m.unmatched_gpu_records && !m.edges.lost()) return;
  finding f;
  f.kind = "incomplete trace";
  f.headline = std::to_string(m.dropped_gpu_records) + " GPU records dropped, " + std::to_string(m.dropped_cpu_events) +
               " CPU events dropped, " + std::to_string(m.unmatched_gpu_records) + " GPU records without their launching call";
  if (m.edges.lost()) f.details.push_back("at the window's edges: " + window_losses(m.edges));
  f.details.push_back("totals above undercount what ran");
  f.estimate = "no cost of its own: the figures undercount";
  f.where = "the whole trace";
  c.add(std::move(f));
}

}  // namespace cuprof::detail::insight_rules
