#include "trace_reader.hpp"

#include <cuprof/base/text.hpp>
#include <cuprof/model/attribution.hpp>
#include <cuprof/model/call_stacks.hpp>
#include <cuprof/model/nesting.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <limits>
#include <optional>
#include <cstring>
#include <map>
#include <system_error>
#include <thread>
#include <unordered_map>

namespace cuprof {

namespace detail {

std::optional<std::uint32_t> file_id(std::int64_t id) {
  if (id < 0 || id > 0xFFFFFFFFll) return std::nullopt;
  return std::uint32_t(id);
}

namespace {

// The metric samples as one series per GPU. The metrics, their labels and the
// interval are the cuprof block's; without a block (another tool's trace),
// the counters' names are the labels (a default label keeps its CUPTI name)
// and the interval is the median gap between a GPU's samples. A GPU's counters
// at one time are one sample. With held values (the block says so) a counter
// holds its value until its track's next event, and a sample ends at the
// GPU's next one, or an interval after its start where a gap (the block's)
// begins before that or none follows. Otherwise each event is one sample,
// which ends at the next sample's start or an interval after its own,
// whichever comes first. Left out: a sample of a metric or GPU the block does
// not name, of a metric past max_gpu_metrics, or at a time outside 64-bit
// epoch nanoseconds; a metric given twice at one time keeps its first value.
// The block's gaps and alignment go to their GPU's series.
void build_gpu_metrics(const raw_trace& raw, std::int64_t base, trace& t) {
  if (raw.metric_samples.empty()) return;
  const raw_metric_block& block = raw.metric_block;
  const bool named = block.present && !block.metrics.empty();
  std::vector<gpu_metric> metrics = block.metrics;
  std::unordered_map<name_id, std::uint32_t> column_of;  // a counter's name -> its metric, or no_index
  const auto column = [&](name_id label) {
    const auto [it, added] = column_of.try_emplace(label, no_index);
    if (!added) return it->second;
    const std::string& text = raw.names.str(label);
    for (std::uint32_t m = 0; m < metrics.size(); ++m)
      if (metrics[m].label == text) return it->second = m;
    if (named || metrics.size() >= max_gpu_metrics) return it->second;
    std::string cupti_name = text;
    for (const gpu_metric& d : labelled_gpu_metrics())
      if (d.label == text) cupti_name = d.name;
    metrics.push_back({std::move(cupti_name), text});
    return it->second = std::uint32_t(metrics.size() - 1);
  };
  struct sample {
    std::uint64_t ts;
    std::uint32_t column;
    std::uint16_t device;
    double value;
  };
  std::vector<sample> samples;
  samples.reserve(raw.metric_samples.size());
  for (const raw_metric_sample& r : raw.metric_samples) {
    std::int64_t ts = 0;
    if (__builtin_add_overflow(r.ts, base, &ts) || ts < 0) continue;
    if (block.present && !block.devices.empty() &&
        std::find(block.devices.begin(), block.devices.end(), r.device) == block.devices.end())
      continue;
    const std::uint32_t m = column(r.label);
    if (m != no_index) samples.push_back({std::uint64_t(ts), m, r.device, r.value});
  }
  if (samples.empty()) return;
  std::stable_sort(samples.begin(), samples.end(),
                   [](const sample& a, const sample& b) { return a.device != b.device ? a.device < b.device : a.ts < b.ts; });
  std::uint64_t interval = block.interval_ns;
  if (interval == 0) {
    std::vector<std::uint64_t> gaps;
    for (std::size_t i = 1; i < samples.size(); ++i)
      if (samples[i].device == samples[i - 1].device && samples[i].ts > samples[i - 1].ts)
        gaps.push_back(samples[i].ts - samples[i - 1].ts);
    interval = summarize(std::move(gaps)).median_ns;
  }
  const auto plus = [](std::uint64_t a, std::uint64_t b) {
    return a > std::numeric_limits<std::uint64_t>::max() - b ? std::numeric_limits<std::uint64_t>::max() : a + b;
  };
  const auto epoch = [&](std::int64_t ts) -> std::optional<std::uint64_t> {
    std::int64_t at = 0;
    if (__builtin_add_overflow(ts, base, &at) || at < 0) return std::nullopt;
    return std::uint64_t(at);
  };
  std::vector<double> values(metrics.size()), held(metrics.size());
  for (std::size_t i = 0; i < samples.size();) {
    gpu_metric_series s;
    s.device = samples[i].device;
    s.interval_ns = interval;
    s.dropped = t.gpu_metrics.empty() ? block.dropped : 0;            // the block's counts, on the first GPU's series
    s.out_of_range = t.gpu_metrics.empty() ? block.out_of_range : 0;  // and add() counts what this file has
    s.metrics = metrics;
    for (const raw_metric_block::gap& g : block.gaps)
      if (g.device == s.device)
        if (const auto a = epoch(g.ts)) s.gaps.push_back({*a, plus(*a, std::uint64_t(g.dur)), g.cause});
    std::sort(s.gaps.begin(), s.gaps.end(),
              [](const gpu_metric_gap& a, const gpu_metric_gap& b) { return a.start_ns < b.start_ns; });
    for (const raw_metric_block::alignment& a : block.alignments)
      if (a.device == s.device) s.shift_ns = a.shift_ns, s.aligned = a.aligned;
    std::size_t next_gap = 0;  // the first gap not ending by the sample
    std::fill(held.begin(), held.end(), __builtin_nan(""));
    for (; i < samples.size() && samples[i].device == s.device;) {
      const std::uint64_t ts = samples[i].ts;
      std::fill(values.begin(), values.end(), __builtin_nan(""));
      for (; i < samples.size() && samples[i].device == s.device && samples[i].ts == ts; ++i)
        if (values[samples[i].column] != values[samples[i].column]) values[samples[i].column] = samples[i].value;
      const bool last = i == samples.size() || samples[i].device != s.device;
      std::uint64_t end = last ? ts : samples[i].ts;
      if (block.held_values) {
        while (next_gap < s.gaps.size() && s.gaps[next_gap].end_ns <= ts) ++next_gap;
        const bool gap_before_next = next_gap < s.gaps.size() && s.gaps[next_gap].start_ns < end;
        if (interval && (last || gap_before_next)) end = std::min(last ? plus(ts, interval) : end, plus(ts, interval));
        for (std::size_t m = 0; m < values.size(); ++m)
          if (values[m] == values[m]) held[m] = values[m];
          else values[m] = held[m];
        if (last || gap_before_next) std::fill(held.begin(), held.end(), __builtin_nan(""));  // a gap: nothing holds across it
      } else if (interval && (last || end - ts > interval)) {
        end = plus(ts, interval);
      }
      s.add(ts, end, values.data());
    }
    list_unlisted_gaps(s);  // a trace without the block's gaps (older, or another tool's) says them by its times
    t.gpu_metrics.push_back(std::move(s));
  }
}

}  // namespace

void build_trace(raw_trace& raw, loaded_trace& out) {
  out.base_ns = raw.base_ns;
  out.events = raw.events;
  out.used = raw.used;
  out.rank = raw.rank;
  trace& t = out.t;
  t.meta = std::move(raw.meta);
  std::map<std::uint32_t, std::string> thread_names;
  // Times become Unix-epoch nanoseconds now that the base is known.
  const std::int64_t base = std::int64_t(out.base_ns);
  const auto absolute = [&](std::int64_t& x) {
    if (__builtin_add_overflow(x, base, &x))
      throw error(out.source + ": an event lies beyond what 64-bit nanoseconds hold (\"baseTimeNanoseconds\" + \"ts\")");
    if (x < 0) throw error(out.source + ": an event lies before the epoch (negative \"ts\")");
  };
  for (raw_span& x : raw.spans) absolute(x.start), absolute(x.end);
  for (raw_span& x : raw.overhead) absolute(x.start), absolute(x.end);
  for (raw_call& x : raw.calls) absolute(x.start), absolute(x.end);
  for (raw_gpu& x : raw.gpu) absolute(x.start), absolute(x.end);
  for (raw_annotation& x : raw.annotations) absolute(x.start), absolute(x.end);
  // Names enter the model's table in the order they always did (overhead,
  // spans, calls, then GPU work by time): tables break ties by it.
  std::vector<name_id> model_name(raw.names.size(), no_index);
  const auto name = [&](name_id raw_name) {
    name_id& id = model_name[raw_name];
    if (id == no_index) id = t.names.intern(raw.names.str(raw_name));
    return id;
  };
  for (const raw_span& r : raw.overhead) {
    overhead_span o;
    o.start_ns = std::uint64_t(r.start);
    o.end_ns = std::uint64_t(r.end);
    o.name = name(r.name);
    t.overhead.push_back(o);
  }
  for (const auto& c : raw.thread_candidates)
    if (c.pid == raw.cpu_pid && !thread_names.count(std::uint32_t(c.tid))) thread_names.emplace(std::uint32_t(c.tid), c.name);
  out.format = raw.is_cuprof ? trace_format::cuprof : raw.is_torch ? trace_format::torch : trace_format::chrome;
  t.meta.pid = raw.cpu_pid >= 0 ? std::uint32_t(raw.cpu_pid) : 0;
  if (auto it = raw.process_names.find(raw.cpu_pid); it != raw.process_names.end()) t.meta.process_name = it->second;

  // Spans in nesting order (nests_before, file order on identical extents): parents precede children.
  // Sorted as compact keys, cheaper to compare and move than indices into the spans, and only when out of order.
  struct span_key {
    std::int64_t start, end;
    std::size_t order;
    std::uint32_t tid, index;
    bool operator<(const span_key& o) const noexcept {
      if (tid != o.tid) return tid < o.tid;
      if (start != o.start) return start < o.start;
      if (end != o.end) return end > o.end;
      return order < o.order;
    }
  };
  std::vector<span_key> order;
  order.reserve(raw.spans.size());
  for (const raw_span& r : raw.spans) order.push_back({r.start, r.end, r.order, r.tid, std::uint32_t(order.size())});
  if (!std::is_sorted(order.begin(), order.end())) std::sort(order.begin(), order.end());
  std::int64_t max_ext = 0;
  for (const raw_span& s : raw.spans) max_ext = std::max(max_ext, s.ext);
  // External id -> position in t.spans, the first span in nesting order keeping an id given twice.
  correlation_index span_by_ext;
  span_by_ext.build_from([&](auto&& add) {
    for (std::uint32_t pos = 0; pos < order.size(); ++pos)
      if (const auto ext = file_id(raw.spans[order[pos].index].ext)) add(*ext, pos);
  });
  const auto span_of = [&](std::int64_t ext) {
    const auto id = file_id(ext);
    return id ? span_by_ext.find(*id) : no_index;
  };
  std::uint32_t next_id = std::uint32_t(std::min<std::int64_t>(max_ext, 0x7FFFFFFF)) + 1;
  t.spans.reserve(raw.spans.size());
  for (const span_key& key : order) {
    const raw_span& r = raw.spans[key.index];
    cpu_span s;
    s.start_ns = std::uint64_t(r.start);
    s.end_ns = std::uint64_t(r.end);
    s.name = name(r.name);
    s.tid = r.tid;
    s.is_step = starts_with(raw.names.str(r.name), step_name_prefix);
    const bool usable_id = span_of(r.ext) == t.spans.size();
    s.id = usable_id ? std::uint32_t(r.ext) : next_id++;
    s.first_arg = std::uint32_t(t.span_args.size());
    s.arg_count = std::uint8_t(r.args.size());
    for (const raw_arg& ra : r.args) {
      span_arg a;
      a.key = t.names.intern(ra.key);
      a.kind = ra.kind;
      a.integer = ra.integer;
      a.real = ra.real;
      if (ra.kind == span_arg::type::text) a.text = t.names.intern(ra.text);
      t.span_args.push_back(a);
    }
    t.spans.push_back(s);
  }

  // Calls in start order per thread.
  std::sort(raw.calls.begin(), raw.calls.end(), [](const raw_call& a, const raw_call& b) {
    return a.tid != b.tid ? a.tid < b.tid : a.start != b.start ? a.start < b.start : a.end > b.end;
  });
  t.api_calls.reserve(raw.calls.size());
  correlation_index call_by_correlation;  // -> position in t.api_calls
  call_by_correlation.build_from([&](auto&& add) {
    for (std::uint32_t i = 0; i < raw.calls.size(); ++i)
      if (const auto correlation = file_id(raw.calls[i].correlation)) add(*correlation, i);
  });
  // Calls share a call_kind per name, callback id, domain and arrow: looked
  // up in a map, as a file may have many. A trace holds at most 2^16 kinds.
  std::unordered_map<std::uint64_t, std::uint16_t> kind_index;
  const auto intern_kind = [&](const call_kind& k) {
    const std::uint64_t key = std::uint64_t(k.name) << 32 | std::uint64_t(k.cbid) << 2 |
                              std::uint64_t(k.domain == api_domain::driver) << 1 | std::uint64_t(k.has_flow);
    const auto [it, added] = kind_index.try_emplace(key, std::uint16_t(t.call_kinds.size()));
    if (added) {
      if (t.call_kinds.size() > 0xFFFF)
        throw error(out.source + ": more than 65536 different CUDA calls (name and \"cbid\"); cuprof reads at most that");
      t.call_kinds.push_back(k);
    }
    return it->second;
  };
  stack_interner stacks;
  // A call's whole stack from "stackFrames" (its "sf", innermost first, up
  // the callers; 1024 frames at most, 16 times what cuprof captures),
  // interned once per node: where a node is missing or the callers loop, the
  // call keeps its "Call stack" arg.
  constexpr std::size_t max_read_stack_frames = 1024;
  std::unordered_map<std::int64_t, std::uint32_t> stack_of_frame;
  const auto stack_from_frames = [&](std::int64_t leaf) -> std::uint32_t {
    const auto known = stack_of_frame.find(leaf);
    if (known != stack_of_frame.end()) return known->second;
    std::vector<name_id> frames;
    for (std::int64_t id = leaf; id >= 0;) {
      const auto node = raw.frame_nodes.find(id);
      if (node == raw.frame_nodes.end() || frames.size() >= raw.frame_nodes.size()) {
        frames.clear();  // a caller not there, or a loop
        break;
      }
      if (frames.size() == max_read_stack_frames) break;  // deeper: its innermost frames
      frames.push_back(name(node->second.frame));
      id = node->second.parent;
    }
    return stack_of_frame[leaf] = frames.empty() ? no_index : stacks.add(t, frames);
  };
  for (const raw_call& r : raw.calls) {
    std::uint32_t stack = r.frame >= 0 && !raw.frame_nodes.empty() ? stack_from_frames(r.frame) : no_index;
    if (stack == no_index && r.stack != no_index) {
      std::vector<name_id> frames;
      for (name_id f : raw.stacks[r.stack]) frames.push_back(name(f));
      stack = stacks.add(t, frames);
    }
    if (stack != no_index) stack_interner::set(t, t.api_calls.size(), stack);
    api_call a;
    a.start_ns = std::uint64_t(r.start);
    a.end_ns = std::uint64_t(r.end);
    a.tid = r.tid;
    const auto cbid = std::uint16_t(std::max<std::int64_t>(0, std::min<std::int64_t>(r.cbid, 0xFFFF)));  // CUPTI's are below
    a.kind = intern_kind({name(r.name), cbid, r.domain, false});
    a.correlation = r.correlation >= 0 ? std::uint32_t(r.correlation) : 0;
    t.api_calls.push_back(a);
  }
  stack_interner::finish(t);
  link_parents(t, parents_of::spans_and_calls);

  // Allocations and frees in time order (file order at equal times: an
  // allocation and its free may share a microsecond), each charged to a scope:
  // the one the file names (External id), else as attribute_memory() charges
  // it. One that lies outside what 64-bit epoch nanoseconds hold is dropped.
  if (!raw.memory.empty()) t.meta.memory_recorded = true;
  const auto earlier = [](const raw_memory& a, const raw_memory& b) { return a.ts < b.ts; };
  if (!std::is_sorted(raw.memory.begin(), raw.memory.end(), earlier))
    std::stable_sort(raw.memory.begin(), raw.memory.end(), earlier);
  t.memory.reserve(raw.memory.size());
  std::vector<std::uint32_t> named_spans;  // per memory event: the scope its External id names, or no_index
  named_spans.reserve(raw.memory.size());
  for (const raw_memory& r : raw.memory) {
    std::int64_t ts = 0;
    if (__builtin_add_overflow(r.ts, base, &ts) || ts < 0) continue;
    t.memory.push_back(r.event);
    t.memory.back().ts_ns = std::uint64_t(ts);
    named_spans.push_back(span_of(r.ext));
  }
  attribute_memory(t, call_by_correlation);
  for (std::size_t i = 0; i < t.memory.size(); ++i)
    if (named_spans[i] != no_index) t.memory[i].span = named_spans[i];
  build_gpu_metrics(raw, base, t);

  // GPU work: the launching call by correlation, the scope by External id.
  const auto starts_before = [](const raw_gpu& a, const raw_gpu& b) { return a.start < b.start; };
  if (!std::is_sorted(raw.gpu.begin(), raw.gpu.end(), starts_before))
    std::stable_sort(raw.gpu.begin(), raw.gpu.end(), starts_before);
  t.meta.unmatched_gpu_records = 0;
  t.gpu.reserve(raw.gpu.size());
  std::unordered_map<gpu_lane, std::uint32_t, gpu_lane_hash> lane_index;
  std::vector<std::uint32_t> launch_spans;
  launch_spans.reserve(raw.gpu.size());
  bool any_launch_span = false;
  for (const raw_gpu& r : raw.gpu) {
    gpu_activity g;
    g.start_ns = std::uint64_t(r.start);
    g.end_ns = std::uint64_t(r.end);
    g.name = name(r.name);
    g.correlation = r.correlation >= 0 ? std::uint32_t(r.correlation) : 0;
    const gpu_lane where{r.device, r.context, r.stream};
    const auto [lane, added] = lane_index.try_emplace(where, std::uint32_t(t.gpu_lanes.size()));
    if (added) t.gpu_lanes.push_back(where);
    g.lane = lane->second;
    g.kind = r.kind;
    g.subkind = r.subkind;
    const auto correlation = file_id(r.correlation);
    g.api = correlation ? call_by_correlation.find(*correlation) : no_index;
    const std::uint32_t span = span_of(r.ext);
    launch_spans.push_back(span);
    any_launch_span = any_launch_span || span != no_index;
    if (r.kind != gpu_kind::sync && g.api == no_index && span == no_index) ++t.meta.unmatched_gpu_records;
    if (g.api != no_index) {  // drawn with an arrow, as the writer drew it: syncs too
      api_call& call = t.api_calls[g.api];
      if (!t.kind_of(call).has_flow) {
        call_kind flowing = t.kind_of(call);
        flowing.has_flow = true;
        call.kind = intern_kind(flowing);
      }
    }
    if (moves_bytes(r.kind)) {
      t.set_bytes(g, r.bytes);
    } else if (r.has_wait) {
      t.set_wait(g, r.wait);
    } else if (r.has_details) {
      g.details = std::uint32_t(t.kernels.size());
      t.kernels.push_back(r.details);
    }
    if (r.collective) out.collectives.emplace_back(std::uint32_t(t.gpu.size()), *r.collective);
    t.gpu.push_back(g);
  }
  if (any_launch_span) t.gpu_launch_spans = std::move(launch_spans);

  // The file's scope extents on the GPU. Kineto (and cuprof) draw them 1 ns
  // wider on each side than the work they cover; the table uses the work's extent.
  for (const raw_annotation& r : raw.annotations) {
    const std::uint32_t span = span_of(r.ext);
    if (span == no_index || t.names.str(t.spans[span].name) != raw.names.str(r.name)) {
      ++out.unmatched_annotations;
      continue;
    }
    gpu_annotation a;
    a.span = span;
    a.device = r.device;
    a.stream = r.stream;
    a.start_ns = std::uint64_t(r.start);
    a.end_ns = std::uint64_t(r.end);
    if (a.end_ns - a.start_ns >= 2) {
      ++a.start_ns;
      --a.end_ns;
    }
    t.gpu_annotations.push_back(a);
  }
  // The order derive_gpu_annotations() gives: per lane by start, enclosing ones first,
  // the shallower first when two cover the same work.
  const std::vector<std::uint32_t> depth = span_depths(t);
  std::stable_sort(t.gpu_annotations.begin(), t.gpu_annotations.end(), [&](const gpu_annotation& a, const gpu_annotation& b) {
    if (a.device != b.device) return a.device < b.device;
    if (a.stream != b.stream) return a.stream < b.stream;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    if (a.end_ns != b.end_ns) return a.end_ns > b.end_ns;
    return depth[a.span] < depth[b.span];
  });

  // Threads and the window.
  for (const auto& th : thread_names) t.meta.threads.push_back({th.first, th.second});
  time_extent events;
  for (const cpu_span& s : t.spans) events.add(s.start_ns, s.end_ns);
  for (const api_call& a : t.api_calls) events.add(a.start_ns, a.end_ns);
  for (const gpu_activity& g : t.gpu) events.add(g.start_ns, g.end_ns);
  for (const memory_event& m : t.memory) events.add(m.ts_ns, m.ts_ns);
  std::int64_t profiler_start = 0;
  if (raw.has_profiler_start && !__builtin_add_overflow(raw.profiler_start, std::int64_t(out.base_ns), &profiler_start) &&
      profiler_start > 0)
    t.meta.profiler_start_ns = std::uint64_t(profiler_start);
  if (raw.window_start > 0 && raw.window_end >= raw.window_start) {
    t.meta.window_start_ns = std::uint64_t(raw.window_start);
    t.meta.window_end_ns = std::uint64_t(raw.window_end);
  } else if (!events.empty()) {
    t.meta.window_start_ns = events.start_ns;
    t.meta.window_end_ns = events.end_ns;
  }
}

raw_trace read_raw_trace_serially(std::string_view json, const std::string& source, const read_progress& progress) {
  trace_event_reader b;
  std::vector<json_node> nodes;  // the value being read; reused, so an event allocates nothing
  read_top_level(json, source, b, [&](json_document& doc, simdjson::ondemand::value events) {
    std::size_t i = 0, reported = 0;
    doc.for_each_item(events, [&](simdjson::ondemand::value e) {
      const json_node& event = doc.read(e, nodes, event_member_used);
      b.event(event, i++, doc);
      if (event.offset - reported >= (1u << 20)) {
        progress(read_stage::parsing, reported = event.offset, json.size());
        doc.release_before(event.offset);
      }
    });
  });
  return std::move(b.result());
}

bool is_json_blank(char c) noexcept { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::optional<events_array> find_events_array(std::string_view json) {
  std::size_t at = json.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;
  while (at < json.size() && is_json_blank(json[at])) ++at;
  if (at >= json.size()) return std::nullopt;
  events_array a;
  if (json[at] == '[') {
    a.open = at;
  } else {
    const std::size_t key = json.find("\"traceEvents\"", at);
    if (key == std::string_view::npos) return std::nullopt;
    at = key + 13;
    while (at < json.size() && is_json_blank(json[at])) ++at;
    if (at >= json.size() || json[at] != ':') return std::nullopt;
    for (++at; at < json.size() && is_json_blank(json[at]);) ++at;
    if (at >= json.size() || json[at] != '[') return std::nullopt;
    a.open = at;
  }
  // The last ']' that follows an object's '}': an array of events ends so.
  const std::size_t tail = json.size() > (1u << 20) ? json.size() - (1u << 20) : 0;
  for (std::size_t close = json.rfind(']'); close != std::string_view::npos && close > a.open && close >= tail;
       close = close ? json.rfind(']', close - 1) : std::string_view::npos) {
    std::size_t before = close;
    while (before > a.open + 1 && is_json_blank(json[before - 1])) --before;
    if (json[before - 1] == '}') {
      a.close = close;
      return a;
    }
  }
  return std::nullopt;
}

std::vector<std::pair<std::size_t, std::size_t>> split_events(std::string_view json, events_array a, std::size_t piece_bytes) {
  std::vector<std::pair<std::size_t, std::size_t>> pieces;
  std::size_t from = a.open + 1, end = a.close;
  while (from < end && is_json_blank(json[from])) ++from;
  while (end > from && is_json_blank(json[end - 1])) --end;
  if (from >= end || json[from] != '{' || json[end - 1] != '}') return pieces;
  for (;;) {
    std::size_t cut = std::string_view::npos, next = 0;
    for (std::size_t at = from + piece_bytes; at < end;) {
      const void* c = std::memchr(json.data() + at, ',', end - at);
      if (!c) break;
      const std::size_t comma = std::size_t(static_cast<const char*>(c) - json.data());
      std::size_t before = comma, after = comma + 1;
      while (before > from + 1 && is_json_blank(json[before - 1])) --before;
      while (after < end && is_json_blank(json[after])) ++after;
      if (json[before - 1] == '}' && after < end && json[after] == '{') {
        cut = before, next = after;
        break;
      }
      at = comma + 1;
    }
    if (cut == std::string_view::npos) {
      pieces.emplace_back(from, end);
      return pieces;
    }
    pieces.emplace_back(from, cut);
    from = next;
  }
}

std::optional<raw_trace> read_raw_trace_in_pieces(std::string_view json, const std::string& source, const read_progress& progress,
                                                  std::size_t piece_bytes, unsigned threads) {
  const std::optional<events_array> array = find_events_array(json);
  if (!array) return std::nullopt;
  const auto pieces = split_events(json, *array, piece_bytes);
  if (pieces.size() < 2) return std::nullopt;

  std::string rest;
  rest.reserve(json.size() - (array->close - array->open - 1) + simdjson::SIMDJSON_PADDING);
  rest.append(json.substr(0, array->open + 1)).append(json.substr(array->close));
  pad_for_json(rest);
  trace_event_reader top;
  // Exactly one events array, the emptied one (another, or a rewritten text: read serially).
  bool emptied_array = false, other_array = false;
  bool cuprof_trace = false;  // as the events read it: a "cuprof" member before them
  try {
    read_top_level(rest, source, top, [&](json_document&, simdjson::ondemand::value events) {
      const bool emptied = !emptied_array && events.raw_json_token().data() == rest.data() + array->open;
      (emptied ? emptied_array : other_array) = true;
      if (emptied) cuprof_trace = top.result().is_cuprof;
    });
  } catch (const error&) {
    return std::nullopt;
  }
  if (!emptied_array || other_array) return std::nullopt;

  std::vector<raw_trace> results(pieces.size());
  std::atomic<std::size_t> next{0};
  std::atomic<std::uint64_t> done{0};
  std::atomic<bool> failed{false};
  const auto work = [&](bool reports) {
    std::string text;
    std::vector<json_node> nodes;
    simdjson::ondemand::parser parser;
    for (std::size_t i; !failed && (i = next++) < pieces.size();) {
      try {
        const auto [first, last] = pieces[i];
        text.assign(1, '[').append(json.substr(first, last - first)).push_back(']');
        pad_for_json(text);
        trace_event_reader reader;
        reader.result().is_cuprof = cuprof_trace;
        json_document doc(text, source, &parser);
        std::size_t index = 0;
        doc.for_each_item(
            doc.root(), [&](simdjson::ondemand::value e) { reader.event(doc.read(e, nodes, event_member_used), index++, doc); });
        doc.expect_end();
        results[i] = std::move(reader.result());
        done += last - first;
      } catch (...) {
        failed = true;
      }
      if (reports) progress(read_stage::parsing, done, json.size());
    }
  };
  std::vector<std::thread> helpers;
  for (unsigned t = 1; t < threads && t < pieces.size(); ++t) {
    try {
      helpers.emplace_back(work, false);
    } catch (const std::system_error&) {
      break;  // fewer threads
    }
  }
  work(true);
  for (std::thread& h : helpers) h.join();
  if (failed) return std::nullopt;

  raw_trace out = std::move(top.result());
  join_events(out, results);
  return out;
}

raw_trace read_raw_trace(std::string_view json, const std::string& source, const read_progress& progress) {
  const unsigned threads = std::min(std::thread::hardware_concurrency(), max_read_threads);
  if (threads > 1 && json.size() >= 2 * read_piece_bytes)
    if (std::optional<raw_trace> raw = read_raw_trace_in_pieces(json, source, progress, read_piece_bytes, threads))
      return std::move(*raw);
  return read_raw_trace_serially(json, source, progress);
}

loaded_trace trace_of_bytes(std::string bytes, const std::string& source, bool checked, const read_progress& progress) {
  if (bytes.empty()) throw error("'" + source + "' is empty, expected a JSON trace");
  if (is_gzip(bytes)) {
    bytes = gunzip(bytes, source, progress);
    if (bytes.empty()) throw error("'" + source + "' decompresses to nothing, expected a JSON trace");
  } else if (!checked) {
    json_text_check(source, "").feed(bytes.data(), bytes.size());
  }
  pad_for_json(bytes);
  loaded_trace out;
  out.source = source;
  raw_trace raw = read_raw_trace(bytes, source, progress);
  std::string().swap(bytes);  // the text is no longer needed: free it before the model is built
  build_trace(raw, out);
  return out;
}

loaded_trace read_stream(std::FILE* f, const std::string& source, std::uint64_t size, const read_progress& progress,
                         std::uint64_t limit) {
  const auto over_limit = [&](std::uint64_t held) {
    if (size == 0 && held > limit)
      throw error("'" + source + "' holds more than " + std::to_string(limit) + " bytes, more than cuprof reads from a pipe");
  };
  // A stream of unknown size goes to a temporary file first, then is read as
  // a file of known size: one allocation of exactly its size, where growing
  // a buffer by doubling held up to twice the text, and copied it, before
  // the cap refused it.
  if (size == 0) {
    std::FILE* spool = std::tmpfile();
    if (!spool) throw error("cannot read '" + source + "': no temporary file to hold it: " + std::strerror(errno));
    struct closer {
      std::FILE* f;
      ~closer() { std::fclose(f); }
    } close_spool{spool};
    char block[1 << 16];
    std::uint64_t total = 0;
    json_text_check check(source, "");  // garbage is refused at its first bytes, not spooled whole
    bool gzip = false;
    for (std::size_t n; (n = std::fread(block, 1, sizeof block, f)) > 0;) {
      if (total == 0) gzip = is_gzip(std::string_view(block, n));
      if (!gzip) check.feed(block, n);
      total += n;
      over_limit(total);
      if (std::fwrite(block, 1, n, spool) != n)
        throw error("cannot read '" + source + "': its temporary file: " + std::strerror(errno));
      progress(read_stage::reading, total, 0);
    }
    if (std::ferror(f)) throw error("cannot read '" + source + "': " + std::strerror(errno));
    if (total == 0) return trace_of_bytes(std::string(), source, true, progress);
    if (std::fflush(spool) != 0 || std::fseek(spool, 0, SEEK_SET) != 0)
      throw error("cannot read '" + source + "': its temporary file: " + std::strerror(errno));
    return read_stream(spool, source, total, progress, limit);
  }
  std::string bytes;
  json_text_check check(source, "");
  bool gzip = false;
  char first[1 << 16];
  std::size_t n = std::fread(first, 1, sizeof first, f);
  if (n > 0) {
    gzip = is_gzip(std::string_view(first, n));
    if (!gzip && ends_with_gz(source)) throw error("'" + source + "' ends in .gz but is not gzip data");
    if (!gzip) check.feed(first, n);
    bytes.reserve(std::size_t(size) + simdjson::SIMDJSON_PADDING);  // once the start looked like a trace
    advise_huge_pages(bytes.data(), bytes.capacity());
    bytes.append(first, n);
    over_limit(bytes.size());
    progress(read_stage::reading, bytes.size(), size);
  }
  // The rest straight into the room reserved (no second copy, and no growth
  // past it: growing would copy the whole text); a pipe's, through `first`.
  while (n > 0) {
    const std::size_t held = bytes.size(), room = bytes.capacity() - held;
    if (room > simdjson::SIMDJSON_PADDING) {
      const std::size_t want = std::min(room - simdjson::SIMDJSON_PADDING, sizeof first);
      bytes.resize(held + want);
      n = std::fread(&bytes[held], 1, want, f);
      bytes.resize(held + n);
    } else {
      n = std::fread(first, 1, sizeof first, f);
      bytes.append(first, n);
    }
    over_limit(bytes.size());
    if (!gzip) check.feed(bytes.data() + held, n);
    progress(read_stage::reading, bytes.size(), size);
  }
  if (std::ferror(f)) throw error("cannot read '" + source + "': " + std::strerror(errno));
  return trace_of_bytes(std::move(bytes), source, true, progress);
}

}  // namespace detail

const char* trace_format_name(trace_format f) {
  switch (f) {
    case trace_format::cuprof: return "cuprof trace";
    case trace_format::torch: return "torch.profiler trace";
    default: return "Chrome trace";
  }
}

loaded_trace parse_trace(std::string_view json, const std::string& source, const read_progress& progress) {
  std::string padded;
  padded.reserve(json.size() + simdjson::SIMDJSON_PADDING);
  padded.assign(json);
  detail::pad_for_json(padded);
  loaded_trace out;
  out.source = source;
  detail::raw_trace raw = detail::read_raw_trace(padded, source, progress);
  detail::build_trace(raw, out);
  return out;
}

loaded_trace read_trace_bytes(std::string bytes, const std::string& source) {
  return detail::trace_of_bytes(std::move(bytes), source, false);
}

loaded_trace read_trace_file(const std::string& path, const read_progress& progress) {
  struct stat st;
  if (path.empty()) throw error("no trace file given");
  if (::stat(path.c_str(), &st) != 0) throw error("cannot read '" + path + "': " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw error("cannot read '" + path + "': it is a directory, expected a trace file");
  const bool pipe = S_ISFIFO(st.st_mode);
  if (!S_ISREG(st.st_mode) && !pipe) throw error("cannot read '" + path + "': not a regular file or a pipe");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw error("cannot read '" + path + "': " + std::strerror(errno));
  struct closer {
    std::FILE* f;
    ~closer() { std::fclose(f); }
  } close_at_end{f};
  return detail::read_stream(f, path, pipe ? 0 : std::uint64_t(st.st_size), progress);
}

loaded_trace read_trace_stream(std::FILE* f, const std::string& source, const read_progress& progress) {
  struct stat st;
  const bool regular = ::fstat(::fileno(f), &st) == 0 && S_ISREG(st.st_mode);  // `< file`: its size is known
  return detail::read_stream(f, source, regular ? std::uint64_t(st.st_size) : 0, progress);
}

}  // namespace cuprof
