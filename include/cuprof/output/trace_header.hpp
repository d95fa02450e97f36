// The Chrome trace's header: the document's members before "traceEvents"
// (the GPUs, the versions, the distributed job, cuprof's own counts), written
// at the start of its first block (trace_event_writer.hpp).
#pragma once

#include "json_text.hpp"
#include "trace_layout.hpp"
#include "trace_schema.hpp"
#include "../base/config.hpp"
#include "../model/event.hpp"
#include "../model/gpu_metrics.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace cuprof::detail {

// What the window's edges cut and what came unpaired, always written: a
// reader tells "none" from "not counted".
inline void append_window_edges(text_buffer& out, const window_edges& e) {
  append_next_key(out, schema::cuprof_window_edges);
  const auto by_kind = [&](std::string_view name, const std::array<std::uint64_t, window_edges::kinds>& n) {
    append_key(out, name);
    for (std::size_t k = 0; k < window_edges::kinds; ++k) {
      out += k ? ',' : '{';
      append_key(out, schema::edge_kind_names[k]);
      append_int(out, n[k]);
    }
    out += "},";
  };
  out += '{';
  by_kind(schema::edges_calls_without_gpu_work, e.calls_without_gpu_work);
  by_kind(schema::edges_gpu_work_without_call, e.gpu_work_without_call);
  by_kind(schema::edges_launched_before, e.launched_before);
  append_key(out, schema::edges_calls_running_at_end);
  append_int(out, e.calls_running_at_end);
  out += '}';
}

// What was sampled: the period, the samples lost on every GPU together, the
// GPUs, and each metric's CUPTI name and its label, the counters' name.
inline void append_gpu_metrics_summary(text_buffer& out, const chrome_trace_layout& l) {
  const std::vector<gpu_metric_series>& series = l.t.gpu_metrics;
  append_next_key(out, schema::cuprof_gpu_metrics);
  out += '{';
  append_key(out, schema::gpu_metrics_interval_ns);
  append_int(out, series[0].interval_ns);
  std::uint64_t dropped = 0, out_of_range = 0;
  for (const gpu_metric_series& s : series) dropped += s.dropped, out_of_range += s.out_of_range;
  append_next_key(out, schema::gpu_metrics_dropped);
  append_int(out, dropped);
  append_next_key(out, schema::gpu_metrics_out_of_range);
  append_int(out, out_of_range);
  append_next_key(out, schema::gpu_metrics_devices);
  out += '[';
  for (std::size_t i = 0; i < series.size(); ++i) {
    if (i) out += ',';
    append_int(out, series[i].device);
  }
  out += ']';
  append_next_key(out, schema::gpu_metrics_metrics);
  out += '[';
  const std::vector<gpu_metric> metrics = metrics_of(series);
  for (std::size_t i = 0; i < metrics.size(); ++i) {
    out += std::string_view(i ? ",{" : "{");
    append_key(out, schema::gpu_metrics_name);
    out += '"';
    append_json_escaped(out, metrics[i].name);
    out += '"';
    append_next_key(out, schema::gpu_metrics_label);
    out += '"';
    append_json_escaped(out, metrics[i].label);
    out += "\"}";
  }
  out += ']';
  append_next_key(out, schema::gpu_metrics_held_values);
  out += "true";
  append_next_key(out, schema::gpu_metrics_alignment);
  out += '[';
  for (std::size_t i = 0; i < series.size(); ++i) {
    out += std::string_view(i ? ",{" : "{");
    append_key(out, schema::gpu_metrics_device);
    append_int(out, series[i].device);
    append_next_key(out, schema::gpu_metrics_shift_ns);
    append_int(out, series[i].shift_ns);
    append_next_key(out, schema::gpu_metrics_aligned);
    out += std::string_view(series[i].aligned ? "true}" : "false}");
  }
  out += ']';
  append_next_key(out, schema::gpu_metrics_gaps);
  out += '[';
  bool first = true;
  for (std::size_t i = 0; i < series.size(); ++i)
    for (const gpu_metric_gap& g : l.metric_gaps[i]) {
      out += std::string_view(first ? "{" : ",{");
      first = false;
      append_key(out, schema::gpu_metrics_device);
      append_int(out, series[i].device);
      append_next_key(out, schema::gpu_metrics_gap_ts);
      append_us_between(out, l.base_ns, g.start_ns);
      append_next_key(out, schema::gpu_metrics_gap_dur);
      append_us_between(out, g.start_ns, g.end_ns);
      append_next_key(out, schema::gpu_metrics_gap_cause);
      out += '"';
      out += schema::gap_cause_names[std::size_t(g.cause)];
      out += "\"}";
    }
  out += "]}";
}

