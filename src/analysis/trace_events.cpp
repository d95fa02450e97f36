#include "trace_events.hpp"

#include <cuprof/output/trace_schema.hpp>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>

namespace cuprof::detail {

bool us_to_ns(std::string_view text, std::int64_t& out) {
  if (text.find_first_of("eE") == std::string_view::npos) {
    std::size_t i = 0;
    const bool negative = !text.empty() && text[0] == '-';
    if (negative) ++i;
    std::int64_t whole = 0;
    std::size_t digits = 0;
    for (; i < text.size() && text[i] != '.'; ++i, ++digits) {
      if (text[i] < '0' || text[i] > '9' || digits >= 15) return false;  // 1e15 us: 31 years
      whole = whole * 10 + (text[i] - '0');
    }
    std::int64_t frac = 0;
    int frac_digits = 0;
    bool round_up = false;
    if (i < text.size()) {
      for (++i; i < text.size(); ++i) {
        if (text[i] < '0' || text[i] > '9') return false;
        if (frac_digits < 3) {
          frac = frac * 10 + (text[i] - '0');
          ++frac_digits;
        } else if (frac_digits == 3) {
          round_up = text[i] >= '5';
          ++frac_digits;
        }
      }
    }
    while (frac_digits < 3) {
      frac *= 10;
      ++frac_digits;
    }
    const std::int64_t ns = whole * 1000 + frac + (round_up ? 1 : 0);
    out = negative ? -ns : ns;
    return true;
  }
  errno = 0;
  const long double v = std::strtold(std::string(text).c_str(), nullptr);
  if (errno != 0 || !std::isfinite(double(v)) || std::fabs(double(v)) > 1e15) return false;
  out = std::int64_t(std::llround(double(v * 1000.0L)));
  return true;
}

bool to_int(const json_node& v, std::int64_t& out) {
  if (!v.is_number()) return false;
  const std::string_view s = v.text;
  if (s.find_first_of(".eE") == std::string_view::npos) {
    const bool negative = s[0] == '-';
    std::int64_t x = 0;
    for (std::size_t i = negative ? 1 : 0; i < s.size(); ++i)
      if (__builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, negative ? -(s[i] - '0') : s[i] - '0', &x)) return false;
    out = x;
    return true;
  }
  errno = 0;
  const double d = std::strtod(std::string(s).c_str(), nullptr);
  if (errno == ERANGE || !std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e18) return false;
  out = std::int64_t(d);
  return true;
}

void append_compact(std::string& out, const json_node& v) {
  switch (v.type) {
    case json_kind::array: {
      out += '[';
      const json_node* item = v.first();
      for (std::uint32_t i = 0; i < v.count; ++i, item = item->next()) {
        if (i) out += ", ";
        append_compact(out, *item);
      }
      out += ']';
      break;
    }
    case json_kind::object: out += "{...}"; break;
    case json_kind::boolean: out += v.boolean ? "true" : "false"; break;
    case json_kind::null: out += "null"; break;
    default: out += v.text;  // a string's characters, a number as written
  }
}

std::vector<raw_arg> span_args_of(const json_node* args, bool cuprof_trace) {
  std::vector<raw_arg> out;
  if (!args || !args->is_object()) return out;
  if (const json_node* dims = args->find(schema::arg_input_dims)) {
    raw_arg a;
    a.key = std::string(schema::arg_input_dims);
    a.kind = span_arg::type::text;
    append_compact(a.text, *dims);
    out.push_back(std::move(a));
    return out;
  }
  if (!cuprof_trace) return out;
  const json_node* v = args->first();
  for (std::uint32_t i = 0; i < args->count; ++i, v = v->next()) {
    if (v->key == schema::arg_external_id) continue;
    raw_arg a;
    a.key = std::string(v->key);
    if (v->is_string()) {
      a.kind = span_arg::type::text;
      a.text = std::string(v->text);
    } else if (v->is_number() && !to_int(*v, a.integer)) {
      a.kind = span_arg::type::real;
      a.real = std::strtod(std::string(v->text).c_str(), nullptr);
    } else if (!v->is_number()) {
      continue;
    }
    out.push_back(std::move(a));
    if (out.size() == 255) break;  // cpu_span::arg_count's range
  }
  return out;
}

event_category category_of(std::string_view cat) {
  char lower[32];
  if (cat.size() > sizeof lower) return event_category::skip;  // longer than any category read
  for (std::size_t i = 0; i < cat.size(); ++i) lower[i] = char(std::tolower(static_cast<unsigned char>(cat[i])));
  const std::string_view c(lower, cat.size());
  if (c == schema::cat_user_annotation || c == schema::cat_cpu_op || c == "operator") return event_category::span;
  if (c == schema::cat_cuda_runtime || c == "runtime") return event_category::runtime;
  if (c == schema::cat_cuda_driver || c == "driver") return event_category::driver;
  if (c == schema::cat_kernel) return event_category::kernel;
  if (c == schema::cat_gpu_memcpy || c == "memcpy") return event_category::memcpy;
  if (c == schema::cat_gpu_memset || c == "memset") return event_category::memset;
  if (c == schema::cat_cuda_sync) return event_category::sync;
  if (c == schema::cat_gpu_user_annotation) return event_category::gpu_annotation;
  if (c == schema::cat_overhead) return event_category::overhead;
  return event_category::skip;
}

