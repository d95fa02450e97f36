// Insights: what the PyTorch profiling articles teach a reader to look for,
// computed from a trace, ranked by what each could save. Each finding carries
// its numbers, what it costs (a share of GPU time, of CPU time or of the
// window), what fixing it could save and how that was estimated, and where in
// the trace it is (step, scope, lane, ts as the trace file writes it). One
// function per rule:
//
// - the verdict: overhead-bound, compute-bound or mixed, from three signals
//   (Self CPU vs Self CUDA, GPU idle share of the window, launch-to-start);
// - the GPU waiting for launches (not in a compute-bound run: there the
//   launch-to-start gap is queue depth);
// - chains of elementwise kernels worth fusing;
// - a memset or memcpy right before a GEMM (cuBLAS's flag clear, addmm's bias copy);
// - a kernel whose time varies step to step, as a distribution over steps;
// - a cold first step or call, where CPU time matters and warmup was not used;
// - occupancy queries before launches (adaptively sized kernels);
// - synchronizations that take a large share of CPU time;
// - profiler overhead and dropped records.
#pragma once

#ifdef CUPROF_DISABLE
#error "cuprof: reading and analysing traces needs the real model; build this file without CUPROF_DISABLE"
#endif

#include "kernel_names.hpp"
#include "text_format.hpp"
#include "throughput.hpp"
#include <cuprof/model/api_vocabulary.hpp>
#include <cuprof/model/attribution.hpp>
#include <cuprof/model/event.hpp>
#include <cuprof/model/stats.hpp>
#include <cuprof/output/table.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cuprof {

struct insights_options {
  // The time base that "ts" values are shown against: a trace file's
  // baseTimeNanoseconds. 0: whole seconds below the first event, as cuprof's
  // writer chooses it, so ts values match cuprof's trace files.
  std::uint64_t base_ns = 0;
  // The verdict's signals. The GPU idle this share of the window or more: removing
  // the idle time would make the run at least 1.4x faster, more than step-to-step
  // noise or the trace's ragged edges explain.
  double idle_share = 0.3;
  // Launch-to-start deeper than this many launch-call durations (and queue_min_ns):
  // work waited behind earlier work on its stream, the CPU ran ahead. A kernel
  // launched onto an idle stream starts within a launch call or two.
  double queue_factor = 3.0;
  std::uint64_t queue_min_ns = 20000;
  // Elementwise kernels of one scope call chain across at most this many other kernels
  // (torch's eager GeGLU runs up_proj's GEMM between the GeLU and its mul); more, and
  // they are likely separate stages of the computation.
  std::size_t chain_gap_kernels = 1;
  double cold_factor = 1.5;       // first step at least this many times the median of the others
  double variation_factor = 1.25; // a kernel's slowest step at least this many times its median step
  double sync_share = 0.25;       // synchronizations taking at least this share of Self CPU time
  std::size_t max_items = 8;      // per finding list
  std::size_t summary_items = 3;  // findings in the summary
};

enum class bound_verdict : std::uint8_t { no_gpu_work, overhead_bound, compute_bound, mixed };

inline const char* verdict_name(bound_verdict v) {
  switch (v) {
    case bound_verdict::overhead_bound: return "overhead-bound";
    case bound_verdict::compute_bound: return "compute-bound";
    case bound_verdict::mixed: return "mixed";
    default: return "no GPU work";
  }
}

// What a finding's cost is a share of.
enum class cost_base : std::uint8_t { none, gpu_time, cpu_time, window };

inline const char* cost_base_name(cost_base b) {
  switch (b) {
    case cost_base::gpu_time: return "GPU time";
    case cost_base::cpu_time: return "CPU time";
    case cost_base::window: return "the window";
    default: return "";
  }
}

struct finding {
  std::string kind;                  // "elementwise chain", "memset before GEMM", ...
  std::string cause;                 // what it is about (kind and kernel or scope): one finding per cause
  std::string headline;              // one line, with the numbers
  std::vector<std::string> details;  // further lines
  std::string where;                 // where in the trace
  std::uint64_t cost_ns = 0;         // what it costs now
  cost_base cost_of = cost_base::none;
  double cost_share = 0;             // cost_ns over Self CUDA, Self CPU or the window
  std::uint64_t saving_ns = 0;       // what fixing it could save, estimated; findings are ranked by it
  std::string estimate;              // how saving_ns was estimated
};

// A trace of host scopes only: no CUDA calls and no GPU work were recorded.
inline bool is_cpu_only(const trace& t) { return t.gpu.empty() && t.api_calls.empty() && !t.spans.empty(); }

// What a CPU-only trace's figures mean (insights, and the table's last line).
inline constexpr const char* cpu_only_note =
    "a CPU-only trace: no CUDA calls and no GPU work were recorded, so every figure is host time inside the scopes; "
    "figures under a microsecond are scopes around very little work (recording a scope costs tens of nanoseconds)";

// One row per GPU kernel, memcpy or memset name.
struct kernel_summary {
  std::string name;
  gpu_kind kind = gpu_kind::kernel;
  distribution duration;
  distribution launch_to_start;  // launching call's start to the GPU start; count 0 if no call is known
  kernel_name_info decoded;
  std::uint64_t first_start_ns = 0;
  // Achieved rate over the instances whose size the trace gives (throughput.hpp):
  // FLOPs or bytes over their GPU time, and the peak; amount 0 where unknown.
  activity_throughput throughput;
};

struct insights {
  bound_verdict verdict = bound_verdict::no_gpu_work;
  std::string verdict_rule;    // the rule that gave the verdict, with its thresholds
  std::string verdict_signals; // the three signals as measured
  std::string verdict_reason;  // what the verdict means here
  // The table's time_totals (Self CPU, of it in synchronize calls, Self CUDA).
  std::uint64_t self_cpu_ns = 0;   // Self CPU time total
  std::uint64_t sync_cpu_ns = 0;   // of it, in synchronize calls (the CPU waiting)
  std::uint64_t self_cuda_ns = 0;  // Self CUDA time total
  time_totals totals() const { return {self_cpu_ns, sync_cpu_ns, self_cuda_ns}; }
  std::uint64_t window_start_ns = 0, window_end_ns = 0;  // first to last event, CPU and GPU
  std::uint64_t gpu_busy_ns = 0;   // union of GPU work inside the window
  double gpu_idle_share = 0;
  distribution launch_to_start;    // all GPU work with a known launching call
  std::uint64_t launch_call_median_ns = 0;  // the launching calls' own duration
  bool cpu_only = false;           // no CUDA calls and no GPU work: host scopes only
  std::size_t steps = 0;
  long first_step = -1;            // N of the first ProfilerStep#N; -1 without steps
  std::uint64_t base_ns = 0;
  std::vector<finding> findings;   // ranked: the largest estimated saving first
  std::vector<std::string> summary;  // the top findings, one line each
  std::vector<kernel_summary> kernels;

  std::uint64_t window_ns() const { return window_end_ns - window_start_ns; }
  double ts_us(std::uint64_t ns) const { return ns >= base_ns ? double(ns - base_ns) / 1000.0 : 0.0; }
  // Self CPU time without synchronize calls: the CPU's own work.
  std::uint64_t cpu_work_ns() const { return self_cpu_ns - sync_cpu_ns; }
  // Where CPU time is worth spending effort on: the GPU is not what limits the run.
  bool cpu_time_matters() const {
    return verdict == bound_verdict::overhead_bound || verdict == bound_verdict::no_gpu_work ||
           (verdict == bound_verdict::mixed && cpu_work_ns() > self_cuda_ns);
  }
};

namespace detail {

inline std::string ts_text(const insights& in, std::uint64_t ns) { return "ts " + fixed_text(in.ts_us(ns), 3) + "us"; }

class analyzer {
 public:
  analyzer(const trace& t, const insights_options& o) : t_(t), o_(o) {}

