// The Chrome trace writer: formats a trace as Kineto-flavoured JSON
// (docs/trace-format.md) in blocks, formatted (and compressed, for a ".gz")
// on one thread per core and written in order. Inline, for tests and
// benchmarks to include anywhere; the export functions that run it are the
// runtime's (runtime/chrome_trace_impl.hpp).
#pragma once

#include "chrome_trace.hpp"
#include "file_sink.hpp"
#include "json_text.hpp"
#include "trace_schema.hpp"
#include "../model/occupancy.hpp"
#include "../base/log.hpp"
#include "../model/attribution.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cuprof {

namespace detail {

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

// Formats blocks of a layout into its buffer: one per thread.
class chrome_trace_writer {
 public:
  explicit chrome_trace_writer(const chrome_trace_layout& layout)
      : l_(layout), t_(layout.t), base_ns_(layout.base_ns), out_(2 << 20) {}

  // Appends block k of the document to out(); returns the number of trace events in it.
  std::size_t write_block(std::size_t k) {
    events_ = 0;
    first_event_ = k == 0;  // block 0 always has events: the process's metadata
    if (k == 0) {
      header();
      metadata_events();
    }
    const std::size_t begin = k * l_.items_per_block, end = begin + std::min(l_.items_per_block, l_.items - begin);
    std::size_t section = 0;  // the current section's first item
    // The part of items [begin, end) in the next section, of n items, as indices in it.
    const auto part = [&](std::size_t n) {
      const std::pair<std::size_t, std::size_t> r{std::clamp(begin, section, section + n) - section,
                                                  std::clamp(end, section, section + n) - section};
      section += n;
      return r;
    };
    for (auto [i, e] = part(t_.spans.size()); i < e; ++i) span_event(t_.spans[i]);
    for (auto [i, e] = part(t_.api_calls.size()); i < e; ++i) api_call_event(i);
    for (auto [i, e] = part(t_.gpu_annotations.size()); i < e; ++i) annotation_event(t_.gpu_annotations[i]);
    for (auto [i, e] = part(t_.gpu.size()); i < e; ++i) gpu_event(i);
    for (auto [i, e] = part(t_.overhead.size()); i < e; ++i) overhead_event(i);
    for (auto [i, e] = part(t_.memory.size()); i < e; ++i) memory_events(t_.memory[i]);
    for (std::size_t series = 0; series < t_.gpu_metrics.size(); ++series)
      for (auto [i, e] = part(t_.gpu_metrics[series].size()); i < e; ++i) metric_events(series, i);
    if (k + 1 == l_.block_count()) {
      out_ += "\n  ],\n  \"traceName\":\"";
      append_json_escaped(out_, l_.trace_name);
      out_ += "\"\n}\n";
    }
    return events_;
  }

  text_buffer& out() { return out_; }

 private:
  // The small pieces of every event are forced inline: GCC leaves them out of
  // line, and inlined, their literals and schema keys copy as constants (with
  // text_buffer's and append_int's, 13% fewer instructions per event).
  [[gnu::always_inline]] void begin_event() {
    if (first_event_) out_ += '\n';
    else out_ += ",\n";
    first_event_ = false;
    ++events_;
  }

  [[gnu::always_inline]] void ts(std::uint64_t ns) {
    out_ += "\"ts\":";
    append_us(out_, ns > base_ns_ ? ns - base_ns_ : 0);
  }

  // "key":, then ,"key": and ,"key":[x,y,z] -- members named as the schema spells them.
  [[gnu::always_inline]] void key(std::string_view k) {
    out_ += '"';
    out_ += k;
    out_ += "\":";
  }
  [[gnu::always_inline]] void next_key(std::string_view k) {
    out_ += ',';
    key(k);
  }

  void dims3(std::string_view k, const std::uint32_t (&d)[3]) {
    next_key(k);
    out_ += '[';
    append_int(out_, d[0]);
    out_ += ',';
    append_int(out_, d[1]);
    out_ += ',';
    append_int(out_, d[2]);
    out_ += ']';
  }

  void complete(std::string_view cat, const std::string& escaped_name, std::uint32_t pid, std::uint32_t tid, std::uint64_t start,
                std::uint64_t end) {
    begin_event();
    out_ += "{\"ph\":\"X\",\"cat\":\"";
    out_ += cat;
    out_ += "\",\"name\":\"";
    out_ += escaped_name;
    out_ += "\",\"pid\":";
    append_int(out_, pid);
    out_ += ",\"tid\":";
    append_int(out_, tid);
    out_ += ',';
    ts(start);
    out_ += ",\"dur\":";
    append_us(out_, end > start ? end - start : 0);
  }

  // A v2 flow's members, after the slice's "dur": `direction` is ",\"flow_out\":true"
  // on the call, ",\"flow_in\":true" on its GPU record.
  template <std::size_t N>
  [[gnu::always_inline]] void bind(std::uint32_t correlation, const char (&direction)[N]) {
    out_ += ",\"bind_id\":";
    append_int(out_, l_.bind_id(correlation));
    out_ += direction;
  }

