// What the insight rules share: the trace and options, the insights being
// built, and the index built once before the rules run. Each rule (one file
// each) reads the context and adds its findings with add().
#pragma once

#include "../text_format.hpp"
#include <cuprof/analysis.hpp>
#include <cuprof/base/text.hpp>
#include <cuprof/model/event.hpp>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cuprof::detail::insight_rules {

// Pools runs' GPU counters into one kernel_counters: each run's averages
// (average_metrics) weighted by its duration, per metric.
class counter_pool {
 public:
  void add(const gpu_metric_series& s, std::uint64_t start, std::uint64_t end);
  kernel_counters result() const;

 private:
  double sum_[4] = {}, weight_[4] = {};
  kernel_counters r_;
};

// What a kernel's counters say bounds it (insights_options' thresholds); none
// when they say nothing clear or rest on too few samples.
enum class counter_bound { none, compute, tensor, memory, latency };

inline std::string ts_text(const insights& in, std::uint64_t ns) { return "ts " + fixed_text(in.ts_us(ns), 3) + "us"; }

struct context {
  context(const trace& trace_in, const insights_options& options) : t(trace_in), o(options) {}

  const trace& t;
  const insights_options& o;
  insights in;

  // Built by index().
  std::vector<std::uint32_t> steps;                   // the ProfilerStep spans, by start
  std::vector<std::uint64_t> first_child;             // per span: the start of its first child scope or call; max() if none
  std::vector<name_id> first_child_name;              // per span: that child's name
  std::vector<std::vector<std::uint32_t>> instances;  // per in.kernels entry: indices into trace::gpu
  std::vector<std::uint32_t> row_of;                  // per trace::gpu record: its in.kernels entry; no_index for syncs
  // Built by verdict().
  std::vector<std::pair<std::uint64_t, std::uint64_t>> busy_union;  // GPU work, merged, in time order

  // The ProfilerStep containing a scope, or no_index.
  std::uint32_t step_of_span(std::uint32_t s) const {
    for (; s != no_index; s = t.spans[s].parent)
      if (t.spans[s].is_step) return s;
    return no_index;
  }
  // The step a GPU activity belongs to: by its launching scope, else by its call's time.
  std::uint32_t step_of(const gpu_activity& g) const;
  // The step a call belongs to: by its scope, else by its thread and time.
  std::uint32_t step_of(const api_call& a) const;
  // The step open on thread `tid` at `ts`, or no_index.
  std::uint32_t step_at(std::uint32_t tid, std::uint64_t ts) const;
  std::string step_name(std::uint32_t step) const { return step == no_index ? std::string() : t.names.str(t.spans[step].name); }
  // "ProfilerStep#2 > matmul_add > matmul"
  std::string scope_path(std::uint32_t s) const;
  // The same without the steps ("matmul_add > matmul"): one path for the
  // same scope in every step.
  std::string scope_path_in_step(std::uint32_t s) const;
  // Where a GPU activity or a call is: its scopes, its lane or thread, its ts.
  std::string where_gpu(const gpu_activity& g) const;
  std::string where_call(const api_call& a) const;

  bool same_stream(const gpu_activity& a, const gpu_activity& b) const {
    const gpu_lane &x = t.lane_of(a), &y = t.lane_of(b);
    return x.device == y.device && x.stream == y.stream;
  }
  // GPU work in stream order: per (device, stream), by start.
  std::vector<std::uint32_t> stream_order() const;

  // Decoded once per name: rules ask for every GPU record.
  kernel_category category_of(name_id n) {
    auto it = category_.find(n);
    if (it == category_.end()) it = category_.emplace(n, decode_kernel_name(t.names.str(n)).category).first;
    return it->second;
  }

  // A GPU's metric samples, or null.
  const gpu_metric_series* series_of(std::uint32_t device) const {
    for (const gpu_metric_series& s : t.gpu_metrics)
      if (s.device == device) return &s;
    return nullptr;
  }
  counter_bound bound_of(const kernel_counters& k) const;

  // Launch-to-start up to this: the work found its stream (nearly) empty.
  std::uint64_t queue_threshold_ns() const;

  // Sets the cost's share of its base; a finding's cause defaults to its kind.
  void add(finding f);

 private:
  std::unordered_map<name_id, kernel_category> category_;
};

// Before the rules, in this order.
void index(context& c);    // steps, first children, in.kernels with their throughput and counters
void verdict(context& c);  // totals, window, busy_union, launch-to-start, the verdict

// The rules, each in the file named for the finding it adds.
void launch_to_start(context& c);
void elementwise_chains(context& c);
void copies_before_gemms(context& c);
void step_variation(context& c);
void cold_start(context& c);
void occupancy_queries(context& c);
void synchronizations(context& c);
void profiler_overhead(context& c);
void incomplete_trace(context& c);
void allocations_in_loop(context& c);
void pageable_copies(context& c);
void memory_not_freed(context& c);
void memory_peaks(context& c);
void kernel_bounds(context& c);

// A kernel's counters as figures, those a bound rests on first: "DRAM 82% of
// peak, SM 8%, 37 samples"; with `all`, every metric sampled.
std::string counters_text(const kernel_counters& k, counter_bound b, bool all = false);

// Where memory is: "GPU 0", or "host memory" (memory_event::device -1).
std::string memory_place(std::int32_t device);

// A finding as one summary line (format.cpp, with the rest of the text).
std::string summary_line(const finding& f);
// A report's opening block: its summary lines numbered, terminal-safe, then a blank line; "" for none.
std::string summary_block(const std::vector<std::string>& summary);

}  // namespace cuprof::detail::insight_rules