// "stackFrames": every distinct stack's frames once, a node per frame and
// caller ({"name", "parent"}, keyed by id); calls name their innermost
// node ("sf"). A line per node.
inline void append_stack_frames(text_buffer& out, const chrome_trace_layout& l) {
  append_key(out, schema::key_stack_frames);
  out += '{';
  for (std::size_t i = 0; i < l.stack_nodes.size(); ++i) {
    out += std::string_view(i ? ",\n    \"" : "\n    \"");
    append_int(out, i + 1);
    out += "\":{";
    append_key(out, schema::frame_name);
    out += '"';
    out += l.escaped_names[l.stack_nodes[i].frame];
    out += '"';
    if (const std::uint32_t parent = l.stack_nodes[i].parent) {
      append_next_key(out, schema::frame_parent);
      out += '"';
      append_int(out, parent);
      out += '"';
    }
    out += '}';
  }
  out += "\n  },\n  ";
}

// The members before the events, up to the opening of "traceEvents".
inline void append_trace_header(text_buffer& out, const chrome_trace_layout& l) {
  const trace_metadata& m = l.t.meta;
  out += "{\n  \"schemaVersion\":1,\n  ";
  append_key(out, schema::key_device_properties);
  out += '[';
  for (std::size_t i = 0; i < m.devices.size(); ++i) {
    const device_info& d = m.devices[i];
    const auto number = [&](std::string_view k, auto value) {
      append_next_key(out, k);
      append_int(out, value);
    };
    out += std::string_view(i ? ",\n    {" : "\n    {");
    append_key(out, schema::device_id);
    append_int(out, d.id);
    append_next_key(out, schema::device_name);
    out += '"';
    append_json_escaped(out, d.name);
    out += '"';
    number(schema::device_total_global_mem, d.total_global_mem);
    for (const schema::device_property& p : schema::device_properties)
      if (!p.known_only || d.*p.field) number(p.key, d.*p.field);
    out += "}";
  }
  out += std::string_view(m.devices.empty() ? "]" : "\n  ]");
  for (const auto& [key, version] : {std::pair{schema::key_cupti_version, m.cupti_version},
                                     std::pair{schema::key_cuda_runtime_version, m.cuda_runtime_version},
                                     std::pair{schema::key_cuda_driver_version, m.cuda_driver_version}}) {
    out += ",\n  ";
    append_key(out, key);
    append_int(out, version);
  }
  out += ",\n  \"trace_id\":\"";
  append_int(out, m.pid);
  out += '-';
  append_int(out, m.window_start_ns);
  out += "\",\n  ";
  append_key(out, schema::key_host_name);
  out += '"';
  append_json_escaped(out, m.host_name);
  // HTA finds the rank with a regex that wants the space after the colon,
  // and stops reading metadata at traceEvents: keep this before them.
  out += "\",\n  ";
  append_key(out, schema::key_distributed_info);
  out += '{';
  append_key(out, schema::key_backend);
  out += '"';
  append_json_escaped(out, m.distributed_backend.empty() ? std::string_view("none") : m.distributed_backend);
  out += "\",";
  append_key(out, schema::key_rank);
  out += ' ';
  append_int(out, m.rank);
  append_next_key(out, schema::key_world_size);
  append_int(out, m.world_size);
  if (m.communicator_count) {
    append_next_key(out, schema::key_pg_count);
    append_int(out, m.communicator_count);
  }
  if (!m.nccl_version.empty()) {
    append_next_key(out, schema::key_nccl_version);
    out += '"';
    append_json_escaped(out, m.nccl_version);
    out += '"';
  }
  out += "},\n  ";
  append_key(out, schema::key_cuprof);
  out += "{\"version\":\"" CUPROF_VERSION_STRING "\"";
  append_next_key(out, schema::cuprof_dropped_gpu_records);
  append_int(out, m.dropped_gpu_records);
  append_next_key(out, schema::cuprof_dropped_cpu_events);
  append_int(out, m.dropped_cpu_events);
  out += ",\"unmatched_gpu_records\":";
  append_int(out, m.unmatched_gpu_records);
  append_next_key(out, schema::cuprof_cuda_status);
  out += '"';
  append_json_escaped(out, m.cuda_status.empty() ? schema::cuda_status_on : m.cuda_status);
  out += '"';
  append_next_key(out, schema::cuprof_window_start_ns);
  append_int(out, m.window_start_ns);
  append_next_key(out, schema::cuprof_window_end_ns);
  append_int(out, m.window_end_ns);
  if (l.lean()) {
    append_next_key(out, schema::cuprof_trace_detail);
    out += "\"lean\"";
  }
  append_window_edges(out, m.edges);
  if (!l.t.gpu_metrics.empty()) append_gpu_metrics_summary(out, l);
  out += "},\n  ";
  if (m.memory_recorded) {
    append_key(out, schema::key_profile_memory);
    out += "1,\n  ";
  }
  if (!l.stack_nodes.empty()) append_stack_frames(out, l);
  out += "\"displayTimeUnit\":\"ms\",\n  ";
  append_key(out, schema::key_base_time);
  append_int(out, l.base_ns);
  out += ",\n  ";
  append_key(out, schema::key_trace_events);
  out += '[';
}

}  // namespace cuprof::detail