  // A v1 flow event: 's' on the call, 'f' on the GPU record.
  void flow(char phase, std::uint64_t id, std::uint32_t pid, std::uint32_t tid, std::uint64_t at) {
    begin_event();
    out_ += "{\"ph\":\"";
    out_.push_back(phase);
    out_ += "\",\"id\":";
    append_int(out_, id);
    out_ += ",\"pid\":";
    append_int(out_, pid);
    out_ += ",\"tid\":";
    append_int(out_, tid);
    out_ += ',';
    ts(at);
    out_ += ",\"cat\":\"";
    out_ += schema::cat_flow;
    out_ += "\",\"name\":\"";
    out_ += schema::cat_flow;
    out_ += '"';
    if (phase == 'f') out_ += ",\"bp\":\"e\"}";
    else out_ += '}';
  }

  void meta_event(std::string_view name, std::uint32_t pid, std::uint32_t tid, std::string_view arg, const std::string& value,
                  bool quoted) {
    begin_event();
    out_ += "{\"name\":\"";
    out_ += name;
    out_ += "\",\"ph\":\"M\",\"ts\":0,\"pid\":";
    append_int(out_, pid);
    out_ += ",\"tid\":";
    append_int(out_, tid);
    out_ += ",\"args\":{";
    key(arg);
    if (quoted) out_ += '"';
    if (quoted) append_json_escaped(out_, value);
    else out_ += value;
    if (quoted) out_ += '"';
    out_ += "}}";
  }

  void header() {
    const trace_metadata& m = t_.meta;
    out_ += "{\n  \"schemaVersion\":1,\n  ";
    key(schema::key_device_properties);
    out_ += '[';
    for (std::size_t i = 0; i < m.devices.size(); ++i) {
      const device_info& d = m.devices[i];
      const auto number = [&](std::string_view k, auto value) {
        next_key(k);
        append_int(out_, value);
      };
      out_ += std::string_view(i ? ",\n    {" : "\n    {");
      key(schema::device_id);
      append_int(out_, d.id);
      next_key(schema::device_name);
      out_ += '"';
      append_json_escaped(out_, d.name);
      out_ += '"';
      number(schema::device_total_global_mem, d.total_global_mem);
      number(schema::device_compute_major, d.compute_major);
      number(schema::device_compute_minor, d.compute_minor);
      number(schema::device_max_threads_per_block, d.max_threads_per_block);
      number(schema::device_max_threads_per_multiprocessor, d.max_threads_per_multiprocessor);
      number(schema::device_regs_per_block, d.regs_per_block);
      number(schema::device_warp_size, d.warp_size);
      number(schema::device_shared_mem_per_block, d.shared_mem_per_block);
      number(schema::device_num_sms, d.num_sms);
      number(schema::device_regs_per_multiprocessor, d.regs_per_multiprocessor);
      number(schema::device_shared_mem_per_block_optin, d.shared_mem_per_block_optin);
      number(schema::device_shared_mem_per_multiprocessor, d.shared_mem_per_multiprocessor);
      if (d.clock_rate_khz) number(schema::device_clock_rate, d.clock_rate_khz);
      if (d.memory_clock_rate_khz) number(schema::device_memory_clock_rate, d.memory_clock_rate_khz);
      if (d.memory_bus_width) number(schema::device_memory_bus_width, d.memory_bus_width);
      out_ += "}";
    }
    out_ += std::string_view(m.devices.empty() ? "],\n  " : "\n  ],\n  ");
    key(schema::key_cupti_version);
    append_int(out_, m.cupti_version);
    out_ += ",\n  ";
    key(schema::key_cuda_runtime_version);
    append_int(out_, m.cuda_runtime_version);
    out_ += ",\n  ";
    key(schema::key_cuda_driver_version);
    append_int(out_, m.cuda_driver_version);
    out_ += ",\n  \"trace_id\":\"";
    append_int(out_, m.pid);
    out_ += '-';
    append_int(out_, m.window_start_ns);
    out_ += "\",\n  ";
    key(schema::key_host_name);
    out_ += '"';
    append_json_escaped(out_, m.host_name);
    // HTA finds the rank with a regex that wants the space after the colon,
    // and stops reading metadata at traceEvents: keep this before them.
    out_ += "\",\n  ";
    key(schema::key_distributed_info);
    out_ += '{';
    key(schema::key_backend);
    out_ += '"';
    append_json_escaped(out_, m.distributed_backend.empty() ? std::string_view("none") : m.distributed_backend);
    out_ += "\",";
    key(schema::key_rank);
    out_ += ' ';
    append_int(out_, m.rank);
    next_key(schema::key_world_size);
    append_int(out_, m.world_size);
    if (m.communicator_count) {
      next_key(schema::key_pg_count);
      append_int(out_, m.communicator_count);
    }
    if (!m.nccl_version.empty()) {
      next_key(schema::key_nccl_version);
      out_ += '"';
      append_json_escaped(out_, m.nccl_version);
      out_ += '"';
    }
    out_ += "},\n  ";
    key(schema::key_cuprof);
    out_ += "{\"version\":\"" CUPROF_VERSION_STRING "\"";
    next_key(schema::cuprof_dropped_gpu_records);
    append_int(out_, m.dropped_gpu_records);
    next_key(schema::cuprof_dropped_cpu_events);
    append_int(out_, m.dropped_cpu_events);
    out_ += ",\"unmatched_gpu_records\":";
    append_int(out_, m.unmatched_gpu_records);
    next_key(schema::cuprof_cuda_status);
    out_ += '"';
    append_json_escaped(out_, m.cuda_status.empty() ? schema::cuda_status_on : m.cuda_status);
    out_ += '"';
    next_key(schema::cuprof_window_start_ns);
    append_int(out_, m.window_start_ns);
    next_key(schema::cuprof_window_end_ns);
    append_int(out_, m.window_end_ns);
    if (l_.lean()) {
      next_key(schema::cuprof_trace_detail);
      out_ += "\"lean\"";
    }
    window_edges_block(m.edges);
    if (!t_.gpu_metrics.empty()) gpu_metrics_block();
    out_ += "},\n  ";
    if (m.memory_recorded) {
      key(schema::key_profile_memory);
      out_ += "1,\n  ";
    }
    out_ += "\"displayTimeUnit\":\"ms\",\n  ";
    key(schema::key_base_time);
    append_int(out_, base_ns_);
    out_ += ",\n  ";
    key(schema::key_trace_events);
    out_ += '[';
  }

