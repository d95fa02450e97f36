// "launch to start": the GPU idle while launches trickle in. Not in a
// compute-bound run: there the launch-to-start gap is the depth of the queue
// the CPU keeps ahead, no cost.
#include "context.hpp"

#include <algorithm>

namespace cuprof::detail::insight_rules {

void launch_to_start(context& c) {
  const trace& t = c.t;
  const insights& in = c.in;
  if (in.verdict == bound_verdict::compute_bound || !in.launch_to_start.count) return;
  std::vector<const kernel_summary*> ks;
  for (const kernel_summary& k : in.kernels)
    if (k.launch_to_start.count) ks.push_back(&k);
  std::stable_sort(ks.begin(), ks.end(), [](const kernel_summary* a, const kernel_summary* b) {
    return a->launch_to_start.median_ns > b->launch_to_start.median_ns;
  });
  const distribution& d = in.launch_to_start;
  const std::uint64_t queue_threshold = c.queue_threshold_ns();
  const bool waits = d.median_ns < queue_threshold;
  finding f;
  f.kind = "launch to start";
  f.headline = "the GPU was idle " + us_text(in.window_ns() - in.gpu_busy_ns) + " of the " + us_text(in.window_ns()) +
               " window; launch to start on the GPU: median " + us_text(d.median_ns) + ", max " + us_text(d.max_ns) + " over " +
               std::to_string(d.count) + " records";
  for (std::size_t i = 0; i < ks.size() && i < c.o.max_items; ++i)
    f.details.push_back(shorten(ks[i]->name, 70) + ": median " + us_text(ks[i]->launch_to_start.median_ns) + ", max " +
                        us_text(ks[i]->launch_to_start.max_ns) + " (" + std::to_string(ks[i]->launch_to_start.count) + ")");
  f.details.push_back(waits ? "work starts soon after its launch call (launch calls take " + us_text(in.launch_call_median_ns) +
                                  " median): the GPU waits for the CPU"
                            : "work queues behind earlier work on its stream (launch calls take " +
                                  us_text(in.launch_call_median_ns) + " median): the CPU runs ahead; the idle time is elsewhere");
  f.cost_ns = in.window_ns() - in.gpu_busy_ns;
  f.cost_of = cost_base::window;
  if (waits) {
    f.saving_ns = f.cost_ns;
    f.estimate =
        "up to the GPU's idle time: with launches that keep it fed (a CUDA graph, fewer and bigger launches) the "
        "window shrinks towards the GPU's busy time";
  } else {
    f.estimate = "launches do not starve the GPU: the queue was not empty";
  }
  // Where: the record that waited longest.
  const gpu_activity* worst = nullptr;
  for (const gpu_activity& g : t.gpu)
    if (g.kind != gpu_kind::sync && g.api != no_index && g.start_ns >= t.api_calls[g.api].start_ns &&
        (!worst || g.start_ns - t.api_calls[g.api].start_ns > worst->start_ns - t.api_calls[worst->api].start_ns))
      worst = &g;
  if (worst) f.where = "longest: " + shorten(t.names.str(worst->name), 60) + ", " + c.where_gpu(*worst);
  c.add(std::move(f));
}

}  // namespace cuprof::detail::insight_rules
