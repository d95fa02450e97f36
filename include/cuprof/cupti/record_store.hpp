// The record store: CUPTI's activity records and the call recorder's API
// calls -> cuprof events. It reads CUPTI's plain C structs only (no CUPTI call),
// so tests feed it synthetic records on a machine with no GPU.
//
// Records are staged with raw clock ticks until a window closes; then the
// window's API calls, the GPU work they caused and CUPTI's overhead inside it
// are moved into the trace and converted to epoch nanoseconds. What a call is
// staged as: staged_calls.hpp; an activity record: staged_activities.hpp
// (from CUPTI's structs: activity_converter.hpp); which calls a window keeps:
// window_selection.hpp.
#pragma once

#include "activity_converter.hpp"
#include "stack_store.hpp"
#include "staged_activities.hpp"
#include "staged_calls.hpp"
#include "window_selection.hpp"
#include "../base/chunked_vector.hpp"
#include "../collect/clock.hpp"
#include "../model/api_vocabulary.hpp"
#include "../model/event.hpp"
#include "../model/event_waits.hpp"
#include "../model/memory_ledger.hpp"

#include <cupti_activity.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cuprof::detail::cupti {

// Staged records are compact copies of the trace's structs with times still
// in ticks, names as ids in the store's string table and kernel launch
// configurations deduplicated, so a long window costs little memory. A window
// is built from them in storage order, each staged chunk freed once read, so
// that the staged records and the trace do not both stay whole.
class record_store {
 public:
  static constexpr std::size_t default_max_staged = 16u << 20;  // about 1 GiB of records

  explicit record_store(api_name_lookup lookup, std::size_t max_staged = default_max_staged)
      : call_kinds_(std::move(lookup)), max_staged_(max_staged) {}

  // Converts one CUPTI activity record (activity_converter.hpp); records of
  // kinds cuprof does not show are ignored. API calls and synchronizations
  // come through add_call() instead.
  void add(const CUpti_Activity* record) {
    if (at_cap()) return;
    activities_.add(record, staged_);
  }

  // Stages one CUDA call, and a synchronization's record; calls cuprof does
  // not show (classify_api) are dropped.
  void add_call(const call_record& r) {
    if (at_cap()) return;
    ++api_changes_;
    const std::uint32_t kind = call_kinds_.index(r.domain, r.cbid, staged_.names);
    if (kind == no_index) return;
    // Among the calls kept only: a hidden call's id can be older than the
    // recording (cuProfilerStart, made inside the cudaProfilerStart that
    // waited for the window to open, while other threads launched).
    if (r.start >= recording_since_) first_recorded_id_ = std::min(first_recorded_id_, r.correlation);
    if (r.stack != no_index) stacks_.link(r.correlation, r.start, r.stack);
    if (r.sync_kind) add_sync(r);
    if (r.records_event && r.event && r.return_value == 0) event_records_.push_back({r.start, r.event, r.correlation, r.stream});
    staged_call c;
    c.start_ns = r.start;
    c.end_ns = r.end;
    c.tid = r.tid;
    c.kind = std::uint16_t(kind);
    c.correlation = r.correlation;
    c.return_value = narrow_return_value(r.return_value);
    c.domain = r.domain;
    api_.add(c);
  }

  void add_dropped(std::uint64_t n) { dropped_ += n; }
  // Calls the call recorder lost for want of memory (CUPROF_MAX_CPU_EVENTS).
  void add_dropped_calls(std::uint64_t n) { dropped_calls_ += n; }

  // Stages one NCCL call (nvtx_recorder.hpp), its time in ticks; tied to its
  // NVTX range when its window is taken (attach_collectives).
  void add_collective(const collective_call& c) {
    if (at_cap()) return;
    collectives_.push_back(c);
  }