  // What was sampled: the period, the samples lost on every GPU together, the
  // GPUs, and each metric's CUPTI name and its label, the counters' name.
  // What the window's edges cut and what came unpaired, always written: a
  // reader tells "none" from "not counted".
  void window_edges_block(const window_edges& e) {
    next_key(schema::cuprof_window_edges);
    const auto by_kind = [&](std::string_view name, const std::array<std::uint64_t, window_edges::kinds>& n) {
      key(name);
      for (std::size_t k = 0; k < window_edges::kinds; ++k) {
        out_ += k ? ',' : '{';
        key(schema::edge_kind_names[k]);
        append_int(out_, n[k]);
      }
      out_ += "},";
    };
    out_ += '{';
    by_kind(schema::edges_calls_without_gpu_work, e.calls_without_gpu_work);
    by_kind(schema::edges_gpu_work_without_call, e.gpu_work_without_call);
    by_kind(schema::edges_launched_before, e.launched_before);
    key(schema::edges_calls_running_at_end);
    append_int(out_, e.calls_running_at_end);
    out_ += '}';
  }

  void gpu_metrics_block() {
    const std::vector<gpu_metric_series>& series = t_.gpu_metrics;
    next_key(schema::cuprof_gpu_metrics);
    out_ += '{';
    key(schema::gpu_metrics_interval_ns);
    append_int(out_, series[0].interval_ns);
    std::uint64_t dropped = 0, out_of_range = 0;
    for (const gpu_metric_series& s : series) dropped += s.dropped, out_of_range += s.out_of_range;
    next_key(schema::gpu_metrics_dropped);
    append_int(out_, dropped);
    next_key(schema::gpu_metrics_out_of_range);
    append_int(out_, out_of_range);
    next_key(schema::gpu_metrics_devices);
    out_ += '[';
    for (std::size_t i = 0; i < series.size(); ++i) {
      if (i) out_ += ',';
      append_int(out_, series[i].device);
    }
    out_ += ']';
    next_key(schema::gpu_metrics_metrics);
    out_ += '[';
    const std::vector<gpu_metric> metrics = metrics_of(series);
    for (std::size_t i = 0; i < metrics.size(); ++i) {
      out_ += std::string_view(i ? ",{" : "{");
      key(schema::gpu_metrics_name);
      out_ += '"';
      append_json_escaped(out_, metrics[i].name);
      out_ += '"';
      next_key(schema::gpu_metrics_label);
      out_ += '"';
      append_json_escaped(out_, metrics[i].label);
      out_ += "\"}";
    }
    out_ += ']';
    next_key(schema::gpu_metrics_held_values);
    out_ += "true";
    next_key(schema::gpu_metrics_alignment);
    out_ += '[';
    for (std::size_t i = 0; i < series.size(); ++i) {
      out_ += std::string_view(i ? ",{" : "{");
      key(schema::gpu_metrics_device);
      append_int(out_, series[i].device);
      next_key(schema::gpu_metrics_shift_ns);
      append_int(out_, series[i].shift_ns);
      next_key(schema::gpu_metrics_aligned);
      out_ += std::string_view(series[i].aligned ? "true}" : "false}");
    }
    out_ += ']';
    next_key(schema::gpu_metrics_gaps);
    out_ += '[';
    bool first = true;
    for (std::size_t i = 0; i < series.size(); ++i)
      for (const gpu_metric_gap& g : l_.metric_gaps[i]) {
        out_ += std::string_view(first ? "{" : ",{");
        first = false;
        key(schema::gpu_metrics_device);
        append_int(out_, series[i].device);
        out_ += ',';
        ts(g.start_ns);
        next_key(schema::gpu_metrics_gap_dur);
        append_us(out_, g.end_ns > g.start_ns ? g.end_ns - g.start_ns : 0);
        next_key(schema::gpu_metrics_gap_cause);
        out_ += '"';
        out_ += schema::gap_cause_names[std::size_t(g.cause)];
        out_ += "\"}";
      }
    out_ += "]}";
  }

