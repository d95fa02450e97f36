// Turns the slots that scopes wrote into cpu_spans of a trace.
#pragma once

#include "clock.hpp"
#include "chunk_pool.hpp"
#include "../model/event.hpp"
#include "../model/nesting.hpp"

#include <pthread.h>

#include <algorithm>
#include <cstring>

#include <string>
#include <vector>

namespace cuprof::detail {

struct open_span {
  std::uint64_t start_ticks;
  name_id name;
  bool is_step;
  std::uint32_t first_arg = 0;
  std::uint8_t arg_count = 0;
};

// Replays one thread's slots into the window [start, end]. Exits with no
// matching enter belong to scopes entered before this window and are skipped;
// scopes entered before its start (published too late for the window before)
// start at it, and scopes still open at its end are closed there. Records
// stamped after the end are left for the next window.
class span_builder {
 public:
  span_builder(trace& out, const tick_converter& clock, std::uint32_t tid, std::uint64_t window_start_ticks,
               std::uint64_t window_end_ticks)
      : out_(out), clock_(clock), tid_(tid), window_start_ticks_(window_start_ticks), window_end_ticks_(window_end_ticks) {}

  // Takes the records of s[0, n) up to the window's end; returns the slots taken.
  std::size_t consume(const slot* s, std::size_t n) {
    const std::size_t taken = records_until(s, n, window_end_ticks_);
    for (std::size_t i = 0; i < taken; i += record_slots(s[i])) {
      const slot& cur = s[i];
      switch (slot_kind_of(cur)) {
        case slot_kind::enter_static:
          open(cur, out_.names.intern_static(reinterpret_cast<const char*>(cur.payload)), false);
          break;
        case slot_kind::enter_dynamic:
          open(cur, out_.names.intern(std::string_view(reinterpret_cast<const char*>(s + i + 1), std::size_t(cur.payload))),
               false);
          break;
        case slot_kind::enter_step:
          open(cur, out_.names.intern(std::string(step_name_prefix) + std::to_string(cur.payload)), true);
          break;
        case slot_kind::exit:
          if (!stack_.empty()) close(ticks_of(cur));
          break;
        case slot_kind::args:
          if (!stack_.empty()) add_args(s + i);  // the enter it follows was just opened
          break;
      }
    }
    return taken;
  }

  void finish() {
    while (!stack_.empty()) close(window_end_ticks_);
    // Spans were emitted at their exits, children first. Reversed, every scope
    // precedes the scopes it encloses, also those with its very extent; sorted
    // stably, parents precede children.
    std::reverse(out_.spans.begin() + first_, out_.spans.end());
    std::stable_sort(out_.spans.begin() + first_, out_.spans.end(), nests_before);
    link_parents(out_, parents_of::spans, first_);
  }

 private:
  void open(const slot& enter, name_id name, bool is_step) {
    stack_.push_back({std::max(ticks_of(enter), window_start_ticks_), name, is_step});
  }

  void add_args(const slot* record) {
    open_span& o = stack_.back();
    o.first_arg = std::uint32_t(out_.span_args.size());
    o.arg_count = std::uint8_t(args_count(*record));
    for (std::size_t k = 0; k < o.arg_count; ++k) {
      const slot& a = record[1 + k];
      span_arg arg;
      arg.key = out_.names.intern_static(reinterpret_cast<const char*>(a.head));
      if (arg_is_real(*record, k)) {
        arg.kind = span_arg::type::real;
        std::memcpy(&arg.real, &a.payload, sizeof arg.real);
      } else {
        arg.integer = std::int64_t(a.payload);
      }
      out_.span_args.push_back(arg);
    }
  }

  void close(std::uint64_t end_ticks) {
    const open_span o = stack_.back();
    stack_.pop_back();
    cpu_span sp;
    sp.start_ns = clock_.to_epoch_ns(o.start_ticks);
    sp.end_ns = std::max(sp.start_ns, clock_.to_epoch_ns(end_ticks));
    sp.name = o.name;
    sp.tid = tid_;
    sp.is_step = o.is_step;
    sp.first_arg = o.first_arg;
    sp.arg_count = o.arg_count;
    out_.spans.push_back(sp);
  }

  trace& out_;
  const tick_converter& clock_;
  std::uint32_t tid_;
  std::uint64_t window_start_ticks_, window_end_ticks_;
  std::size_t first_ = out_.spans.size();
  std::vector<open_span> stack_;
};

inline std::string thread_name_of(pthread_t handle) {
  char buf[64] = {0};
  if (pthread_getname_np(handle, buf, sizeof buf) != 0) return {};
  return buf;
}

// Drains every thread's slots of the window [start, end] into `out`. Each
// drain stops at the thread's first record after the end, so it takes a
// bounded amount however fast other threads keep recording.
inline void collect_cpu_spans(trace& out, const tick_converter& clock, std::uint64_t window_start_ticks,
                              std::uint64_t window_end_ticks) {
  global_thread_registry().for_each([&](thread_buffer& b) {
    const std::size_t before = out.spans.size();
    span_builder builder(out, clock, b.tid(), window_start_ticks, window_end_ticks);
    b.drain([&](const slot* s, std::size_t n) { return builder.consume(s, n); });
    builder.finish();
    out.meta.dropped_cpu_events += b.take_dropped();
    if (out.spans.size() > before) {
      std::string name = b.exited() ? std::string() : thread_name_of(b.handle());
      out.meta.threads.push_back({b.tid(), std::move(name)});
    }
  });
  out.meta.dropped_cpu_events += process().dropped_scope_exits.exchange(0, std::memory_order_relaxed);
  for (std::size_t i = 0; i < out.spans.size(); ++i) out.spans[i].id = std::uint32_t(i + 1);
}

// Throws away what was recorded up to `limit_ticks` (warmup, or before a
// window), and the count of records dropped meanwhile. Where no profile runs
// and scopes do not record, the chunks that wait for reuse are freed.
inline void discard_cpu_spans(std::uint64_t limit_ticks) {
  global_thread_registry().for_each([&](thread_buffer& b) {
    b.discard_until(limit_ticks);
    b.take_dropped();
  });
  process().dropped_scope_exits.store(0, std::memory_order_relaxed);
  if (!cpu_recording() && !process().running_profile.load(std::memory_order_relaxed)) global_chunk_pool().trim();
}

}  // namespace cuprof::detail
