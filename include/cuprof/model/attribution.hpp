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
}

}  // namespace cuprof