  void metadata_events() {
    const trace_metadata& m = t_.meta;
    const std::string pid_str = std::to_string(m.pid);
    meta_event(schema::meta_process_name, m.pid, 0, schema::meta_name, m.process_name, true);
    meta_event("process_labels", m.pid, 0, "labels", "CPU", true);
    meta_event("process_sort_index", m.pid, 0, "sort_index", pid_str, false);
    for (const thread_info& th : m.threads) {
      std::string label = "thread " + std::to_string(th.tid) + " (" + (th.name.empty() ? m.process_name : th.name) + ")";
      meta_event(schema::meta_thread_name, m.pid, th.tid, schema::meta_name, label, true);
      meta_event("thread_sort_index", m.pid, th.tid, "sort_index", std::to_string(th.tid), false);
    }
    for (std::uint32_t d : l_.devices) {
      meta_event(schema::meta_process_name, d, 0, schema::meta_name, m.process_name, true);
      meta_event("process_labels", d, 0, "labels", "GPU " + std::to_string(d), true);
      meta_event("process_sort_index", d, 0, "sort_index", std::to_string(5000000u + d), false);
    }
    for (const auto& lane : l_.gpu_lanes) {
      const bool sync = lane.second >= sync_tid_offset;
      const std::uint32_t stream = sync ? lane.second - sync_tid_offset : lane.second;
      meta_event(schema::meta_thread_name, lane.first, lane.second, schema::meta_name,
                 "stream " + std::to_string(stream) + (sync ? " (sync)" : ""), true);
      meta_event("thread_sort_index", lane.first, lane.second, "sort_index", std::to_string(lane.second), false);
    }
    if (!t_.overhead.empty()) {
      meta_event(schema::meta_process_name, overhead_pid, 0, schema::meta_name, "CUPTI Overhead", true);
      meta_event("process_labels", overhead_pid, 0, "labels", "CUPTI Overhead", true);
      meta_event("process_sort_index", overhead_pid, 0, "sort_index", std::to_string(0x100000), false);
      const std::vector<std::uint32_t>& lanes = l_.overhead_lane;
      const std::uint32_t count = lanes.empty() ? 0 : *std::max_element(lanes.begin(), lanes.end()) + 1;
      for (std::uint32_t l = 0; l < count; ++l)
        meta_event(schema::meta_thread_name, overhead_pid, l, schema::meta_name, "overhead " + std::to_string(l), true);
    }
  }

  void span_event(const cpu_span& s) {
    complete(schema::cat_user_annotation, escaped_name(s.name), t_.meta.pid, s.tid, s.start_ns, s.end_ns);
    out_ += ",\"args\":{";
    key(schema::arg_external_id);
    append_int(out_, s.id);
    scope_args(s);
    if (const collective_call* c = l_.collective_of_span(std::size_t(&s - t_.spans.data()))) collective_args(*c);
    out_ += "}}";
  }

  void api_call_event(std::size_t i) {
    const api_call& a = t_.api_calls[i];
    const std::uint32_t pid = t_.meta.pid;
    const call_kind& kind = t_.kind_of(a);
    const std::uint32_t flows = kind.has_flow ? l_.records_of_call(i) : 0;
    complete(kind.domain == api_domain::driver ? schema::cat_cuda_driver : schema::cat_cuda_runtime, escaped_name(kind.name), pid,
             a.tid, a.start_ns, a.end_ns);
    if (flows != 0) bind(a.correlation, ",\"flow_out\":true");  // to its first record
    out_ += ",\"args\":{";
    if (a.parent != no_index) {
      key(schema::arg_external_id);
      append_int(out_, t_.spans[a.parent].id);
      out_ += ',';
    }
    key(schema::arg_correlation);
    append_int(out_, a.correlation);
    call_stack_arg(t_.stack_of(i));
    out_ += "}}";
    for (std::uint32_t k = 1; k < flows; ++k) flow('s', flow_id(a.correlation, k), pid, a.tid, a.start_ns);
  }