  // The recording the calls drained from now on belong to began at `since`
  // (call_recorder::start_recording): the lowest call id staged since then
  // tells GPU work of calls made before it apart from work of unrecorded calls.
  void note_recording(std::uint64_t since) {
    if (since == recording_since_) return;
    recording_since_ = since;
    first_recorded_id_ = no_index;
  }

  // Every call that started before `ticks` is staged but those still in
  // progress then, whose starts are `running` (one a thread at most): the
  // call recorder's drain says so. Without a recorder (tests feeding calls
  // themselves), all are.
  void set_call_horizon(std::uint64_t ticks, const std::vector<std::uint64_t>& running) {
    drained_at_ = ticks;
    running_calls_ = running;
  }
  // Every call that started in [start, end] is staged. A call in progress
  // that started before `start` is no matter: it is not the window's.
  bool calls_complete_through(std::uint64_t start, std::uint64_t end) const noexcept {
    if (drained_at_ <= end) return false;
    for (const std::uint64_t r : running_calls_)
      if (r >= start && r <= end) return false;
    return true;
  }

  // True when every call that started in [start, end] is staged and every
  // launch, copy and memset among them has its GPU record staged: the window
  // can be finalised without a device sync.
  bool window_complete(std::uint64_t start, std::uint64_t end) {
    if (!calls_complete_through(start, end)) return false;
    window_calls w = select_window_calls(api_, start, end);
    std::vector<char> has_record(w.kept.size(), 0);
    staged_.gpu.for_each([&](const staged_gpu& g) {
      const std::uint32_t pos = w.owner.find(g.correlation);
      if (pos != no_index) has_record[pos] = 1;
    });
    for (std::size_t pos = 0; pos < w.kept.size(); ++pos) {
      const staged_call& c = api_.calls[w.kept[pos]];
      if (!has_record[pos] && call_kinds_[c.kind].expects_gpu_record && c.return_value == 0) return false;
    }
    // take() of this window comes next: it reuses the selection unless API
    // records arrived in between. Kept only now, not while the window waits.
    checked_ = checked_window{start, end, api_changes_, std::move(w)};
    return true;
  }

  // Moves the window's records into `out` and drops staged records that
  // belong to no later window. The steps go in this order: out numbers names
  // as they are first used.
  void take(trace& out, std::uint64_t start, std::uint64_t end, const tick_converter& clock) {
    taking t(out, start, end, clock, selection(start, end), staged_.names);
    std::vector<std::uint32_t> later_ids = take_calls(t);
    stacks_.take(out, t.first_call, t.calls.owner, end, !discarding_);
    // The GPU records need only the index: the list of kept calls (4 bytes
    // a call) goes before they are converted, where take() peaks.
    std::vector<std::uint32_t>().swap(t.calls.kept);
    take_gpu(t, std::move(later_ids));
    window_edges& edges = out.meta.edges;
    for (const std::uint8_t k : t.owed)
      if (k) ++edges.calls_without_gpu_work[k - 1];
    // The calls still in progress when the calls were last drained that started in the window.
    for (const std::uint64_t running : running_calls_) edges.calls_running_at_end += running >= start && running <= end;
    // A wait in a later window resolves to records in that window only.
    event_records_.erase(std::remove_if(event_records_.begin(), event_records_.end(),
                                        [&](const staged_event_record& r) { return r.start <= end; }),
                         event_records_.end());
    take_nvtx_ranges(t);
    take_collectives(t);
    take_overhead(t);
    take_memory(t);

    api_.forget_folds_through(t.calls.owner.empty() ? 0 : t.calls.owner.highest());

    const std::uint64_t lost_timestamps = activities_.take_lost_timestamps();
    out.meta.dropped_gpu_records += dropped_ + lost_timestamps + over_cap_;
    if (dropped_ + lost_timestamps + over_cap_)
      out.meta.dropped_gpu_detail = std::to_string(dropped_) + " dropped by CUPTI, " + std::to_string(lost_timestamps) +
                                    " without valid timestamps, " + std::to_string(over_cap_) + " over CUPROF_MAX_RECORDS";
    dropped_ = over_cap_ = 0;
    out.meta.dropped_cpu_events += dropped_calls_;
    dropped_calls_ = 0;
  }

