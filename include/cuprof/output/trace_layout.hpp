// The Chrome trace's layout, computed before its text (trace_event_writer.hpp):
// the document's items cut into blocks, and what their events need from each
// other (flow ids, lanes, escaped names, the base time, metric values kept).
#pragma once

#include "chrome_trace.hpp"
#include "json_text.hpp"
#include "stack_summary.hpp"
#include "../model/event.hpp"
#include "../model/gpu_metrics.hpp"
#include "../model/occupancy.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cuprof::detail {

// What the text of an event depends on beyond the event itself, computed once
// before formatting (ids of flows, lanes, names escaped, ...), so that any
// block of events formats alone and blocks concatenated in order are the
// document. The events are items in order -- CPU spans, API calls (each with
// its v1 flow starts), GPU annotations, GPU records (each with its v1 flow
// end), CUPTI overhead, memory events (each with its counter), GPU metric
// samples (a counter per metric), GPU by GPU -- cut into blocks of
// `items_per_block`; the first block also holds the header and the metadata
// events, the last the closing lines.
struct chrome_trace_layout {
  // About 512 KiB of JSON at the 190-290 bytes of a launch's call or kernel
  // with its flow: one gzip member, one write. Each worker's block is
  // resident on top of the trace while it is written (a 1 M-launch burst's
  // export peaked 5 MB higher with blocks twice the size).
  static constexpr std::size_t default_items_per_block = 2048;

  chrome_trace_layout(const trace& trace, std::string name, std::size_t block_items = default_items_per_block,
                      export_options export_with = {})
      : t(trace), trace_name(std::move(name)), items_per_block(std::max<std::size_t>(1, block_items)), options(export_with) {
    escaped_names.reserve(t.names.size());
    for (std::size_t i = 0; i < t.names.size(); ++i) escaped_names.push_back(json_escaped(t.names.str(name_id(i))));
    scan_gpu_records();
    scan_gpu_metrics();
    for (std::uint32_t i = 0; i < t.collectives.size(); ++i)
      if (t.collectives[i].span < t.spans.size()) {
        if (span_collective.empty()) span_collective.assign(t.spans.size(), no_index);
        span_collective[t.collectives[i].span] = i;
      }
    base_ns = base_time();
    overhead_lane = overhead_lanes();
    if (!t.stacks.empty()) lay_out_stacks();
    items = t.spans.size() + t.api_calls.size() + t.gpu_annotations.size() + t.gpu.size() + t.overhead.size() + t.memory.size();
    for (const gpu_metric_series& s : t.gpu_metrics) items += s.size();
  }
  chrome_trace_layout(const chrome_trace_layout&) = delete;
  chrome_trace_layout& operator=(const chrome_trace_layout&) = delete;

  // A GPU record's lane: its stream, or its stream's sync lane.
  std::uint32_t gpu_tid(const gpu_activity& g) const {
    const std::uint32_t stream = t.lane_of(g).stream;
    return g.kind == gpu_kind::sync ? sync_tid_offset + stream : stream;
  }

  std::size_t block_count() const { return items == 0 ? 1 : (items - 1) / items_per_block + 1; }

  // A kernel's estimated occupancy on its device. Launch configurations are
  // shared by many launches: one estimate each, per device for mixed GPUs,
  // kept by whichever block computes it first (blocks racing on an entry
  // store the same value).
  int occupancy_percent(const gpu_activity& g) const {
    std::atomic<std::uint64_t>& entry = occupancy[g.details];
    std::uint64_t known = entry.load(std::memory_order_relaxed);  // device << 32 | percent + 1; 0: none yet
    const std::uint32_t device = t.lane_of(g).device;
    if (known == 0 || std::uint32_t(known >> 32) != device) {
      const int percent = estimate_occupancy(t.kernels[g.details], find_device(t, device)).percent;
      known = std::uint64_t(device) << 32 | std::uint32_t(percent + 1);
      entry.store(known, std::memory_order_relaxed);
    }
    return int(std::uint32_t(known)) - 1;
  }