  // with_stack: the call's native stack, innermost frame first. Perfetto
  // shows an array arg as indexed entries ("Call stack[0]", ...).
  void call_stack_arg(std::uint32_t stack) {
    if (stack == no_index) return;
    const call_stack& s = t_.stacks[stack];
    next_key(schema::arg_call_stack);
    out_ += '[';
    for (std::uint32_t k = 0; k < s.frame_count; ++k) {
      if (k) out_ += ',';
      out_ += '"';
      out_ += escaped_name(t_.stack_frames[s.first_frame + k]);
      out_ += '"';
    }
    out_ += ']';
  }

  // The scope's own arguments, after its External id (a key spelled so is
  // left out: a member twice would be ambiguous JSON).
  void scope_args(const cpu_span& s) {
    for (std::uint32_t i = s.first_arg; i < s.first_arg + s.arg_count; ++i) {
      const span_arg& a = t_.span_args[i];
      if (t_.names.str(a.key) == schema::arg_external_id) continue;
      out_ += ",\"";
      out_ += escaped_name(a.key);
      out_ += "\":";
      switch (a.kind) {
        case span_arg::type::integer: append_int(out_, a.integer); break;
        case span_arg::type::real: append_json_real(out_, a.real); break;
        case span_arg::type::text:
          out_ += '"';
          out_ += escaped_name(a.text);
          out_ += '"';
          break;
      }
    }
  }

  // An NCCL call's args (model/collectives.hpp), torch's record_param_comms
  // names first; a communicator's creation has no "Collective name".
  void collective_args(const collective_call& c) {
    const auto text = [&](std::string_view k, std::string_view v) {
      next_key(k);
      out_ += '"';
      append_json_escaped(out_, v);
      out_ += '"';
    };
    const auto number = [&](std::string_view k, std::int64_t v) {
      next_key(k);
      append_int(out_, v);
    };
    const bool creates = c.kind == collective_kind::comm_init || c.kind == collective_kind::comm_split;
    if (!creates) {
      text(schema::arg_collective_name, detail::collective_torch_name(c.kind));
      if (c.dtype != collective_dtype::unknown) text(schema::arg_collective_dtype, detail::collective_dtype_torch_name(c.dtype));
      std::uint64_t in = 0, out = 0;
      if (detail::collective_elements(c, in, out)) {
        number(schema::arg_in_msg_nelems, std::int64_t(in));
        number(schema::arg_out_msg_nelems, std::int64_t(out));
      }
    }
    if (c.group_size > 0) number(schema::arg_group_size, c.group_size);
    if (c.rank >= 0) number(schema::arg_collective_rank, c.rank);
    if (c.comm) text(schema::arg_process_group_name, detail::communicator_name(c.comm));
    if (creates) return;
    number(schema::arg_bytes, std::int64_t(c.bytes));
    if (c.op >= 0) text(schema::arg_reduction_op, detail::reduction_op_name(c.op));
    if (c.peer >= 0)
      number(c.kind == collective_kind::broadcast || c.kind == collective_kind::reduce ? schema::arg_collective_root
                                                                                       : schema::arg_collective_peer,
             c.peer);
  }

  static std::uint64_t flow_id(std::uint32_t correlation, std::uint32_t ordinal) {
    return (std::uint64_t(ordinal) << 32) | correlation;
  }

  // "context" only where it tells something: on a device with work in more
  // than one context (most programs have one per device, the primary context).
  void context(const gpu_lane& where) {
    const std::vector<std::uint32_t>& several = l_.several_contexts;
    if (several.empty() || std::find(several.begin(), several.end(), where.device) == several.end()) return;
    next_key(schema::arg_context);
    append_int(out_, where.context);
  }

  // A lean trace leaves out what the record's lane (device) and its call's
  // slice (External id, through correlation) already say.
  void gpu_common_args(const gpu_activity& g, const gpu_lane& where) {
    out_ += ",\"args\":{";
    if (!l_.lean()) {
      const std::uint32_t span = launching_span(t_, g);
      if (span != no_index) {
        key(schema::arg_external_id);
        append_int(out_, t_.spans[span].id);
        out_ += ',';
      }
      key(schema::arg_device);
      append_int(out_, where.device);
      out_ += ',';
    }
    key(schema::arg_stream);
    append_int(out_, where.stream);
    context(where);
    next_key(schema::arg_correlation);
    append_int(out_, g.correlation);
  }

  void annotation_event(const gpu_annotation& a) {
    // 1 ns earlier and 2 ns longer than what it covers, so viewers that
    // break ties by duration still draw it as the parent.
    complete(schema::cat_gpu_user_annotation, escaped_name(t_.spans[a.span].name), a.device, a.stream, a.start_ns - 1,
             a.end_ns + 1);
    out_ += ",\"args\":{";
    key(schema::arg_external_id);
    append_int(out_, t_.spans[a.span].id);
    out_ += "}}";
  }

  // A GPU record's event up to its "dur", with its call's v2 flow end if it is linked so.
  [[gnu::always_inline]] void gpu_complete(std::string_view cat, const gpu_activity& g, std::uint32_t device, std::uint32_t tid,
                                           bool flow_in) {
    complete(cat, escaped_name(g.name), device, tid, g.start_ns, g.end_ns);
    if (flow_in) bind(g.correlation, ",\"flow_in\":true");
  }

