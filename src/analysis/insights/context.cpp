#include "context.hpp"

#include <cuprof/model/attribution.hpp>

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace cuprof::detail::insight_rules {

namespace {

// Each name's achieved FLOP/s or bytes/s, pooled over the instances with known sizes.
void throughputs(context& c) {
  std::vector<std::uint32_t> row_of(c.t.gpu.size(), no_index);
  for (std::uint32_t k = 0; k < c.instances.size(); ++k)
    for (std::uint32_t i : c.instances[k]) row_of[i] = k;
  for (activity_throughput& r : gpu_throughput(c.t)) {
    if (row_of[r.gpu] == no_index) continue;
    activity_throughput& sum = c.in.kernels[row_of[r.gpu]].throughput;
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
  throughputs(c);
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
