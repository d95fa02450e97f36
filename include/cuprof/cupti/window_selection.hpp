// Which staged API calls a window keeps, and in what order: the calls that
// started in [start, end], a driver call made inside a runtime call on the
// same thread (cudaLaunchKernel -> cuLaunchKernel) folded into it, as torch
// shows only the outer call. Plain logic over the record store's staged calls
// (record_store.hpp), apart from CUPTI.
#pragma once

#include "staged_calls.hpp"
#include "../model/correlation_index.hpp"
#include "../model/event.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace cuprof::detail::cupti {

// The order of a window's calls: by thread, then start, the runtime call
// before the driver call it makes; the correlation id makes it total, so
// that the staged calls and the trace's sort alike.
template <class Call>
bool call_order(const Call& x, api_domain x_domain, const Call& y, api_domain y_domain) {
  if (x.tid != y.tid) return x.tid < y.tid;
  if (x.start_ns != y.start_ns) return x.start_ns < y.start_ns;
  if (x_domain != y_domain) return x_domain < y_domain;
  return x.correlation < y.correlation;
}
inline bool call_order(const staged_call& x, const staged_call& y) { return call_order(x, x.domain, y, y.domain); }

// The API calls a window keeps; a folded call's correlation id maps to the
// outer call.
struct window_calls {
  std::vector<std::uint32_t> kept;  // indices into the staged calls, in call_order
  detail::correlation_index owner;  // correlation (kept or folded) -> position in `kept`
  std::uint32_t newest_before = 0;  // highest correlation id called before the window
  bool in_order = true;             // storage order is call order: `kept` needed no sort
};

// The staged calls that started in [start, end], folded: those folded on
// arrival (staged_calls::add) and those that arrived with other threads'
// calls in between.
inline window_calls select_window_calls(const staged_calls& staged, std::uint64_t start, std::uint64_t end) {
  const chunked_vector<staged_call>& api = staged.calls;
  window_calls w;
  std::vector<std::uint32_t> in_window;  // fits: staged records are capped far below 4 Gi
  // Found on the way: whether storage order is already call order, and the
  // bounds and count of the correlation ids the index will hold.
  bool& in_order = w.in_order;
  const staged_call* previous = nullptr;
  std::uint32_t lowest = no_index, highest = 0;
  std::size_t ids = 0;
  const auto count_id = [&](std::uint32_t id) { lowest = std::min(lowest, id), highest = std::max(highest, id), ++ids; };
  for (std::size_t i = 0; i < api.size(); ++i) {
    const staged_call& c = api[i];
    if (c.start_ns < start) {
      w.newest_before = std::max({w.newest_before, c.correlation, c.folded_correlation()});
    } else if (c.start_ns <= end) {
      in_window.push_back(std::uint32_t(i));
      in_order = in_order && (!previous || !call_order(c, *previous));
      previous = &c;
      count_id(c.correlation);
      if (c.folded_offset) count_id(c.folded_correlation());
    }
  }
  if (!in_order)
    std::sort(in_window.begin(), in_window.end(), [&](std::uint32_t a, std::uint32_t b) { return call_order(api[a], api[b]); });
  // Each window call's correlation ids (its own, and those of the calls
  // folded into it) -> its position in `kept`; the kept calls are listed
  // on the first pass.
  bool kept_listed = false;
  w.kept.reserve(in_window.size());
  const auto window_entries = [&](auto&& add) {
    const staged_call* outer = nullptr;
    std::uint32_t next_pos = 0, outer_pos = 0;
    for (std::uint32_t i : in_window) {
      const staged_call& c = api[i];
      if (outer && folds_into(*outer, c)) {
        add(c.correlation, outer_pos);
        continue;
      }
      const std::uint32_t pos = next_pos++;
      if (!kept_listed) w.kept.push_back(i);
      if (c.domain == api_domain::runtime) outer = &c, outer_pos = pos;
      add(c.correlation, pos);
      if (c.folded_offset) add(c.folded_correlation(), pos);
    }
    kept_listed = true;
  };
  w.owner.build_from(lowest, highest, ids, window_entries);
  if (!staged.folded.empty()) {  // the other calls folded on arrival map to their outer call's position
    std::vector<std::pair<std::uint32_t, std::uint32_t>> also;
    for (const auto& [inner, outer] : staged.folded) {
      const std::uint32_t pos = w.owner.find(outer);
      if (pos != no_index) also.emplace_back(inner, pos);
      else if (outer <= w.newest_before) w.newest_before = std::max(w.newest_before, inner);
    }
    if (!also.empty())
      w.owner.build_from([&](auto&& add) {
        window_entries(add);
        for (const auto& [inner, pos] : also) add(inner, pos);
      });
  }
  return w;
}

}  // namespace cuprof::detail::cupti