  insights run() {
    in_.base_ns = o_.base_ns ? o_.base_ns : default_base();
    index();
    throughputs();
    verdict();
    launch_latency();
    elementwise_chains();
    copies_before_gemms();
    step_variation();
    cold_start();
    occupancy_queries();
    synchronizations();
    profiler_notes();
    rank();
    return std::move(in_);
  }

 private:
  std::uint64_t default_base() const {
    std::uint64_t lo = std::numeric_limits<std::uint64_t>::max();
    for (const cpu_span& s : t_.spans) lo = std::min(lo, s.start_ns);
    for (const api_call& a : t_.api_calls) lo = std::min(lo, a.start_ns);
    for (const gpu_activity& g : t_.gpu) lo = std::min(lo, g.start_ns);
    if (t_.meta.window_start_ns) lo = std::min(lo, t_.meta.window_start_ns);
    if (lo == std::numeric_limits<std::uint64_t>::max()) return 0;
    if (lo > 0) lo -= 1;
    return lo - lo % 1000000000ull;
  }

  void index() {
    for (std::uint32_t i = 0; i < t_.spans.size(); ++i)
      if (t_.spans[i].is_step) steps_.push_back(i);
    std::sort(steps_.begin(), steps_.end(),
              [&](std::uint32_t a, std::uint32_t b) { return t_.spans[a].start_ns < t_.spans[b].start_ns; });
    in_.steps = steps_.size();
    if (!steps_.empty()) {
      const std::string& first = t_.names.str(t_.spans[steps_[0]].name);
      if (first.size() > step_name_prefix.size()) in_.first_step = std::strtol(first.c_str() + step_name_prefix.size(), nullptr, 10);
    }
    first_child_.assign(t_.spans.size(), std::numeric_limits<std::uint64_t>::max());
    first_child_name_.assign(t_.spans.size(), 0);
    const auto child = [&](std::uint32_t parent, std::uint64_t start, name_id name) {
      if (parent == no_index || start >= first_child_[parent]) return;
      first_child_[parent] = start;
      first_child_name_[parent] = name;
    };
    for (const cpu_span& s : t_.spans) child(s.parent, s.start_ns, s.name);
    for (const api_call& a : t_.api_calls) child(a.parent, a.start_ns, t_.name_of(a));

    // Kernels by name, in first-start order.
    std::unordered_map<std::string, std::size_t> by_name;
    std::vector<std::vector<std::uint64_t>> dur, lat;
    for (std::uint32_t i = 0; i < t_.gpu.size(); ++i) {
      const gpu_activity& g = t_.gpu[i];
      if (g.kind == gpu_kind::sync) continue;
      const std::string& name = t_.names.str(g.name);
      auto [it, inserted] = by_name.try_emplace(name, in_.kernels.size());
      if (inserted) {
        kernel_summary k;
        k.name = name;
        k.kind = g.kind;
        k.first_start_ns = g.start_ns;
        if (g.kind == gpu_kind::kernel) k.decoded = decode_kernel_name(name);
        in_.kernels.push_back(std::move(k));
        dur.emplace_back();
        lat.emplace_back();
        instances_.emplace_back();
      }
      kernel_summary& k = in_.kernels[it->second];
      k.first_start_ns = std::min(k.first_start_ns, g.start_ns);
      dur[it->second].push_back(g.end_ns - g.start_ns);
      if (g.api != no_index && g.start_ns >= t_.api_calls[g.api].start_ns)
        lat[it->second].push_back(g.start_ns - t_.api_calls[g.api].start_ns);
      instances_[it->second].push_back(i);
    }
    for (std::size_t i = 0; i < in_.kernels.size(); ++i) {
      in_.kernels[i].duration = summarize(dur[i]);
      in_.kernels[i].launch_to_start = summarize(lat[i]);
    }
  }

  // Each name's achieved FLOP/s or bytes/s, pooled over the instances with known sizes.
  void throughputs() {
    std::vector<std::uint32_t> row_of(t_.gpu.size(), no_index);
    for (std::uint32_t k = 0; k < instances_.size(); ++k)
      for (std::uint32_t i : instances_[k]) row_of[i] = k;
    for (activity_throughput& r : gpu_throughput(t_)) {
      if (row_of[r.gpu] == no_index) continue;
      activity_throughput& sum = in_.kernels[row_of[r.gpu]].throughput;
      if (sum.amount == 0) {
        sum.what = r.what;
        sum.peak = std::move(r.peak);
      }
      sum.amount += r.amount;
      sum.seconds += r.seconds;
    }
  }

  // The ProfilerStep containing a scope, or no_index.
  std::uint32_t step_of_span(std::uint32_t s) const {
    for (; s != no_index; s = t_.spans[s].parent)
      if (t_.spans[s].is_step) return s;
    return no_index;
  }

  // The step a GPU activity belongs to: by its launching scope, else by its call's time.
  std::uint32_t step_of(const gpu_activity& g) const {
    std::uint32_t s = step_of_span(launching_span(t_, g));
    if (s != no_index || g.api == no_index) return s;
    const api_call& a = t_.api_calls[g.api];
    for (std::uint32_t st : steps_)
      if (t_.spans[st].tid == a.tid && t_.spans[st].start_ns <= a.start_ns && a.start_ns < t_.spans[st].end_ns) return st;
    return no_index;
  }

  std::string step_name(std::uint32_t step) const { return step == no_index ? std::string() : t_.names.str(t_.spans[step].name); }

  // "ProfilerStep#2 > matmul_add > matmul"
  std::string scope_path(std::uint32_t s) const {
    std::vector<std::string> parts;
    for (; s != no_index && parts.size() < 6; s = t_.spans[s].parent) parts.push_back(t_.names.str(t_.spans[s].name));
    std::string out;
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) out += (out.empty() ? "" : " > ") + *it;
    return out;
  }

  std::string where_gpu(const gpu_activity& g) const {
    std::string path = scope_path(launching_span(t_, g));
    if (path.empty()) path = step_name(step_of(g));
    std::string s = path.empty() ? std::string() : path + ", ";
    const gpu_lane& where = t_.lane_of(g);
    s += "GPU " + std::to_string(where.device) + " stream " + std::to_string(where.stream) + " at " + ts_text(in_, g.start_ns);
    return s;
  }

  std::string where_call(const api_call& a) const {
    std::string path = scope_path(a.parent);
    return (path.empty() ? std::string() : path + ", ") + "thread " + std::to_string(a.tid) + " at " + ts_text(in_, a.start_ns);
  }

  // Sets the cost's share of its base; a finding's cause defaults to its kind.
  void add(finding f) {
    const std::uint64_t base = f.cost_of == cost_base::gpu_time  ? in_.self_cuda_ns
                               : f.cost_of == cost_base::cpu_time ? in_.self_cpu_ns
                               : f.cost_of == cost_base::window   ? in_.window_ns()
                                                                  : 0;
    f.cost_share = base ? double(f.cost_ns) / double(base) : 0.0;
    if (f.cause.empty()) f.cause = f.kind;
    in_.findings.push_back(std::move(f));
  }

  // The largest estimated saving first, then the largest cost; the top ones make the summary.
  void rank() {
    std::stable_sort(in_.findings.begin(), in_.findings.end(), [](const finding& a, const finding& b) {
      return a.saving_ns != b.saving_ns ? a.saving_ns > b.saving_ns : a.cost_ns > b.cost_ns;
    });
    for (const finding& f : in_.findings) {
      if (in_.summary.size() >= o_.summary_items || f.saving_ns == 0) break;
      in_.summary.push_back("[" + f.kind + "] " + f.headline + "; " + percent_text(f.cost_share) + " of " +
                            cost_base_name(f.cost_of) + ", could save ~" + us_text(f.saving_ns) + " (" + f.estimate + ")");
    }
  }