  void gpu_event(std::size_t i) {
    const gpu_activity& g = t_.gpu[i];
    const gpu_lane& where = t_.lane_of(g);
    const std::uint32_t tid = l_.gpu_tid(g);
    const bool linked = g.api != no_index && t_.kind_of(t_.api_calls[g.api]).has_flow;
    const bool v2 = linked && l_.flow_ordinal(i) == 0;
    switch (g.kind) {
      case gpu_kind::kernel: {
        gpu_complete(schema::cat_kernel, g, where.device, tid, v2);
        gpu_common_args(g, where);
        // Also in a lean trace: the kernel a user most wants to find (the one that hit an assert) says why it has no time.
        if (g.flags & gpu_timing_unknown) {
          next_key(schema::arg_timing);
          out_ +=
              "\"unknown: CUPTI gave no start or end, the kernel did not complete (a device-side assert or "
              "fault?); shown at its launch's end or after its stream's previous work, 0 ns\"";
        }
        if (g.details != no_index) {
          const kernel_details& k = t_.kernels[g.details];
          if (!l_.lean()) {
            // "shared memory" 0 too: a kernel's footprint is read from both (the profiling articles' "32
            // registers and zero shared memory"); a lean trace is for size.
            next_key(schema::arg_registers_per_thread);
            append_int(out_, k.registers_per_thread);
            next_key(schema::arg_shared_memory);
            append_int(out_, k.static_shared_memory + k.dynamic_shared_memory);
            dims3(schema::arg_grid, k.grid);
            dims3(schema::arg_block, k.block);
            out_ += ",\"est. achieved occupancy %\":";
            append_int(out_, l_.occupancy_percent(g));
          }
          if (k.graph_id) {
            next_key(schema::arg_graph_id);
            append_int(out_, k.graph_id);
            next_key(schema::arg_graph_node_id);
            append_int(out_, k.graph_node_id);
          }
        }
        if (const collective_call* c = l_.collective_of_gpu(i)) collective_args(*c);
        if (const std::uint32_t series = l_.metric_series(g); series != no_index) metric_args(g, series);
        out_ += "}}";
        break;
      }
      case gpu_kind::memcpy:
      case gpu_kind::memset: {
        gpu_complete(g.kind == gpu_kind::memcpy ? schema::cat_gpu_memcpy : schema::cat_gpu_memset, g, where.device, tid, v2);
        gpu_common_args(g, where);
        const std::uint64_t bytes = t_.bytes_of(g);
        next_key(schema::arg_bytes);
        append_int(out_, bytes);
        if (g.end_ns > g.start_ns) {
          out_ += ",\"memory bandwidth (GB/s)\":";
          append_double(out_, double(bytes) / double(g.end_ns - g.start_ns));
        }
        out_ += "}}";
        break;
      }
      case gpu_kind::sync: {
        gpu_complete(schema::cat_cuda_sync, g, where.device, tid, v2);
        out_ += ",\"args\":{";
        key(schema::arg_sync_kind);
        out_ += '"';
        out_ += std::string_view(sync_kind_name(g.subkind));
        out_ += '"';
        next_key(schema::arg_device);
        append_int(out_, where.device);
        context(where);
        next_key(schema::arg_stream);
        if (g.subkind == sync_context) out_ += "-1";
        else append_int(out_, where.stream);
        next_key(schema::arg_correlation);
        append_int(out_, g.correlation);
        if (const event_wait* w = t_.wait_of(g)) {  // what an event sync or a stream's wait waited for, as Kineto writes it
          const auto id = [&](std::string_view k, std::uint32_t v) {
            next_key(k);
            if (v == no_index) out_ += "-1";
            else append_int(out_, v);
          };
          id(schema::arg_wait_on_stream, w->stream);
          id(schema::arg_wait_on_record_correlation, w->record_correlation);
          id(schema::arg_wait_on_event, w->event);
        }
        out_ += "}}";
        break;
      }
    }
    if (linked && !v2) flow('f', flow_id(g.correlation, l_.flow_ordinal(i)), where.device, tid, g.start_ns);
  }

  // A kernel's averages of its GPU's metrics (model/gpu_metrics.hpp), also in
  // a lean trace: what the counter tracks say of it without a viewer's help.
  // None on a kernel CUPTI could not time.
  void metric_args(const gpu_activity& g, std::uint32_t series) {
    if (g.flags & gpu_timing_unknown) return;
    const kernel_metric_averages a = average_metrics(t_.gpu_metrics[series], g.start_ns, g.end_ns);
    const std::vector<std::string>& labels = l_.metric_labels[series];
    for (std::size_t m = 0; m < a.values.size(); ++m) {
      if (!std::isfinite(a.values[m])) continue;
      out_ += ",\"";
      out_ += labels[m];
      out_ += "\":";
      append_double(out_, a.values[m], 2);
    }
    next_key(schema::arg_metric_samples);
    append_int(out_, a.samples);
    const std::string why = a.too_short ? std::string(schema::metric_samples_short)
                            : a.samples == 0
                                ? unsampled_reason(t_.gpu_metrics[series], g.start_ns, g.end_ns, &l_.metric_gaps[series])
                                : std::string();
    if (!why.empty()) {
      next_key(schema::arg_metric_note);
      out_ += '"';
      out_ += why;
      out_ += '"';
    }
  }

