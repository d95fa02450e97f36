// Building a trace's call stacks (trace::stacks): each distinct list of frames
// once, whoever builds the trace (the record store at a window's end, the
// reader from a file).
#pragma once

#include "event.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

namespace cuprof::detail {

class stack_interner {
 public:
  stack_interner() = default;
  // Knows the stacks t holds already.
  explicit stack_interner(const trace& t) {
    for (std::uint32_t i = 0; i < t.stacks.size(); ++i) {
      const call_stack& s = t.stacks[i];
      const auto first = t.stack_frames.begin() + s.first_frame;
      index_.try_emplace(std::vector<name_id>(first, first + s.frame_count), i);
    }
  }

  // The index in t.stacks of the stack with these frames (name ids of t,
  // innermost first), added when new; no_index for no frames.
  std::uint32_t add(trace& t, const std::vector<name_id>& frames) {
    if (frames.empty()) return no_index;
    auto [it, added] = index_.try_emplace(frames, std::uint32_t(t.stacks.size()));
    if (added) {
      t.stacks.push_back({std::uint32_t(t.stack_frames.size()), std::uint32_t(frames.size())});
      t.stack_frames.insert(t.stack_frames.end(), frames.begin(), frames.end());
    }
    return it->second;
  }

  // Sets call `call`'s stack (a call t holds, or the next one it will).
  // call_stacks grows to every call of t; a builder that adds calls after
  // calls with stacks calls finish() once done.
  static void set(trace& t, std::size_t call, std::uint32_t stack) {
    if (t.call_stacks.size() <= call || t.call_stacks.size() < t.api_calls.size())
      t.call_stacks.resize(std::max(call + 1, t.api_calls.size()), no_index);
    t.call_stacks[call] = stack;
  }
  static void finish(trace& t) {
    if (!t.call_stacks.empty()) t.call_stacks.resize(t.api_calls.size(), no_index);
  }

 private:
  std::map<std::vector<name_id>, std::uint32_t> index_;
};

}  // namespace cuprof::detail