std::uint8_t memcpy_kind_of(std::string_view name) {
  for (std::uint8_t k = 1; k <= 10; ++k) {
    const std::string token = std::string(" ") + memcpy_kind_name(k) + " ";
    if ((std::string(name) + " ").find(token) != std::string::npos) return k;
  }
  return 0;
}

std::uint8_t memory_kind_of(std::string_view name) {
  for (std::uint8_t k = 1; k <= 7; ++k)
    if (name == memory_kind_name(k)) return k;
  return 0;
}

std::uint8_t sync_kind_of(std::string_view name) {
  for (std::uint8_t k = 1; k <= 4; ++k)
    if (name == sync_kind_name(k)) return k;
  return 0;
}

bool event_member_used(int depth, std::string_view object, std::string_view key) {
  static constexpr std::string_view event_keys[] = {
      "ph", "cat", "name", "ts", "dur", "pid", "tid", "args", schema::event_stack_frame};
  static constexpr std::string_view arg_keys[] = {schema::arg_external_id,   "external id",
                                                  schema::arg_correlation,   schema::arg_cbid,
                                                  schema::arg_device,        schema::arg_context,
                                                  schema::arg_stream,        schema::arg_bytes,
                                                  schema::arg_sync_kind,     schema::arg_registers_per_thread,
                                                  schema::arg_shared_memory, schema::arg_grid,
                                                  schema::arg_block,         schema::arg_graph_id,
                                                  schema::arg_graph_node_id, schema::meta_name};
  // Torch's args the reader never looks at; any other key may be a scope's own argument (span_args_of).
  static constexpr std::string_view unused_torch_arg_keys[] = {"Record function id",
                                                               "Ev Idx",
                                                               "Sequence number",
                                                               "Fwd thread id",
                                                               "Input type",
                                                               "Input Strides",
                                                               "Concrete Inputs",
                                                               "Python id",
                                                               "Python parent id",
                                                               "Python thread",
                                                               "Trace name",
                                                               "Trace iteration",
                                                               "queued",
                                                               "blocks per SM",
                                                               "warps per SM",
                                                               "est. achieved occupancy %",
                                                               "priority",
                                                               "kind",
                                                               "memory bandwidth (GB/s)",
                                                               "Kernel Backend",
                                                               "kernel_backend",
                                                               "Process Group Name",
                                                               "Process Group Ranks"};
  const auto listed = [&](const auto& keys) {
    for (std::string_view k : keys)
      if (json_node::same_key(k, key)) return true;
    return false;
  };
  if (depth == 0) return listed(event_keys);
  if (depth == 1 && object == "args") return listed(arg_keys) || !listed(unused_torch_arg_keys);
  return true;
}

void join_events(raw_trace& into, std::vector<raw_trace>& pieces) {
  const auto reserve = [&](auto member) {
    std::size_t n = (into.*member).size();
    for (const raw_trace& p : pieces) n += (p.*member).size();
    (into.*member).reserve(n);
  };
  reserve(&raw_trace::spans);
  reserve(&raw_trace::overhead);
  reserve(&raw_trace::calls);
  reserve(&raw_trace::gpu);
  reserve(&raw_trace::annotations);
  reserve(&raw_trace::memory);
  reserve(&raw_trace::metric_samples);
  reserve(&raw_trace::thread_candidates);
  std::vector<name_id> ids;
  for (raw_trace& piece : pieces) {
    ids.resize(piece.names.size());
    for (name_id i = 0; i < ids.size(); ++i) ids[i] = into.names.intern(piece.names.str(i));
    const std::size_t first_span = into.spans.size();
    for (raw_span& s : piece.spans) s.name = ids[s.name], s.order += first_span;
    for (raw_span& s : piece.overhead) s.name = ids[s.name];
    const std::uint32_t first_stack = std::uint32_t(into.stacks.size());
    for (raw_call& c : piece.calls) {
      c.name = ids[c.name];
      if (c.stack != no_index) c.stack += first_stack;
    }
    for (std::vector<name_id>& frames : piece.stacks) {
      for (name_id& f : frames) f = ids[f];
      into.stacks.push_back(std::move(frames));
    }
    for (raw_gpu& g : piece.gpu) g.name = ids[g.name];
    for (raw_annotation& a : piece.annotations) a.name = ids[a.name];
    for (raw_metric_sample& m : piece.metric_samples) m.label = ids[m.label];
    const auto append = [](auto& to, auto& from) {
      to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
    };
    append(into.spans, piece.spans);
    append(into.overhead, piece.overhead);
    append(into.calls, piece.calls);
    append(into.gpu, piece.gpu);
    append(into.annotations, piece.annotations);
    append(into.memory, piece.memory);
    append(into.metric_samples, piece.metric_samples);
    append(into.thread_candidates, piece.thread_candidates);
    for (auto& p : piece.process_names) into.process_names.emplace(p.first, std::move(p.second));
    into.events += piece.events;
    into.used += piece.used;
    into.is_torch = into.is_torch || piece.is_torch;
    if (piece.has_profiler_start && (!into.has_profiler_start || piece.profiler_start < into.profiler_start))
      into.has_profiler_start = true, into.profiler_start = piece.profiler_start;
    if (into.cpu_pid < 0) into.cpu_pid = piece.cpu_pid;
    piece = raw_trace();  // freed as it is joined
  }
}