  const trace& t;
  const std::string trace_name;
  const std::size_t items_per_block;
  const export_options options;
  bool lean() const { return options.detail == trace_detail::lean; }
  std::size_t items = 0;
  std::uint64_t base_ns = 0;
  std::vector<std::string> escaped_names;       // each name escaped once per document
  std::vector<std::uint32_t> several_contexts;  // devices with work in more than one context
  // One arrow per GPU record a call with a flow caused, by the record's flow
  // ordinal (its call's records before it). The first (ordinal 0) is flow v2:
  // "bind_id" with "flow_out" on the call's slice and "flow_in" on the
  // record's, no event of its own. A slice carries one bind_id, so the others
  // (a graph launch's further nodes) are v1 "s"/"f" event pairs, with id
  // ordinal << 32 | correlation.
  // A call's v2 bind_id: its correlation id, plus 2^32 where the document also
  // has v1 flows. Perfetto numbers v1 flows 0, 1, 2, ... in the id space of
  // the bind_ids (FlowTracker::GetFlowIdForV1Event): a bind_id below the number
  // of v1 flows would cross arrows.
  std::uint64_t bind_id(std::uint32_t correlation) const { return bind_id_base | correlation; }
  // Its call's GPU records for an API call, and its flow ordinal for a GPU
  // record. Nearly every call has at most one record: the exceptions are kept
  // apart, so that a million launches add no per-record arrays to the export.
  std::uint32_t records_of_call(std::size_t call) const {
    if (!call_has_record[call]) return 0;
    const auto more = records_of_busy_call.find(std::uint32_t(call));
    return more == records_of_busy_call.end() ? 1 : more->second;
  }
  std::uint32_t flow_ordinal(std::size_t record) const {
    const auto later = later_ordinal.find(std::uint32_t(record));
    return later == later_ordinal.end() ? 0 : later->second;
  }
  std::uint64_t bind_id_base = 0;            // 0, or 2^32 with v1 flows
  std::vector<std::uint32_t> overhead_lane;  // per overhead record
  std::set<std::uint32_t> devices;           // GPU processes, and lanes: {device, tid}
  std::set<std::pair<std::uint32_t, std::uint32_t>> gpu_lanes;
  mutable std::vector<std::atomic<std::uint64_t>> occupancy = std::vector<std::atomic<std::uint64_t>>(t.kernels.size());
  std::vector<std::uint32_t> span_collective;  // empty, or per span: its NCCL call in t.collectives, or no_index
  // GPU metrics: each series' labels escaped, and per GPU lane its device's
  // series in t.gpu_metrics, or no_index (empty without metrics).
  std::vector<std::vector<std::string>> metric_labels;
  std::vector<std::uint32_t> lane_metrics;
  // Per series, sample-major like its values: 1 where a counter event is written.
  std::vector<std::vector<std::uint8_t>> metric_written;
  // Per series, its gaps and those its samples' times show (unlisted_gaps), in time order.
  std::vector<std::vector<gpu_metric_gap>> metric_gaps;
  std::uint32_t metric_series(const gpu_activity& g) const {
    return g.lane < lane_metrics.size() ? lane_metrics[g.lane] : no_index;
  }
  // with_stack: each distinct stack once, as the Trace Event Format's
  // stackFrames, a tree of frames (a node: a frame and the node of its
  // caller), and per stack in t.stacks the node of its innermost frame (the
  // calls' "sf") and the JSON array its calls' "Call stack" arg shows
  // (stack_summary: Perfetto reads no stackFrames).
  struct stack_frame_node {
    name_id frame;
    std::uint32_t parent;  // a node's index + 1; 0: the outermost frame
  };
  std::vector<stack_frame_node> stack_nodes;
  std::vector<std::uint32_t> stack_leaf;  // per stack: its innermost frame's node index + 1
  std::vector<std::string> stack_shown;   // per stack: ["frame",...], escaped
  // The NCCL call of a span or of a GPU record, or null.
  const collective_call* collective_of_span(std::size_t span) const {
    return span < span_collective.size() && span_collective[span] != no_index ? &t.collectives[span_collective[span]] : nullptr;
  }
  const collective_call* collective_of_gpu(std::size_t record) const {
    return record < t.gpu_collectives.size() && t.gpu_collectives[record] != no_index ? &t.collectives[t.gpu_collectives[record]]
                                                                                      : nullptr;
  }

