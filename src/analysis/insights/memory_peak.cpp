// "memory peak": per device (and host memory), the highest memory in use
// (memory_event::total_allocated) in the window, when, and the allocation and
// scope that reached it.
#include "context.hpp"

#include <map>

namespace cuprof::detail::insight_rules {

void memory_peaks(context& c) {
  const trace& t = c.t;
  std::map<std::int32_t, std::uint32_t> peak;  // device -> the first event at its highest total
  for (std::uint32_t i = 0; i < t.memory.size(); ++i) {
    const memory_event& m = t.memory[i];
    const auto [it, added] = peak.try_emplace(m.device, i);
    if (!added && m.total_allocated > t.memory[it->second].total_allocated) it->second = i;
  }
  for (const auto& [device, at] : peak) {
    const memory_event& m = t.memory[at];
    if (m.total_allocated == 0) continue;
    const std::string scope = m.span == no_index ? std::string("no scope") : c.scope_path(m.span);
    finding f;
    f.kind = "memory peak";
    f.cause = f.kind + ": " + memory_place(device);
    f.headline = memory_place(device) + ": at most " + memory_text(m.total_allocated) + " in use, at " + ts_text(c.in, m.ts_ns) +
                 (m.bytes > 0 ? ", reached by an allocation of " + memory_text(std::uint64_t(m.bytes)) + " in " + scope : "");
    // torch reports no reserve for host memory (0): then only what the device has is said.
    std::string held = m.total_reserved ? "reserved then: " + memory_text(m.total_reserved) : std::string();
    if (m.total_reserved > m.total_allocated)
      held += " (" + memory_text(m.total_reserved - m.total_allocated) + " held by the allocator beyond what is in use)";
    if (device >= 0)
      if (const device_info* d = find_device(t, std::uint32_t(device)); d && d->total_global_mem)
        held += (held.empty() ? "" : "; ") + std::string("the device has ") + memory_text(d->total_global_mem) + ", " +
                percent_text(double(m.total_reserved > m.total_allocated ? m.total_reserved : m.total_allocated) /
                             double(d->total_global_mem)) +
                " of it taken";
    if (!held.empty()) f.details.push_back(held);
    f.details.push_back(
        "in use counts what the trace's allocator reports, memory allocated before the window included; lowering the "
        "peak (smaller batches, freeing or reusing buffers sooner, activation checkpointing) makes room, it saves no time");
    f.where = scope + ", thread " + std::to_string(m.tid) + " at " + ts_text(c.in, m.ts_ns);
    c.add(std::move(f));
  }
}

}  // namespace cuprof::detail::insight_rules