std::uint32_t trace_event_reader::stack_of(const json_node* args) {
  const json_node* stack = args ? args->find(schema::arg_call_stack) : nullptr;
  if (!stack || !stack->is_array() || stack->count == 0) return no_index;
  std::vector<name_id> frames;
  frames.reserve(stack->count);
  const json_node* f = stack->first();
  for (std::uint32_t i = 0; i < stack->count; ++i, f = f->next()) {
    if (!f->is_string()) return no_index;
    frames.push_back(raw_.names.intern(f->text));
  }
  const auto [it, added] = stack_index_.try_emplace(std::move(frames), std::uint32_t(raw_.stacks.size()));
  if (added) raw_.stacks.push_back(it->first);
  return it->second;
}

namespace {

// A stack frame's id, as a key gives it ("12") or a value (12 or "12"); -1
// when it is none of these.
std::int64_t frame_id(std::string_view text) {
  std::int64_t id = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), id);
  return error == std::errc() && end == text.data() + text.size() && id >= 0 ? id : -1;
}
std::int64_t frame_id(const json_node& v) {
  std::int64_t id = -1;
  if (v.is_string()) return frame_id(v.text);
  return to_int(v, id) && id >= 0 ? id : -1;
}

}  // namespace

void trace_event_reader::stack_frames(const json_node& v) {
  const json_node* node = v.first();
  for (std::uint32_t i = 0; i < v.count; ++i, node = node->next()) {
    const std::int64_t id = frame_id(node->key);
    const json_node* name = node->is_object() ? node->find(schema::frame_name) : nullptr;
    if (id < 0 || !name || !name->is_string()) continue;
    const json_node* parent = node->find(schema::frame_parent);
    raw_.frame_nodes[id] = {raw_.names.intern(name->text), parent ? frame_id(*parent) : -1};
  }
}