 private:
  std::vector<bool> call_has_record;                                      // per API call
  std::unordered_map<std::uint32_t, std::uint32_t> records_of_busy_call;  // calls with several records
  std::unordered_map<std::uint32_t, std::uint32_t> later_ordinal;         // their records after the first

  // One pass over the GPU records for what their events need from the others.
  void scan_gpu_records() {
    struct contexts {
      std::uint32_t device, first;
      bool several;
    };
    std::vector<contexts> seen;  // a few devices: a linear search
    call_has_record.assign(t.api_calls.size(), false);
    for (const device_info& d : t.meta.devices) devices.insert(std::uint32_t(d.id));
    std::pair<std::uint32_t, std::uint32_t> last_lane{0, 0};
    for (std::size_t i = 0; i < t.gpu.size(); ++i) {
      const gpu_activity& g = t.gpu[i];
      if (g.api != no_index) {
        if (!call_has_record[g.api]) {
          call_has_record[g.api] = true;
        } else {  // a further record of its call (a graph launch's next node): a v1 flow
          const std::uint32_t ordinal = records_of_busy_call.try_emplace(g.api, 1).first->second++;
          later_ordinal.emplace(std::uint32_t(i), ordinal);
          if (t.kind_of(t.api_calls[g.api]).has_flow) bind_id_base = std::uint64_t(1) << 32;
        }
      }
      const gpu_lane& where = t.lane_of(g);
      const auto d = std::find_if(seen.begin(), seen.end(), [&](const contexts& c) { return c.device == where.device; });
      if (d == seen.end()) {
        seen.push_back({where.device, where.context, false});
        devices.insert(where.device);
      } else {
        d->several |= d->first != where.context;
      }
      const std::pair<std::uint32_t, std::uint32_t> lane{where.device, gpu_tid(g)};
      if (i == 0 || lane != last_lane) gpu_lanes.insert(lane);  // runs of one lane: one set look-up each
      last_lane = lane;
    }
    for (const contexts& c : seen)
      if (c.several) several_contexts.push_back(c.device);
  }

  // The GPUs sampled have a process each, lanes or not.
  void scan_gpu_metrics() {
    if (t.gpu_metrics.empty()) return;
    for (const gpu_metric_series& s : t.gpu_metrics) {
      devices.insert(s.device);
      std::vector<std::string>& labels = metric_labels.emplace_back();
      for (const gpu_metric& m : s.metrics) labels.push_back(json_escaped(m.label));
      metric_written.push_back(changed_metric_values(s));
      std::vector<gpu_metric_gap>& gaps = metric_gaps.emplace_back(s.gaps);
      for (const gpu_metric_gap& g : unlisted_gaps(s)) gaps.push_back(g);
      std::sort(gaps.begin(), gaps.end(),
                [](const gpu_metric_gap& a, const gpu_metric_gap& b) { return a.start_ns < b.start_ns; });
    }
    lane_metrics = metric_series_of_lanes(t);
  }

  // Which values get a counter event: one that moved more than a small step
  // from the value last written on its track, and every value of a sample
  // that begins or ends a stretch without gaps (where a reader's held values
  // start and stop). A viewer draws a counter as steps held until the next
  // event, so the values left out change the picture by less than the step:
  // half a point of a percentage (under a pixel of a track's height), else
  // 0.5 % of the metric's largest value. An idle or steady GPU's samples were
  // most of a metrics trace's bytes.
  static std::vector<std::uint8_t> changed_metric_values(const gpu_metric_series& s) {
    const std::size_t n = s.size(), nm = s.metrics.size();
    std::vector<std::uint8_t> written(n * nm, 0);
    std::vector<double> step(nm, 0.0), last(nm, __builtin_nan(""));
    for (std::size_t m = 0; m < nm; ++m) {
      double top = 0;
      for (std::size_t i = 0; i < n; ++i)
        if (std::isfinite(s.value(i, m))) top = std::max(top, std::fabs(s.value(i, m)));
      step[m] = is_percentage(s.metrics[m]) ? 0.5 : 0.005 * top;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const bool edge = i == 0 || i + 1 == n || samples_apart(s, i) || samples_apart(s, i + 1);
      for (std::size_t m = 0; m < nm; ++m) {
        const double v = s.value(i, m);
        if (!std::isfinite(v)) continue;
        if (edge || !(std::fabs(v - last[m]) <= step[m])) {
          written[i * nm + m] = 1;
          last[m] = v;
        }
      }
    }
    return written;
  }

