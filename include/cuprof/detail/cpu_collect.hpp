// Turns the slots that scopes wrote into cpu_spans of a trace.
#pragma once

#include "../event.hpp"
#include "clock.hpp"
#include "thread_buffer.hpp"

#include <pthread.h>

#include <algorithm>

#include <string>
#include <vector>

namespace cuprof::detail {

struct open_span {
  std::uint64_t start_ticks;
  name_id name;
  bool is_step;
};

// Replays one thread's slots. Exits with no matching enter belong to scopes
// entered before this window and are skipped; scopes still open at
// `window_end_ticks` are closed there.
class span_builder {
 public:
  span_builder(trace& out, const tick_converter& clock, std::uint32_t tid)
      : out_(out), clock_(clock), tid_(tid) {}

  void consume(const slot* s, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      const slot& cur = s[i];
      switch (kind_of(cur)) {
        case slot_kind::enter_static:
          stack_.push_back({ticks_of(cur), out_.names.intern_static(reinterpret_cast<const char*>(cur.payload)), false});
          break;
        case slot_kind::enter_dynamic: {
          const std::size_t len = std::size_t(cur.payload);
          const char* chars = reinterpret_cast<const char*>(s + i + 1);
          stack_.push_back({ticks_of(cur), out_.names.intern(std::string_view(chars, len)), false});
          i += (len + sizeof(slot) - 1) / sizeof(slot);
          break;
        }
        case slot_kind::enter_step:
          stack_.push_back({ticks_of(cur), out_.names.intern("ProfilerStep#" + std::to_string(cur.payload)), true});
          break;
        case slot_kind::exit:
          if (!stack_.empty()) close(ticks_of(cur));
          break;
      }
    }
  }

  void finish(std::uint64_t window_end_ticks) {
    while (!stack_.empty()) close(window_end_ticks);
    // Spans were emitted at their exits (children first); restore enter order
    // so parents precede children, then link each to its parent.
    std::sort(out_.spans.begin() + first_, out_.spans.end(), [](const cpu_span& a, const cpu_span& b) {
      return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
    });
    std::vector<std::uint32_t> ancestors;
    for (std::size_t i = first_; i < out_.spans.size(); ++i) {
      cpu_span& sp = out_.spans[i];
      while (!ancestors.empty() && out_.spans[ancestors.back()].end_ns < sp.end_ns) ancestors.pop_back();
      sp.parent = ancestors.empty() ? no_index : ancestors.back();
      ancestors.push_back(std::uint32_t(i));
    }
  }

 private:
  void close(std::uint64_t end_ticks) {
    const open_span o = stack_.back();
    stack_.pop_back();
    cpu_span sp;
    sp.start_ns = clock_.to_epoch_ns(o.start_ticks);
    sp.end_ns = std::max(sp.start_ns, clock_.to_epoch_ns(end_ticks));
    sp.name = o.name;
    sp.tid = tid_;
    sp.is_step = o.is_step;
    out_.spans.push_back(sp);
  }

  trace& out_;
  const tick_converter& clock_;
  std::uint32_t tid_;
  std::size_t first_ = out_.spans.size();
  std::vector<open_span> stack_;
};

inline std::string thread_name_of(pthread_t handle) {
  char buf[64] = {0};
  if (pthread_getname_np(handle, buf, sizeof buf) != 0) return {};
  return buf;
}

// Drains every thread's published slots into `out`.
inline void collect_cpu_spans(trace& out, const tick_converter& clock, std::uint64_t window_end_ticks) {
  global_thread_registry().for_each([&](thread_buffer& b) {
    const std::size_t before = out.spans.size();
    span_builder builder(out, clock, b.tid());
    b.drain([&](const slot* s, std::size_t n) { builder.consume(s, n); });
    builder.finish(window_end_ticks);
    out.meta.dropped_cpu_events += b.take_dropped();
    if (out.spans.size() > before) {
      std::string name = b.exited() ? std::string() : thread_name_of(b.handle());
      out.meta.threads.push_back({b.tid(), std::move(name)});
    }
  });
  for (std::size_t i = 0; i < out.spans.size(); ++i) out.spans[i].id = std::uint32_t(i + 1);
}

// Throws away everything recorded so far (warmup, or before a window).
inline void discard_cpu_spans() {
  global_thread_registry().for_each([](thread_buffer& b) { b.discard(); });
}

}  // namespace cuprof::detail
