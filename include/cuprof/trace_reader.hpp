// Reads a Chrome trace back into a cuprof::trace: cuprof's own traces and
// torch.profiler (Kineto) traces, plain or gzip-compressed. key_averages(),
// insights and diffs then work on either.
//
// Attribution is taken from the file, not re-derived, so that a torch trace
// gives torch's own table: GPU work is charged to the op whose "External id"
// it carries, scope extents on the GPU are the file's gpu_user_annotation
// events, and CPU parents are found by interval nesting per thread, as
// torch's key_averages() does. Timestamps convert to integer nanoseconds from
// their decimal text, without floating-point rounding.
//
// Not included by cuprof.hpp. Throws cuprof::error, with the file name and
// the place, for anything it cannot read: missing or non-regular files, bad
// gzip data, invalid JSON, fields of the wrong type.
#pragma once

#ifdef CUPROF_DISABLE
#error "cuprof: reading and analysing traces needs the real model; build this file without CUPROF_DISABLE"
#endif

#include "detail/json_reader.hpp"
#include "detail/nesting.hpp"
#include "detail/text.hpp"
#include "detail/trace_schema.hpp"
#include "error.hpp"
#include "event.hpp"
#include "trace.hpp"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cuprof {

enum class trace_format : std::uint8_t {
  cuprof,  // written by cuprof (has the "cuprof" metadata block)
  torch,   // written by torch.profiler / Kineto
  chrome,  // another Chrome trace with Kineto's categories
};

inline const char* trace_format_name(trace_format f) {
  switch (f) {
    case trace_format::cuprof: return "cuprof trace";
    case trace_format::torch: return "torch.profiler trace";
    default: return "Chrome trace";
  }
}

struct loaded_trace {
  trace t;
  trace_format format = trace_format::chrome;
  std::uint64_t base_ns = 0;  // baseTimeNanoseconds: the file's ts are microseconds after it
  std::string source;         // the path, or the name given to parse_trace()
  std::size_t events = 0;     // entries of traceEvents
  std::size_t used = 0;       // of them, turned into spans, calls, GPU work, annotations, overhead
  std::size_t unmatched_annotations = 0;  // gpu_user_annotation events naming no known scope

  // A time of the model as the file writes it: microseconds after base_ns.
  double file_us(std::uint64_t ns) const { return ns >= base_ns ? double(ns - base_ns) / 1000.0 : 0.0; }
};