  void lay_out_stacks() {
    std::map<std::pair<std::uint32_t, name_id>, std::uint32_t> node_of;  // (caller's node, frame) -> node + 1
    stack_leaf.reserve(t.stacks.size());
    stack_shown.reserve(t.stacks.size());
    for (const call_stack& s : t.stacks) {
      std::uint32_t node = 0;
      std::vector<std::string_view> frames;
      for (std::uint32_t k = s.frame_count; k-- > 0;) {  // outermost first
        const name_id f = t.stack_frames[s.first_frame + k];
        auto [it, added] = node_of.try_emplace({node, f}, std::uint32_t(stack_nodes.size() + 1));
        if (added) stack_nodes.push_back({f, node});
        node = it->second;
      }
      for (std::uint32_t k = 0; k < s.frame_count; ++k) frames.push_back(t.names.str(t.stack_frames[s.first_frame + k]));
      stack_leaf.push_back(node);
      std::string shown = "[";
      for (const std::string& entry : stack_summary(frames)) {
        if (shown.size() > 1) shown += ',';
        shown += '"';
        append_json_escaped(shown, entry);
        shown += '"';
      }
      stack_shown.push_back(shown + "]");
    }
  }

  std::uint64_t base_time() const {
    // A window start of 0 is unset (a hand-made trace, or one read from a file
    // without a window): as the base it would make every ts an epoch time,
    // beyond the 1e15 us the reader takes.
    std::uint64_t lo = t.meta.window_start_ns ? t.meta.window_start_ns : UINT64_MAX;
    for (const cpu_span& s : t.spans) lo = std::min(lo, s.start_ns);
    for (const api_call& a : t.api_calls) lo = std::min(lo, a.start_ns);
    for (const gpu_activity& g : t.gpu) lo = std::min(lo, g.start_ns);
    for (const gpu_metric_series& s : t.gpu_metrics)
      if (s.size()) lo = std::min(lo, s.start_ns[0]);
    if (lo == UINT64_MAX)  // CUPTI overhead records alone
      for (const overhead_span& o : t.overhead) lo = std::min(lo, o.start_ns);
    if (lo == UINT64_MAX) return 0;  // nothing timed
    if (lo > 0) lo -= 1;             // room for the 1 ns lead of GPU annotations
    return lo - lo % base_rounding_ns(t.meta.world_size);
  }

  // Whole seconds, as Kineto rounds its base. A rank of a multi-process job
  // rounds down to the UTC day instead, so that every rank of the job writes
  // the same base: HTA aligns ranks by their smallest "ts" and ignores the
  // base, and rank windows starting a second apart would otherwise be shifted
  // by a second against each other. "ts" then stays below 8.64e10 us, which a
  // double holds to a few picoseconds.
  static std::uint64_t base_rounding_ns(int world_size) { return world_size > 1 ? 86400ull * 1000000000ull : 1000000000ull; }

  // CUPTI's overhead records from several threads overlap: each goes on the
  // first lane of the overhead process that is free at its start.
  std::vector<std::uint32_t> overhead_lanes() const {
    std::vector<std::size_t> order(t.overhead.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return t.overhead[a].start_ns < t.overhead[b].start_ns; });
    std::vector<std::uint32_t> lane(order.size(), 0);
    std::vector<std::uint64_t> busy_until;
    for (std::size_t i : order) {
      std::uint32_t l = 0;
      while (l < busy_until.size() && busy_until[l] > t.overhead[i].start_ns) ++l;
      if (l == busy_until.size()) busy_until.push_back(0);
      busy_until[l] = t.overhead[i].end_ns;
      lane[i] = l;
    }
    return lane;
  }
};

}  // namespace cuprof::detail