  void verdict() {
    const time_totals time = key_averages(t_).totals();
    in_.self_cpu_ns = time.self_cpu_ns;
    in_.sync_cpu_ns = time.sync_ns;
    in_.self_cuda_ns = time.self_cuda_ns;

    time_extent window;
    for (const cpu_span& s : t_.spans) window.add(s.start_ns, s.end_ns);
    for (const api_call& a : t_.api_calls) window.add(a.start_ns, a.end_ns);
    std::vector<std::pair<std::uint64_t, std::uint64_t>> busy;
    for (const gpu_activity& g : t_.gpu) {
      if (g.kind == gpu_kind::sync) continue;
      window.add(g.start_ns, g.end_ns);
      busy.emplace_back(g.start_ns, g.end_ns);
    }
    if (window.empty()) {
      in_.verdict_reason = "the trace has no events";
      return;
    }
    in_.window_start_ns = window.start_ns;
    in_.window_end_ns = window.end_ns;
    // The union of GPU work as intervals: its length is the busy time; synchronizations
    // are matched against it (what ran while the CPU waited).
    std::sort(busy.begin(), busy.end());
    for (const auto& b : busy) {
      if (busy_union_.empty() || b.first > busy_union_.back().second) busy_union_.push_back(b);
      else busy_union_.back().second = std::max(busy_union_.back().second, b.second);
    }
    for (const auto& u : busy_union_) in_.gpu_busy_ns += u.second - u.first;
    const std::uint64_t window_ns = window.end_ns - window.start_ns;
    in_.gpu_idle_share = window_ns ? 1.0 - double(in_.gpu_busy_ns) / double(window_ns) : 0.0;

    if (busy.empty()) {
      in_.verdict = bound_verdict::no_gpu_work;
      in_.cpu_only = is_cpu_only(t_);
      in_.verdict_reason = !t_.meta.cuda_status.empty() ? "no GPU work in the trace: CUDA was not traced (" + t_.meta.cuda_status + ")"
                           : in_.cpu_only               ? std::string(cpu_only_note)
                                                        : "no GPU work in the trace: CPU time only";
      return;
    }

    // Launch-to-start: from each launching call's start to its work's start on the GPU.
    std::vector<std::uint64_t> waits, calls;
    for (const gpu_activity& g : t_.gpu) {
      if (g.kind == gpu_kind::sync || g.api == no_index) continue;
      const api_call& a = t_.api_calls[g.api];
      calls.push_back(a.end_ns - a.start_ns);
      if (g.start_ns >= a.start_ns) waits.push_back(g.start_ns - a.start_ns);
    }
    in_.launch_to_start = summarize(std::move(waits));
    in_.launch_call_median_ns = median_of(std::move(calls));

    // Three signals, each pointing to overhead or to compute.
    const std::uint64_t cpu = in_.cpu_work_ns();
    const double r = in_.self_cuda_ns ? double(cpu) / double(in_.self_cuda_ns) : 0.0;
    const std::uint64_t queue_threshold = queue_threshold_ns();
    const bool cpu_heavy = cpu > in_.self_cuda_ns;
    const bool idle = in_.gpu_idle_share >= o_.idle_share;
    const bool known_queue = in_.launch_to_start.count > 0;
    const bool short_queue = in_.launch_to_start.median_ns < queue_threshold;
    in_.verdict_rule = "overhead-bound when Self CPU (without synchronize calls) > Self CUDA, the GPU is idle >= " +
                       percent_text(o_.idle_share) + " of the window and the median launch-to-start is under " +
                       us_text(queue_threshold) + " (" + fixed_text(o_.queue_factor, 0) + "x the median launch call, at least " +
                       us_text(o_.queue_min_ns) + "); compute-bound when none of the three holds; mixed otherwise";
    const std::string cpu_signal = "Self CPU " + us_text(cpu) +
                                   (in_.sync_cpu_ns ? " (not counting " + us_text(in_.sync_cpu_ns) + " in synchronize calls)" : "") +
                                   " vs Self CUDA " + us_text(in_.self_cuda_ns) + " (" + ratio_text(r) + ")";
    const std::string idle_signal = "GPU idle " + percent_text(in_.gpu_idle_share) + " of the " + us_text(window_ns) + " window";
    const std::string queue_signal =
        known_queue ? "launch-to-start median " + us_text(in_.launch_to_start.median_ns) + " (launch calls " +
                          us_text(in_.launch_call_median_ns) + " median)"
                    : "launch-to-start unknown (no launching calls in the trace)";
    in_.verdict_signals = cpu_signal + "; " + idle_signal + "; " + queue_signal;

    const int overhead_votes = int(cpu_heavy) + int(idle) + int(known_queue && short_queue);
    const int votes = known_queue ? 3 : 2;
    if (overhead_votes == votes) {
      in_.verdict = bound_verdict::overhead_bound;
      in_.verdict_reason = "the CPU's work outweighs the GPU's, the GPU sits idle and work starts as soon as it is launched: "
                           "the GPU waits for the CPU. Make the work per launch bigger, batch or fuse launches, or capture a "
                           "CUDA graph.";
    } else if (overhead_votes == 0) {
      in_.verdict = bound_verdict::compute_bound;
      in_.verdict_reason = std::string("the GPU is busy") +
                           (known_queue ? " and work queues behind earlier work: the CPU runs ahead." : ".") +
                           " The GPU kernels are where the time goes; CPU time is hidden behind them.";
    } else {
      in_.verdict = bound_verdict::mixed;
      std::vector<std::string> to_overhead, to_compute;
      (cpu_heavy ? to_overhead : to_compute).push_back(cpu_heavy ? "the CPU's work exceeds the GPU's" : "the GPU's work exceeds the CPU's");
      (idle ? to_overhead : to_compute).push_back(idle ? "the GPU is idle " + percent_text(in_.gpu_idle_share) + " of the window"
                                                       : "the GPU is busy " + percent_text(1.0 - in_.gpu_idle_share) + " of the window");
      if (known_queue)
        (short_queue ? to_overhead : to_compute)
            .push_back(short_queue ? "work starts soon after its launch (the GPU waits for it)"
                                   : "work queues behind earlier work (the CPU runs ahead)");
      std::string o, c;
      for (const std::string& x : to_overhead) o += (o.empty() ? "" : ", ") + x;
      for (const std::string& x : to_compute) c += (c.empty() ? "" : ", ") + x;
      in_.verdict_reason = "towards overhead: " + o + "; towards compute: " + c +
                           ". Part of the window is one, part the other (a cold step, host work outside the traced "
                           "scopes, synchronizations or a short trace): read the findings.";
    }
  }

