// key_averages(): a trace's rows of torch's summary table (table.hpp), each
// time attributed as torch attributes it: Self and total CPU and CUDA time per
// name (or name and arguments, or call stack), memory per scope by time, GPU
// metrics' averages over each row's kernels.
#pragma once

#include "table.hpp"
#include "../base/text.hpp"
#include "../model/api_vocabulary.hpp"
#include "../model/attribution.hpp"
#include "../model/event.hpp"
#include "../model/stats.hpp"
#include "trace_schema.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace cuprof {

// A span's arguments as one line: "M=8192 N=3072 K=768"; a torch op's input
// shapes as their text alone, as torch's Input Shapes column shows them.
inline std::string format_span_args(const trace& t, const cpu_span& s) {
  std::string out;
  for (std::uint32_t i = s.first_arg; i < s.first_arg + s.arg_count; ++i) {
    const span_arg& a = t.span_args[i];
    if (!out.empty()) out += ' ';
    const std::string& key = t.names.str(a.key);
    if (key != detail::schema::arg_input_dims || a.kind != span_arg::type::text) out += key + '=';
    if (a.kind == span_arg::type::integer) {
      out += std::to_string(a.integer);
    } else if (a.kind == span_arg::type::real) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g", a.real);
      out += std::isfinite(a.real) ? std::string_view(buf) : std::string_view(non_finite_name(a.real));  // as the trace writes it
    } else {
      out += t.names.str(a.text);
    }
  }
  return out;
}

namespace detail {

// key_averages()'s GPU metrics: each kernel's averages (average_metrics) summed
// into its row, weighted by the kernel's duration, metric by metric.
struct kernel_metrics {
  std::vector<std::string> labels;  // the columns: each label once, every series'
  explicit kernel_metrics(const trace& t) : t_(t) {
    if (t.gpu_metrics.empty()) return;
    for (const gpu_metric& m : metrics_of(t.gpu_metrics)) labels.push_back(m.label);
    for (const gpu_metric_series& s : t.gpu_metrics) {
      std::vector<std::size_t>& columns = columns_.emplace_back();
      for (const gpu_metric& m : s.metrics)
        columns.push_back(std::size_t(std::find(labels.begin(), labels.end(), m.label) - labels.begin()));
    }
    lane_series_ = metric_series_of_lanes(t);
  }

  void add(const gpu_activity& g, std::size_t row, event_average& r) {
    if (g.kind != gpu_kind::kernel || g.lane >= lane_series_.size() || lane_series_[g.lane] == no_index) return;
    if (r.metrics.empty()) r.metrics.assign(labels.size(), 0.0);  // a kernel row: its sums until finish()
    if (weight_.size() <= row) weight_.resize(row + 1);
    std::vector<double>& weight = weight_[row];
    if (weight.empty()) weight.assign(labels.size(), 0.0);
    if (g.flags & gpu_timing_unknown) return;
    const std::uint32_t series = lane_series_[g.lane];
    const kernel_metric_averages a = average_metrics(t_.gpu_metrics[series], g.start_ns, g.end_ns);
    const double ns = double(g.end_ns - g.start_ns);
    bool any = false;
    for (std::size_t m = 0; m < a.values.size(); ++m) {
      if (!std::isfinite(a.values[m])) continue;
      const std::size_t c = columns_[series][m];
      r.metrics[c] += a.values[m] * ns;
      weight[c] += ns;
      any = true;
    }
    r.sampled += any;
  }

  // The sums to averages, NaN where no kernel of the row had a value.
  void finish(std::vector<event_average>& rows) const {
    for (std::size_t row = 0; row < weight_.size(); ++row)
      for (std::size_t c = 0; c < weight_[row].size(); ++c)
        rows[row].metrics[c] = weight_[row][c] > 0 ? rows[row].metrics[c] / weight_[row][c] : __builtin_nan("");
  }