void trace_event_reader::top_level(std::string_view key, const json_node& v, const json_document& doc) {
  at_ = v.offset;
  doc_ = &doc;
  if (key == schema::key_base_time) {
    std::int64_t b = 0;
    if (!to_int(v, b) || b < 0) fail("\"baseTimeNanoseconds\" is not a non-negative integer");
    raw_.base_ns = std::uint64_t(b);
  } else if (key == schema::key_stack_frames) {
    if (v.is_object()) stack_frames(v);
  } else if (key == schema::key_cuprof) {
    if (!v.is_object()) fail("\"cuprof\" is " + std::string(json_type_name(v.type)) + ", expected an object");
    raw_.is_cuprof = true;
    trace_metadata& m = raw_.meta;
    std::int64_t x = 0;
    const auto count = [&](std::string_view k, std::uint64_t& field) {
      if (const json_node* f = v.find(k); f && to_int(*f, x) && x >= 0) field = std::uint64_t(x);
    };
    if (const json_node* f = v.find(schema::cuprof_window_start_ns); f && to_int(*f, x) && x > 0) raw_.window_start = x;
    if (const json_node* f = v.find(schema::cuprof_window_end_ns); f && to_int(*f, x) && x > 0) raw_.window_end = x;
    count(schema::cuprof_dropped_gpu_records, m.dropped_gpu_records);
    count(schema::cuprof_dropped_cpu_events, m.dropped_cpu_events);
    const json_node* status = v.find(schema::cuprof_cuda_status);
    if (status && status->is_string() && status->text != schema::cuda_status_on) m.cuda_status = std::string(status->text);
    if (const json_node* g = v.find(schema::cuprof_gpu_metrics); g && g->is_object()) metric_block(*g);
    if (const json_node* e = v.find(schema::cuprof_window_edges); e && e->is_object()) {
      // Counts only: a value that is not a non-negative integer is left at 0.
      const auto by_kind = [&](std::string_view k, std::array<std::uint64_t, window_edges::kinds>& n) {
        const json_node* o = e->find(k);
        if (!o || !o->is_object()) return;
        for (std::size_t i = 0; i < window_edges::kinds; ++i)
          if (const json_node* f = o->find(schema::edge_kind_names[i]); f && to_int(*f, x) && x >= 0) n[i] = std::uint64_t(x);
      };
      by_kind(schema::edges_calls_without_gpu_work, m.edges.calls_without_gpu_work);
      by_kind(schema::edges_gpu_work_without_call, m.edges.gpu_work_without_call);
      by_kind(schema::edges_launched_before, m.edges.launched_before);
      if (const json_node* f = e->find(schema::edges_calls_running_at_end); f && to_int(*f, x) && x >= 0)
        m.edges.calls_running_at_end = std::uint64_t(x);
    }
  } else if (key == schema::key_device_properties) {
    if (!v.is_array()) fail("\"deviceProperties\" is " + std::string(json_type_name(v.type)) + ", expected an array");
    const json_node* d = v.first();
    for (std::uint32_t i = 0; i < v.count; ++i, d = d->next()) {
      if (!d->is_object()) fail("\"deviceProperties\" holds " + std::string(json_type_name(d->type)) + ", expected objects");
      device_info info;
      std::int64_t x = 0;
      const auto get = [&](std::string_view k, int& field) {
        if (const json_node* f = d->find(k); f && to_int(*f, x)) field = int(x);
      };
      get(schema::device_id, info.id);
      if (const json_node* f = d->find(schema::device_name); f && f->is_string()) info.name = std::string(f->text);
      if (const json_node* f = d->find(schema::device_total_global_mem); f && to_int(*f, x) && x >= 0)
        info.total_global_mem = std::uint64_t(x);
      for (const schema::device_property& p : schema::device_properties) get(p.key, info.*p.field);
      raw_.meta.devices.push_back(info);
    }
  } else if (key == schema::key_cuda_runtime_version || key == schema::key_cuda_driver_version ||
             key == schema::key_cupti_version) {
    std::int64_t x = 0;
    if (to_int(v, x)) {
      trace_metadata& m = raw_.meta;
      (key == schema::key_cuda_runtime_version  ? m.cuda_runtime_version
       : key == schema::key_cuda_driver_version ? m.cuda_driver_version
                                                : m.cupti_version) = int(x);
    }
  } else if ((key == schema::key_host_name || key == "hostName") && v.is_string()) {
    raw_.meta.host_name = std::string(v.text);
  } else if (key == schema::key_distributed_info && v.is_object()) {
    std::int64_t x = 0;
    if (const json_node* f = v.find(schema::key_rank); f && to_int(*f, x)) {
      raw_.rank = x;  // any integer: several ranks' traces are told apart by it, never indexed by it
      if (x >= 0 && x <= std::numeric_limits<int>::max()) raw_.meta.rank = int(x);
    }
    if (const json_node* f = v.find(schema::key_world_size); f && to_int(*f, x) && x >= 1 && x <= std::numeric_limits<int>::max())
      raw_.meta.world_size = int(x);
    if (const json_node* f = v.find(schema::key_backend); f && f->is_string())
      raw_.meta.distributed_backend = std::string(f->text);
    if (const json_node* f = v.find(schema::key_nccl_version); f && f->is_string()) raw_.meta.nccl_version = std::string(f->text);
    if (const json_node* f = v.find(schema::key_pg_count); f && to_int(*f, x) && x >= 0 && x <= std::numeric_limits<int>::max())
      raw_.meta.communicator_count = int(x);
  } else if (key == schema::key_profile_memory) {
    // torch adds it (as 1) only when memory was profiled; 0, false or "0" say it was not.
    std::int64_t x = 0;
    const bool off = (v.is_number() && to_int(v, x) && x == 0) || (v.type == json_kind::boolean && !v.boolean) ||
                     v.type == json_kind::null || (v.is_string() && v.text == "0");
    raw_.meta.memory_recorded = raw_.meta.memory_recorded || !off;
  }
}