  // The first of a series of repeated scopes (steps, or a top-level scope called
  // at least three times) much wider than the others.
  // Only where CPU time matters (a compute-bound run hides it behind the GPU), and
  // not when the schedule's warmup was used: torch numbers steps from 0 across
  // wait and warmup, so a first recorded ProfilerStep#N with N > 0 came after them.
  void cold_start() {
    if (!in_.cpu_time_matters() || in_.first_step > 0) return;
    std::vector<std::vector<std::uint32_t>> series;
    if (steps_.size() >= 3) {
      series.push_back(steps_);
    } else {
      std::map<name_id, std::vector<std::uint32_t>> top;
      for (std::uint32_t i = 0; i < t_.spans.size(); ++i)
        if (t_.spans[i].parent == no_index) top[t_.spans[i].name].push_back(i);
      for (auto& entry : top) {
        if (entry.second.size() < 3) continue;
        std::sort(entry.second.begin(), entry.second.end(),
                  [&](std::uint32_t a, std::uint32_t b) { return t_.spans[a].start_ns < t_.spans[b].start_ns; });
        series.push_back(entry.second);
      }
    }
    std::size_t reported = 0;
    for (const std::vector<std::uint32_t>& s : series) {
      if (reported >= o_.max_items) break;
      const cpu_span& first = t_.spans[s[0]];
      std::vector<std::uint64_t> rest;
      for (std::size_t i = 1; i < s.size(); ++i) rest.push_back(t_.spans[s[i]].end_ns - t_.spans[s[i]].start_ns);
      const std::uint64_t median = median_of(rest);
      const std::uint64_t dur = first.end_ns - first.start_ns;
      if (median == 0 || double(dur) < o_.cold_factor * double(median) || dur - median < 5000) continue;
      finding f;
      f.kind = "cold start";
      const std::string name = t_.names.str(first.name);
      const std::string others = first.is_step ? "the other steps" : "the other calls";
      f.headline = name + " took " + us_text(dur) + ", " + ratio_text(double(dur) / double(median)) + " the median of " + others +
                   " (" + us_text(median) + ")";
      f.where = (first.is_step ? name : scope_path(s[0])) + " at " + ts_text(in_, first.start_ns);
      f.cause = f.kind + ": " + name;
      f.cost_ns = dur - median;
      f.cost_of = cost_base::window;
      f.saving_ns = f.cost_ns;
      f.estimate = "its time over the median of " + others + ", paid once per process";

      // Where the extra time went: the longest wait from entering a scope to its first child.
      std::vector<std::uint32_t> inside;
      for (std::uint32_t i = 0; i < t_.spans.size(); ++i)
        for (std::uint32_t p = i; p != no_index; p = t_.spans[p].parent)
          if (p == s[0]) {
            inside.push_back(i);
            break;
          }
      std::uint32_t worst = no_index;
      std::uint64_t worst_gap = 0;
      for (std::uint32_t i : inside) {
        if (first_child_[i] == std::numeric_limits<std::uint64_t>::max()) continue;
        const std::uint64_t gap = first_child_[i] - t_.spans[i].start_ns;
        if (gap > worst_gap) worst_gap = gap, worst = i;
      }
      if (worst != no_index) {
        std::vector<std::uint64_t> gaps;
        for (std::uint32_t i = 0; i < t_.spans.size(); ++i) {
          if (t_.spans[i].name != t_.spans[worst].name || first_child_[i] == std::numeric_limits<std::uint64_t>::max()) continue;
          bool in_first = false;
          for (std::uint32_t p = i; p != no_index; p = t_.spans[p].parent) in_first |= p == s[0];
          if (!in_first) gaps.push_back(first_child_[i] - t_.spans[i].start_ns);
        }
        std::string line = t_.names.str(t_.spans[worst].name) + ": " + us_text(worst_gap) +
                           " from entering the scope to its first " +
                           (first_child_name_[worst] < t_.names.size() ? t_.names.str(first_child_name_[worst]) : "event");
        if (!gaps.empty()) line += " (median " + us_text(median_of(gaps)) + " in " + others + ")";
        f.details.push_back(line);
      }
      // The call that cost the most over its usual time.
      std::uint32_t slow = no_index;
      std::uint64_t slow_excess = 0, slow_median = 0;
      std::unordered_map<name_id, std::vector<std::uint64_t>> elsewhere;
      std::vector<std::uint32_t> calls_inside;
      for (std::uint32_t i = 0; i < t_.api_calls.size(); ++i) {
        const api_call& a = t_.api_calls[i];
        const bool in_first = a.tid == first.tid && a.start_ns >= first.start_ns && a.end_ns <= first.end_ns;
        if (in_first) calls_inside.push_back(i);
        else elsewhere[t_.name_of(a)].push_back(a.end_ns - a.start_ns);
      }
      std::unordered_map<name_id, std::uint64_t> median_elsewhere;  // once per name: a step may hold many calls
      for (auto& entry : elsewhere) median_elsewhere.emplace(entry.first, median_of(std::move(entry.second)));
      for (std::uint32_t i : calls_inside) {
        const api_call& a = t_.api_calls[i];
        auto it = median_elsewhere.find(t_.name_of(a));
        if (it == median_elsewhere.end()) continue;
        const std::uint64_t m = it->second, d = a.end_ns - a.start_ns;
        if (d > m && d - m > slow_excess) slow_excess = d - m, slow = i, slow_median = m;
      }
      if (slow != no_index && slow_excess >= 2000)
        f.details.push_back("slowest call over its usual time: " + t_.names.str(t_.name_of(t_.api_calls[slow])) + " " +
                            us_text(t_.api_calls[slow].end_ns - t_.api_calls[slow].start_ns) + " (median " + us_text(slow_median) +
                            " elsewhere)");
      std::map<std::string, std::uint64_t> overhead;
      for (const overhead_span& o : t_.overhead)
        if (o.start_ns < first.end_ns && o.end_ns > first.start_ns) overhead[t_.names.str(o.name)] += o.end_ns - o.start_ns;
      std::vector<std::pair<std::string, std::uint64_t>> by_time(overhead.begin(), overhead.end());
      std::stable_sort(by_time.begin(), by_time.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
      std::string list;
      for (const auto& o : by_time) list += (list.empty() ? "" : ", ") + o.first + " " + us_text(o.second);
      if (!list.empty()) f.details.push_back("CUPTI overhead inside it: " + list);
      f.details.push_back(
          "usual causes: cuBLAS heuristics and workspace allocation, lazy module loading, first-touch allocations; "
          "warm up before profiling (or use the schedule's warmup)");
      add(std::move(f));
      ++reported;
    }
  }

  // A memset or memcpy on a stream immediately followed by a GEMM on that stream.
  void copies_before_gemms() {
    const std::vector<std::uint32_t> order = stream_order();
    struct group {
      std::vector<std::uint32_t> copies;
      std::vector<std::uint64_t> gaps;
      std::uint32_t gemm;
    };
    std::map<std::tuple<std::string, std::uint64_t, std::string>, group> groups;  // copy, bytes, GEMM: one cause
    std::vector<std::tuple<std::string, std::uint64_t, std::string>> keys;
    for (std::size_t k = 0; k + 1 < order.size(); ++k) {
      const gpu_activity& c = t_.gpu[order[k]];
      const gpu_activity& n = t_.gpu[order[k + 1]];
      if ((c.kind != gpu_kind::memcpy && c.kind != gpu_kind::memset) || n.kind != gpu_kind::kernel) continue;
      if (!same_stream(c, n)) continue;
      if (!gemm_name(n.name)) continue;
      auto key = std::make_tuple(t_.names.str(c.name), t_.bytes_of(c), t_.names.str(n.name));
      auto [it, inserted] = groups.try_emplace(key, group{{}, {}, order[k + 1]});
      if (inserted) keys.push_back(key);
      it->second.copies.push_back(order[k]);
      it->second.gaps.push_back(n.start_ns > c.end_ns ? n.start_ns - c.end_ns : 0);
    }
    for (const auto& key : keys) {
      const group& gr = groups[key];
      const gpu_activity& c = t_.gpu[gr.copies[0]];
      const std::string& copy_name = std::get<0>(key);
      const std::string& gemm_name = std::get<2>(key);
      const std::string call = c.api != no_index ? t_.names.str(t_.name_of(t_.api_calls[c.api])) : std::string();  // the first's
      const kernel_name_info gemm = decode_kernel_name(gemm_name);
      finding f;
      f.kind = c.kind == gpu_kind::memset ? "memset before GEMM" : "memcpy before GEMM";
      std::vector<std::uint64_t> durs, call_durs;
      std::vector<std::string> steps;
      std::uint64_t gpu_ns = 0, cpu_ns = 0;
      for (std::uint32_t i : gr.copies) {
        const gpu_activity& g = t_.gpu[i];
        durs.push_back(g.end_ns - g.start_ns);
        gpu_ns += g.end_ns - g.start_ns;
        if (g.api != no_index) call_durs.push_back(t_.api_calls[g.api].end_ns - t_.api_calls[g.api].start_ns);
        if (g.api != no_index) cpu_ns += t_.api_calls[g.api].end_ns - t_.api_calls[g.api].start_ns;
        const std::string st = step_name(step_of(g));
        if (!st.empty() && (steps.empty() || steps.back() != st)) steps.push_back(st);
      }
      f.headline = copy_name + " of " + bytes_text(std::get<1>(key)) + " right before the GEMM " + shorten(gemm_name, 90) + ", " +
                   std::to_string(gr.copies.size()) + (gr.copies.size() == 1 ? " time" : " times");
      std::string launched = call.empty() ? std::string("its launching call is not in the trace")
                                          : "launched by " + call + " (median " + us_text(median_of(call_durs)) + " on the CPU)";
      std::vector<std::string> scopes;  // the scopes that launched them, in first-seen order
      for (std::uint32_t i : gr.copies) {
        const std::uint32_t scope = launching_span(t_, t_.gpu[i]);
        if (scope == no_index) continue;
        const std::string& n = t_.names.str(t_.spans[scope].name);
        if (std::find(scopes.begin(), scopes.end(), n) == scopes.end()) scopes.push_back(n);
      }
      for (std::size_t i = 0; i < scopes.size() && i < o_.max_items; ++i) launched += (i ? ", " : " in ") + scopes[i];
      f.details.push_back(us_text(median_of(durs)) + " median on the GPU, " + us_text(median_of(gr.gaps)) +
                          " median gap to the GEMM; " + launched);
      // What it costs: its launches' CPU time where CPU time matters, else its GPU time.
      const bool on_cpu = in_.cpu_time_matters() && cpu_ns > 0;
      f.cause = f.kind + ": " + copy_name + " of " + bytes_text(std::get<1>(key)) + " before " + gemm_name;
      f.cost_ns = on_cpu ? cpu_ns : gpu_ns;
      f.cost_of = on_cpu ? cost_base::cpu_time : cost_base::gpu_time;
      const bool cublas_flag = c.kind == gpu_kind::memset && t_.bytes_of(c) <= 64;
      if (cublas_flag && !on_cpu) {
        f.estimate = "cuBLAS's own flag clear, a fraction of a microsecond of GPU time a GEMM";
      } else if (cublas_flag) {
        f.saving_ns = f.cost_ns;
        f.estimate = "its launch calls' CPU time: a CUDA graph replays the memset without them";
      } else {
        f.saving_ns = f.cost_ns;
        f.estimate = on_cpu ? "its launch calls' CPU time, if the GEMM did without it (the bias in the GEMM's epilogue)"
                            : "its GPU time, if the GEMM did without it (the bias in the GEMM's epilogue)";
      }
      if (cublas_flag)
        f.details.push_back("cuBLAS clears a small flag or counter before this GEMM (" +
                            (gemm.schedule.empty() ? std::string("its kernel") : gemm.schedule) +
                            "): one more launch per GEMM, not your code");
      else if (c.kind == gpu_kind::memcpy && c.subkind == 8)
        f.details.push_back(gemm.epilogue.rfind("beta=1", 0) == 0
                                ? "the output seeded with C (the bias) before a beta=1 GEMM, as torch's addmm does: one more "
                                  "launch and one more pass over the output"
                                : "a device-to-device copy before the GEMM: often the bias or C copied into the output");
      else
        f.details.push_back("work of its own before every such GEMM");
      if (gemm.recognised()) f.details.push_back("GEMM: " + gemm.summary());
      if (!steps.empty()) {
        std::string list;
        for (std::size_t i = 0; i < steps.size() && i < o_.max_items; ++i) list += (i ? ", " : "") + steps[i];
        if (steps.size() > o_.max_items) list += ", ...";
        f.details.push_back("in " + list);
      }
      f.where = where_gpu(c);
      add(std::move(f));
    }
  }

  static std::string bytes_text(std::uint64_t b) {
    if (b >= (1ull << 30) && b % (1ull << 30) == 0) return std::to_string(b >> 30) + " GiB";
    if (b >= (1ull << 20) && b % (1ull << 20) == 0) return std::to_string(b >> 20) + " MiB";
    if (b >= (1ull << 10) && b % (1ull << 10) == 0) return std::to_string(b >> 10) + " KiB";
    return std::to_string(b) + (b == 1 ? " byte" : " bytes");
  }

  // cudaOccupancy* calls on a thread before a launch: the launched kernel sizes
  // its grid to the SM at run time.
  void occupancy_queries() {
    std::vector<std::uint32_t> calls(t_.api_calls.size());
    for (std::uint32_t i = 0; i < calls.size(); ++i) calls[i] = i;
    std::stable_sort(calls.begin(), calls.end(), [&](std::uint32_t a, std::uint32_t b) {
      const api_call& x = t_.api_calls[a];
      const api_call& y = t_.api_calls[b];
      return x.tid != y.tid ? x.tid < y.tid : x.start_ns < y.start_ns;
    });
    std::unordered_map<std::uint32_t, std::vector<std::uint32_t>> launched;  // call -> GPU records
    for (std::uint32_t i = 0; i < t_.gpu.size(); ++i)
      if (t_.gpu[i].api != no_index) launched[t_.gpu[i].api].push_back(i);
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
      const api_call& a = t_.api_calls[i];
      if (a.tid != tid) pending.clear(), tid = a.tid;
      const std::string& name = t_.names.str(t_.name_of(a));
      if (is_occupancy_query(name)) {
        pending.push_back(i);
        continue;
      }
      if (!is_kernel_launch(name)) continue;
      std::string kernel = name;
      if (auto it = launched.find(i); it != launched.end()) kernel = t_.names.str(t_.gpu[it->second[0]].name);
      auto [it, inserted] = groups.try_emplace(kernel);
      if (inserted) names.push_back(kernel);
      group& g = it->second;
      ++g.launches;
      if (!pending.empty()) {
        ++g.queried;
        for (std::uint32_t q : pending) {
          ++g.queries[t_.names.str(t_.name_of(t_.api_calls[q]))];
          g.query_durs.push_back(t_.api_calls[q].end_ns - t_.api_calls[q].start_ns);
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
        queries += (queries.empty() ? "" : " and ") + q.first + (per > 1.0 ? " x" + fixed_text(per, per == double(int(per)) ? 0 : 1) : "");
      }
      f.headline = shorten(kernel, 90) + ": " + queries + " before " + std::to_string(g.queried) + " of " +
                   std::to_string(g.launches) + " launches";
      f.details.push_back(us_text(median_of(g.query_durs)) +
                          " median per query: an adaptively launched kernel (a GEMM, conv or tuned kernel) sizing its "
                          "grid to the SM; kernels launched without one have a fixed footprint");
      const kernel_name_info k = decode_kernel_name(kernel);
      if (k.recognised()) f.details.push_back("kernel: " + k.summary());
      f.where = where_call(t_.api_calls[g.first_query]);
      f.cause = f.kind + ": " + kernel;
      for (std::uint64_t d : g.query_durs) f.cost_ns += d;
      f.cost_of = cost_base::cpu_time;
      if (in_.cpu_time_matters()) {
        f.saving_ns = f.cost_ns;
        f.estimate = "the queries' CPU time: a CUDA graph replays the launches without them";
      } else {
        f.estimate = "the queries' CPU time is hidden behind the GPU's work";
      }
      add(std::move(f));
    }
  }

  // A kernel whose time differs from step to step (per call without steps): its
  // distribution, the steps far above the median, and the time above the median.
  void step_variation() {
    const bool by_step = steps_.size() >= 3;
    for (std::size_t k = 0; k < in_.kernels.size(); ++k) {
      const kernel_summary& ks = in_.kernels[k];
      if (ks.kind != gpu_kind::kernel || ks.duration.count < 3) continue;
      // (step, or the record without steps; its time; its longest record)
      std::vector<std::tuple<std::uint32_t, std::uint64_t, std::uint32_t>> samples;
      if (by_step) {
        std::map<std::uint32_t, std::pair<std::uint64_t, std::uint32_t>> per_step;
        for (std::uint32_t i : instances_[k]) {
          const std::uint32_t st = step_of(t_.gpu[i]);
          if (st == no_index) continue;
          auto [it, inserted] = per_step.try_emplace(st, 0, i);
          it->second.first += t_.gpu[i].end_ns - t_.gpu[i].start_ns;
          const gpu_activity& longest = t_.gpu[it->second.second];
          if (t_.gpu[i].end_ns - t_.gpu[i].start_ns > longest.end_ns - longest.start_ns) it->second.second = i;
        }
        for (std::uint32_t st : steps_)
          if (auto it = per_step.find(st); it != per_step.end()) samples.emplace_back(st, it->second.first, it->second.second);
      } else {
        for (std::uint32_t i : instances_[k]) samples.emplace_back(i, t_.gpu[i].end_ns - t_.gpu[i].start_ns, i);
      }
      if (samples.size() < 3) continue;
      std::vector<std::uint64_t> times;
      for (const auto& x : samples) times.push_back(std::get<1>(x));
      const distribution d = summarize(times);
      if (d.median_ns == 0 || double(d.max_ns) < o_.variation_factor * double(d.median_ns) || d.max_ns - d.median_ns < 1000) continue;
      finding f;
      f.kind = by_step ? "varies step to step" : "varies call to call";
      f.cause = f.kind + ": " + ks.name;
      const std::string unit = by_step ? " steps" : " calls";
      f.headline = shorten(ks.name, 90) + (by_step ? " per step" : " per call") + ": min " + us_text(d.min_ns) + ", median " +
                   us_text(d.median_ns) + ", p95 " + us_text(d.p95_ns) + ", max " + us_text(d.max_ns) + " over " +
                   std::to_string(d.count) + unit;
      std::string slow;
      std::size_t listed = 0;
      std::uint32_t slowest = no_index;
      std::uint64_t slowest_time = 0;
      for (const auto& [at, time, longest] : samples) {
        if (time > d.median_ns) f.cost_ns += time - d.median_ns;
        if (time > slowest_time) slowest_time = time, slowest = longest;
        if (double(time) < o_.variation_factor * double(d.median_ns) || listed >= o_.max_items) continue;
        ++listed;
        slow += (slow.empty() ? "" : ", ") + (by_step ? step_name(at) + " " : std::string()) + us_text(time) + " (" +
                ratio_text(double(time) / double(d.median_ns)) + ")";
      }
      f.details.push_back("at least " + fixed_text(o_.variation_factor, 2) + "x the median: " + slow);
      f.details.push_back("the same kernel timing differently: clocks, power, contention, a cold cache or a profiler buffer "
                          "request; read the distribution, not the mean");
      f.where = "slowest: " + where_gpu(t_.gpu[slowest]);
      f.cost_of = cost_base::gpu_time;
      f.saving_ns = f.cost_ns;
      f.estimate = std::string("the time above the median, if every") + (by_step ? " step" : " call") + " ran at the median";
      add(std::move(f));
    }
  }

  // Launch-to-start up to this: the work found its stream (nearly) empty.
  std::uint64_t queue_threshold_ns() const {
    return std::max<std::uint64_t>(o_.queue_min_ns, std::uint64_t(o_.queue_factor * double(in_.launch_call_median_ns)));
  }

  // The GPU idle while launches trickle in. Not in a compute-bound run: there the
  // launch-to-start gap is the depth of the queue the CPU keeps ahead, no cost.
  void launch_latency() {
    if (in_.verdict == bound_verdict::compute_bound || !in_.launch_to_start.count) return;
    std::vector<const kernel_summary*> ks;
    for (const kernel_summary& k : in_.kernels)
      if (k.launch_to_start.count) ks.push_back(&k);
    std::stable_sort(ks.begin(), ks.end(), [](const kernel_summary* a, const kernel_summary* b) {
      return a->launch_to_start.median_ns > b->launch_to_start.median_ns;
    });
    const distribution& d = in_.launch_to_start;
    const std::uint64_t queue_threshold = queue_threshold_ns();
    const bool waits = d.median_ns < queue_threshold;
    finding f;
    f.kind = "launch to start";
    f.headline = "the GPU was idle " + us_text(in_.window_ns() - in_.gpu_busy_ns) + " of the " + us_text(in_.window_ns()) +
                 " window; launch to start on the GPU: median " + us_text(d.median_ns) + ", max " + us_text(d.max_ns) + " over " +
                 std::to_string(d.count) + " records";
    for (std::size_t i = 0; i < ks.size() && i < o_.max_items; ++i)
      f.details.push_back(shorten(ks[i]->name, 70) + ": median " + us_text(ks[i]->launch_to_start.median_ns) + ", max " +
                          us_text(ks[i]->launch_to_start.max_ns) + " (" + std::to_string(ks[i]->launch_to_start.count) + ")");
    f.details.push_back(waits ? "work starts soon after its launch call (launch calls take " + us_text(in_.launch_call_median_ns) +
                                    " median): the GPU waits for the CPU"
                              : "work queues behind earlier work on its stream (launch calls take " +
                                    us_text(in_.launch_call_median_ns) + " median): the CPU runs ahead; the idle time is elsewhere");
    f.cost_ns = in_.window_ns() - in_.gpu_busy_ns;
    f.cost_of = cost_base::window;
    if (waits) {
      f.saving_ns = f.cost_ns;
      f.estimate = "up to the GPU's idle time: with launches that keep it fed (a CUDA graph, fewer and bigger launches) the "
                   "window shrinks towards the GPU's busy time";
    } else {
      f.estimate = "launches do not starve the GPU: the queue was not empty";
    }
    // Where: the record that waited longest.
    const gpu_activity* worst = nullptr;
    for (const gpu_activity& g : t_.gpu)
      if (g.kind != gpu_kind::sync && g.api != no_index && g.start_ns >= t_.api_calls[g.api].start_ns &&
          (!worst || g.start_ns - t_.api_calls[g.api].start_ns > worst->start_ns - t_.api_calls[worst->api].start_ns))
        worst = &g;
    if (worst) f.where = "longest: " + shorten(t_.names.str(worst->name), 60) + ", " + where_gpu(*worst);
    add(std::move(f));
  }

  bool same_stream(const gpu_activity& a, const gpu_activity& b) const {
    const gpu_lane &x = t_.lane_of(a), &y = t_.lane_of(b);
    return x.device == y.device && x.stream == y.stream;
  }

  // GPU work in stream order: per (device, stream), by start.
  std::vector<std::uint32_t> stream_order() const {
    std::vector<std::uint32_t> order;
    for (std::uint32_t i = 0; i < t_.gpu.size(); ++i)
      if (t_.gpu[i].kind != gpu_kind::sync) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
      const gpu_lane& x = t_.lane_of(t_.gpu[a]);
      const gpu_lane& y = t_.lane_of(t_.gpu[b]);
      if (x.device != y.device) return x.device < y.device;
      if (x.stream != y.stream) return x.stream < y.stream;
      return t_.gpu[a].start_ns < t_.gpu[b].start_ns;
    });
    return order;
  }

  // The innermost scope enclosing both, below the steps; no_index when none (or a step).
  std::uint32_t common_scope(std::uint32_t a, std::uint32_t b) const {
    std::vector<std::uint32_t> up;
    for (; a != no_index; a = t_.spans[a].parent) up.push_back(a);
    for (; b != no_index; b = t_.spans[b].parent)
      if (std::find(up.begin(), up.end(), b) != up.end()) return t_.spans[b].is_step ? no_index : b;
    return no_index;
  }

  // Elementwise kernels on one stream that one scope call launched (the innermost
  // scope enclosing them, below the step; at most chain_gap_kernels other kernels
  // between two of them), or back to back without a known scope:
  // each writes its result to memory and the next reads inputs back. Fused (as
  // torch.compile or a hand-written kernel does), memory-bound elementwise kernels
  // cost about as much as the longest of them: the intermediates stay in registers.
  void elementwise_chains() {
    const std::vector<std::uint32_t> order = stream_order();
    struct group {
      std::size_t count = 0;
      std::uint64_t total = 0, saving = 0;
      std::vector<std::uint64_t> per_member;  // total time per member position
      std::uint32_t first = no_index, scope = no_index;
      std::vector<name_id> between;  // other kernels between the members, first occurrence
    };
    std::map<std::vector<name_id>, group> groups;
    std::vector<std::vector<name_id>> keys;  // in first-seen order
    std::vector<std::uint32_t> run;
    std::vector<name_id> between, pending;
    std::uint32_t run_scope = no_index;
    const auto flush = [&]() {
      if (run.size() >= 2) {
        std::vector<name_id> key;
        std::uint64_t total = 0, longest = 0;
        for (std::uint32_t i : run) {
          const gpu_activity& g = t_.gpu[i];
          key.push_back(g.name);
          total += g.end_ns - g.start_ns;
          longest = std::max(longest, g.end_ns - g.start_ns);
        }
        auto [it, inserted] = groups.try_emplace(key);
        group& gr = it->second;
        if (inserted) {
          keys.push_back(key);
          gr.first = run[0];
          gr.scope = run_scope;
          gr.per_member.assign(key.size(), 0);
          gr.between = between;
        }
        ++gr.count;
        gr.total += total;
        gr.saving += total - longest;
        for (std::size_t i = 0; i < run.size(); ++i) gr.per_member[i] += t_.gpu[run[i]].end_ns - t_.gpu[run[i]].start_ns;
      }
      run.clear();
      between.clear();
      pending.clear();
      run_scope = no_index;
    };
    for (std::size_t k = 0; k < order.size(); ++k) {
      const gpu_activity& g = t_.gpu[order[k]];
      if (!run.empty() && !same_stream(g, t_.gpu[run[0]])) flush();
      if (g.kind != gpu_kind::kernel || category_of(g.name) != kernel_category::elementwise) {
        if (!run.empty() && g.kind == gpu_kind::kernel) pending.push_back(g.name);
        continue;
      }
      if (!run.empty()) {
        const std::uint32_t scope = common_scope(launching_span(t_, t_.gpu[run.back()]), launching_span(t_, g));
        const bool same_call = scope != no_index && (run.size() == 1 || scope == run_scope) &&
                               pending.size() <= o_.chain_gap_kernels;
        const bool back_to_back = pending.empty() && scope == no_index && run_scope == no_index;
        if (same_call || back_to_back) {
          if (run.size() == 1) run_scope = scope;
          for (name_id n : pending)
            if (std::find(between.begin(), between.end(), n) == between.end()) between.push_back(n);
          pending.clear();
          run.push_back(order[k]);
          continue;
        }
        flush();
      }
      run.push_back(order[k]);
    }
    flush();
    for (const std::vector<name_id>& key : keys) {
      const group& gr = groups[key];
      finding f;
      f.kind = "elementwise chain";
      std::string chain;
      for (name_id n : key) chain += (chain.empty() ? "" : " -> ") + short_kernel(n);
      f.cause = f.kind + ": " + chain;
      f.headline = std::to_string(key.size()) + " elementwise kernels, " + chain + ", " +
                   (gr.scope != no_index ? "in one " + t_.names.str(t_.spans[gr.scope].name) + " call" : std::string("back to back")) +
                   ", " + std::to_string(gr.count) + (gr.count == 1 ? " time" : " times") + ": " + us_text(gr.total);
      for (std::size_t i = 0; i < key.size(); ++i)
        f.details.push_back(shorten(t_.names.str(key[i]), 90) + ": " + us_text(gr.per_member[i]));
      std::string others;
      for (name_id n : gr.between) others += (others.empty() ? "" : ", ") + short_kernel(n);
      if (!others.empty()) f.details.push_back("other kernels between them: " + others);
      f.details.push_back("each writes its result to memory and the next reads it back; fused (torch.compile, a hand-written "
                          "kernel) the intermediates stay in registers, if one feeds the other (the trace shows no data "
                          "flow, nor the bytes moved)");
      f.where = where_gpu(t_.gpu[gr.first]);
      f.cost_ns = gr.total;
      f.cost_of = cost_base::gpu_time;
      f.saving_ns = gr.saving;
      f.estimate = "fused, memory-bound elementwise kernels cost about the longest of them: the chain's time minus its longest "
                   "kernel, per occurrence";
      add(std::move(f));
    }
  }

  // A kernel's short name: what its decoded name says (its operation), else the name itself, cut.
  std::string short_kernel(name_id n) const {
    const std::string& name = t_.names.str(n);
    const kernel_name_info k = decode_kernel_name(name);
    if (k.category == kernel_category::elementwise && !k.op.empty()) return k.op;
    return shorten(name, 60);
  }

  kernel_category category_of(name_id n) {
    auto it = category_.find(n);
    if (it == category_.end()) it = category_.emplace(n, decode_kernel_name(t_.names.str(n)).category).first;
    return it->second;
  }

  void synchronizations() {
    if (!in_.self_cpu_ns) return;
    std::map<std::string, std::pair<std::uint64_t, std::vector<std::uint32_t>>> by_name;
    for (std::uint32_t i = 0; i < t_.api_calls.size(); ++i) {
      const api_call& a = t_.api_calls[i];
      const std::string& name = t_.names.str(t_.name_of(a));
      if (!is_cpu_blocking_synchronization(name)) continue;
      by_name[name].first += a.end_ns - a.start_ns;
      by_name[name].second.push_back(i);
    }
    for (const auto& entry : by_name) {
      const double share = double(entry.second.first) / double(in_.self_cpu_ns);
      if (share < o_.sync_share) continue;
      finding f;
      f.kind = "synchronization";
      f.headline = entry.first + ": " + us_text(entry.second.first) + " in " + std::to_string(entry.second.second.size()) +
                   (entry.second.second.size() == 1 ? " call, " : " calls, ") + percent_text(share) + " of Self CPU time";
      // How much GPU work ran while the CPU waited (overlap with the busy union).
      std::uint64_t covered = 0, waited = 0;
      for (std::uint32_t i : entry.second.second) {
        const api_call& a = t_.api_calls[i];
        waited += a.end_ns - a.start_ns;
        auto it = std::lower_bound(busy_union_.begin(), busy_union_.end(), a.start_ns,
                                   [](const std::pair<std::uint64_t, std::uint64_t>& x, std::uint64_t v) {
                                     return x.second <= v;
                                   });
        for (; it != busy_union_.end() && it->first < a.end_ns; ++it)
          covered += std::min(it->second, a.end_ns) - std::max(it->first, a.start_ns);
      }
      const double busy = waited ? double(covered) / double(waited) : 0.0;
      f.details.push_back("the GPU was busy " + percent_text(busy) + " of that wait (" + us_text(covered) + " of work)" +
                          (busy >= 0.5 ? ": the CPU waits for GPU work, its duration is the GPU's, not a CPU cost"
                                       : ": a long wait covering little GPU work, the GPU idles before or during it"));
      f.where = where_call(t_.api_calls[entry.second.second[0]]);
      f.cause = f.kind + ": " + entry.first;
      f.cost_ns = waited;
      f.cost_of = cost_base::cpu_time;
      f.saving_ns = waited - covered;
      f.estimate = "the wait while the GPU had no work: the wait minus the GPU work that ran during it";
      add(std::move(f));
    }
  }

  void profiler_notes() {
    std::map<std::string, std::pair<std::size_t, std::uint64_t>> overhead;
    std::uint64_t first = std::numeric_limits<std::uint64_t>::max();
    for (const overhead_span& o : t_.overhead) {
      auto& e = overhead[t_.names.str(o.name)];
      ++e.first;
      e.second += o.end_ns - o.start_ns;
      first = std::min(first, o.start_ns);
    }
    if (!overhead.empty()) {
      finding f;
      f.kind = "profiler overhead";
      std::string list;
      for (const auto& o : overhead)
        list += (list.empty() ? "" : ", ") + o.first + " " + us_text(o.second.second) +
                (o.second.first > 1 ? " (" + std::to_string(o.second.first) + ")" : "");
      f.headline = "CUPTI's own work in the window: " + list;
      f.details.push_back("gaps it causes are the profiler's, not your code's; a schedule with warmup steps moves the "
                          "first buffer request out of the recorded window");
      f.where = "CUPTI Overhead lane, first at " + ts_text(in_, first);
      for (const auto& o : overhead) f.cost_ns += o.second.second;
      f.cost_of = cost_base::window;
      f.estimate = "the profiler's own work, not your code's";
      add(std::move(f));
    }
    if (t_.meta.dropped_gpu_records || t_.meta.dropped_cpu_events || t_.meta.unmatched_gpu_records) {
      finding f;
      f.kind = "incomplete trace";
      f.headline = std::to_string(t_.meta.dropped_gpu_records) + " GPU records dropped, " +
                   std::to_string(t_.meta.dropped_cpu_events) + " CPU events dropped, " +
                   std::to_string(t_.meta.unmatched_gpu_records) + " GPU records without their launching call";
      f.details.push_back("totals above undercount what ran");
      f.estimate = "no cost of its own: the figures undercount";
      f.where = "the whole trace";
      add(std::move(f));
    }
  }

  const trace& t_;
  const insights_options& o_;
  insights in_;
  std::vector<std::uint32_t> steps_;
  std::vector<std::uint64_t> first_child_;
  std::vector<name_id> first_child_name_;
  std::vector<std::vector<std::uint32_t>> instances_;  // per kernels[] entry: indices into trace::gpu
  std::vector<std::pair<std::uint64_t, std::uint64_t>> busy_union_;  // GPU work, merged, in time order
  std::unordered_map<name_id, kernel_category> category_;

  bool gemm_name(name_id n) {
    const kernel_category c = category_of(n);
    return c == kernel_category::gemm || c == kernel_category::gemv;
  }
};

}  // namespace detail

