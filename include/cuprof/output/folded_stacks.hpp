// Call stacks in the "folded" text of flamegraph.pl and speedscope, as torch's
// export_stacks writes it: a line per stack, its frames root first joined by
// ';', a space, and an integer value in microseconds.
#pragma once

#include "../base/error.hpp"
#include "../model/event.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace cuprof {

enum class stack_metric : std::uint8_t {
  self_cpu_time_total,   // the CUDA calls' own CPU time
  self_cuda_time_total,  // the GPU time of the work they launched
};

namespace detail {

// torch's metric names ("cuda" and "device" spellings alike).
inline stack_metric parse_stack_metric(std::string_view name) {
  if (name == "self_cpu_time_total") return stack_metric::self_cpu_time_total;
  if (name == "self_cuda_time_total" || name == "self_device_time_total") return stack_metric::self_cuda_time_total;
  throw error("unknown stack metric '" + std::string(name) +
              "'; valid metrics: self_cpu_time_total, self_cuda_time_total, self_device_time_total");
}

// A frame as one field of a folded line: ';' would split it and a line break
// end the line, so both become other characters.
inline void append_folded_frame(std::string& out, std::string_view frame) {
  for (char c : frame) out += c == ';' ? ',' : (static_cast<unsigned char>(c) < 0x20 ? ' ' : c);
}

}  // namespace detail

// The folded lines of t's stacks, in the order of their text; stacks whose
// value rounds to 0 us are left out, as torch leaves them out.
inline std::string folded_stacks(const trace& t, stack_metric metric) {
  std::vector<std::uint64_t> ns(t.stacks.size(), 0);
  if (metric == stack_metric::self_cpu_time_total) {
    for (std::size_t i = 0; i < t.api_calls.size(); ++i) {
      const std::uint32_t s = t.stack_of(i);
      if (s != no_index) ns[s] += t.api_calls[i].end_ns - t.api_calls[i].start_ns;
    }
  } else {
    for (const gpu_activity& g : t.gpu) {
      if (g.kind == gpu_kind::sync || g.api == no_index) continue;
      const std::uint32_t s = t.stack_of(g.api);
      if (s != no_index) ns[s] += g.end_ns - g.start_ns;
    }
  }
  std::map<std::string, std::uint64_t> lines;  // distinct stacks may fold to the same text
  for (std::size_t s = 0; s < t.stacks.size(); ++s) {
    if (ns[s] == 0) continue;
    const call_stack& st = t.stacks[s];
    std::string line;
    for (std::uint32_t k = st.frame_count; k-- > 0;) {
      detail::append_folded_frame(line, t.names.str(t.stack_frames[st.first_frame + k]));
      if (k) line += ';';
    }
    lines[line] += ns[s];
  }
  std::string out;
  for (const auto& [line, total_ns] : lines) {
    const std::uint64_t us = (total_ns + 500) / 1000;
    if (us == 0) continue;
    out += line;
    out += ' ';
    out += std::to_string(us);
    out += '\n';
  }
  return out;
}

}  // namespace cuprof
