// A wait on a CUDA event (an event sync, a stream's wait) -> what it waited
// for: the event's latest record in the window that started before the wait
// (a handle is reused once its event is destroyed: the latest record is the
// new event's), with the correlation id of the call the trace shows for it (a
// nested driver call's is its runtime call's). A record before the window is
// not resolved: its call is not in the trace (Kineto writes -1 too). The
// event's number (event_wait::event) is one per handle, across windows.
#pragma once

#include "event.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <unordered_map>
#include <vector>

namespace cuprof::detail {

// A staged record of a CUDA event (cudaEventRecord): what a later wait on the
// event resolves to, time in ticks.
struct staged_event_record {
  std::uint64_t start = 0;
  std::uint64_t event = 0;  // its handle
  std::uint32_t correlation = 0;
  std::uint32_t stream = 0;
};

class event_wait_resolver {
 public:
  // `ids`: each event handle's number, kept across windows.
  explicit event_wait_resolver(std::unordered_map<std::uint64_t, std::uint32_t>& ids) : ids_(ids) {}

  // The window's event records: those of `records` that started in [start,
  // end] (sorted here by start), each with the correlation id shown(id) the
  // trace gives its call.
  template <class ShownId>
  void add_window_records(std::vector<staged_event_record>& records, std::uint64_t start, std::uint64_t end,
                          const ShownId& shown) {
    std::stable_sort(records.begin(), records.end(),
                     [](const staged_event_record& a, const staged_event_record& b) { return a.start < b.start; });
    for (const staged_event_record& r : records) {
      if (r.start < start || r.start > end) continue;
      by_event_[r.event].push_back({r.start, shown(r.correlation), r.stream});
    }
  }

  event_wait operator()(std::uint64_t event, std::uint64_t wait_start) const {
    event_wait e;
    auto [id, added] = ids_.try_emplace(event, std::uint32_t(ids_.size() + 1));
    e.event = id->second;
    const auto it = by_event_.find(event);
    if (it == by_event_.end()) return e;
    const std::vector<record>& v = it->second;
    const auto after = std::partition_point(v.begin(), v.end(), [&](const record& r) { return r.start < wait_start; });
    if (after == v.begin()) return e;
    e.stream = std::prev(after)->stream;
    e.record_correlation = std::prev(after)->correlation;
    return e;
  }

 private:
  struct record {
    std::uint64_t start;
    std::uint32_t correlation, stream;
  };
  std::unordered_map<std::uint64_t, std::uint32_t>& ids_;
  std::unordered_map<std::uint64_t, std::vector<record>> by_event_;  // each event's records in the window, by start
};

}  // namespace cuprof::detail