namespace detail::reader {

using detail::json_value;

// Decimal microseconds ("861533.571", "-2", "1.5e3") to integer nanoseconds.
inline bool us_to_ns(const std::string& text, std::int64_t& out) {
  if (text.find_first_of("eE") == std::string::npos) {
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
  const long double v = std::strtold(text.c_str(), nullptr);
  if (errno != 0 || !std::isfinite(double(v)) || std::fabs(double(v)) > 1e15) return false;
  out = std::int64_t(std::llround(double(v * 1000.0L)));
  return true;
}

// An integral JSON number ("7", "-1", "7.0") as int64.
inline bool to_int(const json_value& v, std::int64_t& out) {
  if (!v.is_number()) return false;
  const std::string& s = v.text;
  if (s.find_first_of(".eE") == std::string::npos) {
    errno = 0;
    char* end = nullptr;
    const long long x = std::strtoll(s.c_str(), &end, 10);
    if (errno == ERANGE || end != s.c_str() + s.size()) return false;
    out = x;
    return true;
  }
  errno = 0;
  const double d = std::strtod(s.c_str(), nullptr);
  if (errno == ERANGE || !std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e18) return false;
  out = std::int64_t(d);
  return true;
}

struct raw_span {
  std::int64_t start, end;
  std::string name;
  std::uint32_t tid;
  std::int64_t ext = -1;
  std::size_t order;
};

struct raw_call {
  std::int64_t start, end;
  std::string name;
  std::uint32_t tid;
  std::int64_t ext = -1, correlation = -1, cbid = 0;
  api_domain domain;
};

struct raw_gpu {
  std::int64_t start = 0, end = 0;
  std::string name;
  gpu_kind kind = gpu_kind::kernel;
  std::uint8_t subkind = 0;
  std::uint32_t device = 0, stream = 0, context = 0;
  std::int64_t ext = -1, correlation = -1;
  std::uint64_t bytes = 0;
  bool has_details = false;
  kernel_details details;
};

struct raw_annotation {
  std::int64_t start, end;
  std::string name;
  std::uint32_t device, stream;
  std::int64_t ext = -1;
};

enum class category { skip, span, runtime, driver, kernel, memcpy, memset, sync, gpu_annotation, overhead };

// Older torch.profiler traces spell categories capitalised and bare
// ("Operator", "Runtime", "Memcpy"): compared lower-cased, the bare ones too.
inline category classify(std::string_view cat) {
  std::string c(cat);
  for (char& ch : c) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  if (c == schema::cat_user_annotation || c == schema::cat_cpu_op || c == "operator") return category::span;
  if (c == schema::cat_cuda_runtime || c == "runtime") return category::runtime;
  if (c == schema::cat_cuda_driver || c == "driver") return category::driver;
  if (c == schema::cat_kernel) return category::kernel;
  if (c == schema::cat_gpu_memcpy || c == "memcpy") return category::memcpy;
  if (c == schema::cat_gpu_memset || c == "memset") return category::memset;
  if (c == schema::cat_cuda_sync) return category::sync;
  if (c == schema::cat_gpu_user_annotation) return category::gpu_annotation;
  if (c == schema::cat_overhead) return category::overhead;
  return category::skip;
}

inline std::uint8_t memcpy_kind_of(std::string_view name) {
  for (std::uint8_t k = 1; k <= 10; ++k) {
    const std::string token = std::string(" ") + memcpy_kind_name(k) + " ";
    if ((std::string(name) + " ").find(token) != std::string::npos) return k;
  }
  return 0;
}

inline std::uint8_t sync_kind_of(std::string_view name) {
  for (std::uint8_t k = 1; k <= 4; ++k)
    if (name == sync_kind_name(k)) return k;
  return 0;
}

class builder {
 public:
  explicit builder(loaded_trace& out) : out_(out) {}

  void top_level(const std::string& key, const json_value& v, json_reader& r) {
    if (key == schema::key_base_time) {
      std::int64_t b = 0;
      if (!to_int(v, b) || b < 0) r.fail("\"baseTimeNanoseconds\" is not a non-negative integer");
      out_.base_ns = std::uint64_t(b);
    } else if (key == schema::key_cuprof) {
      if (!v.is_object()) r.fail("\"cuprof\" is " + std::string(json_type_name(v.type)) + ", expected an object");
      is_cuprof_ = true;
      trace_metadata& m = out_.t.meta;
      std::int64_t x = 0;
      const auto count = [&](std::string_view k, std::uint64_t& field) {
        if (const json_value* f = v.find(k); f && to_int(*f, x) && x >= 0) field = std::uint64_t(x);
      };
      if (const json_value* f = v.find(schema::cuprof_window_start_ns); f && to_int(*f, x) && x > 0) window_start_ = x;
      if (const json_value* f = v.find(schema::cuprof_window_end_ns); f && to_int(*f, x) && x > 0) window_end_ = x;
      count(schema::cuprof_dropped_gpu_records, m.dropped_gpu_records);
      count(schema::cuprof_dropped_cpu_events, m.dropped_cpu_events);
      const json_value* status = v.find(schema::cuprof_cuda_status);
      if (status && status->is_string() && status->text != schema::cuda_status_on) m.cuda_status = status->text;
    } else if (key == schema::key_device_properties) {
      if (!v.is_array()) r.fail("\"deviceProperties\" is " + std::string(json_type_name(v.type)) + ", expected an array");
      for (const json_value& d : v.items) {
        if (!d.is_object()) r.fail("\"deviceProperties\" holds " + std::string(json_type_name(d.type)) + ", expected objects");
        device_info info;
        std::int64_t x = 0;
        const auto get = [&](std::string_view k, int& field) {
          if (const json_value* f = d.find(k); f && to_int(*f, x)) field = int(x);
        };
        get(schema::device_id, info.id);
        if (const json_value* f = d.find(schema::device_name); f && f->is_string()) info.name = f->text;
        if (const json_value* f = d.find(schema::device_total_global_mem); f && to_int(*f, x) && x >= 0)
          info.total_global_mem = std::uint64_t(x);
        get(schema::device_compute_major, info.compute_major);
        get(schema::device_compute_minor, info.compute_minor);
        get(schema::device_max_threads_per_block, info.max_threads_per_block);
        get(schema::device_max_threads_per_multiprocessor, info.max_threads_per_multiprocessor);
        get(schema::device_regs_per_block, info.regs_per_block);
        get(schema::device_regs_per_multiprocessor, info.regs_per_multiprocessor);
        get(schema::device_warp_size, info.warp_size);
        get(schema::device_num_sms, info.num_sms);
        get(schema::device_shared_mem_per_block, info.shared_mem_per_block);
        get(schema::device_shared_mem_per_block_optin, info.shared_mem_per_block_optin);
        get(schema::device_shared_mem_per_multiprocessor, info.shared_mem_per_multiprocessor);
        out_.t.meta.devices.push_back(info);
      }
    } else if (key == schema::key_cuda_runtime_version || key == schema::key_cuda_driver_version ||
               key == schema::key_cupti_version) {
      std::int64_t x = 0;
      if (to_int(v, x)) {
        trace_metadata& m = out_.t.meta;
        (key == schema::key_cuda_runtime_version  ? m.cuda_runtime_version
         : key == schema::key_cuda_driver_version ? m.cuda_driver_version
                                                  : m.cupti_version) = int(x);
      }
    } else if (key == schema::key_host_name && v.is_string()) {
      out_.t.meta.host_name = v.text;
    } else if (key == schema::key_distributed_info && v.is_object()) {
      std::int64_t x = 0;
      if (const json_value* f = v.find(schema::key_rank); f && to_int(*f, x)) out_.t.meta.rank = int(x);
      if (const json_value* f = v.find(schema::key_world_size); f && to_int(*f, x)) out_.t.meta.world_size = int(x);
    }
  }

  void event(const json_value& e, std::size_t index, json_reader& r) {
    ++out_.events;
    const auto where = [&](const std::string& what) -> std::string {
      std::string s = "traceEvents[" + std::to_string(index) + "]";
      if (const json_value* n = e.find("name"); n && n->is_string()) s += " (\"" + n->text.substr(0, 80) + "\")";
      return s + ": " + what;
    };
    if (!e.is_object())
      r.fail("traceEvents[" + std::to_string(index) + "] is " + json_type_name(e.type) + ", expected an object");
    const json_value* ph = e.find("ph");
    if (!ph) return;
    if (!ph->is_string()) r.fail(where("\"ph\" is " + std::string(json_type_name(ph->type)) + ", expected a string"));
    if (ph->text == "M") return metadata(e);
    if (ph->text != "X") return;
    const json_value* cat = e.find("cat");
    if (!cat) return;
    if (!cat->is_string()) r.fail(where("\"cat\" is " + std::string(json_type_name(cat->type)) + ", expected a string"));
    const category c = classify(cat->text);
    if (c == category::skip) {
      if (cat->text == schema::cat_cpu_op || cat->text == schema::cat_torch_trace) is_torch_ = true;
      return;
    }
    if (cat->text == schema::cat_cpu_op) is_torch_ = true;

    const json_value* name = e.find("name");
    if (!name) r.fail(where("has no \"name\""));
    if (!name->is_string()) r.fail(where("\"name\" is " + std::string(json_type_name(name->type)) + ", expected a string"));
    const auto time = [&](const char* key) -> std::int64_t {
      const json_value* f = e.find(key);
      if (!f) r.fail(where(std::string("has no \"") + key + "\""));
      std::int64_t ns = 0;
      if (!f->is_number()) r.fail(where(std::string("\"") + key + "\" is " + json_type_name(f->type) + ", expected a number"));
      if (!us_to_ns(f->text, ns)) r.fail(where(std::string("\"") + key + "\" is out of range: " + f->text));
      return ns;
    };
    const std::int64_t ts = time("ts");
    const std::int64_t dur = time("dur");
    if (dur < 0) r.fail(where("\"dur\" is negative"));
    const std::int64_t start = ts;  // relative to baseTimeNanoseconds, which may come later in the file
    const std::int64_t end = ts + dur;
    const auto integer = [&](const char* key, bool required) -> std::int64_t {
      const json_value* f = e.find(key);
      if (!f) {
        if (required) r.fail(where(std::string("has no \"") + key + "\""));
        return -1;
      }
      std::int64_t x = 0;
      if (!to_int(*f, x) || x < 0 || x > std::int64_t(std::numeric_limits<std::uint32_t>::max()))
        r.fail(where(std::string("\"") + key + "\" is " +
                     (f->is_number() ? std::string("not a small non-negative integer") : "not an integer") +
                     " (" + (f->is_number() ? f->text : std::string(json_type_name(f->type))) + ")"));
      return x;
    };
    const json_value* args = e.find("args");
    if (args && !args->is_object()) r.fail(where("\"args\" is " + std::string(json_type_name(args->type)) + ", expected an object"));
    const auto arg_int = [&](std::string_view key, std::int64_t fallback) -> std::int64_t {
      if (!args) return fallback;
      const json_value* f = args->find(key);
      if (!f || f->type == json_value::kind::null) return fallback;
      std::int64_t x = 0;
      if (!to_int(*f, x))
        r.fail(where("args \"" + std::string(key) + "\" is " + json_type_name(f->type) +
                     (f->is_number() ? " (" + f->text + ")" : std::string()) + ", expected an integer"));
      return x;
    };
    // Older Kineto versions spell it "external id".
    const auto external_id = [&]() { return arg_int(schema::arg_external_id, arg_int("external id", -1)); };

    ++out_.used;
    switch (c) {
      case category::span: {
        const std::int64_t pid = integer("pid", true), tid = integer("tid", true);
        note_cpu_pid(pid);
        spans_.push_back({start, end, name->text, std::uint32_t(tid), external_id(), spans_.size()});
        break;
      }
      case category::runtime:
      case category::driver: {
        const std::int64_t pid = integer("pid", true), tid = integer("tid", true);
        note_cpu_pid(pid);
        raw_call call{start, end, name->text, std::uint32_t(tid), external_id(),
                      arg_int(schema::arg_correlation, -1), arg_int(schema::arg_cbid, 0),
                      c == category::driver ? api_domain::driver : api_domain::runtime};
        calls_.push_back(std::move(call));
        break;
      }
      case category::kernel:
      case category::memcpy:
      case category::memset:
      case category::sync: {
        raw_gpu g;
        g.start = start;
        g.end = end;
        g.name = name->text;
        g.kind = c == category::kernel ? gpu_kind::kernel
               : c == category::memcpy ? gpu_kind::memcpy
               : c == category::memset ? gpu_kind::memset
                                       : gpu_kind::sync;
        const std::int64_t pid = integer("pid", true), tid = integer("tid", true);
        g.device = std::uint32_t(arg_int(schema::arg_device, pid));
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
            if (const json_value* k = args->find(schema::arg_sync_kind); k && k->is_string())
              g.subkind = sync_kind_of(k->text);
        }
        if (g.kind == gpu_kind::kernel && args) {
          const auto dims3 = [&](std::string_view key, std::uint32_t (&d)[3]) {
            const json_value* f = args->find(key);
            if (!f) return;
            if (!f->is_array() || f->items.size() != 3)
              r.fail(where("args \"" + std::string(key) + "\" is not an array of 3 integers"));
            for (int i = 0; i < 3; ++i) {
              std::int64_t x = 0;
              if (!to_int(f->items[std::size_t(i)], x) || x < 0 || x > 0xFFFFFFFFll)
                r.fail(where("args \"" + std::string(key) + "\" is not an array of 3 integers"));
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
        }
        gpu_.push_back(std::move(g));
        break;
      }
      case category::gpu_annotation: {
        const std::int64_t pid = integer("pid", true), tid = integer("tid", true);
        annotations_.push_back({start, end, name->text, std::uint32_t(pid), std::uint32_t(tid), external_id()});
        break;
      }
      case category::overhead:
        overhead_.push_back({start, end, name->text, 0, -1, 0});
        break;
      default: break;
    }
  }

  void finish() {
    trace& t = out_.t;
    // Times become Unix-epoch nanoseconds now that the base is known.
    const std::int64_t base = std::int64_t(out_.base_ns);
    const auto absolute = [&](std::int64_t& x) {
      if (__builtin_add_overflow(x, base, &x))
        throw error(out_.source + ": an event lies beyond what 64-bit nanoseconds hold (\"baseTimeNanoseconds\" + \"ts\")");
      if (x < 0) throw error(out_.source + ": an event lies before the epoch (negative \"ts\")");
    };
    for (raw_span& x : spans_) absolute(x.start), absolute(x.end);
    for (raw_span& x : overhead_) absolute(x.start), absolute(x.end);
    for (raw_call& x : calls_) absolute(x.start), absolute(x.end);
    for (raw_gpu& x : gpu_) absolute(x.start), absolute(x.end);
    for (raw_annotation& x : annotations_) absolute(x.start), absolute(x.end);
    for (const raw_span& r : overhead_) {
      overhead_span o;
      o.start_ns = std::uint64_t(r.start);
      o.end_ns = std::uint64_t(r.end);
      o.name = t.names.intern(r.name);
      t.overhead.push_back(o);
    }
    for (const auto& c : thread_candidates_)
      if (c.pid == cpu_pid_ && !thread_names_.count(std::uint32_t(c.tid))) thread_names_.emplace(std::uint32_t(c.tid), c.name);
    out_.format = is_cuprof_ ? trace_format::cuprof : is_torch_ ? trace_format::torch : trace_format::chrome;
    t.meta.pid = cpu_pid_ >= 0 ? std::uint32_t(cpu_pid_) : 0;
    if (auto it = process_names_.find(cpu_pid_); it != process_names_.end()) t.meta.process_name = it->second;

    // Spans in nesting order (nests_before, file order on identical extents): parents precede children.
    std::vector<std::size_t> order(spans_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      const raw_span& x = spans_[a];
      const raw_span& y = spans_[b];
      if (x.tid != y.tid) return x.tid < y.tid;
      if (x.start != y.start) return x.start < y.start;
      if (x.end != y.end) return x.end > y.end;
      return x.order < y.order;
    });
    std::unordered_map<std::int64_t, std::uint32_t> span_by_ext;
    std::int64_t max_ext = 0;
    for (const raw_span& s : spans_) max_ext = std::max(max_ext, s.ext);
    std::uint32_t next_id = std::uint32_t(std::min<std::int64_t>(max_ext, 0x7FFFFFFF)) + 1;
    t.spans.reserve(spans_.size());
    for (std::size_t i : order) {
      const raw_span& r = spans_[i];
      cpu_span s;
      s.start_ns = std::uint64_t(r.start);
      s.end_ns = std::uint64_t(r.end);
      s.name = t.names.intern(r.name);
      s.tid = r.tid;
      s.is_step = starts_with(r.name, schema::step_name_prefix);
      const bool usable_id = r.ext >= 0 && r.ext <= 0xFFFFFFFFll && !span_by_ext.count(r.ext);
      s.id = usable_id ? std::uint32_t(r.ext) : next_id++;
      if (usable_id) span_by_ext.emplace(r.ext, std::uint32_t(t.spans.size()));
      t.spans.push_back(s);
    }

    // Calls in start order per thread.
    std::sort(calls_.begin(), calls_.end(), [](const raw_call& a, const raw_call& b) {
      return a.tid != b.tid ? a.tid < b.tid : a.start != b.start ? a.start < b.start : a.end > b.end;
    });
    t.api_calls.reserve(calls_.size());
    std::unordered_map<std::int64_t, std::uint32_t> call_by_correlation;
    for (const raw_call& r : calls_) {
      api_call a;
      a.start_ns = std::uint64_t(r.start);
      a.end_ns = std::uint64_t(r.end);
      a.name = t.names.intern(r.name);
      a.tid = r.tid;
      a.cbid = std::uint32_t(std::max<std::int64_t>(0, std::min<std::int64_t>(r.cbid, 0xFFFFFFFFll)));
      a.correlation = r.correlation >= 0 ? std::uint32_t(r.correlation) : 0;
      a.domain = r.domain;
      if (r.correlation >= 0) call_by_correlation.emplace(r.correlation, std::uint32_t(t.api_calls.size()));
      t.api_calls.push_back(a);
    }
    link_parents(t, parents_of::spans_and_calls);

    // GPU work: the launching call by correlation, the scope by External id.
    std::stable_sort(gpu_.begin(), gpu_.end(), [](const raw_gpu& a, const raw_gpu& b) { return a.start < b.start; });
    t.meta.unmatched_gpu_records = 0;
    for (const raw_gpu& r : gpu_) {
      gpu_activity g;
      g.start_ns = std::uint64_t(r.start);
      g.end_ns = std::uint64_t(r.end);
      g.bytes = r.bytes;
      g.name = t.names.intern(r.name);
      g.correlation = r.correlation >= 0 ? std::uint32_t(r.correlation) : 0;
      g.device = r.device;
      g.context = r.context;
      g.stream = r.stream;
      g.kind = r.kind;
      g.subkind = r.subkind;
      if (r.correlation >= 0)
        if (auto it = call_by_correlation.find(r.correlation); it != call_by_correlation.end()) g.api = it->second;
      if (r.ext >= 0)
        if (auto it = span_by_ext.find(r.ext); it != span_by_ext.end()) g.span = it->second;
      if (r.kind != gpu_kind::sync && g.api == no_index && g.span == no_index) ++t.meta.unmatched_gpu_records;
      if (g.api != no_index && r.kind != gpu_kind::sync) t.api_calls[g.api].has_flow = true;
      if (r.has_details) {
        g.details = std::uint32_t(t.kernels.size());
        t.kernels.push_back(r.details);
      }
      t.gpu.push_back(g);
    }

    // The file's scope extents on the GPU. Kineto (and cuprof) draw them 1 ns
    // wider on each side than the work they cover; the table uses the work's extent.
    t.gpu_annotations_from_file = true;
    for (const raw_annotation& r : annotations_) {
      auto it = r.ext >= 0 ? span_by_ext.find(r.ext) : span_by_ext.end();
      if (it == span_by_ext.end() || t.names.str(t.spans[it->second].name) != r.name) {
        ++out_.unmatched_annotations;
        continue;
      }
      gpu_annotation a;
      a.span = it->second;
      a.device = r.device;
      a.stream = r.stream;
      a.start_ns = std::uint64_t(r.start);
      a.end_ns = std::uint64_t(r.end);
      if (a.end_ns - a.start_ns >= 2) {
        ++a.start_ns;
        --a.end_ns;
      }
      t.file_gpu_annotations.push_back(a);
    }
    // The order gpu_annotations() gives: per lane by start, enclosing ones first,
    // the shallower first when two cover the same work.
    const auto depth = [&](std::uint32_t s) {
      int d = 0;
      for (; t.spans[s].parent != no_index; s = t.spans[s].parent) ++d;
      return d;
    };
    std::stable_sort(t.file_gpu_annotations.begin(), t.file_gpu_annotations.end(),
                     [&](const gpu_annotation& a, const gpu_annotation& b) {
                       if (a.device != b.device) return a.device < b.device;
                       if (a.stream != b.stream) return a.stream < b.stream;
                       if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
                       if (a.end_ns != b.end_ns) return a.end_ns > b.end_ns;
                       return depth(a.span) < depth(b.span);
                     });

    // Threads and the window.
    for (const auto& th : thread_names_) t.meta.threads.push_back({th.first, th.second});
    std::uint64_t lo = std::numeric_limits<std::uint64_t>::max(), hi = 0;
    const auto extend = [&](std::uint64_t s, std::uint64_t e) {
      lo = std::min(lo, s);
      hi = std::max(hi, e);
    };
    for (const cpu_span& s : t.spans) extend(s.start_ns, s.end_ns);
    for (const api_call& a : t.api_calls) extend(a.start_ns, a.end_ns);
    for (const gpu_activity& g : t.gpu) extend(g.start_ns, g.end_ns);
    if (window_start_ > 0 && window_end_ >= window_start_) {
      t.meta.window_start_ns = std::uint64_t(window_start_);
      t.meta.window_end_ns = std::uint64_t(window_end_);
    } else if (hi > 0) {
      t.meta.window_start_ns = lo;
      t.meta.window_end_ns = hi;
    }
  }

 private:
  void metadata(const json_value& e) {
    const json_value* name = e.find("name");
    const json_value* args = e.find("args");
    if (!name || !name->is_string() || !args || !args->is_object()) return;
    const json_value* value = args->find(schema::meta_name);
    if (!value || !value->is_string()) return;
    std::int64_t pid = -1, tid = -1;
    if (const json_value* p = e.find("pid")) to_int(*p, pid);
    if (const json_value* p = e.find("tid")) to_int(*p, tid);
    if (name->text == schema::meta_process_name && pid >= 0) process_names_.emplace(pid, value->text);
    if (name->text == schema::meta_thread_name && tid >= 0 && tid <= 0xFFFFFFFFll)
      thread_candidates_.push_back({pid, tid, value->text});
  }

  void note_cpu_pid(std::int64_t pid) {
    if (cpu_pid_ < 0) cpu_pid_ = pid;
  }

  struct thread_candidate {
    std::int64_t pid, tid;
    std::string name;
  };

  loaded_trace& out_;
  std::vector<raw_span> spans_, overhead_;
  std::vector<raw_call> calls_;
  std::vector<raw_gpu> gpu_;
  std::vector<raw_annotation> annotations_;
  std::unordered_map<std::int64_t, std::string> process_names_;
  std::vector<thread_candidate> thread_candidates_;
  std::map<std::uint32_t, std::string> thread_names_;
  std::int64_t cpu_pid_ = -1;
  std::int64_t window_start_ = 0, window_end_ = 0;
  bool is_cuprof_ = false, is_torch_ = false;
};

// Checks text as it arrives, before it is parsed or even held whole. A trace
// is JSON text: it never holds a NUL or another control byte but tab, line
// feed and carriage return (JSON escapes them inside strings), and no trace
// writer puts a megabyte of whitespace in a row (indentation is a few bytes a
// line). So a zero-filled or sparse file, binary data, or a gzip bomb of
// zeros or blanks is refused after its first bytes, in constant memory.
class json_text_check {
 public:
  static constexpr std::size_t max_blank_run = 1u << 20;

  // `source`: the file; `where`: "" for its own bytes, or " of its decompressed data".
  json_text_check(const std::string& source, const char* where) : source_(source), where_(where) {}

  void feed(const char* data, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      const unsigned char c = static_cast<unsigned char>(data[i]);
      if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
        if (++blank_run_ > max_blank_run)
          refuse(offset_ + i, "more than 1 MiB of whitespace in a row: not a trace (no trace writer emits that)");
      } else {
        blank_run_ = 0;
        if (c == 0) refuse(offset_ + i, "a NUL byte: not JSON text (a zero-filled or sparse file, or binary data)");
        if (c < 0x20) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", c);
          refuse(offset_ + i, std::string("a control byte (") + hex + "): not JSON text (binary data?)");
        }
      }
    }
    offset_ += n;
  }

 private:
  [[noreturn]] void refuse(std::uint64_t at, const std::string& what) const {
    throw error("'" + source_ + "': byte " + std::to_string(at) + where_ + " is " + what);
  }

  const std::string& source_;
  const char* where_;
  std::uint64_t offset_ = 0;
  std::size_t blank_run_ = 0;
};

