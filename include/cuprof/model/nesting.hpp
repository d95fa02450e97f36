// Parent linking by interval nesting: the one rule for CPU spans and API calls.
#pragma once

#include "event.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

namespace cuprof::detail {

// Nesting order: per thread by start, the longer first. A stable sort keeps
// input order between identical extents, and the first of them is the parent.
inline bool nests_before(const cpu_span& a, const cpu_span& b) {
  if (a.tid != b.tid) return a.tid < b.tid;
  if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
  return a.end_ns > b.end_ns;
}

enum class parents_of { spans, calls, spans_and_calls };

// Rule: an interval's parent is the innermost span of its thread that contains it (starts no later,
// ends no earlier; on identical extents a span contains the calls and the spans after it in nesting
// order). Partial overlap: a call that starts inside a span (before its end) and ends after it stays
// its child, as a call still running where its scope was cut at the window's end must; a span does not.
//
// Sets the parents of spans [first_span, end) and/or of every call; those spans are the candidate
// parents. Spans are not moved: callers that want parents before children sort by nests_before.
inline void link_parents(trace& t, parents_of what, std::size_t first_span = 0) {
  std::vector<cpu_span>& spans = t.spans;
  std::vector<std::uint32_t> span_order(spans.size() - first_span);
  std::iota(span_order.begin(), span_order.end(), std::uint32_t(first_span));
  const auto span_less = [&](std::uint32_t a, std::uint32_t b) { return nests_before(spans[a], spans[b]); };
  if (!std::is_sorted(span_order.begin(), span_order.end(), span_less))
    std::stable_sort(span_order.begin(), span_order.end(), span_less);

  // The calls in (thread, start) order: usually their order already, then
  // with no list of indices.
  std::vector<std::uint32_t> call_order;
  std::size_t call_count = 0;
  if (what != parents_of::spans) {
    const auto call_less = [](const api_call& x, const api_call& y) {
      return x.tid != y.tid ? x.tid < y.tid : x.start_ns < y.start_ns;
    };
    call_count = t.api_calls.size();
    if (!std::is_sorted(t.api_calls.begin(), t.api_calls.end(), call_less)) {
      call_order.resize(call_count);
      std::iota(call_order.begin(), call_order.end(), 0u);
      std::sort(call_order.begin(), call_order.end(),
                [&](std::uint32_t a, std::uint32_t b) { return call_less(t.api_calls[a], t.api_calls[b]); });
    }
  }
  const auto nth_call = [&](std::size_t n) -> api_call& { return t.api_calls[call_order.empty() ? n : call_order[n]]; };

  // The spans of one thread around the sweep point, outermost first. Ends never
  // increase upwards, so the spans reaching a given time are a prefix.
  std::vector<std::uint32_t> open;
  std::uint32_t open_tid = 0;
  const auto reaching = [&](std::uint32_t tid, std::uint64_t time) {
    if (tid != open_tid) open.clear(), open_tid = tid;
    return std::partition_point(open.begin(), open.end(), [&](std::uint32_t s) { return spans[s].end_ns >= time; });
  };
  const auto innermost = [&](std::vector<std::uint32_t>::iterator end) { return end == open.begin() ? no_index : end[-1]; };

  // Calls come after the spans that start with them, and leave `open` as it is:
  // a later interval may still start inside a span that ends before a call does.
  std::size_t next_call = 0;
  const auto calls_until = [&](const cpu_span* next) {
    for (; next_call < call_count; ++next_call) {
      api_call& c = nth_call(next_call);
      if (next && (next->tid != c.tid ? next->tid < c.tid : next->start_ns <= c.start_ns)) return;
      // Reaching past its start, or to its end when it has no length.
      c.parent = innermost(reaching(c.tid, c.end_ns > c.start_ns ? c.start_ns + 1 : c.start_ns));
    }
  };
  for (std::uint32_t i : span_order) {
    cpu_span& s = spans[i];
    calls_until(&s);
    const auto keep = reaching(s.tid, s.end_ns);
    if (what != parents_of::calls) s.parent = innermost(keep);
    // What a dropped span would contain from here on, s contains too, and is inner.
    open.erase(keep, open.end());
    open.push_back(i);
  }
  calls_until(nullptr);
}

}  // namespace cuprof::detail