  // Everything recorded before `ticks` is discarded (warmup).
  void discard_before(std::uint64_t ticks) {
    trace scratch;
    discarding_ = true;  // its calls' stacks are not symbolized
    take(scratch, 0, ticks ? ticks - 1 : 0, tick_converter{});
    discarding_ = false;
  }

  void clear() {
    checked_.reset();
    api_.calls.clear();
    staged_.clear();
    activities_.clear();
    std::vector<staged_event_record>().swap(event_records_);
    event_ids_.clear();
    std::vector<collective_call>().swap(collectives_);
    ledger_ = memory_ledger();
    folded_calls().swap(api_.folded);
    stacks_.clear();
    dropped_ = over_cap_ = dropped_calls_ = 0;  // after the last window: not the next one's
    running_calls_.clear();
    newest_left_out_ = first_recorded_id_ = 0;  // a new CUPTI session numbers its calls afresh
    recording_since_ = 0;
  }

  // The native call stacks (with_stack) the call recorder publishes.
  stack_store& stacks() noexcept { return stacks_; }

  std::size_t staged() const noexcept { return api_.calls.size() + staged_.size() + event_records_.size() + collectives_.size(); }

 private:
  // One take() under way: the window, its calls, and the store's names as
  // `out` numbers them, each added to out the first time a record uses it.
  struct taking {
    taking(trace& o, std::uint64_t from, std::uint64_t to, const tick_converter& c, window_calls w, const string_table& names)
        : out(o),
          start(from),
          end(to),
          clock(c),
          calls(std::move(w)),
          first_call(std::uint32_t(o.api_calls.size())),
          staged_names(names),
          out_names(names.size(), no_index) {}

    name_id name(name_id staged) {
      if (out_names[staged] == no_index) out_names[staged] = out.names.intern(staged_names.str(staged));
      return out_names[staged];
    }
    // The correlation id the trace shows for a record of call `id` at
    // position `pos` (no_index: none of the window's): a folded call's
    // records belong to the outer call.
    std::uint32_t shown(std::uint32_t pos, std::uint32_t id) const {
      return pos != no_index ? out.api_calls[first_call + pos].correlation : id;
    }

    trace& out;
    const std::uint64_t start, end;
    const tick_converter& clock;
    window_calls calls;
    const std::uint32_t first_call;  // out.api_calls[first_call + pos] is calls.kept[pos]'s call
    // By position: 1 + the kind of GPU work the call still owes (kernel, memcpy, memset), 0 none.
    std::vector<std::uint8_t> owed;
    const string_table& staged_names;
    std::vector<name_id> out_names;  // staged name id -> out's, no_index until used
  };

