#include "context.hpp"

#include <cuprof/model/attribution.hpp>

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace cuprof::detail::insight_rules {

namespace {

// The default metrics, in kernel_counters' order.
const char* const counter_labels[4] = {metric_label_sm, metric_label_dram, metric_label_tensor, metric_label_occupancy};

// Each name's achieved FLOP/s or bytes/s, pooled over the instances with known sizes.
void throughputs(context& c) {
  for (activity_throughput& r : gpu_throughput(c.t)) {
    if (c.row_of[r.gpu] == no_index) continue;
    activity_throughput& sum = c.in.kernels[c.row_of[r.gpu]].throughput;
    if (sum.amount == 0) {
      sum.what = r.what;
      sum.peak = std::move(r.peak);
    }
    sum.amount += r.amount;
    sum.seconds += r.seconds;
  }
}

}  // namespace

void index(context& c) {
  const trace& t = c.t;
  insights& in = c.in;
  for (std::uint32_t i = 0; i < t.spans.size(); ++i)
    if (t.spans[i].is_step) c.steps.push_back(i);
  std::sort(c.steps.begin(), c.steps.end(),
            [&](std::uint32_t a, std::uint32_t b) { return t.spans[a].start_ns < t.spans[b].start_ns; });
  in.steps = c.steps.size();
  if (!c.steps.empty()) {
    const std::string& first = t.names.str(t.spans[c.steps[0]].name);
    if (first.size() > step_name_prefix.size()) in.first_step = std::strtol(first.c_str() + step_name_prefix.size(), nullptr, 10);
  }
  c.first_child.assign(t.spans.size(), std::numeric_limits<std::uint64_t>::max());
  c.first_child_name.assign(t.spans.size(), 0);
  const auto child = [&](std::uint32_t parent, std::uint64_t start, name_id name) {
    if (parent == no_index || start >= c.first_child[parent]) return;
    c.first_child[parent] = start;
    c.first_child_name[parent] = name;
  };
  for (const cpu_span& s : t.spans) child(s.parent, s.start_ns, s.name);
  for (const api_call& a : t.api_calls) child(a.parent, a.start_ns, t.name_of(a));

  // Kernels by name, in first-start order.
  std::unordered_map<std::string, std::size_t> by_name;
  std::vector<std::vector<std::uint64_t>> dur, lat;
  for (std::uint32_t i = 0; i < t.gpu.size(); ++i) {
    const gpu_activity& g = t.gpu[i];
    if (g.kind == gpu_kind::sync) continue;
    const std::string& name = t.names.str(g.name);
    auto [it, inserted] = by_name.try_emplace(name, in.kernels.size());
    if (inserted) {
      kernel_summary k;
      k.name = name;
      k.kind = g.kind;
      k.first_start_ns = g.start_ns;
      if (g.kind == gpu_kind::kernel) k.decoded = decode_kernel_name(name);
      in.kernels.push_back(std::move(k));
      dur.emplace_back();
      lat.emplace_back();
      c.instances.emplace_back();
    }
    kernel_summary& k = in.kernels[it->second];
    k.first_start_ns = std::min(k.first_start_ns, g.start_ns);
    dur[it->second].push_back(g.end_ns - g.start_ns);
    if (g.api != no_index && g.start_ns >= t.api_calls[g.api].start_ns)
      lat[it->second].push_back(g.start_ns - t.api_calls[g.api].start_ns);
    c.instances[it->second].push_back(i);
  }
  for (std::size_t i = 0; i < in.kernels.size(); ++i) {
    in.kernels[i].duration = summarize(std::move(dur[i]));
    in.kernels[i].launch_to_start = summarize(std::move(lat[i]));
  }
  c.row_of.assign(t.gpu.size(), no_index);
  for (std::uint32_t k = 0; k < c.instances.size(); ++k)
    for (std::uint32_t i : c.instances[k]) c.row_of[i] = k;
  throughputs(c);
  if (!t.gpu_metrics.empty())
    for (std::size_t k = 0; k < in.kernels.size(); ++k) {
      counter_pool pool;
      for (std::uint32_t i : c.instances[k])
        if (const gpu_metric_series* s = c.series_of(t.lane_of(t.gpu[i]).device))
          pool.add(*s, t.gpu[i].start_ns, t.gpu[i].end_ns);
      in.kernels[k].counters = pool.result();
    }
}

void counter_pool::add(const gpu_metric_series& s, std::uint64_t start, std::uint64_t end) {
  r_.interval_ns = s.interval_ns;
  const kernel_metric_averages a = average_metrics(s, start, end);
  r_.too_short += a.too_short;
  r_.samples += a.samples;
  for (int m = 0; m < 4; ++m)
    for (std::size_t col = 0; col < s.metrics.size(); ++col)
      if (s.metrics[col].label == counter_labels[m] && a.values[col] == a.values[col]) {
        sum_[m] += a.values[col] * double(end - start);
        weight_[m] += double(end - start);
      }
}

kernel_counters counter_pool::result() const {
  kernel_counters k = r_;
  double* out[4] = {&k.sm, &k.dram, &k.tensor, &k.occupancy};
  for (int m = 0; m < 4; ++m)
    if (weight_[m] > 0) *out[m] = sum_[m] / weight_[m];
  return k;
}

counter_bound context::bound_of(const kernel_counters& k) const {
  if (k.samples == 0 || k.samples < o.metric_min_samples) return counter_bound::none;
  const auto at_least = [](double v, double x) { return v == v && v >= x; };  // false for NaN
  const auto below = [](double v, double x) { return v == v && v < x; };
  if (at_least(k.dram, o.memory_dram_pct) && below(k.sm, k.dram + o.memory_tie_pct) && !(k.tensor >= k.dram))
    return counter_bound::memory;
  if (at_least(k.tensor, o.compute_tensor_pct) && below(k.dram, k.tensor)) return counter_bound::tensor;
  if (at_least(k.sm, o.compute_sm_pct) && below(k.dram, k.sm)) return counter_bound::compute;
  if (below(k.occupancy, o.latency_occupancy_pct) && below(k.sm, o.latency_throughput_pct) &&
      below(k.dram, o.latency_throughput_pct))
    return counter_bound::latency;
  return counter_bound::none;
}

std::string counters_text(const kernel_counters& k, counter_bound b, bool all) {
  enum { sm, dram, tensor, occupancy };
  const double value[4] = {k.sm, k.dram, k.tensor, k.occupancy};
  const char* name[4] = {"SM", "DRAM", "tensor pipe", "achieved occupancy"};
  std::vector<int> order = b == counter_bound::memory    ? std::vector<int>{dram, sm}
                           : b == counter_bound::tensor  ? std::vector<int>{tensor, sm, dram}
                           : b == counter_bound::latency ? std::vector<int>{occupancy, sm, dram}
                                                         : std::vector<int>{sm, dram};
  if (all || b == counter_bound::none)
    for (int m : {sm, dram, tensor, occupancy})
      if (std::find(order.begin(), order.end(), m) == order.end()) order.push_back(m);
  std::string out;
  bool said_peak = false;  // after the first throughput: occupancy is a share of the warps an SM holds
  for (int m : order) {
    if (value[m] != value[m]) continue;
    out += (out.empty() ? "" : ", ") + std::string(name[m]) + " " + fixed_text(value[m], 0) + "%";
    if (!said_peak && m != occupancy) out += " of peak", said_peak = true;
  }
  return out + (out.empty() ? "" : ", ") + std::to_string(k.samples) + (k.samples == 1 ? " sample" : " samples");
}

std::uint32_t context::step_of(const gpu_activity& g) const {
  std::uint32_t s = step_of_span(launching_span(t, g));
  if (s != no_index || g.api == no_index) return s;
  return step_at(t.api_calls[g.api].tid, t.api_calls[g.api].start_ns);
}

std::uint32_t context::step_of(const api_call& a) const {
  const std::uint32_t s = step_of_span(a.parent);
  return s != no_index ? s : step_at(a.tid, a.start_ns);
}

std::uint32_t context::step_at(std::uint32_t tid, std::uint64_t ts) const {
  for (std::uint32_t st : steps)
    if (t.spans[st].tid == tid && t.spans[st].start_ns <= ts && ts < t.spans[st].end_ns) return st;
  return no_index;
}

std::string memory_place(std::int32_t device) { return device < 0 ? "host memory" : "GPU " + std::to_string(device); }

std::string context::scope_path(std::uint32_t s) const {
  std::vector<std::string> parts;
  for (; s != no_index && parts.size() < 6; s = t.spans[s].parent) parts.push_back(t.names.str(t.spans[s].name));
  std::string out;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) out += (out.empty() ? "" : " > ") + *it;
  return out;
}

