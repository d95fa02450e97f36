// The Chrome trace writer: formats a trace as Kineto-flavoured JSON
// (docs/trace-format.md), block by block of its layout (trace_layout.hpp), so
// that blocks format on several threads (block_writer.hpp). Inline, for tests
// and benchmarks to include anywhere; the export functions that run it are
// the runtime's (runtime/chrome_trace_impl.hpp).
#pragma once

#include "chrome_trace.hpp"
#include "json_text.hpp"
#include "trace_header.hpp"
#include "trace_layout.hpp"
#include "trace_schema.hpp"
#include "../model/attribution.hpp"
#include "../model/collectives.hpp"
#include "../model/event.hpp"
#include "../model/gpu_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cuprof::detail {

// The members an event opens with, each spelled here once; every kind takes
// them in the order Kineto writes them: a slice is
// open_event().ph('X').cat(c).name(n).pid(p).tid(t).ts(start).dur(start, end),
// a v1 flow has its "id" before its lane, a metadata event its "name" first,
// and the caller writes the rest. Each key is written with its comma, left out
// for an event's first member (First, the builder's type), so that it copies as
// one constant. Forced inline: GCC leaves these small pieces out of line, and
// inlined, their literals copy as constants (with text_buffer's and
// append_int's, 13% fewer instructions per event) and the builder stays in
// registers.
template <bool First>
class event_builder {
 public:
  [[gnu::always_inline]] event_builder(text_buffer& out, std::uint64_t base_ns) : out_(out), base_ns_(base_ns) {}

  [[gnu::always_inline]] event_builder<false> ph(char phase) const {
    key(",\"ph\":\"");
    const char value[2] = {phase, '"'};
    out_.append(value, 2);
    return {out_, base_ns_};
  }
  [[gnu::always_inline]] event_builder<false> cat(std::string_view category) const { return text(",\"cat\":\"", category); }
  [[gnu::always_inline]] event_builder<false> name(std::string_view escaped) const { return text(",\"name\":\"", escaped); }
  [[gnu::always_inline]] event_builder<false> thread_scope() const { return text(",\"s\":\"", "t"); }  // an instant event's
  [[gnu::always_inline]] event_builder<false> id(std::uint64_t id) const { return number(",\"id\":", id); }
  [[gnu::always_inline]] event_builder<false> pid(std::uint32_t pid) const { return number(",\"pid\":", pid); }
  [[gnu::always_inline]] event_builder<false> tid(std::uint32_t tid) const { return number(",\"tid\":", tid); }
  [[gnu::always_inline]] event_builder<false> ts(std::uint64_t ns) const {
    key(",\"ts\":");
    append_us_between(out_, base_ns_, ns);
    return {out_, base_ns_};
  }
  [[gnu::always_inline]] event_builder<false> dur(std::uint64_t start, std::uint64_t end) const {
    key(",\"dur\":");
    append_us_between(out_, start, end);
    return {out_, base_ns_};
  }
  // Its members and "}}" are the caller's.
  [[gnu::always_inline]] void args() const { key(",\"args\":{"); }

 private:
  template <std::size_t N>
  [[gnu::always_inline]] void key(const char (&comma_key)[N]) const {
    out_.append(comma_key + First, N - 1 - First);
  }
  template <std::size_t N>
  [[gnu::always_inline]] event_builder<false> text(const char (&comma_key)[N], std::string_view escaped) const {
    key(comma_key);
    out_ += escaped;
    out_ += '"';
    return {out_, base_ns_};
  }
  template <std::size_t N, class Int>
  [[gnu::always_inline]] event_builder<false> number(const char (&comma_key)[N], Int value) const {
    key(comma_key);
    append_int(out_, value);
    return {out_, base_ns_};
  }

  text_buffer& out_;
  const std::uint64_t base_ns_;
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
      append_trace_header(out_, l_);
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

  // The whole document, block after block: what the parallel writer gives a file.
  std::string document() {
    std::string all;
    for (std::size_t k = 0; k < l_.block_count(); ++k) {
      out_.clear();
      write_block(k);
      all.append(out_.data(), out_.size());
    }
    return all;
  }

  text_buffer& out() { return out_; }