// Beyond what json_text_check sees, a bomb of valid-looking JSON is bounded
// by size. Real traces are large, and gzip 15-25x (cuprof writes level 1,
// less): a million kernel launches make about 680 MB of JSON, and cuprof's
// default record cap (16 Mi records) about 4 GB in one window. So 8 GiB is
// twice the largest trace cuprof writes by default, and past 256 MiB a ratio
// above 100x (4-7 times the usual) is not a trace anyone wrote. The output
// never grows past the cap by capacity doubling. A real trace beyond these
// reads once decompressed (gunzip): plain JSON has no cap but its size.
constexpr std::uint64_t max_decompressed = 8ull << 30;
constexpr std::uint64_t ratio_checked_from = 256ull << 20;
constexpr std::uint64_t max_ratio = 100;

// The bytes of a gzip (or zlib) stream, all members; throws on damage.
inline std::string gunzip(const std::string& in, const std::string& source) {
  const auto refuse = [&](const std::string& why) {
    throw error("'" + source + "' " + why + ": refused as a decompression bomb (gunzip it to read it anyway)");
  };
  json_text_check check(source, " of its decompressed data");
  std::string out;
  z_stream z;
  std::memset(&z, 0, sizeof z);
  if (inflateInit2(&z, 15 + 32) != Z_OK) throw error(source + ": cannot initialise zlib");
  struct inflate_end {
    z_stream& z;
    ~inflate_end() { inflateEnd(&z); }
  } end{z};
  std::size_t consumed = 0;
  char buf[1 << 16];
  int rc = Z_OK;
  while (true) {
    const std::size_t left = in.size() - consumed;
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + consumed));
    z.avail_in = uInt(std::min<std::size_t>(left, 1u << 30));
    const uInt given = z.avail_in;
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    consumed += given - z.avail_in;
    const std::size_t produced = sizeof buf - z.avail_out;
    check.feed(buf, produced);
    const std::uint64_t total = std::uint64_t(out.size()) + produced;
    if (total > max_decompressed) refuse("decompresses to more than " + std::to_string(max_decompressed >> 30) + " GiB");
    if (total > ratio_checked_from && total > max_ratio * std::uint64_t(consumed))
      refuse("decompresses to more than " + std::to_string(max_ratio) + " times its compressed size");
    if (total > out.capacity()) out.reserve(std::size_t(std::min(max_decompressed, std::max<std::uint64_t>(total, 2 * out.capacity()))));
    out.append(buf, produced);
    const bool progress = given != z.avail_in || z.avail_out != sizeof buf;
    if (rc == Z_STREAM_END) {
      // Another member may follow (concatenated gzip files); trailing zeros are padding.
      std::size_t rest = consumed;
      while (rest < in.size() && in[rest] == '\0') ++rest;
      if (rest >= in.size()) break;
      if (inflateReset(&z) != Z_OK) break;
      consumed = rest;
      continue;
    }
    if ((rc == Z_OK || rc == Z_BUF_ERROR) && consumed >= in.size() && z.avail_out != 0)
      throw error(source + ": truncated gzip data");
    if ((rc == Z_OK || rc == Z_BUF_ERROR) && progress) continue;
    if (rc == Z_OK || rc == Z_BUF_ERROR)  // no progress with input and room left: stop rather than spin
      throw error(source + ": not valid gzip data");
    throw error(source + ": not valid gzip data (" + (z.msg ? z.msg : "invalid data") + ")");
  }
  return out;
}