void trace_event_reader::event(const json_node& e, std::size_t index, const json_document& doc) {
  at_ = e.offset;
  doc_ = &doc;
  ++raw_.events;
  const auto where = [&](const std::string& what) -> std::string {
    std::string s = "traceEvents[" + std::to_string(index) + "]";
    if (const json_node* n = e.find("name"); n && n->is_string()) s += " (\"" + std::string(n->text.substr(0, 80)) + "\")";
    return s + ": " + what;
  };
  if (!e.is_object()) fail("traceEvents[" + std::to_string(index) + "] is " + json_type_name(e.type) + ", expected an object");
  const json_node* ph = e.find("ph");
  if (!ph) return;
  if (!ph->is_string()) fail(where("\"ph\" is " + std::string(json_type_name(ph->type)) + ", expected a string"));
  if (ph->text == "M") return metadata(e);
  if (ph->text == "i" || ph->text == "I") return instant(e);
  if (ph->text == "C") return counter(e);
  if (ph->text != "X") return;
  const json_node* cat = e.find("cat");
  if (!cat) return;
  if (!cat->is_string()) fail(where("\"cat\" is " + std::string(json_type_name(cat->type)) + ", expected a string"));
  const event_category c = category_of(cat->text);
  if (c == event_category::skip) {
    if (cat->text == schema::cat_cpu_op || cat->text == schema::cat_torch_trace) raw_.is_torch = true;
    std::int64_t ns = 0;
    if (cat->text == schema::cat_torch_trace)
      if (const json_node* ts = e.find("ts"); ts && ts->is_number() && us_to_ns(ts->text, ns))
        if (!raw_.has_profiler_start || ns < raw_.profiler_start) raw_.has_profiler_start = true, raw_.profiler_start = ns;
    return;
  }
  if (cat->text == schema::cat_cpu_op) raw_.is_torch = true;

  const json_node* name = e.find("name");
  if (!name) fail(where("has no \"name\""));
  if (!name->is_string()) fail(where("\"name\" is " + std::string(json_type_name(name->type)) + ", expected a string"));
  const auto time = [&](const char* key) -> std::int64_t {
    const json_node* f = e.find(key);
    if (!f) fail(where(std::string("has no \"") + key + "\""));
    std::int64_t ns = 0;
    if (!f->is_number()) fail(where(std::string("\"") + key + "\" is " + json_type_name(f->type) + ", expected a number"));
    if (!us_to_ns(f->text, ns)) fail(where(std::string("\"") + key + "\" is out of range: " + std::string(f->text)));
    return ns;
  };
  const std::int64_t ts = time("ts");
  const std::int64_t dur = time("dur");
  if (dur < 0) fail(where("\"dur\" is negative"));
  const std::int64_t start = ts;  // relative to baseTimeNanoseconds, which may come later in the file
  const std::int64_t end = ts + dur;
  const auto integer = [&](const char* key, bool required) -> std::int64_t {
    const json_node* f = e.find(key);
    if (!f) {
      if (required) fail(where(std::string("has no \"") + key + "\""));
      return -1;
    }
    std::int64_t x = 0;
    if (!to_int(*f, x) || x < 0 || x > std::int64_t(std::numeric_limits<std::uint32_t>::max()))
      fail(where(std::string("\"") + key + "\" is " +
                 (f->is_number() ? std::string("not a small non-negative integer") : "not an integer") + " (" +
                 (f->is_number() ? std::string(f->text) : std::string(json_type_name(f->type))) + ")"));
    return x;
  };
  const json_node* args = e.find("args");
  if (args && !args->is_object()) fail(where("\"args\" is " + std::string(json_type_name(args->type)) + ", expected an object"));
  const auto arg_int = [&](std::string_view key, std::int64_t fallback) -> std::int64_t {
    if (!args) return fallback;
    const json_node* f = args->find(key);
    if (!f || f->type == json_kind::null) return fallback;
    std::int64_t x = 0;
    if (!to_int(*f, x))
      fail(where("args \"" + std::string(key) + "\" is " + json_type_name(f->type) +
                 (f->is_number() ? " (" + std::string(f->text) + ")" : std::string()) + ", expected an integer"));
    return x;
  };
  // Older Kineto versions spell it "external id".
  const auto external_id = [&]() { return arg_int(schema::arg_external_id, arg_int("external id", -1)); };

  ++raw_.used;
  switch (c) {
    case event_category::span: {
      const std::int64_t pid = integer("pid", true), tid = integer("tid", true);
      note_cpu_pid(pid);
      raw_.spans.push_back({start, end, name_id_of(*name), std::uint32_t(tid), external_id(), raw_.spans.size(),
                            span_args_of(args, raw_.is_cuprof)});
      break;
    }
    case event_category::runtime:
    case event_category::driver: {
      const std::int64_t pid = integer("pid", true), tid = integer("tid", true);
      note_cpu_pid(pid);
      raw_call call{start,
                    end,
                    name_id_of(*name),
                    std::uint32_t(tid),
                    external_id(),
                    arg_int(schema::arg_correlation, -1),
                    arg_int(schema::arg_cbid, 0),
                    c == event_category::driver ? api_domain::driver : api_domain::runtime};
      call.stack = stack_of(args);
      if (const json_node* sf = e.find(schema::event_stack_frame)) call.frame = frame_id(*sf);
      raw_.calls.push_back(std::move(call));
      break;
    }
    case event_category::kernel:
    case event_category::memcpy:
    case event_category::memset:
    case event_category::sync: {
      raw_gpu g;
      g.start = start;
      g.end = end;
      g.name = name_id_of(*name);
      g.kind = c == event_category::kernel   ? gpu_kind::kernel
               : c == event_category::memcpy ? gpu_kind::memcpy
               : c == event_category::memset ? gpu_kind::memset
                                             : gpu_kind::sync;
      const std::int64_t pid = integer("pid", true), tid = integer("tid", true);
      const std::int64_t device = arg_int(schema::arg_device, pid);
      if (device < 0 || device > 0xFFFF)
        fail("a GPU event's device is " + std::to_string(device) + ", expected a device number (0 to 65535)");
      g.device = std::uint16_t(device);
      std::int64_t stream = arg_int(schema::arg_stream, -2);
      if (stream < 0) {
        const bool sync_lane = g.kind == gpu_kind::sync && tid >= schema::sync_tid_offset;
        stream = sync_lane ? tid - schema::sync_tid_offset : (stream == -1 ? 0 : tid);
      }
      g.stream = std::uint32_t(stream);
      g.context = std::uint32_t(std::max<std::int64_t>(0, arg_int(schema::arg_context, 0)));
      g.ext = external_id();
      g.correlation = arg_int(schema::arg_correlation, -1);
      g.bytes = std::uint64_t(std::max<std::int64_t>(0, arg_int(schema::arg_bytes, 0)));
      if (g.kind == gpu_kind::memcpy) g.subkind = memcpy_kind_of(name->text);
      if (g.kind == gpu_kind::sync) {
        g.subkind = sync_kind_of(name->text);
        if (args)
          if (const json_node* k = args->find(schema::arg_sync_kind); k && k->is_string()) g.subkind = sync_kind_of(k->text);
        // What an event sync or a stream's wait waited for (Kineto's wait_on_* args); -1 or out of range: not known.
        if (args && (args->find(schema::arg_wait_on_stream) || args->find(schema::arg_wait_on_record_correlation) ||
                     args->find(schema::arg_wait_on_event))) {
          const auto id = [&](std::string_view key) {
            const std::int64_t v = arg_int(key, -1);
            return v >= 0 && v < std::int64_t(no_index) ? std::uint32_t(v) : no_index;
          };
          g.has_wait = true;
          g.wait = {id(schema::arg_wait_on_stream), id(schema::arg_wait_on_record_correlation), id(schema::arg_wait_on_event)};
        }
      }
      if (g.kind == gpu_kind::kernel && args) {
        const auto dims3 = [&](std::string_view key, std::uint32_t(&d)[3]) {
          const json_node* f = args->find(key);
          if (!f) return;
          if (!f->is_array() || f->count != 3) fail(where("args \"" + std::string(key) + "\" is not an array of 3 integers"));
          const json_node* item = f->first();
          for (int i = 0; i < 3; ++i, item = item->next()) {
            std::int64_t x = 0;
            if (!to_int(*item, x) || x < 0 || x > 0xFFFFFFFFll)
              fail(where("args \"" + std::string(key) + "\" is not an array of 3 integers"));
            d[i] = std::uint32_t(x);
          }
          g.has_details = true;
        };
        dims3(schema::arg_grid, g.details.grid);
        dims3(schema::arg_block, g.details.block);
        const std::int64_t regs = arg_int(schema::arg_registers_per_thread, -1);
        const std::int64_t smem = arg_int(schema::arg_shared_memory, -1);
        if (regs >= 0) g.details.registers_per_thread = std::uint32_t(regs), g.has_details = true;
        if (smem >= 0) g.details.dynamic_shared_memory = std::uint32_t(smem), g.has_details = true;
        const std::int64_t graph = arg_int(schema::arg_graph_id, 0), node = arg_int(schema::arg_graph_node_id, 0);
        if (graph > 0) g.details.graph_id = std::uint32_t(graph), g.details.graph_node_id = std::uint64_t(node);
        // A collective's args, as torch writes them for record_param_comms; wrong types are ignored.
        if (const json_node* f = args->find(schema::arg_collective_name); f && f->is_string()) {
          g.collective = std::make_unique<collective_args>();
          collective_args& ca = *g.collective;
          ca.name = std::string(f->text);
          if (const json_node* d = args->find(schema::arg_collective_dtype); d && d->is_string()) ca.dtype = std::string(d->text);
          std::int64_t x = 0;
          if (const json_node* n = args->find(schema::arg_in_msg_nelems); n && to_int(*n, x) && x >= 0) ca.in_nelems = x;
          if (const json_node* n = args->find(schema::arg_out_msg_nelems); n && to_int(*n, x) && x >= 0) ca.out_nelems = x;
          if (const json_node* n = args->find(schema::arg_group_size); n && to_int(*n, x) && x >= 0) ca.group_size = x;
          ca.bytes = g.bytes;
        }
      }
      raw_.gpu.push_back(std::move(g));
      break;
    }
    case event_category::gpu_annotation: {
      const std::int64_t pid = integer("pid", true), tid = integer("tid", true);
      raw_.annotations.push_back({start, end, name_id_of(*name), std::uint32_t(pid), std::uint32_t(tid), external_id()});
      break;
    }
    case event_category::overhead: raw_.overhead.push_back({start, end, name_id_of(*name), 0, -1, 0, {}}); break;
    default: break;
  }
}