  // The window's calls into out.api_calls, in the order select_window_calls()
  // gave them, and the calls after the window kept. Returns the later calls'
  // correlation ids: their GPU records stay.
  std::vector<std::uint32_t> take_calls(taking& t) {
    trace& out = t.out;
    const window_calls& w = t.calls;
    std::vector<std::uint32_t> kinds(call_kinds_.size(), no_index);
    const auto kind_in_out = [&](std::uint16_t store_kind) {
      std::uint32_t& k = kinds[store_kind];
      if (k == no_index) {
        call_kind shown = call_kinds_[store_kind].kind;
        shown.name = t.name(shown.name);
        k = out.add_call_kind(shown);  // the store has fewer than 2^16 kinds, so out's first window does
      }
      return std::uint16_t(k);
    };
    // Ticks to epoch ns, the kind into out's table: done once the calls are
    // in call order, which the sort compares in ticks and store kinds.
    const auto finish = [&](api_call& c) {
      c.start_ns = t.clock.to_epoch_ns(c.start_ns);
      c.end_ns = std::max(c.start_ns, t.clock.to_epoch_ns(c.end_ns));
      c.kind = kind_in_out(c.kind);
    };
    // The window's calls are copied in storage order as their chunks are
    // freed, then put in call order unless storage order was that already
    // (as it is for one thread), so that out.api_calls[first_call + pos] is
    // w.kept[pos].
    out.api_calls.reserve(out.api_calls.size() + w.kept.size());
    populating_appender<api_call> calls_out(out.api_calls);
    chunked_vector<staged_call> later_api;
    t.owed.assign(w.kept.size(), 0);
    std::vector<std::uint32_t> later_ids;
    std::size_t index = 0;
    api_.calls.consume([&](const staged_call& staged) {
      const std::size_t i = index++;
      if (staged.start_ns > t.end) {
        later_api.push_back(staged);
        later_ids.push_back(staged.correlation);
        if (staged.folded_offset) later_ids.push_back(staged.folded_correlation());
        return;
      }
      const std::uint32_t pos = w.owner.find(staged.correlation);
      if (pos == no_index || w.kept[pos] != i) return;  // before the window, or folded into a kept call
      const staged_kind& k = call_kinds_[staged.kind];
      if (k.expects_gpu_record && staged.return_value == 0) t.owed[pos] = std::uint8_t(1 + std::uint8_t(k.work));
      api_call c{staged};  // finish() makes its times epoch nanoseconds and its kind the trace's
      if (w.in_order) finish(c);
      calls_out.push_back(c);
    });
    api_.calls = std::move(later_api);
    if (!w.in_order) {
      std::sort(out.api_calls.begin() + t.first_call, out.api_calls.end(), [&](const api_call& x, const api_call& y) {
        return call_order(x, call_kinds_[x.kind].kind.domain, y, call_kinds_[y.kind].kind.domain);
      });
      for (auto c = out.api_calls.begin() + t.first_call; c != out.api_calls.end(); ++c) finish(*c);
    }
    return later_ids;
  }

