// Attribution: which scope launched each API call and each piece of GPU work.
//
// A GPU record names its launching API call by CUPTI correlation id; the API
// call is charged to the innermost scope open on its thread when it started.
// Matching by thread and time keeps CUPTI out of the scope hot path.
#pragma once

#include "correlation_index.hpp"
#include "event.hpp"
#include "nesting.hpp"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace cuprof {

// Orders spans per thread by start (enclosing first) and links each to its
// parent, after spans from several sources (scopes, NVTX ranges) were merged.
inline void link_spans(trace& t) {
  std::stable_sort(t.spans.begin(), t.spans.end(), detail::nests_before);
  detail::link_parents(t, detail::parents_of::spans);
  for (std::uint32_t i = 0; i < t.spans.size(); ++i) t.spans[i].id = i + 1;
}

// Each span's nesting depth (0: no parent), in one pass over the spans: a
// span's depth is looked up from its parent's once that is known, whatever
// the order of the spans. Sorts compare depths: walking parents inside a
// comparator makes deeply nested scopes with equal extents take minutes.
inline std::vector<std::uint32_t> span_depths(const trace& t) {
  constexpr std::uint32_t unknown = no_index;
  std::vector<std::uint32_t> depth(t.spans.size(), unknown);
  std::vector<std::uint32_t> path;  // spans whose depth waits for their parent's
  for (std::uint32_t i = 0; i < t.spans.size(); ++i) {
    std::uint32_t s = i;
    while (depth[s] == unknown && t.spans[s].parent != no_index && path.size() <= t.spans.size()) {
      path.push_back(s);
      s = t.spans[s].parent;
    }
    std::uint32_t d = depth[s] != unknown ? depth[s] : (depth[s] = 0);
    while (!path.empty()) {
      depth[path.back()] = ++d;
      path.pop_back();
    }
  }
  return depth;
}

// The scope that launched a GPU activity (an element of t.gpu), or no_index.
// A trace read from a file may name it explicitly (torch's "External id"); that wins.
inline std::uint32_t launching_span(const trace& t, const gpu_activity& g) {
  if (!t.gpu_launch_spans.empty()) {
    const std::uint32_t named = t.gpu_launch_spans[std::size_t(&g - t.gpu.data())];
    if (named != no_index) return named;
  }
  return g.api == no_index ? no_index : t.api_calls[g.api].parent;
}

// Every scope's extent on each GPU stream (gpu_annotation, event.hpp), from the
// work it launched.
inline std::vector<gpu_annotation> derive_gpu_annotations(const trace& t) {
  struct key_hash {
    std::size_t operator()(const std::pair<std::uint32_t, std::uint64_t>& k) const noexcept {
      return std::hash<std::uint64_t>()(k.second * 1000003u ^ k.first);
    }
  };
  std::unordered_map<std::pair<std::uint32_t, std::uint64_t>, std::size_t, key_hash> index;
  std::vector<gpu_annotation> out;
  // The annotations the last record extended: the next one, launched from
  // the same scope onto the same lane as most are, extends them unhashed.
  std::vector<std::size_t> last_chain;
  std::uint32_t last_span = no_index;
  std::uint64_t last_lane = 0;
  for (const gpu_activity& g : t.gpu) {
    if (g.kind == gpu_kind::sync) continue;
    const gpu_lane& where = t.lane_of(g);
    const std::uint64_t lane = (std::uint64_t(where.device) << 32) | where.stream;
    const std::uint32_t launcher = launching_span(t, g);
    if (launcher != last_span || lane != last_lane) {
      last_span = launcher, last_lane = lane;
      last_chain.clear();
      for (std::uint32_t s = launcher; s != no_index; s = t.spans[s].parent) {
        if (t.spans[s].is_step) continue;  // as torch: no GPU lane entry for steps
        auto [it, inserted] = index.try_emplace({s, lane}, out.size());
        if (inserted) out.push_back({s, where.device, where.stream, g.start_ns, g.end_ns});
        last_chain.push_back(it->second);
      }
    }
    for (std::size_t i : last_chain) {
      gpu_annotation& a = out[i];
      a.start_ns = std::min(a.start_ns, g.start_ns);
      a.end_ns = std::max(a.end_ns, g.end_ns);
    }
  }
  // Per lane in start order, enclosing annotations before the ones they
  // contain, also when both cover the same GPU work (then the shallower first).
  const std::vector<std::uint32_t> depth = span_depths(t);
  std::sort(out.begin(), out.end(), [&](const gpu_annotation& a, const gpu_annotation& b) {
    if (a.device != b.device) return a.device < b.device;
    if (a.stream != b.stream) return a.stream < b.stream;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    if (a.end_ns != b.end_ns) return a.end_ns > b.end_ns;
    return depth[a.span] < depth[b.span];
  });
  return out;
}

