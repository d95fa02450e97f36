// Runs the rules and ranks their findings. The verdict comes first: the rules
// read it (a compute-bound run hides CPU costs behind the GPU). The rules:
//
// - the GPU waiting for launches (not in a compute-bound run: there the
//   launch-to-start gap is queue depth);
// - chains of elementwise kernels worth fusing;
// - with GPU hardware metrics, what limits each kernel: compute, the tensor
//   cores, DRAM bandwidth or latency;
// - a memset or memcpy right before a GEMM (cuBLAS's flag clear, addmm's bias copy);
// - a kernel whose time varies step to step, as a distribution over steps;
// - a cold first step or call, where CPU time matters and warmup was not used;
// - occupancy queries before launches (adaptively sized kernels);
// - synchronizations that take a large share of CPU time;
// - cudaMalloc, cudaFree and their kin (not the stream-ordered ones) in steps
//   after the first: each may synchronize the device;
// - copies from pageable host memory, against the trace's own pinned copies;
// - memory still allocated at the end of the window, per scope;
// - each device's peak of memory in use, and the allocation that reached it;
// - profiler overhead and dropped records.
#include "context.hpp"

#include <algorithm>
#include <limits>

namespace cuprof {

namespace {

// Whole seconds below the first event, as cuprof's trace writer chooses its base.
std::uint64_t default_base(const trace& t) {
  std::uint64_t lo = std::numeric_limits<std::uint64_t>::max();
  for (const cpu_span& s : t.spans) lo = std::min(lo, s.start_ns);
  for (const api_call& a : t.api_calls) lo = std::min(lo, a.start_ns);
  for (const gpu_activity& g : t.gpu) lo = std::min(lo, g.start_ns);
  if (t.meta.window_start_ns) lo = std::min(lo, t.meta.window_start_ns);
  if (lo == std::numeric_limits<std::uint64_t>::max()) return 0;
  if (lo > 0) lo -= 1;
  return lo - lo % 1000000000ull;
}

// The largest estimated saving first, then the largest cost; the top ones make the summary.
void rank(insights& in, std::size_t summary_items) {
  std::stable_sort(in.findings.begin(), in.findings.end(), [](const finding& a, const finding& b) {
    return a.saving_ns != b.saving_ns ? a.saving_ns > b.saving_ns : a.cost_ns > b.cost_ns;
  });
  for (const finding& f : in.findings) {
    if (in.summary.size() >= summary_items || f.saving_ns == 0) break;
    in.summary.push_back(detail::insight_rules::summary_line(f));
  }
}

}  // namespace

bool is_cpu_only(const trace& t) { return t.gpu.empty() && t.api_calls.empty() && !t.spans.empty(); }

insights analyze(const trace& t, const insights_options& options) {
  namespace rules = detail::insight_rules;
  rules::context c(t, options);
  c.in.base_ns = options.base_ns ? options.base_ns : default_base(t);
  rules::index(c);
  rules::verdict(c);
  rules::launch_to_start(c);
  rules::elementwise_chains(c);
  rules::kernel_bounds(c);
  rules::copies_before_gemms(c);
  rules::step_variation(c);
  rules::cold_start(c);
  rules::occupancy_queries(c);
  rules::synchronizations(c);
  rules::allocations_in_loop(c);
  rules::pageable_copies(c);
  rules::memory_not_freed(c);
  rules::memory_peaks(c);
  rules::profiler_overhead(c);
  rules::incomplete_trace(c);
  rank(c.in, options.summary_items);
  return std::move(c.in);
}

}  // namespace cuprof