  void overhead_event(std::size_t i) {
    const overhead_span& o = t_.overhead[i];
    complete(schema::cat_overhead, escaped_name(o.name), overhead_pid, l_.overhead_lane[i], std::max(o.start_ns, base_ns_),
             o.end_ns);
    out_ += "}";
  }

  // An allocation or free as torch writes it (an instant event on its thread,
  // args as torch names them, then cuprof's), and the memory in use after it.
  void memory_events(const memory_event& m) {
    const std::uint32_t pid = t_.meta.pid;
    begin_event();
    out_ += "{\"ph\":\"i\",\"cat\":\"";
    out_ += schema::cat_cpu_instant_event;
    out_ += "\",\"s\":\"t\",\"name\":\"";
    out_ += schema::memory_event_name;
    out_ += "\",\"pid\":";
    append_int(out_, pid);
    out_ += ",\"tid\":";
    append_int(out_, m.tid);
    out_ += ',';
    ts(m.ts_ns);
    out_ += ",\"args\":{";
    key(schema::arg_memory_total_reserved);
    append_int(out_, m.total_reserved);
    next_key(schema::arg_memory_total_allocated);
    append_int(out_, m.total_allocated);
    next_key(schema::arg_memory_bytes);
    append_int(out_, m.bytes);
    next_key(schema::arg_memory_device_id);
    append_int(out_, std::int64_t(m.device));
    next_key(schema::arg_memory_device_type);
    append_int(out_, is_host_memory(m) ? 0 : schema::memory_device_type_cuda);
    next_key(schema::arg_memory_addr);
    append_int(out_, m.address);
    if (m.correlation) {
      next_key(schema::arg_correlation);
      append_int(out_, m.correlation);
    }
    if (m.span != no_index) {
      next_key(schema::arg_external_id);
      append_int(out_, t_.spans[m.span].id);
    }
    if (m.memory_kind) {
      next_key(schema::arg_memory_kind);
      out_ += '"';
      out_ += std::string_view(memory_kind_name(m.memory_kind));
      out_ += '"';
    }
    if (m.flags & memory_from_pool) {
      next_key(schema::arg_memory_pool);
      out_ += '1';
    }
    if (m.flags & memory_virtual) {
      next_key(schema::arg_memory_virtual);
      out_ += '1';
    }
    out_ += "}}";
    begin_event();
    out_ += "{\"ph\":\"C\",\"name\":\"";
    out_ += is_host_memory(m) ? schema::memory_counter_host : schema::memory_counter_device;
    out_ += "\",\"pid\":";
    append_int(out_, is_host_memory(m) ? pid : std::uint32_t(m.device));
    out_ += ",\"tid\":0,";
    ts(m.ts_ns);
    out_ += ",\"args\":{";
    key(schema::arg_counter_allocated);
    append_int(out_, m.total_allocated);
    next_key(schema::arg_counter_reserved);
    append_int(out_, m.total_reserved);
    out_ += "}}";
  }

  // A sample of a GPU's metrics: a counter per metric whose value is written
  // (chrome_trace_layout::changed_metric_values), at the sample's start on the
  // GPU's process. A viewer holds each value until the next event's.
  void metric_events(std::size_t series, std::size_t i) {
    const gpu_metric_series& s = t_.gpu_metrics[series];
    const std::vector<std::string>& labels = l_.metric_labels[series];
    const std::uint8_t* written = &l_.metric_written[series][i * s.metrics.size()];
    for (std::size_t m = 0; m < s.metrics.size(); ++m) {
      const double v = s.value(i, m);
      if (!written[m]) continue;
      begin_event();
      out_ += "{\"ph\":\"C\",\"cat\":\"";
      out_ += schema::cat_gpu_metric;
      out_ += "\",\"name\":\"";
      out_ += labels[m];
      out_ += "\",\"pid\":";
      append_int(out_, s.device);
      out_ += ",\"tid\":0,";
      ts(s.start_ns[i]);
      out_ += ",\"args\":{";
      key(schema::arg_counter_value);
      append_double(out_, v, 2);
      out_ += "}}";
    }
  }

  const std::string& escaped_name(name_id id) const { return l_.escaped_names[id]; }

  const chrome_trace_layout& l_;
  const trace& t_;
  const std::uint64_t base_ns_;
  text_buffer out_;
  std::size_t events_ = 0;
  bool first_event_ = true;
};

}  // namespace detail