void trace_event_reader::metadata(const json_node& e) {
  const json_node* name = e.find("name");
  const json_node* args = e.find("args");
  if (!name || !name->is_string() || !args || !args->is_object()) return;
  const json_node* value = args->find(schema::meta_name);
  if (!value || !value->is_string()) return;
  std::int64_t pid = -1, tid = -1;
  if (const json_node* p = e.find("pid")) to_int(*p, pid);
  if (const json_node* p = e.find("tid")) to_int(*p, tid);
  if (name->text == schema::meta_process_name && pid >= 0) raw_.process_names.emplace(pid, std::string(value->text));
  if (name->text == schema::meta_thread_name && tid >= 0 && tid <= 0xFFFFFFFFll)
    raw_.thread_candidates.push_back({pid, tid, std::string(value->text)});
}

void trace_event_reader::instant(const json_node& e) {
  const json_node* name = e.find("name");
  if (!name || !name->is_string() || name->text != schema::memory_event_name) return;
  const json_node* args = e.find("args");
  const json_node* ts = e.find("ts");
  if (!args || !args->is_object() || !ts || !ts->is_number()) return;
  raw_memory m;
  if (!us_to_ns(ts->text, m.ts)) return;
  // An integer arg, or `fallback` where it is absent or null; false if it is anything else.
  const auto arg = [&](std::string_view key, std::int64_t fallback, std::int64_t& out) {
    const json_node* f = args->find(key);
    if (!f || f->type == json_kind::null) {
      out = fallback;
      return true;
    }
    if (f->type == json_kind::boolean) {
      out = f->boolean;
      return true;
    }
    return to_int(*f, out);
  };
  std::int64_t bytes = 0, x = 0;
  // No allocation is 2^62 bytes (4 EiB); the bound keeps sums and negations in range.
  constexpr std::int64_t max_bytes = std::int64_t(1) << 62;
  const json_node* b = args->find(schema::arg_memory_bytes);
  if (!b || !to_int(*b, bytes) || bytes > max_bytes || bytes < -max_bytes) return;
  m.event.bytes = bytes;
  // Figures that are negative or unreadable count as unknown (0): the event still says what moved.
  const auto unsigned_arg = [&](std::string_view key, std::uint64_t& field) {
    if (arg(key, 0, x) && x > 0) field = std::uint64_t(std::min(x, max_bytes));
  };
  unsigned_arg(schema::arg_memory_total_allocated, m.event.total_allocated);
  unsigned_arg(schema::arg_memory_total_reserved, m.event.total_reserved);
  if (arg(schema::arg_memory_addr, 0, x) && x > 0) m.event.address = std::uint64_t(x);
  if (const json_node* t = e.find("tid"); t && to_int(*t, x) && x >= 0 && x <= 0xFFFFFFFFll) m.event.tid = std::uint32_t(x);
  if (arg(schema::arg_correlation, 0, x) && x > 0 && x <= 0xFFFFFFFFll) m.event.correlation = std::uint32_t(x);
  if (arg(schema::arg_external_id, -1, x)) m.ext = x;
  std::int64_t type = 0, device = -1;
  if (!arg(schema::arg_memory_device_type, 0, type) || !arg(schema::arg_memory_device_id, -1, device)) return;
  if (type == schema::memory_device_type_cuda) {
    if (device < 0 || device > 0xFFFF) return;  // CUDA memory on no device: not a figure to charge anywhere
    m.event.device = std::int32_t(device);
  }
  if (const json_node* k = args->find(schema::arg_memory_kind); k && k->is_string())
    m.event.memory_kind = memory_kind_of(k->text);
  if (arg(schema::arg_memory_pool, 0, x) && x != 0) m.event.flags |= memory_from_pool;
  if (arg(schema::arg_memory_virtual, 0, x) && x != 0) m.event.flags |= memory_virtual;
  ++raw_.used;
  raw_.memory.push_back(m);
}

