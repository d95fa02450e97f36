// The verdict: overhead-bound, compute-bound or mixed, from three signals
// (Self CPU vs Self CUDA, the GPU's idle share of the window, launch-to-start),
// and the figures it stands on, which the rules read too. The GPU's hardware
// counters, where the trace has them, are shown beside the signals and say
// what limits a compute-bound run's kernels; they cast no vote: a GPU waiting
// for launches shows low counters whatever its kernels do.
#include "context.hpp"

#include <cuprof/output/key_averages.hpp>

#include <algorithm>

namespace cuprof {

const char cpu_only_note[] =
    "a CPU-only trace: no CUDA calls and no GPU work were recorded, so every figure is host time inside the scopes; "
    "figures under a microsecond are scopes around very little work (recording a scope costs tens of nanoseconds)";

namespace detail::insight_rules {

namespace {

// Intervals merged into their union, in time order.
std::vector<std::pair<std::uint64_t, std::uint64_t>> union_of(std::vector<std::pair<std::uint64_t, std::uint64_t>> v) {
  std::sort(v.begin(), v.end());
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  for (const auto& b : v) {
    if (out.empty() || b.first > out.back().second) out.push_back(b);
    else out.back().second = std::max(out.back().second, b.second);
  }
  return out;
}

// The counters over the time each GPU was busy.
kernel_counters busy_counters(const trace& t) {
  counter_pool pool;
  for (const gpu_metric_series& s : t.gpu_metrics) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> work;
    for (const gpu_activity& g : t.gpu)
      if (g.kind != gpu_kind::sync && t.lane_of(g).device == s.device) work.emplace_back(g.start_ns, g.end_ns);
    for (const auto& u : union_of(std::move(work))) pool.add(s, u.first, u.second);
  }
  return pool.result();
}

}  // namespace

void verdict(context& c) {
  const trace& t = c.t;
  const insights_options& o = c.o;
  insights& in = c.in;
  const time_totals time = key_averages(t).totals();
  in.self_cpu_ns = time.self_cpu_ns;
  in.sync_cpu_ns = time.sync_ns;
  in.self_cuda_ns = time.self_cuda_ns;

  time_extent window;
  for (const cpu_span& s : t.spans) window.add(s.start_ns, s.end_ns);
  for (const api_call& a : t.api_calls) window.add(a.start_ns, a.end_ns);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> busy;
  for (const gpu_activity& g : t.gpu) {
    if (g.kind == gpu_kind::sync) continue;
    window.add(g.start_ns, g.end_ns);
    busy.emplace_back(g.start_ns, g.end_ns);
  }
  if (window.empty()) {
    in.verdict_reason = "the trace has no events";
    return;
  }
  in.window_start_ns = window.start_ns;
  in.window_end_ns = window.end_ns;
  // The union of GPU work as intervals: its length is the busy time; synchronizations
  // are matched against it (what ran while the CPU waited).
  c.busy_union = union_of(busy);
  for (const auto& u : c.busy_union) in.gpu_busy_ns += u.second - u.first;
  const std::uint64_t window_ns = window.end_ns - window.start_ns;
  in.gpu_idle_share = window_ns ? 1.0 - double(in.gpu_busy_ns) / double(window_ns) : 0.0;

  if (busy.empty()) {
    in.verdict = bound_verdict::no_gpu_work;
    in.cpu_only = is_cpu_only(t);
    in.verdict_reason = !t.meta.cuda_status.empty() ? "no GPU work in the trace: CUDA was not traced (" + t.meta.cuda_status + ")"
                        : in.cpu_only               ? std::string(cpu_only_note)
                                                    : "no GPU work in the trace: CPU time only";
    return;
  }

  // Launch-to-start: from each launching call's start to its work's start on the GPU.
  std::vector<std::uint64_t> waits, calls;
  for (const gpu_activity& g : t.gpu) {
    if (g.kind == gpu_kind::sync || g.api == no_index) continue;
    const api_call& a = t.api_calls[g.api];
    calls.push_back(a.end_ns - a.start_ns);
    if (g.start_ns >= a.start_ns) waits.push_back(g.start_ns - a.start_ns);
  }
  in.launch_to_start = summarize(std::move(waits));
  in.launch_call_median_ns = median_of(std::move(calls));

  // Three signals, each pointing to overhead or to compute.
  const std::uint64_t cpu = in.cpu_work_ns();
  const double r = in.self_cuda_ns ? double(cpu) / double(in.self_cuda_ns) : 0.0;
  const std::uint64_t queue_threshold = c.queue_threshold_ns();
  const bool cpu_heavy = cpu > in.self_cuda_ns;
  const bool idle = in.gpu_idle_share >= o.idle_share;
  const bool known_queue = in.launch_to_start.count > 0;
  const bool short_queue = in.launch_to_start.median_ns < queue_threshold;
  in.verdict_rule =
      "overhead-bound when Self CPU (without synchronize calls) > Self CUDA, the GPU is idle >= " + percent_text(o.idle_share) +
      " of the window and the median launch-to-start is under " + us_text(queue_threshold) + " (" +
      fixed_text(o.queue_factor, 0) + "x the median launch call, at least " + us_text(o.queue_min_ns) +
      "); compute-bound when none of the three holds; mixed otherwise";
  const std::string cpu_signal = "Self CPU " + us_text(cpu) +
                                 (in.sync_cpu_ns ? " (not counting " + us_text(in.sync_cpu_ns) + " in synchronize calls)" : "") +
                                 " vs Self CUDA " + us_text(in.self_cuda_ns) + " (" + ratio_text(r) + ")";
  const std::string idle_signal = "GPU idle " + percent_text(in.gpu_idle_share) + " of the " + us_text(window_ns) + " window";
  const std::string queue_signal = known_queue ? "launch-to-start median " + us_text(in.launch_to_start.median_ns) +
                                                     " (launch calls " + us_text(in.launch_call_median_ns) + " median)"
                                               : "launch-to-start unknown (no launching calls in the trace)";
  in.verdict_signals = cpu_signal + "; " + idle_signal + "; " + queue_signal;
  counter_bound bound = counter_bound::none;
  if (!t.gpu_metrics.empty()) {
    in.gpu_counters = busy_counters(t);
    const kernel_counters& k = in.gpu_counters;
    in.verdict_signals += k.samples ? "; GPU counters while busy: " + counters_text(k, counter_bound::none, true)
                          : k.too_short
                              ? "; GPU counters: none, no busy stretch lasts the " + us_text(k.interval_ns) + " sampling interval"
                              : "; GPU counters: no sample while the GPU was busy";
    bound = c.bound_of(k);
  }

  const int overhead_votes = int(cpu_heavy) + int(idle) + int(known_queue && short_queue);
  const int votes = known_queue ? 3 : 2;
  if (overhead_votes == votes) {
    in.verdict = bound_verdict::overhead_bound;
    in.verdict_reason =
        "the CPU's work outweighs the GPU's, the GPU sits idle and work starts as soon as it is launched: "
        "the GPU waits for the CPU. Make the work per launch bigger, batch or fuse launches, or capture a "
        "CUDA graph.";
  } else if (overhead_votes == 0) {
    in.verdict = bound_verdict::compute_bound;
    in.verdict_reason = std::string("the GPU is busy") +
                        (known_queue ? " and work queues behind earlier work: the CPU runs ahead." : ".") +
                        " The GPU kernels are where the time goes; CPU time is hidden behind them.";
    const std::string counters = " Its counters while busy (" + counters_text(in.gpu_counters, bound) + ")";
    if (bound == counter_bound::memory)
      in.verdict_reason += counters + " say memory bandwidth, not arithmetic, limits the kernels.";
    else if (bound == counter_bound::compute) in.verdict_reason += counters + " agree: the SMs' arithmetic limits the kernels.";
    else if (bound == counter_bound::tensor) in.verdict_reason += counters + " agree: the tensor cores limit the kernels.";
    else if (bound == counter_bound::latency)
      in.verdict_reason += counters + " say the kernels are latency-bound: too few warps in flight to keep the SMs or DRAM busy.";
  } else {
    in.verdict = bound_verdict::mixed;
    std::vector<std::string> to_overhead, to_compute;
    (cpu_heavy ? to_overhead : to_compute)
        .push_back(cpu_heavy ? "the CPU's work exceeds the GPU's" : "the GPU's work exceeds the CPU's");
    (idle ? to_overhead : to_compute)
        .push_back(idle ? "the GPU is idle " + percent_text(in.gpu_idle_share) + " of the window"
                        : "the GPU is busy " + percent_text(1.0 - in.gpu_idle_share) + " of the window");
    if (known_queue)
      (short_queue ? to_overhead : to_compute)
          .push_back(short_queue ? "work starts soon after its launch (the GPU waits for it)"
                                 : "work queues behind earlier work (the CPU runs ahead)");
    std::string over, comp;
    for (const std::string& x : to_overhead) over += (over.empty() ? "" : ", ") + x;
    for (const std::string& x : to_compute) comp += (comp.empty() ? "" : ", ") + x;
    in.verdict_reason = "towards overhead: " + over + "; towards compute: " + comp +
                        ". Part of the window is one, part the other (a cold step, host work outside the traced "
                        "scopes, synchronizations or a short trace): read the findings.";
  }
}

}  // namespace detail::insight_rules

}  // namespace cuprof