namespace detail {

// Writes a document's blocks on several threads: each worker takes the next
// block, formats it (and compresses it into one gzip member for a ".gz" path)
// into a free slot and goes on to the next block; the worker that finishes
// the block next in order writes it and every finished block after it. So a
// worker waits for an earlier block only when every slot (one per worker and
// two more) holds a finished block. One worker formats and writes on the
// calling thread, no thread started.
class parallel_block_writer {
 public:
  // workers: 0 for one per core, at most 8 (each slot holds a block and its
  // member in memory; the file takes no more: docs/performance.md).
  parallel_block_writer(const chrome_trace_layout& layout, atomic_file& file, unsigned workers = 0)
      : layout_(layout),
        file_(file),
        libdeflate_(file.gzip() ? libdeflate() : nullptr),
        blocks_(layout.block_count()),
        workers_(unsigned(
            std::min<std::size_t>(blocks_, workers ? workers : std::min(8u, std::max(1u, std::thread::hardware_concurrency()))))),
        slots_(workers_ + 2),
        finished_(slots_.size(), nullptr) {
    for (slot& s : slots_) free_.push_back(&s);
  }
  parallel_block_writer(const parallel_block_writer&) = delete;
  parallel_block_writer& operator=(const parallel_block_writer&) = delete;

  // Writes every block, returns the number of trace events written; throws the first error.
  std::size_t run() {
    std::vector<std::thread> threads;
    for (unsigned i = 1; i < workers_; ++i) {
      // A member function, not a lambda: std::thread's code for a lambda type is
      // shared by every copy of cuprof in the process (architecture.md).
      try {
        threads.emplace_back(&parallel_block_writer::work, this);
      } catch (const std::system_error&) {  // no more threads to be had: fewer workers
        break;
      }
    }
    work();
    for (std::thread& t : threads) t.join();
    if (failure_) std::rethrow_exception(failure_);
    return events_;
  }

 private:
  // A block being formatted, or finished and waiting for its turn to be written.
  struct slot {
    std::unique_ptr<chrome_trace_writer> writer;
    std::unique_ptr<gzip_compressor> gzip;
    std::string_view bytes;  // what goes to the file: the text or its member
    std::size_t events = 0;
  };

  void work() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      slot_freed_.wait(lock, [&] { return failed_ || next_taken_ == blocks_ || !free_.empty(); });
      if (failed_ || next_taken_ == blocks_) return;
      const std::size_t order = next_taken_++;
      slot* s = free_.back();
      free_.pop_back();
      lock.unlock();
      const std::exception_ptr error = caught([&] { format(*s, order); });
      lock.lock();
      if (error) {
        fail(error);
        return;
      }
      finished_[order % finished_.size()] = s;  // blocks taken and not written: at most one per slot
      write_finished(lock);
    }
  }

  void format(slot& s, std::size_t order) {
    if (!s.writer) s.writer.reset(new chrome_trace_writer(layout_));
    text_buffer& text = s.writer->out();
    text.clear();
    s.events = s.writer->write_block(order);
    s.bytes = {text.data(), text.size()};
    if (file_.gzip()) {
      if (!s.gzip) s.gzip.reset(new gzip_compressor(libdeflate_));
      s.bytes = s.gzip->compress(text.data(), text.size());
    }
  }

  // Writes the finished blocks next in order, unless another worker is at it
  // (it takes what finishes meanwhile: it looks again after each write).
  void write_finished(std::unique_lock<std::mutex>& lock) {
    if (writing_) return;
    writing_ = true;
    while (!failed_) {
      slot*& next = finished_[next_written_ % finished_.size()];
      slot* const s = next;
      if (!s) break;
      next = nullptr;
      lock.unlock();
      const std::exception_ptr error = caught([&] { file_.write(s->bytes.data(), s->bytes.size()); });
      lock.lock();
      if (error) {
        fail(error);
        break;
      }
      events_ += s->events;
      ++next_written_;
      free_.push_back(s);
      slot_freed_.notify_one();
    }
    writing_ = false;
  }

  // What `step` threw, or null: run outside the lock, reported under it.
  template <class Step>
  static std::exception_ptr caught(Step&& step) noexcept {
    try {
      step();
      return nullptr;
    } catch (...) {
      return std::current_exception();
    }
  }

  void fail(std::exception_ptr error) {
    if (!failed_) failure_ = error;
    failed_ = true;
    slot_freed_.notify_all();
  }

  const chrome_trace_layout& layout_;
  atomic_file& file_;
  const libdeflate_library* libdeflate_;  // null: zlib's gzip
  const std::size_t blocks_;
  const unsigned workers_;
  std::vector<slot> slots_;
  std::mutex mutex_;
  std::condition_variable slot_freed_;
  std::vector<slot*> free_;
  std::vector<slot*> finished_;  // block k's at k % its size, till written; null: not finished
  std::size_t next_taken_ = 0, next_written_ = 0, events_ = 0;
  bool writing_ = false, failed_ = false;
  std::exception_ptr failure_;
};

}  // namespace detail

}  // namespace cuprof