// The innermost span of thread `tid` open at `ts` (starts no later, ends no
// earlier), or no_index. Spans must be in nesting order with parents linked
// (link_spans): the last span to start by `ts` is it, or one of its parents.
inline std::uint32_t innermost_span_at(const trace& t, std::uint32_t tid, std::uint64_t ts) {
  const auto after = std::upper_bound(t.spans.begin(), t.spans.end(), std::make_pair(tid, ts),
                                      [](const std::pair<std::uint32_t, std::uint64_t>& key, const cpu_span& s) {
                                        return key.first != s.tid ? key.first < s.tid : key.second < s.start_ns;
                                      });
  if (after == t.spans.begin() || after[-1].tid != tid) return no_index;
  std::uint32_t s = std::uint32_t(after - t.spans.begin() - 1);
  while (s != no_index && t.spans[s].end_ns < ts) s = t.spans[s].parent;
  return s;
}

// Charges each allocation and free to a scope: the scope of the CUDA call
// that made it (its correlation id; the call also gives the thread), else the
// innermost scope open on its thread at its time, as torch charges its
// [memory] events.
inline void attribute_memory(trace& t, const detail::correlation_index& call_by_correlation) {
  for (memory_event& m : t.memory) {
    const std::uint32_t call = m.correlation ? call_by_correlation.find(m.correlation) : no_index;
    if (call != no_index) {
      m.tid = t.api_calls[call].tid;
      m.span = t.api_calls[call].parent;
    } else {
      m.span = innermost_span_at(t, m.tid, m.ts_ns);
    }
  }
}

// NCCL calls (trace::collectives) to their NVTX ranges and kernels. A call
// recorded from NCCL's NVTX payload carries the thread and time of its range's
// push: its span is that thread's span starting nearest that time, within
// collective_match_ns, named for an NCCL function (the MARKER record and the
// NVTX callback stamp the same push a few microseconds apart, in either
// order). A call whose function was not known when recorded is decided by
// that span's name. Each kernel gets the call of the innermost NCCL range
// around its launch (its launching scope and that scope's parents, as
// attribution charges it); an NCCL kernel launched outside any (a group's
// kernel, launched at ncclGroupEnd, as torch's ProcessGroupNCCL groups its
// calls) gets the latest call its thread made before the launch that no
// earlier kernel took, of the collective its name spells. Each call takes its
// element type from its kernel's name. Ranges already tied (a trace read back) stay.
constexpr std::uint64_t collective_match_ns = 50000;