inline insights analyze(const trace& t, const insights_options& options = {}) {
  return detail::analyzer(t, options).run();
}

// The report as text: the summary, the verdict, the findings, then the GPU kernels.
// "412.3 TFLOP/s achieved, 41.7% of the peak (sm_90 bf16 dense tensor: ...)", or "..., peak unknown: why".
inline std::string throughput_text(const activity_throughput& r) {
  const bool flops = r.what == activity_throughput::measure::flops;
  std::string text = detail::format_rate(r.per_second(), flops ? "FLOP/s" : "B/s") + " achieved";
  if (r.peak.value > 0) {
    text += ", " + detail::fixed_text(r.percent_of_peak(), 1) + "% of the peak (" + r.peak.basis + ")";
    const std::string note = above_peak_note(r);
    return note.empty() ? text : text + "; " + note;
  }
  return text + "; " + r.peak.basis;
}

inline std::string format_insights(const insights& in, std::size_t kernel_rows = 15) {
  using namespace detail;
  std::string out;
  // Headlines, details and places quote names from the trace: printed terminal-safe.
  if (!in.summary.empty()) {
    out += "Summary (the largest estimated savings)\n";
    for (std::size_t i = 0; i < in.summary.size(); ++i)
      out += "  " + std::to_string(i + 1) + ". " + detail::terminal_safe(in.summary[i]) + "\n";
    out += "\n";
  }
  out += "Verdict: ";
  out += verdict_name(in.verdict);
  out += "\n";
  if (!in.verdict_signals.empty()) out += "  signals: " + detail::terminal_safe(in.verdict_signals) + "\n";
  if (!in.verdict_rule.empty()) out += "  rule: " + in.verdict_rule + "\n";
  out += "  " + detail::terminal_safe(in.verdict_reason) + "\n";
  if (in.window_end_ns > in.window_start_ns)
    out += "  active window " + ts_text(in, in.window_start_ns) + " .. " + ts_text(in, in.window_end_ns) + " (" +
           us_text(in.window_ns()) + "), GPU busy " + us_text(in.gpu_busy_ns) + "; Self CPU time total " +
           us_text(in.self_cpu_ns) + ", Self CUDA time total " + us_text(in.self_cuda_ns) + "\n";
  out += "\nFindings";
  if (in.findings.empty()) out += ": none\n";
  else out += ", by estimated saving\n";
  for (std::size_t i = 0; i < in.findings.size(); ++i) {
    const finding& f = in.findings[i];
    out += "  " + std::to_string(i + 1) + ". [" + f.kind + "] " + detail::terminal_safe(f.headline) + "\n";
    if (f.cost_of != cost_base::none)
      out += "       costs " + us_text(f.cost_ns) + " (" + percent_text(f.cost_share) + " of " + cost_base_name(f.cost_of) +
             "); could save " + (f.saving_ns ? "~" + us_text(f.saving_ns) : std::string("nothing")) + ": " + f.estimate + "\n";
    for (const std::string& d : f.details) out += "       " + detail::terminal_safe(d) + "\n";
    if (!f.where.empty()) out += "       where: " + detail::terminal_safe(f.where) + "\n";
  }
  if (!in.kernels.empty()) {
    std::vector<const kernel_summary*> ks;
    for (const kernel_summary& k : in.kernels) ks.push_back(&k);
    std::stable_sort(ks.begin(), ks.end(), [](const kernel_summary* a, const kernel_summary* b) {
      return a->duration.total_ns > b->duration.total_ns;
    });
    out += "\nGPU work by name\n";
    char line[200];
    std::snprintf(line, sizeof line, "  %12s %6s %12s %12s %12s  %s\n", "total", "calls", "median", "max",
                  "launch>start", "name (and what it says)");
    out += line;
    for (std::size_t i = 0; i < ks.size() && i < kernel_rows; ++i) {
      const kernel_summary& k = *ks[i];
      std::snprintf(line, sizeof line, "  %12s %6llu %12s %12s %12s  ", us_text(k.duration.total_ns).c_str(),
                    static_cast<unsigned long long>(k.duration.count), us_text(k.duration.median_ns).c_str(),
                    us_text(k.duration.max_ns).c_str(),
                    k.launch_to_start.count ? us_text(k.launch_to_start.median_ns).c_str() : "-");
      out += line + detail::display_name(k.name, 100) + "\n";
      if (k.decoded.recognised()) out += std::string(62, ' ') + "= " + detail::terminal_safe(k.decoded.summary()) + "\n";
      if (k.throughput.amount > 0) out += std::string(62, ' ') + "= " + throughput_text(k.throughput) + "\n";
    }
    if (ks.size() > kernel_rows) out += "  ... " + std::to_string(ks.size() - kernel_rows) + " more\n";
  }
  return out;
}

}  // namespace cuprof