 private:
  const trace& t_;
  std::vector<std::vector<std::size_t>> columns_;  // per series, per metric: its column in `labels`
  std::vector<std::uint32_t> lane_series_;         // per GPU lane: its device's series, or no_index
  std::vector<std::vector<double>> weight_;        // per row, per column: the kernel ns summed
};

// torch's [memory] events (those no CUDA call is known to have made), by
// time: the bytes of those stamped within [from, to], both ends included, as
// torch's MemRecordsAcc.in_interval() finds them for an op.
class memory_by_time {
 public:
  explicit memory_by_time(const std::vector<memory_event>& memory) {
    for (const memory_event& m : memory)
      if (m.correlation == 0) events_[is_host_memory(m) ? 0 : 1].push_back({m.ts_ns, m.bytes});
    for (auto& e : events_) {
      std::sort(e.begin(), e.end());
      std::int64_t sum = 0;
      for (auto& [ts, bytes] : e) bytes = sum += bytes;  // prefix sums, in time order
    }
  }
  std::int64_t between(int space, std::uint64_t from, std::uint64_t to) const {
    const auto& e = events_[space];
    const auto first = std::lower_bound(e.begin(), e.end(), from, [](const auto& x, std::uint64_t t) { return x.first < t; });
    const auto last = std::upper_bound(e.begin(), e.end(), to, [](std::uint64_t t, const auto& x) { return t < x.first; });
    if (first >= last) return 0;
    return last[-1].second - (first == e.begin() ? 0 : first[-1].second);
  }

 private:
  std::vector<std::pair<std::uint64_t, std::int64_t>> events_[2];  // (ts, bytes summed through it)
};

}  // namespace detail