 private:
  // The next event of "traceEvents", opened: its members follow.
  [[gnu::always_inline]] event_builder<true> open_event() {
    if (first_event_) out_ += "\n{";
    else out_ += ",\n{";
    first_event_ = false;
    ++events_;
    return {out_, base_ns_};
  }

  // ,"key":[x,y,z]
  void dims3(std::string_view k, const std::uint32_t (&d)[3]) {
    append_next_key(out_, k);
    for (std::size_t i = 0; i < 3; ++i) {
      out_ += i ? ',' : '[';
      append_int(out_, d[i]);
    }
    out_ += ']';
  }

  // A slice up to its "dur".
  event_builder<false> complete(std::string_view cat, const std::string& escaped_name, std::uint32_t pid, std::uint32_t tid,
                                std::uint64_t start, std::uint64_t end) {
    return open_event().ph('X').cat(cat).name(escaped_name).pid(pid).tid(tid).ts(start).dur(start, end);
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
    open_event().ph(phase).id(id).pid(pid).tid(tid).ts(at).cat(schema::cat_flow).name(schema::cat_flow);
    if (phase == 'f') out_ += ",\"bp\":\"e\"}";
    else out_ += '}';
  }

  void meta_event(std::string_view name, std::uint32_t pid, std::uint32_t tid, std::string_view arg, const std::string& value,
                  bool quoted) {
    open_event().name(name).ph('M').ts(base_ns_).pid(pid).tid(tid).args();  // timeless: "ts" 0, the base
    append_key(out_, arg);
    if (quoted) out_ += '"';
    if (quoted) append_json_escaped(out_, value);
    else out_ += value;
    if (quoted) out_ += '"';
    out_ += "}}";
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
    complete(schema::cat_user_annotation, escaped_name(s.name), t_.meta.pid, s.tid, s.start_ns, s.end_ns).args();
    append_key(out_, schema::arg_external_id);
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
    const event_builder<false> slice =
        complete(kind.domain == api_domain::driver ? schema::cat_cuda_driver : schema::cat_cuda_runtime, escaped_name(kind.name),
                 pid, a.tid, a.start_ns, a.end_ns);
    if (flows != 0) bind(a.correlation, ",\"flow_out\":true");  // to its first record
    const std::uint32_t stack = t_.stack_of(i);
    if (stack != no_index) {
      append_next_key(out_, schema::event_stack_frame);
      append_int(out_, l_.stack_leaf[stack]);
    }
    slice.args();
    if (a.parent != no_index) {
      append_key(out_, schema::arg_external_id);
      append_int(out_, t_.spans[a.parent].id);
      out_ += ',';
    }
    append_key(out_, schema::arg_correlation);
    append_int(out_, a.correlation);
    call_stack_arg(stack);
    out_ += "}}";
    for (std::uint32_t k = 1; k < flows; ++k) flow('s', flow_id(a.correlation, k), pid, a.tid, a.start_ns);
  }