void trace_event_reader::counter(const json_node& e) {
  const json_node* cat = e.find("cat");
  if (!cat || !cat->is_string() || cat->text != schema::cat_gpu_metric) return;
  const json_node* name = e.find("name");
  const json_node* ts = e.find("ts");
  const json_node* pid = e.find("pid");
  const json_node* args = e.find("args");
  if (!name || !name->is_string() || name->text.empty() || !ts || !ts->is_number() || !pid || !args || !args->is_object()) return;
  raw_metric_sample m;
  std::int64_t device = 0;
  if (!us_to_ns(ts->text, m.ts) || !to_int(*pid, device) || device < 0 || device > 0xFFFF) return;
  // A value that is no number, or no finite one, is a broken sample: kept as one no metric can take, so
  // that the series counts it (gpu_metric_series::add) rather than the trace reading as unsampled.
  const json_node* value = args->find(schema::arg_counter_value);
  errno = 0;
  m.value = value && value->is_number() ? std::strtod(std::string(value->text).c_str(), nullptr) : -HUGE_VAL;
  if (errno == ERANGE || !std::isfinite(m.value)) m.value = -HUGE_VAL;
  m.device = std::uint16_t(device);
  m.label = name_id_of(*name);
  ++raw_.used;
  raw_.metric_samples.push_back(m);
}