  // The window's GPU records into out.gpu; of the others, those a later
  // window may take stay (stays_for_later), the rest go.
  void take_gpu(taking& t, std::vector<std::uint32_t> later_ids) {
    trace& out = t.out;
    const window_calls& w = t.calls;
    std::vector<std::uint32_t> configs(staged_.kernel_configs().size(), no_index);
    std::vector<std::uint32_t> lanes(staged_.lanes().size(), no_index);
    std::unordered_map<gpu_lane, std::uint32_t, gpu_lane_hash> out_lanes;
    for (std::uint32_t i = 0; i < out.gpu_lanes.size(); ++i) out_lanes.emplace(out.gpu_lanes[i], i);
    // A sync's lane has its device once a kernel or copy showed the context's.
    const auto lane_in_out = [&](std::uint32_t store_lane) {
      std::uint32_t& l = lanes[store_lane];
      if (l == no_index) {
        gpu_lane shown = staged_.lanes()[store_lane];
        if (shown.device == staged_activities::unknown_device) shown.device = staged_.device_of_context(shown.context);
        auto [it, added] = out_lanes.try_emplace(shown, std::uint32_t(out.gpu_lanes.size()));
        if (added) out.gpu_lanes.push_back(shown);
        l = it->second;
      }
      return l;
    };
    // The GPU records of the later calls, and of the calls folded into them, stay.
    std::sort(later_ids.begin(), later_ids.end());
    const std::size_t later_calls = later_ids.size();
    for (const auto& [inner, outer] : api_.folded)
      if (std::binary_search(later_ids.begin(), later_ids.begin() + std::ptrdiff_t(later_calls), outer))
        later_ids.push_back(inner);
    std::sort(later_ids.begin(), later_ids.end());
    // The newest call ever left out for starting before its window: an unknown
    // id at or below it is such a call's (or one never recorded between windows).
    newest_left_out_ = std::max(newest_left_out_, discarding_ && !w.owner.empty() ? w.owner.highest() : w.newest_before);
    // Reserving every staged record costs address space, not memory: pages
    // are touched as records are written, and staged chunks freed as read.
    out.gpu.reserve(out.gpu.size() + staged_.gpu.size());
    populating_appender<gpu_activity> gpu_out(out.gpu);
    // Every call that started before it is staged: GPU work of an unknown call older than it has no call to wait for.
    std::uint64_t call_horizon = drained_at_;
    for (const std::uint64_t r : running_calls_) call_horizon = std::min(call_horizon, r);
    std::vector<std::uint64_t> lane_busy_until;  // by out lane: the latest end of the work taken on it so far
    event_wait_resolver resolve_wait(event_ids_);
    if (!staged_.waited_events.empty())
      resolve_wait.add_window_records(event_records_, t.start, t.end,
                                      [&](std::uint32_t id) { return t.shown(w.owner.find(id), id); });
    chunked_vector<staged_gpu> later;
    chunked_vector<std::uint64_t> later_bytes, later_waited;
    staged_.gpu.consume([&](const staged_gpu& staged) {
      const std::uint32_t pos = w.owner.find(staged.correlation);
      const bool unlinked_in_window = staged.correlation == 0 && staged.start_ns >= t.start && staged.start_ns <= t.end;
      if (pos == no_index && !unlinked_in_window) {
        if (!stays_for_later(staged, t, later_ids, call_horizon)) return;
        staged_gpu kept = staged;
        if (staged_.moves_bytes(staged)) {
          kept.details = std::uint32_t(later_bytes.size());
          later_bytes.push_back(staged_.bytes[staged.details]);
        } else if (staged_.waits_for_event(staged)) {
          kept.details = std::uint32_t(later_waited.size());
          later_waited.push_back(staged_.waited_events[staged.details]);
        }
        later.push_back(kept);
        return;
      }
      const gpu_form& form = staged_.form(staged);
      if (pos != no_index) t.owed[pos] = 0;
      gpu_activity a;
      a.name = t.name(form.name);
      a.correlation = t.shown(pos, staged.correlation);
      a.lane = lane_in_out(staged.lane);
      if (a.lane >= lane_busy_until.size()) lane_busy_until.resize(std::size_t(a.lane) + 1, 0);
      if (form.timing_unknown) {
        // No earlier than its launch returned, nor than what its stream ran before it; 0 ns.
        const std::uint64_t launched = pos != no_index ? out.api_calls[t.first_call + pos].end_ns : 0;
        a.start_ns = a.end_ns = std::max(launched, lane_busy_until[a.lane]);
        a.flags = gpu_timing_unknown;
      } else {
        a.start_ns = t.clock.to_epoch_ns(staged.start_ns);
        a.end_ns = std::max(a.start_ns, t.clock.to_epoch_ns(staged.end_ns));
      }
      // A sync record's times are its call's, on the CPU: not work the stream ran.
      if (form.kind != gpu_kind::sync) lane_busy_until[a.lane] = std::max(lane_busy_until[a.lane], a.end_ns);
      a.kind = form.kind;
      a.subkind = form.subkind;
      if (staged_.moves_bytes(staged)) {
        out.set_bytes(a, staged_.bytes[staged.details]);
      } else if (form.kind == gpu_kind::sync) {
        if (staged.details != no_index) out.set_wait(a, resolve_wait(staged_.waited_events[staged.details], staged.start_ns));
      } else if (staged.details != no_index) {
        std::uint32_t& config = configs[staged.details];
        if (config == no_index) {
          config = std::uint32_t(out.kernels.size());
          out.kernels.push_back(staged_.kernel_configs()[staged.details]);
        }
        a.details = config;
      }
      gpu_out.push_back(a);
    });
    staged_.gpu = std::move(later);
    staged_.bytes = std::move(later_bytes);
    staged_.waited_events = std::move(later_waited);
  }