inline bool is_gzip(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f && static_cast<unsigned char>(bytes[1]) == 0x8b;
}

inline bool ends_with_gz(const std::string& path) {
  return path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
}

}  // namespace detail::reader

// Parses trace JSON (already decompressed). `source` names it in messages.
inline loaded_trace parse_trace(std::string_view json, const std::string& source) {
  loaded_trace out;
  out.source = source;
  detail::reader::builder b(out);
  detail::json_reader r(json, source);
  const char first = r.peek();
  bool saw_events = false;
  // The events array, in either format: {"traceEvents": [...]} or a bare [...].
  const auto read_events = [&] {
    saw_events = true;
    r.expect('[');
    if (!r.empty_container(']')) {
      std::size_t i = 0;
      do {
        const detail::json_value e = r.read_value();
        b.event(e, i++, r);
      } while (r.next_in(']'));
    }
  };
  if (first == '{') {
    r.expect('{');
    if (!r.empty_container('}')) {
      do {
        const std::string key = r.read_string();
        r.expect(':');
        if (key == detail::schema::key_trace_events) {
          if (r.peek() != '[') {
            const detail::json_value v = r.read_value();
            r.fail(std::string("\"traceEvents\" is ") + detail::json_type_name(v.type) + ", expected an array");
          }
          read_events();
        } else {
          const detail::json_value v = r.read_value();
          b.top_level(key, v, r);
        }
      } while (r.next_in('}'));
    }
  } else if (first == '[') {  // the JSON Array Format: events only
    read_events();
  } else if (r.at_end()) {
    throw error(source + ": empty input, expected a JSON trace");
  } else {
    r.fail("expected a JSON object with \"traceEvents\"");
  }
  if (!r.at_end()) r.fail("unexpected data after the end of the JSON document");
  if (!saw_events) throw error(source + ": no \"traceEvents\" array: not a Chrome/Kineto trace");
  b.finish();
  return out;
}