std::string context::scope_path_in_step(std::uint32_t s) const {
  std::vector<std::string> parts;
  for (; s != no_index && parts.size() < 6; s = t.spans[s].parent)
    if (!t.spans[s].is_step) parts.push_back(t.names.str(t.spans[s].name));
  std::string out;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) out += (out.empty() ? "" : " > ") + *it;
  return out;
}

std::string context::where_gpu(const gpu_activity& g) const {
  std::string path = scope_path(launching_span(t, g));
  if (path.empty()) path = step_name(step_of(g));
  std::string s = path.empty() ? std::string() : path + ", ";
  const gpu_lane& where = t.lane_of(g);
  s += "GPU " + std::to_string(where.device) + " stream " + std::to_string(where.stream) + " at " + ts_text(in, g.start_ns);
  return s;
}

std::string context::where_call(const api_call& a) const {
  std::string path = scope_path(a.parent);
  return (path.empty() ? std::string() : path + ", ") + "thread " + std::to_string(a.tid) + " at " + ts_text(in, a.start_ns);
}

std::vector<std::uint32_t> context::stream_order() const {
  std::vector<std::uint32_t> order;
  for (std::uint32_t i = 0; i < t.gpu.size(); ++i)
    if (t.gpu[i].kind != gpu_kind::sync) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    const gpu_lane& x = t.lane_of(t.gpu[a]);
    const gpu_lane& y = t.lane_of(t.gpu[b]);
    if (x.device != y.device) return x.device < y.device;
    if (x.stream != y.stream) return x.stream < y.stream;
    return t.gpu[a].start_ns < t.gpu[b].start_ns;
  });
  return order;
}

std::uint64_t context::queue_threshold_ns() const {
  return std::max<std::uint64_t>(o.queue_min_ns, std::uint64_t(o.queue_factor * double(in.launch_call_median_ns)));
}

void context::add(finding f) {
  const std::uint64_t base = f.cost_of == cost_base::gpu_time   ? in.self_cuda_ns
                             : f.cost_of == cost_base::cpu_time ? in.self_cpu_ns
                             : f.cost_of == cost_base::window   ? in.window_ns()
                                                                : 0;
  f.cost_share = base ? double(f.cost_ns) / double(base) : 0.0;
  if (f.cause.empty()) f.cause = f.kind;
  in.findings.push_back(std::move(f));
}

}  // namespace cuprof::detail::insight_rules