// Groups a trace's events into rows with self and total CPU and CUDA time.
// CUDA time is charged to the innermost scope open on the thread that
// launched the work (see attribute()); scopes add their children's totals.
// Grouped by args, a scope's rows (CPU and GPU extent) are one per name and arguments.
// group_by_stack_n > 0: a CUDA call's row, and its GPU work's, are one per name
// and first group_by_stack_n frames of the call's stack (torch's group_by_stack_n).
inline event_averages key_averages(const trace& t, group_by grouping = group_by::name, int group_by_stack_n = 0) {
  const std::size_t n = t.spans.size();
  std::vector<std::uint64_t> child_cpu(n, 0), self_cuda(n, 0), cuda_total(n, 0);
  for (const cpu_span& s : t.spans)
    if (s.parent != no_index) child_cpu[s.parent] += s.end_ns - s.start_ns;
  for (const api_call& a : t.api_calls)
    if (a.parent != no_index) child_cpu[a.parent] += a.end_ns - a.start_ns;
  for (const gpu_activity& g : t.gpu) {
    if (g.kind == gpu_kind::sync) continue;
    const std::uint32_t s = launching_span(t, g);
    if (s != no_index) self_cuda[s] += g.end_ns - g.start_ns;
  }
  // torch's microseconds (event_average::cpu_total_us): from its profiler's
  // start, else the trace's first event.
  std::uint64_t origin = t.meta.profiler_start_ns ? t.meta.profiler_start_ns : ~std::uint64_t(0);
  for (const cpu_span& sp : t.spans) origin = std::min(origin, sp.start_ns);
  for (const api_call& a : t.api_calls) origin = std::min(origin, a.start_ns);
  for (const gpu_activity& g : t.gpu) origin = std::min(origin, g.start_ns);
  for (const overhead_span& w : t.overhead) origin = std::min(origin, w.start_ns);
  for (const gpu_annotation& a : t.gpu_annotations) origin = std::min(origin, a.start_ns);
  const auto us = [origin](std::uint64_t start, std::uint64_t end) {
    return double(end - origin) / 1000.0 - double(start - origin) / 1000.0;
  };
  std::vector<double> cuda_us(n, 0.0);  // a scope's kernels, then its children's, as torch sums them
  for (const gpu_activity& g : t.gpu) {
    if (g.kind == gpu_kind::sync) continue;
    const std::uint32_t sp = launching_span(t, g);
    if (sp != no_index) cuda_us[sp] += us(g.start_ns, g.end_ns);
  }
  // CUPTI's own work (an activity buffer requested, a module loaded lazily)
  // is a row of its own, and torch counts it as a child of the op open at
  // its time on the main thread (the process's own id), whatever thread
  // caused it: that op's self CPU time is less by it.
  // One inside another (a function loaded while its module loads) is that
  // one's child.
  std::vector<std::uint32_t> overhead_parent(t.overhead.size(), no_index);  // a span
  std::vector<std::uint32_t> overhead_call(t.overhead.size(), no_index);    // or a CUDA call in it
  std::vector<std::uint64_t> overhead_child_cpu(t.overhead.size(), 0), call_child_cpu;
  if (!t.overhead.empty()) {
    call_child_cpu.assign(t.api_calls.size(), 0);
    std::vector<std::uint32_t> main_calls;  // the main thread's calls, by start
    for (std::uint32_t c = 0; c < t.api_calls.size(); ++c)
      if (t.api_calls[c].tid == t.meta.pid) main_calls.push_back(c);
    std::sort(main_calls.begin(), main_calls.end(),
              [&](std::uint32_t a, std::uint32_t b) { return t.api_calls[a].start_ns < t.api_calls[b].start_ns; });
    std::vector<std::uint32_t> order(t.overhead.size());
    for (std::uint32_t o = 0; o < order.size(); ++o) order[o] = o;
    std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
      const overhead_span &x = t.overhead[a], &y = t.overhead[b];
      return x.start_ns != y.start_ns ? x.start_ns < y.start_ns : x.end_ns > y.end_ns;
    });
    std::vector<std::uint32_t> open;  // overheads containing the next one, outermost first
    for (std::uint32_t o : order) {
      const overhead_span& w = t.overhead[o];
      while (!open.empty() && t.overhead[open.back()].end_ns < w.end_ns) open.pop_back();
      const auto call = std::upper_bound(main_calls.begin(), main_calls.end(), w.start_ns,
                                         [&](std::uint64_t ts, std::uint32_t c) { return ts < t.api_calls[c].start_ns; });
      if (!open.empty()) {
        overhead_child_cpu[open.back()] += w.end_ns - w.start_ns;
      } else if (call != main_calls.begin() && t.api_calls[call[-1]].end_ns >= w.end_ns) {
        overhead_call[o] = call[-1];
        call_child_cpu[call[-1]] += w.end_ns - w.start_ns;
      } else {
        std::uint32_t p = innermost_span_at(t, t.meta.pid, w.start_ns);
        while (p != no_index && t.spans[p].end_ns < w.end_ns) p = t.spans[p].parent;
        overhead_parent[o] = p;
        if (p != no_index) child_cpu[p] += w.end_ns - w.start_ns;
      }
      open.push_back(o);
    }
  }
  // An op whose only child is an op of its name is recorded twice (the
  // dispatcher's two levels: aten::mean with its sequence number around
  // aten::mean): torch counts it once, the outer one, which takes the inner
  // one's children and GPU work (its _remove_dup_nodes). `folded[i]`: span i
  // is such an inner op; `owner[i]` the span it is counted in.
  std::vector<std::uint32_t> children(n, 0), owner(n);
  std::vector<char> folded(n, 0);
  for (const cpu_span& sp : t.spans)
    if (sp.parent != no_index) ++children[sp.parent];
  for (const api_call& a : t.api_calls)
    if (a.parent != no_index && a.parent < n) ++children[a.parent];
  for (std::uint32_t p : overhead_parent)
    if (p != no_index) ++children[p];
  for (std::uint32_t i = 0; i < n; ++i) {
    owner[i] = i;
    const std::uint32_t p = t.spans[i].parent;
    if (p == no_index || t.spans[p].name != t.spans[i].name || t.spans[i].is_step) continue;
    const std::uint32_t o = owner[p];
    if (children[o] != 1) continue;
    folded[i] = 1, owner[i] = o;
    children[o] = children[i];
    child_cpu[o] = child_cpu[i];
    self_cuda[o] = self_cuda[i], self_cuda[i] = 0;
    cuda_us[o] = cuda_us[i], cuda_us[i] = 0;
  }
  // Memory as torch's columns count it ([0] CPU (host), [1] CUDA). An
  // allocation or free cuprof saw a CUDA call make counts in its scope and
  // that scope's parents. One of torch's [memory] events (no CUDA call known)
  // counts, as torch counts it, in every op and call open at its time on any
  // thread: torch matches them by time alone, so the `backward` scope around
  // loss.backward() counts what the autograd thread allocated meanwhile. Self
  // is the total less the children's totals (torch's cpu_children: the ops
  // and calls nested in it on its own thread).
  std::vector<std::int64_t> self_memory[2], memory_total[2], call_memory[2], call_self_memory[2], overhead_memory[2];
  // Children follow their parents in `spans`, so a reverse pass sums subtrees.
  for (std::size_t i = n; i-- > 0;) {
    cuda_total[i] += self_cuda[i];
    if (t.spans[i].parent != no_index) cuda_total[t.spans[i].parent] += cuda_total[i], cuda_us[t.spans[i].parent] += cuda_us[i];
  }
  if (!t.memory.empty()) {
    for (int space = 0; space < 2; ++space)
      self_memory[space].assign(n, 0), memory_total[space].assign(n, 0), call_memory[space].assign(t.api_calls.size(), 0);
    for (int space = 0; space < 2; ++space) call_self_memory[space].assign(t.api_calls.size(), 0);
    for (const memory_event& m : t.memory)
      if (m.correlation != 0 && m.span != no_index && m.span < n) memory_total[is_host_memory(m) ? 0 : 1][m.span] += m.bytes;
    for (std::size_t i = n; i-- > 0;)
      for (int space = 0; space < 2; ++space)
        if (t.spans[i].parent != no_index) memory_total[space][t.spans[i].parent] += memory_total[space][i];
    const detail::memory_by_time by_time(t.memory);
    for (int space = 0; space < 2; ++space) {
      for (std::size_t i = 0; i < n; ++i)
        memory_total[space][i] += by_time.between(space, t.spans[i].start_ns, t.spans[i].end_ns);
      for (std::size_t i = 0; i < n; ++i) {
        self_memory[space][i] += memory_total[space][i];
        if (t.spans[i].parent != no_index) self_memory[space][t.spans[i].parent] -= memory_total[space][i];
      }
      for (std::size_t c = 0; c < t.api_calls.size(); ++c) {
        call_memory[space][c] = by_time.between(space, t.api_calls[c].start_ns, t.api_calls[c].end_ns);
        call_self_memory[space][c] += call_memory[space][c];
        if (t.api_calls[c].parent != no_index && t.api_calls[c].parent < n)
          self_memory[space][t.api_calls[c].parent] -= call_memory[space][c];
      }
      overhead_memory[space].assign(t.overhead.size(), 0);
      for (std::size_t o = 0; o < t.overhead.size(); ++o) {
        overhead_memory[space][o] = by_time.between(space, t.overhead[o].start_ns, t.overhead[o].end_ns);
        if (overhead_parent[o] != no_index) self_memory[space][overhead_parent[o]] -= overhead_memory[space][o];
        if (overhead_call[o] != no_index) call_self_memory[space][overhead_call[o]] -= overhead_memory[space][o];
      }
      for (std::size_t i = 0; i < n; ++i)
        if (folded[i]) self_memory[space][owner[i]] += self_memory[space][i];
    }
  }

  std::vector<event_average> rows;
  std::unordered_map<std::string, std::size_t> index[4];
  std::vector<std::string> span_args;  // per span, grouped by args
  const std::string no_args, step_key = "ProfilerStep*";
  if (grouping == group_by::args) {
    span_args.reserve(n);
    for (const cpu_span& sp : t.spans) span_args.push_back(format_span_args(t, sp));
  }
  const auto row_index = [&](const std::string& key, row_kind kind, std::uint64_t first, const std::string& args) {
    auto [it, inserted] = index[int(kind)].try_emplace(args.empty() ? key : key + '\0' + args, rows.size());
    if (inserted) {
      event_average r;
      r.key = key;
      r.args = args;
      r.kind = kind;
      r.first_ns = first;
      rows.push_back(std::move(r));
    }
    return it->second;
  };
  const auto counted = [&](std::size_t at, std::uint64_t first, std::uint64_t end) -> event_average& {
    event_average& r = rows[at];
    if (first < r.first_ns) r.first_ns = first, r.first_end_ns = end;
    else if (first == r.first_ns) r.first_end_ns = std::max(r.first_end_ns, end);
    ++r.count;
    return r;
  };
  // Most events are keyed by their name alone: their rows are remembered by
  // name id, so that each name is hashed once, not each event.
  constexpr std::size_t no_row = std::size_t(-1);
  std::vector<std::size_t> row_of_name[4];
  const auto row = [&](name_id name, row_kind kind, std::uint64_t first, std::uint64_t end,
                       const std::string& args) -> event_average& {
    if (!args.empty()) return counted(row_index(t.names.str(name), kind, first, args), first, end);
    std::vector<std::size_t>& rows_by_name = row_of_name[int(kind)];
    if (rows_by_name.empty()) rows_by_name.assign(t.names.size(), no_row);
    std::size_t& at = rows_by_name[name];
    if (at == no_row) at = row_index(t.names.str(name), kind, first, args);
    return counted(at, first, end);
  };
  for (std::size_t i = 0; i < n; ++i) {
    if (folded[i]) continue;
    const cpu_span& s = t.spans[i];
    const std::uint64_t dur = s.end_ns - s.start_ns;
    const std::string& args = span_args.empty() ? no_args : span_args[i];
    event_average& r = s.is_step ? counted(row_index(step_key, row_kind::cpu_scope, s.start_ns, args), s.start_ns, s.end_ns)
                                 : row(s.name, row_kind::cpu_scope, s.start_ns, s.end_ns, args);
    r.cpu_total_ns += dur;
    r.cpu_total_us += us(s.start_ns, s.end_ns);
    r.cuda_total_us += cuda_us[i];
    r.self_cpu_ns += dur > child_cpu[i] ? dur - child_cpu[i] : 0;
    r.self_cuda_ns += self_cuda[i];
    r.cuda_total_ns += cuda_total[i];
    r.cpu_samples_ns.push_back(dur);
    r.cuda_samples_ns.push_back(cuda_total[i]);
    if (!t.memory.empty()) {
      r.self_cpu_memory += self_memory[0][i];
      r.cpu_memory += memory_total[0][i];
      r.self_cuda_memory += self_memory[1][i];
      r.cuda_memory += memory_total[1][i];
    }
  }
  // Rows by name and stack; stacks that share their first frames share a row.
  std::unordered_map<std::uint64_t, std::size_t> row_of_stack[4];
  const auto stack_row = [&](name_id name, row_kind kind, std::uint64_t first, std::uint64_t end,
                             std::uint32_t stack) -> event_average& {
    if (group_by_stack_n <= 0 || stack == no_index || stack >= t.stacks.size()) return row(name, kind, first, end, no_args);
    auto [cached, added] = row_of_stack[int(kind)].try_emplace(std::uint64_t(name) << 32 | stack, 0);
    if (added) {
      const call_stack& s = t.stacks[stack];
      std::vector<std::string> frames;
      std::string key = t.names.str(name);
      for (std::uint32_t k = 0; k < s.frame_count && k < std::uint32_t(group_by_stack_n); ++k) {
        frames.push_back(t.names.str(t.stack_frames[s.first_frame + k]));
        key += '\1' + frames.back();
      }
      auto [it, inserted] = index[int(kind)].try_emplace(key + '\2', rows.size());
      if (inserted) {
        event_average r;
        r.key = t.names.str(name);
        r.kind = kind;
        r.first_ns = first;
        r.stack = std::move(frames);
        rows.push_back(std::move(r));
      }
      cached->second = it->second;
    }
    return counted(cached->second, first, end);
  };
  for (std::size_t i = 0; i < t.api_calls.size(); ++i) {
    const api_call& a = t.api_calls[i];
    event_average& r = stack_row(t.name_of(a), row_kind::cuda_api, a.start_ns, a.end_ns, t.stack_of(i));
    r.cpu_total_ns += a.end_ns - a.start_ns;
    r.cpu_total_us += us(a.start_ns, a.end_ns);
    const std::uint64_t inside = call_child_cpu.empty() ? 0 : call_child_cpu[i];
    r.self_cpu_ns += a.end_ns - a.start_ns > inside ? a.end_ns - a.start_ns - inside : 0;
    r.cpu_samples_ns.push_back(a.end_ns - a.start_ns);
    r.cuda_samples_ns.push_back(0);
    if (!t.memory.empty()) {
      r.self_cpu_memory += call_self_memory[0][i], r.cpu_memory += call_memory[0][i];
      r.self_cuda_memory += call_self_memory[1][i], r.cuda_memory += call_memory[1][i];
    }
  }
  for (std::size_t o = 0; o < t.overhead.size(); ++o) {
    const overhead_span& w = t.overhead[o];
    event_average& r = row(w.name, row_kind::cpu_scope, w.start_ns, w.end_ns, no_args);
    const std::uint64_t dur = w.end_ns - w.start_ns;
    r.cpu_total_ns += dur;
    r.cpu_total_us += us(w.start_ns, w.end_ns);
    r.self_cpu_ns += dur > overhead_child_cpu[o] ? dur - overhead_child_cpu[o] : 0;
    r.cpu_samples_ns.push_back(w.end_ns - w.start_ns);
    r.cuda_samples_ns.push_back(0);
    if (!t.memory.empty()) {
      r.self_cpu_memory += overhead_memory[0][o], r.cpu_memory += overhead_memory[0][o];
      r.self_cuda_memory += overhead_memory[1][o], r.cuda_memory += overhead_memory[1][o];
    }
  }
  // A [memory] event of torch's that no op, call or overhead was open around
  // is a row of its own, as torch lists it: "[memory]", one call each.
  if (!t.memory.empty()) {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> open;  // every CPU interval, by start
    open.reserve(n + t.api_calls.size() + t.overhead.size());
    for (const cpu_span& sp : t.spans) open.push_back({sp.start_ns, sp.end_ns});
    for (const api_call& a : t.api_calls) open.push_back({a.start_ns, a.end_ns});
    for (const overhead_span& w : t.overhead) open.push_back({w.start_ns, w.end_ns});
    std::sort(open.begin(), open.end());
    for (std::size_t k = 1; k < open.size(); ++k) open[k].second = std::max(open[k].second, open[k - 1].second);  // ends so far
    std::size_t unmatched_row = no_row;
    for (const memory_event& m : t.memory) {
      if (m.correlation != 0) continue;
      const auto after = std::upper_bound(open.begin(), open.end(), std::make_pair(m.ts_ns, ~std::uint64_t(0)));
      if (after != open.begin() && after[-1].second >= m.ts_ns) continue;
      if (unmatched_row == no_row)
        unmatched_row = row_index(std::string(detail::schema::memory_event_name), row_kind::cpu_scope, m.ts_ns, no_args);
      event_average& r = counted(unmatched_row, m.ts_ns, m.ts_ns);
      r.cpu_samples_ns.push_back(0);
      r.cuda_samples_ns.push_back(0);
      if (is_host_memory(m)) r.self_cpu_memory += m.bytes, r.cpu_memory += m.bytes;
      else r.self_cuda_memory += m.bytes, r.cuda_memory += m.bytes;
    }
  }
  detail::kernel_metrics metrics(t);
  for (const gpu_activity& g : t.gpu) {
    if (g.kind == gpu_kind::sync) continue;
    event_average& r =
        stack_row(g.name, row_kind::gpu_work, g.start_ns, g.end_ns, g.api == no_index ? no_index : t.stack_of(g.api));
    r.self_cuda_ns += g.end_ns - g.start_ns;
    r.cuda_total_ns += g.end_ns - g.start_ns;
    r.cuda_total_us += us(g.start_ns, g.end_ns);
    r.cpu_samples_ns.push_back(0);
    r.cuda_samples_ns.push_back(g.end_ns - g.start_ns);
    metrics.add(g, std::size_t(&r - rows.data()), r);
  }
  metrics.finish(rows);
  for (const gpu_annotation& a : t.gpu_annotations) {
    event_average& r = row(t.spans[a.span].name, row_kind::gpu_annotation, a.start_ns, a.end_ns,
                           span_args.empty() ? no_args : span_args[a.span]);
    r.self_cuda_ns += a.end_ns - a.start_ns;
    r.cuda_total_ns += a.end_ns - a.start_ns;
    r.cuda_total_us += us(a.start_ns, a.end_ns);
    r.cpu_samples_ns.push_back(0);
    r.cuda_samples_ns.push_back(a.end_ns - a.start_ns);
  }
  return event_averages(std::move(rows), t.meta.memory_recorded || !t.memory.empty(), std::move(metrics.labels));
}

}  // namespace cuprof