inline void attach_collectives(trace& t) {
  if (t.collectives.empty()) return;
  std::vector<std::uint32_t> by_span(t.spans.size(), no_index);
  for (std::uint32_t i = 0; i < t.collectives.size(); ++i) {
    collective_call& c = t.collectives[i];
    if (c.span == no_index && c.ts_ns != 0) {
      const std::uint64_t from = c.ts_ns > collective_match_ns ? c.ts_ns - collective_match_ns : 0;
      auto it = std::lower_bound(t.spans.begin(), t.spans.end(), std::make_pair(c.tid, from),
                                 [](const cpu_span& s, const std::pair<std::uint32_t, std::uint64_t>& key) {
                                   return s.tid != key.first ? s.tid < key.first : s.start_ns < key.second;
                                 });
      std::uint64_t best_distance = ~std::uint64_t(0);
      for (; it != t.spans.end() && it->tid == c.tid && it->start_ns <= c.ts_ns + collective_match_ns; ++it) {
        const collective_kind named = detail::collective_kind_of_function(t.names.str(it->name));
        if (named == collective_kind::unknown || (c.kind != collective_kind::unknown && named != c.kind)) continue;
        const std::uint32_t s = std::uint32_t(it - t.spans.begin());
        if (by_span[s] != no_index) continue;
        const std::uint64_t distance = it->start_ns > c.ts_ns ? it->start_ns - c.ts_ns : c.ts_ns - it->start_ns;
        if (distance < best_distance) best_distance = distance, c.span = s;
      }
      if (c.span != no_index && c.kind == collective_kind::unknown &&
          !detail::resolve_collective(c, t.names.str(t.spans[c.span].name)))
        c.span = no_index;  // an NCCL range with a payload cuprof cannot read: no args rather than wrong ones
    }
    if (c.span != no_index && c.span < by_span.size()) by_span[c.span] = i;
  }
  if (!t.gpu_collectives.empty() || t.gpu.empty()) return;
  t.gpu_collectives.assign(t.gpu.size(), no_index);
  std::vector<char> taken(t.collectives.size(), 0);
  // Calls in (thread, time) order, for the kernels launched outside their range.
  std::vector<std::uint32_t> order;
  for (std::uint32_t i = 0; i < t.collectives.size(); ++i)
    if (t.collectives[i].span != no_index) order.push_back(i);
  const auto call_before = [&](std::uint32_t a, std::uint32_t b) {
    const collective_call &x = t.collectives[a], &y = t.collectives[b];
    return x.tid != y.tid ? x.tid < y.tid : t.spans[x.span].start_ns < t.spans[y.span].start_ns;
  };
  std::sort(order.begin(), order.end(), call_before);
  std::vector<std::uint32_t> outside;  // NCCL kernels launched outside an NCCL range
  for (std::uint32_t k = 0; k < t.gpu.size(); ++k) {
    const gpu_activity& g = t.gpu[k];
    if (g.kind != gpu_kind::kernel) continue;
    for (std::uint32_t s = launching_span(t, g); s != no_index; s = t.spans[s].parent)
      if (by_span[s] != no_index) {
        t.gpu_collectives[k] = by_span[s];
        taken[by_span[s]] = 1;
        break;
      }
    if (t.gpu_collectives[k] == no_index && g.api != no_index && detail::is_nccl_kernel(t.names.str(g.name)))
      outside.push_back(k);
  }
  std::sort(outside.begin(), outside.end(), [&](std::uint32_t a, std::uint32_t b) {
    return t.api_calls[t.gpu[a].api].start_ns < t.api_calls[t.gpu[b].api].start_ns;
  });
  for (std::uint32_t k : outside) {
    const api_call& launch = t.api_calls[t.gpu[k].api];
    const collective_kind spelled = detail::nccl_kernel_collective(t.names.str(t.gpu[k].name));
    auto it = std::upper_bound(order.begin(), order.end(), launch, [&](const api_call& l, std::uint32_t c) {
      const collective_call& x = t.collectives[c];
      return l.tid != x.tid ? l.tid < x.tid : l.start_ns < t.spans[x.span].start_ns;
    });
    while (it != order.begin()) {
      const collective_call& c = t.collectives[*--it];
      if (c.tid != launch.tid) break;
      const bool fits = spelled == collective_kind::unknown || spelled == c.kind ||
                        (spelled == collective_kind::send && c.kind == collective_kind::recv);
      if (taken[*it] || !fits) continue;
      taken[*it] = 1;
      t.gpu_collectives[k] = *it;
      break;
    }
  }
  for (std::uint32_t k = 0; k < t.gpu.size(); ++k) {
    const std::uint32_t c = t.gpu_collectives[k];
    if (c == no_index || t.collectives[c].dtype != collective_dtype::unknown) continue;
    t.collectives[c].dtype = detail::nccl_kernel_dtype(t.names.str(t.gpu[k].name));
  }
}

// Links every API call to its scope, every GPU record to its call (by
// correlation id), and derives the scopes' extents on the GPU lanes.
inline void attribute(trace& t) {
  detail::link_parents(t, detail::parents_of::calls);

  detail::correlation_index call_by_correlation;
  call_by_correlation.build_from([&](auto&& add) {
    for (std::uint32_t i = 0; i < t.api_calls.size(); ++i) add(t.api_calls[i].correlation, i);
  });
  t.meta.unmatched_gpu_records = 0;
  for (gpu_activity& g : t.gpu) {
    g.api = call_by_correlation.find(g.correlation);
    if (g.api == no_index) ++t.meta.unmatched_gpu_records;
  }
  attribute_memory(t, call_by_correlation);
  t.gpu_annotations = derive_gpu_annotations(t);
  attach_collectives(t);
}

}  // namespace cuprof
