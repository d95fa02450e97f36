// "memory not freed": memory allocated in the window and not freed in it,
// matched to its free by device and address, per scope that allocated it (its
// path without the steps, so that the same scope in every step is one). Only
// from a floor up (unfreed_min_bytes), and what memory was allocated before the
// window is not counted. Still held is not leaked: tensors kept on purpose
// (outputs, caches, optimizer state) look the same; growth step by step is
// what a leak looks like, and the finding says how many steps left memory.
#include "context.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace cuprof::detail::insight_rules {

void memory_not_freed(context& c) {
  const trace& t = c.t;
  if (t.memory.empty()) return;
  struct place_hash {
    std::size_t operator()(const std::pair<std::int32_t, std::uint64_t>& k) const noexcept {
      return std::hash<std::uint64_t>()(k.second * 31 + std::uint32_t(k.first));
    }
  };
  // (device, address) -> the allocation there not yet freed (an index into t.memory).
  std::unordered_map<std::pair<std::int32_t, std::uint64_t>, std::uint32_t, place_hash> held;
  std::size_t unknown_address = 0;
  for (std::uint32_t i = 0; i < t.memory.size(); ++i) {
    const memory_event& m = t.memory[i];
    if (m.address == 0) {
      unknown_address += m.bytes > 0;
      continue;  // cannot be matched to its free
    }
    const std::pair<std::int32_t, std::uint64_t> place{m.device, m.address};
    // An allocation at an address still held: its free was not recorded, and
    // the earlier block is no longer there.
    if (m.bytes > 0) held[place] = i;
    else if (m.bytes < 0) held.erase(place);  // a free of memory from before the window matches nothing
  }
  struct scope_total {
    std::uint64_t bytes = 0;
    std::size_t count = 0;
    std::map<std::int32_t, std::uint64_t> per_place;
    std::map<std::uint32_t, std::uint64_t> per_step;
    std::uint32_t largest = no_index;
  };
  std::map<std::string, scope_total> by_scope;
  std::vector<std::uint32_t> left;  // in time order: the figures do not depend on the map's order
  left.reserve(held.size());
  for (const auto& entry : held) left.push_back(entry.second);
  std::sort(left.begin(), left.end());
  for (const std::uint32_t i : left) {
    const memory_event& m = t.memory[i];
    scope_total& s = by_scope[c.scope_path_in_step(m.span)];
    s.bytes += std::uint64_t(m.bytes);
    ++s.count;
    s.per_place[m.device] += std::uint64_t(m.bytes);
    const std::uint32_t step = c.step_of_span(m.span);
    if (step != no_index) s.per_step[step] += std::uint64_t(m.bytes);
    if (s.largest == no_index || m.bytes > t.memory[s.largest].bytes) s.largest = i;
  }
  std::vector<std::pair<std::string, const scope_total*>> ranked;
  for (const auto& entry : by_scope)
    if (entry.second.bytes >= c.o.unfreed_min_bytes) ranked.emplace_back(entry.first, &entry.second);
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second->bytes > b.second->bytes; });
  if (ranked.size() > c.o.max_items) ranked.resize(c.o.max_items);
  for (const auto& [path, s] : ranked) {
    const std::string scope = path.empty() ? std::string("outside any scope") : path;
    std::string places;
    for (const auto& [device, bytes] : s->per_place)
      places += (places.empty() ? "" : ", ") + memory_text(bytes) + (device < 0 ? " in " : " on ") + memory_place(device);
    finding f;
    f.kind = "memory not freed";
    f.cause = f.kind + ": " + scope;
    f.headline = scope + ": " + places + " still allocated at the end of the window, " + std::to_string(s->count) +
                 (s->count == 1 ? " allocation" : " allocations") + " made in it";
    if (c.steps.size() >= 2 && !s->per_step.empty()) {
      std::vector<std::uint64_t> per_step;
      for (const auto& st : s->per_step) per_step.push_back(st.second);
      f.details.push_back("left by " + std::to_string(s->per_step.size()) + " of the " + std::to_string(c.steps.size()) +
                          " steps, median " + memory_text(median_of(per_step)) + " a step" +
                          (s->per_step.size() >= 2 ? ": memory growing step by step is what a leak looks like"
                                                   : ": in one step only, not growing"));
    }
    f.details.push_back(
        "allocations in the window with no free in it (matched by device and address); memory kept on purpose "
        "(outputs, caches, optimizer state) looks the same, and memory allocated before the window is not counted");
    if (unknown_address)
      f.details.push_back(std::to_string(unknown_address) + " allocations in the trace have no address and were not matched");
    const memory_event& big = t.memory[s->largest];
    f.where = "largest: " + memory_text(std::uint64_t(big.bytes)) + " in " +
              (big.span == no_index ? std::string("no scope") : c.scope_path(big.span)) + ", thread " + std::to_string(big.tid) +
              " at " + ts_text(c.in, big.ts_ns);
    c.add(std::move(f));
  }
}

}  // namespace cuprof::detail::insight_rules
