// The record store's native call stacks (profile_options::with_stack): the
// stacks the threads published (collect/native_stack.hpp), merged across
// threads, and which call used which, by correlation id. When a window is
// taken, its calls' stacks are symbolized (collect/symbolizer.hpp) and put in
// the trace as text; what an address resolves to is kept for later windows.
#pragma once

#include "../collect/symbolizer.hpp"
#include "../model/call_stacks.hpp"
#include "../model/correlation_index.hpp"
#include "../model/event.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace cuprof::detail::cupti {

class stack_store {
 public:
  using frame_resolver = std::function<symbolized_frame(std::uint64_t return_address)>;

  // The store's index of a stack (innermost first), the same for the same
  // frames from any thread.
  std::uint32_t add(const std::uint64_t* frames, std::size_t n) {
    const std::uint64_t h = hash_of(frames, n);
    auto range = by_hash_.equal_range(h);
    for (auto it = range.first; it != range.second; ++it) {
      const stored& s = stacks_[it->second];
      if (s.depth == n && std::equal(frames, frames + n, frames_.begin() + std::ptrdiff_t(s.first))) return it->second;
    }
    const std::uint32_t index = std::uint32_t(stacks_.size());
    stacks_.push_back({frames_.size(), n});
    frames_.insert(frames_.end(), frames, frames + n);
    by_hash_.emplace(h, index);
    return index;
  }
  std::size_t size() const noexcept { return stacks_.size(); }

  // Call `correlation`, which started at `start_ticks`, was made from stack `stack`.
  void link(std::uint32_t correlation, std::uint64_t start_ticks, std::uint32_t stack) {
    links_.push_back({start_ticks, correlation, stack});
  }

  // Tests resolve made-up addresses; by default a symbolizer of this process.
  void set_resolver(frame_resolver r) { resolver_ = std::move(r); }

  // The window's calls (out.api_calls from first_call on, positions as
  // `owner` maps their correlation ids) get their stacks; links of calls
  // after `end_ticks` stay for a later window. `keep` false discards (warmup).
  void take(trace& out, std::size_t first_call, const correlation_index& owner, std::uint64_t end_ticks, bool keep) {
    std::vector<linked_call> later;
    std::vector<std::uint32_t> out_stack(keep ? stacks_.size() : 0, unresolved);
    stack_interner interned(out);
    for (const linked_call& l : links_) {
      if (l.start_ticks > end_ticks) {
        later.push_back(l);
        continue;
      }
      if (!keep) continue;
      const std::uint32_t pos = owner.find(l.correlation);
      if (pos == no_index) continue;
      const std::size_t call = first_call + pos;
      // A folded call's stack serves its outer call only when the outer one has none.
      if (out.stack_of(call) != no_index && out.api_calls[call].correlation != l.correlation) continue;
      std::uint32_t& s = out_stack[l.stack];
      if (s == unresolved) s = symbolized(out, l.stack, interned);
      if (s != no_index) stack_interner::set(out, call, s);
    }
    links_.swap(later);
  }

  // A new recording: stacks published before it are not used after it.
  void clear() {
    std::vector<std::uint64_t>().swap(frames_);
    std::vector<stored>().swap(stacks_);
    by_hash_.clear();
    std::vector<linked_call>().swap(links_);
    symbols_.clear();
    symbolizer_.reset();
    ++generation_;
  }
  // Changes at each clear(): the call recorder's ids of store stacks are stale then.
  std::uint64_t generation() const noexcept { return generation_; }

 private:
  static constexpr std::uint32_t unresolved = no_index - 1;

  struct stored {
    std::size_t first;
    std::size_t depth;
  };
  struct linked_call {
    std::uint64_t start_ticks;
    std::uint32_t correlation;
    std::uint32_t stack;
  };

  static std::uint64_t hash_of(const std::uint64_t* frames, std::size_t n) {
    std::uint64_t h = 1469598103934665603ull;
    for (std::size_t i = 0; i < n; ++i) h = (h ^ frames[i]) * 1099511628211ull;
    return h;
  }

  const symbolized_frame& symbol(std::uint64_t address) {
    auto it = symbols_.find(address);
    if (it != symbols_.end()) return it->second;
    symbolized_frame f;
    if (resolver_) {
      f = resolver_(address);
    } else {
      if (!symbolizer_) symbolizer_ = std::make_unique<symbolizer>();
      f = symbolizer_->resolve(address);
    }
    return symbols_.emplace(address, std::move(f)).first->second;
  }

  // Stack `index` in out, less the profiler's own frames at its top; no_index
  // when nothing else is left.
  std::uint32_t symbolized(trace& out, std::uint32_t index, stack_interner& interned) {
    const stored& s = stacks_[index];
    std::vector<name_id> frames;
    bool top = true;
    for (std::size_t i = 0; i < s.depth; ++i) {
      const symbolized_frame& f = symbol(frames_[s.first + i]);
      if (top && f.tool_frame) continue;
      top = false;
      frames.push_back(out.names.intern(f.text));
    }
    return interned.add(out, frames);
  }

  std::vector<std::uint64_t> frames_;
  std::vector<stored> stacks_;
  std::unordered_multimap<std::uint64_t, std::uint32_t> by_hash_;
  std::vector<linked_call> links_;
  std::unordered_map<std::uint64_t, symbolized_frame> symbols_;
  std::unique_ptr<symbolizer> symbolizer_;
  frame_resolver resolver_;
  std::uint64_t generation_ = 0;
};

}  // namespace cuprof::detail::cupti