void trace_event_reader::metric_block(const json_node& v) {
  raw_metric_block& b = raw_.metric_block;
  b.present = true;
  std::int64_t x = 0;
  if (const json_node* f = v.find(schema::gpu_metrics_interval_ns); f && to_int(*f, x) && x > 0) b.interval_ns = std::uint64_t(x);
  if (const json_node* f = v.find(schema::gpu_metrics_dropped); f && to_int(*f, x) && x > 0) b.dropped = std::uint64_t(x);
  if (const json_node* f = v.find(schema::gpu_metrics_out_of_range); f && to_int(*f, x) && x > 0)
    b.out_of_range = std::uint64_t(x);
  if (const json_node* d = v.find(schema::gpu_metrics_devices); d && d->is_array()) {
    const json_node* item = d->first();
    for (std::uint32_t i = 0; i < d->count; ++i, item = item->next())
      if (to_int(*item, x) && x >= 0 && x <= 0xFFFF && std::find(b.devices.begin(), b.devices.end(), x) == b.devices.end())
        b.devices.push_back(std::uint16_t(x));
  }
  if (const json_node* h = v.find(schema::gpu_metrics_held_values); h && h->type == json_kind::boolean)
    b.held_values = h->boolean;
  if (const json_node* a = v.find(schema::gpu_metrics_alignment); a && a->is_array()) {
    const json_node* item = a->first();
    for (std::uint32_t i = 0; i < a->count; ++i, item = item->next()) {
      const json_node* device = item->is_object() ? item->find(schema::gpu_metrics_device) : nullptr;
      const json_node* shift = item->is_object() ? item->find(schema::gpu_metrics_shift_ns) : nullptr;
      const json_node* aligned = item->is_object() ? item->find(schema::gpu_metrics_aligned) : nullptr;
      std::int64_t d = 0, ns = 0;
      if (!device || !to_int(*device, d) || d < 0 || d > 0xFFFF || !shift || !to_int(*shift, ns)) continue;
      const auto same = [&](const raw_metric_block::alignment& x) { return x.device == d; };
      if (std::none_of(b.alignments.begin(), b.alignments.end(), same))
        b.alignments.push_back({std::uint16_t(d), ns, aligned && aligned->type == json_kind::boolean && aligned->boolean});
    }
  }
  if (const json_node* g = v.find(schema::gpu_metrics_gaps); g && g->is_array()) {
    const json_node* item = g->first();
    for (std::uint32_t i = 0; i < g->count && b.gaps.size() < max_metric_gaps; ++i, item = item->next()) {
      if (!item->is_object()) continue;
      const json_node* device = item->find(schema::gpu_metrics_device);
      const json_node* ts = item->find(schema::gpu_metrics_gap_ts);
      const json_node* dur = item->find(schema::gpu_metrics_gap_dur);
      const json_node* cause = item->find(schema::gpu_metrics_gap_cause);
      raw_metric_block::gap gap{};
      std::int64_t d = 0;
      if (!device || !to_int(*device, d) || d < 0 || d > 0xFFFF || !ts || !ts->is_number() || !us_to_ns(ts->text, gap.ts) ||
          !dur || !dur->is_number() || !us_to_ns(dur->text, gap.dur) || gap.dur <= 0 || !cause || !cause->is_string())
        continue;
      std::size_t c = 0;
      while (c < std::size(schema::gap_cause_names) && schema::gap_cause_names[c] != cause->text) ++c;
      if (c == std::size(schema::gap_cause_names)) continue;
      gap.device = std::uint16_t(d);
      gap.cause = metric_gap_cause(c);
      b.gaps.push_back(gap);
    }
  }
  const json_node* list = v.find(schema::gpu_metrics_metrics);
  if (!list || !list->is_array()) return;
  const json_node* item = list->first();
  for (std::uint32_t i = 0; i < list->count && b.metrics.size() < max_gpu_metrics; ++i, item = item->next()) {
    if (!item->is_object()) continue;
    const json_node* name = item->find(schema::gpu_metrics_name);
    const json_node* label = item->find(schema::gpu_metrics_label);
    // A metric without a label is shown under its CUPTI name, as the writer labels a metric the user names.
    if (label && !label->is_string()) label = nullptr;
    if (name && !name->is_string()) name = nullptr;
    if (!label) label = name;
    if (!label || label->text.empty()) continue;
    const auto same_label = [&](const gpu_metric& m) { return m.label == label->text; };
    if (std::any_of(b.metrics.begin(), b.metrics.end(), same_label)) continue;
    b.metrics.push_back({std::string(name ? name->text : label->text), std::string(label->text)});
  }
}

void trace_event_reader::fail(const std::string& what) const { doc_->fail_at(at_, what); }

name_id trace_event_reader::name_id_of(const json_node& name) { return raw_.names.intern(name.text); }

void trace_event_reader::note_cpu_pid(std::int64_t pid) {
  if (raw_.cpu_pid < 0) raw_.cpu_pid = pid;
}

}  // namespace cuprof::detail