namespace detail::reader {

// A file's bytes to a trace; `checked`: a plain file's bytes went through
// json_text_check as they were read.
inline loaded_trace trace_of_bytes(std::string bytes, const std::string& source, bool checked) {
  if (bytes.empty()) throw error("'" + source + "' is empty, expected a JSON trace");
  if (is_gzip(bytes)) {
    bytes = gunzip(bytes, source);
    if (bytes.empty()) throw error("'" + source + "' decompresses to nothing, expected a JSON trace");
  } else if (!checked) {
    json_text_check(source, "").feed(bytes.data(), bytes.size());
  }
  return parse_trace(bytes, source);
}

}  // namespace detail::reader

// Reads a trace from its bytes: JSON, or gzip-compressed JSON (recognised by
// its magic bytes). `source` names it in messages.
inline loaded_trace read_trace_bytes(std::string bytes, const std::string& source) {
  return detail::reader::trace_of_bytes(std::move(bytes), source, false);
}

// Reads a trace file: .json, or gzip-compressed (.json.gz, or any file that
// starts with the gzip magic bytes). JSON is checked as it is read, so a
// zero-filled or sparse file is refused at its first bytes, not held whole.
inline loaded_trace read_trace_file(const std::string& path) {
  struct stat st;
  if (path.empty()) throw error("no trace file given");
  if (::stat(path.c_str(), &st) != 0) throw error("cannot read '" + path + "': " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw error("cannot read '" + path + "': it is a directory, expected a trace file");
  if (!S_ISREG(st.st_mode)) throw error("cannot read '" + path + "': not a regular file");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw error("cannot read '" + path + "': " + std::strerror(errno));
  struct closer {
    std::FILE* f;
    ~closer() { std::fclose(f); }
  } close_at_end{f};
  std::string bytes;
  detail::reader::json_text_check check(path, "");
  bool gzip = false;
  char buf[1 << 16];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    const bool first = bytes.empty();
    if (first) {
      gzip = detail::reader::is_gzip(std::string_view(buf, n));
      if (!gzip && detail::reader::ends_with_gz(path)) throw error("'" + path + "' ends in .gz but is not gzip data");
    }
    if (!gzip) check.feed(buf, n);
    if (first) bytes.reserve(std::size_t(st.st_size));  // once the start looked like a trace
    bytes.append(buf, n);
  }
  if (std::ferror(f)) throw error("cannot read '" + path + "': " + std::strerror(errno));
  return detail::reader::trace_of_bytes(std::move(bytes), path, true);
}

}  // namespace cuprof
