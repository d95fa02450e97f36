// "pageable memcpy": copies from or to pageable host memory (the record's
// name says "Pageable"), per direction: bytes, GPU time, and what pinned
// memory would save at the bandwidth the trace's own pinned copies of that
// direction achieved, where it has some.
#include "context.hpp"

#include <map>

namespace cuprof::detail::insight_rules {

void pageable_copies(context& c) {
  const trace& t = c.t;
  struct copies {
    std::size_t count = 0;
    std::uint64_t bytes = 0, ns = 0;
    std::uint32_t largest = no_index;
  };
  std::map<std::uint8_t, copies> pageable, pinned;  // by direction (the memcpy kind)
  for (std::uint32_t i = 0; i < t.gpu.size(); ++i) {
    const gpu_activity& g = t.gpu[i];
    if (g.kind != gpu_kind::memcpy || (g.flags & gpu_timing_unknown)) continue;
    const std::string& name = t.names.str(g.name);
    const bool from_pageable = name.find("Pageable") != std::string::npos;
    if (!from_pageable && name.find("Pinned") == std::string::npos) continue;
    copies& x = (from_pageable ? pageable : pinned)[g.subkind];
    ++x.count;
    x.bytes += t.bytes_of(g);
    x.ns += g.end_ns - g.start_ns;
    if (x.largest == no_index || t.bytes_of(g) > t.bytes_of(t.gpu[x.largest])) x.largest = i;
  }
  for (const auto& [direction, x] : pageable) {
    if (x.bytes < c.o.pageable_copy_min_bytes || x.ns == 0) continue;
    const std::string dir = direction ? memcpy_kind_name(direction) : "of unknown direction";
    finding f;
    f.kind = "pageable memcpy";
    f.cause = f.kind + ": " + dir;
    f.headline = "Memcpy " + dir + " with pageable host memory: " + std::to_string(x.count) +
                 (x.count == 1 ? " copy, " : " copies, ") + memory_text(x.bytes) + " in " + us_text(x.ns) + " (" +
                 format_rate(double(x.bytes) * 1e9 / double(x.ns), "B/s") + ")";
    f.cost_ns = x.ns;
    f.cost_of = cost_base::gpu_time;
    const auto p = pinned.find(direction);
    if (p != pinned.end() && p->second.bytes > 0 && p->second.ns > 0) {
      const double pinned_rate = double(p->second.bytes) / double(p->second.ns);  // bytes per ns
      const auto as_pinned = std::uint64_t(double(x.bytes) / pinned_rate);
      f.saving_ns = x.ns > as_pinned ? x.ns - as_pinned : 0;
      f.details.push_back("the trace's " + std::to_string(p->second.count) + " pinned " + dir +
                          (p->second.count == 1 ? " copy (" : " copies (") + memory_text(p->second.bytes) + ") ran at " +
                          format_rate(pinned_rate * 1e9, "B/s") + ": from pinned memory these would take ~" +
                          us_text(double(as_pinned)));
      f.estimate = "their GPU time less the same bytes at the bandwidth this trace's pinned " + dir + " copies achieved";
    } else {
      f.details.push_back("the trace has no pinned " + dir + " copies to measure what pinned memory would give here");
      f.estimate = "not estimated: no pinned copies of this direction in the trace to compare with";
    }
    f.details.push_back(
        "the driver stages pageable memory through a pinned buffer of its own, and the copy does not overlap the CPU; "
        "pin the host buffer (torch: tensor.pin_memory(), DataLoader(pin_memory=True), then non_blocking=True)");
    f.where = "largest: " + c.where_gpu(t.gpu[x.largest]);
    c.add(std::move(f));
  }
}

}  // namespace cuprof::detail::insight_rules