  // with_stack: what Perfetto shows of the call's stack when it is selected
  // (an array arg: "Call stack[0]", ...), its short form; the whole stack is
  // the event's "sf" in the document's stackFrames.
  void call_stack_arg(std::uint32_t stack) {
    if (stack == no_index) return;
    append_next_key(out_, schema::arg_call_stack);
    out_ += l_.stack_shown[stack];
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
      append_next_key(out_, k);
      out_ += '"';
      append_json_escaped(out_, v);
      out_ += '"';
    };
    const auto number = [&](std::string_view k, std::int64_t v) {
      append_next_key(out_, k);
      append_int(out_, v);
    };
    const bool creates = c.kind == collective_kind::comm_init || c.kind == collective_kind::comm_split;
    const bool typed = c.dtype != collective_dtype::unknown;
    std::uint64_t in = 0, out = 0;
    const bool counted = !creates && detail::collective_elements(c, in, out);
    if (!creates) {
      text(schema::arg_collective_name, detail::collective_torch_name(c.kind));
      if (typed) text(schema::arg_collective_dtype, detail::collective_dtype_torch_name(c.dtype));
      if (counted) {
        number(schema::arg_in_msg_nelems, std::int64_t(in));
        number(schema::arg_out_msg_nelems, std::int64_t(out));
      }
    }
    if (c.group_size > 0) number(schema::arg_group_size, c.group_size);
    // What nothing showed cuprof, named so that readers do not guess it: the element type where
    // the kernel's name spells none, the counts without it (or without the group size), the
    // group size of a communicator created before cuprof watched.
    if (!creates) {
      std::string missing;
      const auto add = [&](std::string_view name) { missing.append(missing.empty() ? "" : ", ").append(name); };
      if (!typed) add(schema::arg_collective_dtype);
      if (!counted) add(schema::arg_in_msg_nelems), add(schema::arg_out_msg_nelems);
      if (c.group_size <= 0) add(schema::arg_group_size);
      if (!missing.empty()) text(schema::arg_not_known, missing);
    }
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
    append_next_key(out_, schema::arg_context);
    append_int(out_, where.context);
  }

  // A lean trace leaves out what the record's lane (device) and its call's
  // slice (External id, through correlation) already say.
  void gpu_common_args(const event_builder<false>& slice, const gpu_activity& g, const gpu_lane& where) {
    slice.args();
    if (!l_.lean()) {
      const std::uint32_t span = launching_span(t_, g);
      if (span != no_index) {
        append_key(out_, schema::arg_external_id);
        append_int(out_, t_.spans[span].id);
        out_ += ',';
      }
      append_key(out_, schema::arg_device);
      append_int(out_, where.device);
      out_ += ',';
    }
    append_key(out_, schema::arg_stream);
    append_int(out_, where.stream);
    context(where);
    append_next_key(out_, schema::arg_correlation);
    append_int(out_, g.correlation);
  }

  void annotation_event(const gpu_annotation& a) {
    // 1 ns earlier and 2 ns longer than what it covers, so viewers that
    // break ties by duration still draw it as the parent.
    complete(schema::cat_gpu_user_annotation, escaped_name(t_.spans[a.span].name), a.device, a.stream, a.start_ns - 1,
             a.end_ns + 1)
        .args();
    append_key(out_, schema::arg_external_id);
    append_int(out_, t_.spans[a.span].id);
    out_ += "}}";
  }

  // A GPU record's event up to its "dur", with its call's v2 flow end if it is linked so.
  [[gnu::always_inline]] event_builder<false> gpu_complete(std::string_view cat, const gpu_activity& g, std::uint32_t device,
                                                           std::uint32_t tid, bool flow_in) {
    const event_builder<false> slice = complete(cat, escaped_name(g.name), device, tid, g.start_ns, g.end_ns);
    if (flow_in) bind(g.correlation, ",\"flow_in\":true");
    return slice;
  }

  void gpu_event(std::size_t i) {
    const gpu_activity& g = t_.gpu[i];
    const gpu_lane& where = t_.lane_of(g);
    const std::uint32_t tid = l_.gpu_tid(g);
    const bool linked = g.api != no_index && t_.kind_of(t_.api_calls[g.api]).has_flow;
    const bool v2 = linked && l_.flow_ordinal(i) == 0;
    switch (g.kind) {
      case gpu_kind::kernel: {
        gpu_common_args(gpu_complete(schema::cat_kernel, g, where.device, tid, v2), g, where);
        // Also in a lean trace: the kernel a user most wants to find (the one that hit an assert) says why it has no time.
        if (g.flags & gpu_timing_unknown) {
          append_next_key(out_, schema::arg_timing);
          out_ +=
              "\"unknown: CUPTI gave no start or end, the kernel did not complete (a device-side assert or "
              "fault?); shown at its launch's end or after its stream's previous work, 0 ns\"";
        }
        if (g.details != no_index) {
          const kernel_details& k = t_.kernels[g.details];
          if (!l_.lean()) {
            // "shared memory" 0 too: a kernel's footprint is read from both (the profiling articles' "32
            // registers and zero shared memory"); a lean trace is for size.
            append_next_key(out_, schema::arg_registers_per_thread);
            append_int(out_, k.registers_per_thread);
            append_next_key(out_, schema::arg_shared_memory);
            append_int(out_, k.static_shared_memory + k.dynamic_shared_memory);
            dims3(schema::arg_grid, k.grid);
            dims3(schema::arg_block, k.block);
            out_ += ",\"est. achieved occupancy %\":";
            append_int(out_, l_.occupancy_percent(g));
          }
          if (k.graph_id) {
            append_next_key(out_, schema::arg_graph_id);
            append_int(out_, k.graph_id);
            append_next_key(out_, schema::arg_graph_node_id);
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
        const std::string_view cat = g.kind == gpu_kind::memcpy ? schema::cat_gpu_memcpy : schema::cat_gpu_memset;
        gpu_common_args(gpu_complete(cat, g, where.device, tid, v2), g, where);
        const std::uint64_t bytes = t_.bytes_of(g);
        append_next_key(out_, schema::arg_bytes);
        append_int(out_, bytes);
        if (g.end_ns > g.start_ns) {
          out_ += ",\"memory bandwidth (GB/s)\":";
          append_double(out_, double(bytes) / double(g.end_ns - g.start_ns));
        }
        out_ += "}}";
        break;
      }
      case gpu_kind::sync: {
        gpu_complete(schema::cat_cuda_sync, g, where.device, tid, v2).args();
        append_key(out_, schema::arg_sync_kind);
        out_ += '"';
        out_ += std::string_view(sync_kind_name(g.subkind));
        out_ += '"';
        append_next_key(out_, schema::arg_device);
        append_int(out_, where.device);
        context(where);
        append_next_key(out_, schema::arg_stream);
        if (g.subkind == sync_context) out_ += "-1";
        else append_int(out_, where.stream);
        append_next_key(out_, schema::arg_correlation);
        append_int(out_, g.correlation);
        if (const event_wait* w = t_.wait_of(g)) {  // what an event sync or a stream's wait waited for, as Kineto writes it
          const auto id = [&](std::string_view k, std::uint32_t v) {
            append_next_key(out_, k);
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
    append_next_key(out_, schema::arg_metric_samples);
    append_int(out_, a.samples);
    const std::string why = a.too_short ? std::string(schema::metric_samples_short)
                            : a.samples == 0
                                ? unsampled_reason(t_.gpu_metrics[series], g.start_ns, g.end_ns, &l_.metric_gaps[series])
                                : std::string();
    if (!why.empty()) {
      append_next_key(out_, schema::arg_metric_note);
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
    const event_builder<false> instant = open_event().ph('i').cat(schema::cat_cpu_instant_event).thread_scope();
    instant.name(schema::memory_event_name).pid(pid).tid(m.tid).ts(m.ts_ns).args();
    append_key(out_, schema::arg_memory_total_reserved);
    append_int(out_, m.total_reserved);
    append_next_key(out_, schema::arg_memory_total_allocated);
    append_int(out_, m.total_allocated);
    append_next_key(out_, schema::arg_memory_bytes);
    append_int(out_, m.bytes);
    append_next_key(out_, schema::arg_memory_device_id);
    append_int(out_, std::int64_t(m.device));
    append_next_key(out_, schema::arg_memory_device_type);
    append_int(out_, is_host_memory(m) ? 0 : schema::memory_device_type_cuda);
    append_next_key(out_, schema::arg_memory_addr);
    append_int(out_, m.address);
    if (m.correlation) {
      append_next_key(out_, schema::arg_correlation);
      append_int(out_, m.correlation);
    }
    if (m.span != no_index) {
      append_next_key(out_, schema::arg_external_id);
      append_int(out_, t_.spans[m.span].id);
    }
    if (m.memory_kind) {
      append_next_key(out_, schema::arg_memory_kind);
      out_ += '"';
      out_ += std::string_view(memory_kind_name(m.memory_kind));
      out_ += '"';
    }
    if (m.flags & memory_from_pool) {
      append_next_key(out_, schema::arg_memory_pool);
      out_ += '1';
    }
    if (m.flags & memory_virtual) {
      append_next_key(out_, schema::arg_memory_virtual);
      out_ += '1';
    }
    out_ += "}}";
    const bool host = is_host_memory(m);
    const event_builder<false> counter =
        open_event().ph('C').name(host ? schema::memory_counter_host : schema::memory_counter_device);
    counter.pid(host ? pid : std::uint32_t(m.device)).tid(0).ts(m.ts_ns).args();
    append_key(out_, schema::arg_counter_allocated);
    append_int(out_, m.total_allocated);
    append_next_key(out_, schema::arg_counter_reserved);
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
      open_event().ph('C').cat(schema::cat_gpu_metric).name(labels[m]).pid(s.device).tid(0).ts(s.start_ns[i]).args();
      append_key(out_, schema::arg_counter_value);
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

}  // namespace cuprof::detail