  // A GPU record of no call of the window (nor one without a call that ran in
  // it): its call's later, or not staged yet, which only a record newer than
  // the call horizon can wait for (it stays); its call was made before the
  // window or the recording, or never recorded (it goes, counted in the
  // window's edges where it ran in the window).
  bool stays_for_later(const staged_gpu& g, const taking& t, const std::vector<std::uint32_t>& later_ids,
                       std::uint64_t call_horizon) const {
    window_edges& edges = t.out.meta.edges;
    const std::uint32_t id = g.correlation;
    const bool sync = staged_.form(g).kind == gpu_kind::sync;
    const std::size_t kind = std::size_t(staged_.form(g).kind);
    if (id == 0) return g.start_ns > t.end;
    if (std::binary_search(later_ids.begin(), later_ids.end(), id) || (g.start_ns >= call_horizon && g.start_ns != 0))
      return true;
    if (id <= newest_left_out_ || id < first_recorded_id_) {
      if (!sync && g.end_ns >= t.start && g.start_ns <= t.end) ++edges.launched_before[kind];
    } else if (!sync && g.start_ns <= t.end) {
      ++edges.gpu_work_without_call[kind];
    } else {
      return !sync;  // after the window: a later window's to count
    }
    return false;
  }

  // The NVTX ranges that started in the window, cut at its end; later ones stay.
  void take_nvtx_ranges(taking& t) {
    std::vector<cpu_span> later_ranges;
    for (const cpu_span& r : staged_.nvtx_ranges) {
      if (r.start_ns > t.end) {
        later_ranges.push_back(r);
      } else if (r.start_ns >= t.start) {
        cpu_span span = r;
        span.start_ns = t.clock.to_epoch_ns(r.start_ns);
        span.end_ns = std::max(span.start_ns, t.clock.to_epoch_ns(std::min(r.end_ns, t.end)));
        span.name = t.name(r.name);
        t.out.spans.push_back(span);
      }
    }
    staged_.nvtx_ranges.swap(later_ranges);
  }

  // The NCCL calls made in the window; later ones stay.
  void take_collectives(taking& t) {
    std::vector<collective_call> later_collectives;
    for (const collective_call& c : collectives_) {
      if (c.ts_ns > t.end) {
        later_collectives.push_back(c);
      } else if (c.ts_ns >= t.start) {
        t.out.collectives.push_back(c);
        t.out.collectives.back().ts_ns = t.clock.to_epoch_ns(c.ts_ns);
      }
    }
    collectives_.swap(later_collectives);
  }

  // CUPTI's overhead, cut to the window.
  void take_overhead(taking& t) {
    std::vector<overhead_span> later_overhead;
    for (const overhead_span& o : staged_.overhead) {
      if (o.end_ns < t.start) continue;
      if (o.start_ns > t.end) {
        later_overhead.push_back(o);
        continue;
      }
      overhead_span s;
      s.start_ns = t.clock.to_epoch_ns(std::max(o.start_ns, t.start));
      s.end_ns = std::max(s.start_ns, t.clock.to_epoch_ns(std::min(o.end_ns, t.end)));
      s.name = t.name(o.name);
      t.out.overhead.push_back(s);
    }
    staged_.overhead.swap(later_overhead);
  }

  // The window's allocations and frees, in time order, with the memory in
  // use after each; those before it count towards the totals only.
  void take_memory(taking& t) {
    std::vector<staged_memory>& memory = staged_.memory;
    if (memory.empty()) return;
    std::stable_sort(memory.begin(), memory.end(),
                     [](const staged_memory& a, const staged_memory& b) { return a.ticks < b.ticks; });
    std::size_t taken = 0;
    for (; taken < memory.size() && memory[taken].ticks <= t.end; ++taken) {
      const staged_memory& r = memory[taken];
      memory_event e;
      if (!ledger_.apply(r, e) || r.ticks < t.start) continue;
      e.ts_ns = t.clock.to_epoch_ns(r.ticks);
      // A driver call's record belongs to the runtime call it was folded into.
      const std::uint32_t pos = r.correlation ? t.calls.owner.find(r.correlation) : no_index;
      e.correlation = t.shown(pos, r.correlation);
      if (pos != no_index) {
        const api_call& call = t.out.api_calls[t.first_call + pos];
        if (is_virtual_memory_call(t.out.names.str(t.out.name_of(call)))) e.flags |= memory_virtual;
      }
      t.out.memory.push_back(e);
    }
    memory.erase(memory.begin(), memory.begin() + std::ptrdiff_t(taken));
  }

  // What window_complete() found for the window it passed, to be taken next.
  struct checked_window {
    std::uint64_t start = 0, end = 0;
    std::uint64_t api_changes = 0;  // api_changes_ then
    window_calls calls;
  };

  // The window's calls: window_complete()'s selection if no API record
  // arrived since, else selected anew.
  window_calls selection(std::uint64_t start, std::uint64_t end) {
    std::optional<checked_window> checked = std::move(checked_);
    checked_.reset();
    if (checked && checked->start == start && checked->end == end && checked->api_changes == api_changes_)
      return std::move(checked->calls);
    return select_window_calls(api_, start, end);
  }

  // Records past CUPROF_MAX_RECORDS are counted, reported with the window's dropped records.
  bool at_cap() {
    if (staged() < max_staged_) return false;
    ++over_cap_;
    return true;
  }

  // The record CUPTI's SYNCHRONIZATION activity would write, made from the
  // call: that activity costs every runtime call a few hundred ns, shown or
  // not (docs/performance.md), and its times are the call's anyway.
  void add_sync(const call_record& r) {
    staged_gpu g = staged_.gpu_record(r.start, r.end, staged_activities::unknown_device, r.context, r.stream, r.correlation);
    g.form = staged_.form_index(staged_.names.intern(sync_kind_name(r.sync_kind)), gpu_kind::sync, r.sync_kind);
    if (r.event) staged_.stage_wait(g, r.event);  // an event sync or a stream's wait: resolved when taken
    staged_.gpu.push_back(g);
  }

  call_kinds call_kinds_;
  std::size_t max_staged_;
  staged_calls api_;
  staged_activities staged_;                                    // the GPU records, NVTX ranges, overhead, memory records
  activity_converter activities_;                               // CUPTI's records -> staged_
  std::vector<staged_event_record> event_records_;              // cudaEventRecord and the like, not yet taken
  std::unordered_map<std::uint64_t, std::uint32_t> event_ids_;  // event handle -> its number (event_wait::event)
  std::vector<collective_call> collectives_;                    // NCCL calls, ticks
  memory_ledger ledger_;                                        // the memory in use, from all taken so far
  std::uint64_t drained_at_ = ~std::uint64_t(0);                // the calls' last drain (set_call_horizon)
  std::vector<std::uint64_t> running_calls_;                    // the starts of the calls in progress then
  std::uint64_t recording_since_ = 0;                           // note_recording()'s
  std::uint32_t first_recorded_id_ = 0;                         // the lowest call id staged since then; 0 without a recorder
  std::uint32_t newest_left_out_ = 0;                           // the newest call id a take() left out as before its window
  std::uint64_t api_changes_ = 0;  // API records added: a checked window's selection is stale after one
  std::optional<checked_window> checked_;
  std::uint64_t dropped_ = 0;
  std::uint64_t over_cap_ = 0;
  std::uint64_t dropped_calls_ = 0;
  stack_store stacks_;
  bool discarding_ = false;  // inside discard_before()
};

}  // namespace cuprof::detail::cupti
