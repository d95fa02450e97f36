// The Chrome trace writer: formats a trace as Kineto-flavoured JSON
// (docs/trace-format.md) and writes it on other threads, compressing a ".gz"
// in parallel. Where the runtime is compiled (chrome_trace.hpp includes it then).
#pragma once

#include "chrome_trace.hpp"
#include "file_sink.hpp"
#include "json_text.hpp"
#include "trace_schema.hpp"
#include "../model/occupancy.hpp"
#include "../detail/log.hpp"
#include "../model/attribution.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cuprof {

namespace detail {

class chrome_trace_writer {
 public:
  chrome_trace_writer(const trace& t, std::function<void(text_buffer&)> flush)
      : t_(t), flush_(std::move(flush)), out_(flush_threshold + 4096) {}

  // Writes the whole document; returns the number of trace events written.
  std::size_t write(const std::string& trace_name) {
    base_ns_ = base_time();
    find_devices_with_several_contexts();
    escaped_names_.reserve(t_.names.size());
    for (std::size_t i = escaped_names_.size(); i < t_.names.size(); ++i)
      escaped_names_.push_back(json_escaped(t_.names.str(name_id(i))));
    header(trace_name);
    const std::size_t before = events_;
    metadata_events();
    cpu_events();
    gpu_events();
    overhead_events();
    out_ += "\n  ],\n  \"traceName\":\"";
    append_json_escaped(out_, trace_name);
    out_ += "\"\n}\n";
    flush_(out_);
    out_.clear();
    return events_ - before;
  }

 private:
  static constexpr std::size_t flush_threshold = 1 << 20;

  std::uint64_t base_time() const {
    // A window start of 0 is unset (a hand-made trace, or one read from a file
    // without a window): as the base it would make every ts an epoch time,
    // beyond the 1e15 us the reader takes.
    std::uint64_t lo = t_.meta.window_start_ns ? t_.meta.window_start_ns : UINT64_MAX;
    for (const cpu_span& s : t_.spans) lo = std::min(lo, s.start_ns);
    for (const api_call& a : t_.api_calls) lo = std::min(lo, a.start_ns);
    for (const gpu_activity& g : t_.gpu) lo = std::min(lo, g.start_ns);
    if (lo == UINT64_MAX)  // CUPTI overhead records alone
      for (const overhead_span& o : t_.overhead) lo = std::min(lo, o.start_ns);
    if (lo == UINT64_MAX) return 0;  // nothing timed
    if (lo > 0) lo -= 1;  // room for the 1 ns lead of GPU annotations
    return lo - lo % 1000000000ull;  // whole seconds, as Kineto rounds its base
  }

  void begin_event() {
    out_ += events_ == 0 ? "\n" : ",\n";
    ++events_;
    if (out_.size() > flush_threshold) {
      flush_(out_);
      out_.clear();
    }
  }

  void ts(std::uint64_t ns) {
    out_ += "\"ts\":";
    append_us(out_, ns > base_ns_ ? ns - base_ns_ : 0);
  }

  // "key":, then ,"key": and ,"key":[x,y,z] -- members named as the schema spells them.
  void key(std::string_view k) {
    out_ += '"';
    out_ += k;
    out_ += "\":";
  }
  void next_key(std::string_view k) {
    out_ += ',';
    key(k);
  }

  void dims3(std::string_view k, const std::uint32_t (&d)[3]) {
    next_key(k);
    out_ += '['; append_int(out_, d[0]); out_ += ','; append_int(out_, d[1]); out_ += ','; append_int(out_, d[2]);
    out_ += ']';
  }

  void complete(std::string_view cat, const std::string& escaped_name, std::uint32_t pid, std::uint32_t tid,
                std::uint64_t start, std::uint64_t end) {
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
    out_ += phase == 'f' ? ",\"bp\":\"e\"}" : "}";
  }

  void meta_event(std::string_view name, std::uint32_t pid, std::uint32_t tid, std::string_view arg,
                  const std::string& value, bool quoted) {
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
    if (quoted) append_json_escaped(out_, value); else out_ += value;
    if (quoted) out_ += '"';
    out_ += "}}";
  }

  void header(const std::string& trace_name) {
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
      out_ += i ? ",\n    {" : "\n    {";
      key(schema::device_id); append_int(out_, d.id);
      next_key(schema::device_name); out_ += '"'; append_json_escaped(out_, d.name); out_ += '"';
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
    out_ += m.devices.empty() ? "],\n  " : "\n  ],\n  ";
    key(schema::key_cupti_version); append_int(out_, m.cupti_version);
    out_ += ",\n  "; key(schema::key_cuda_runtime_version); append_int(out_, m.cuda_runtime_version);
    out_ += ",\n  "; key(schema::key_cuda_driver_version); append_int(out_, m.cuda_driver_version);
    out_ += ",\n  \"trace_id\":\"";
    append_int(out_, m.pid);
    out_ += '-';
    append_int(out_, m.window_start_ns);
    out_ += "\",\n  "; key(schema::key_host_name); out_ += '"'; append_json_escaped(out_, m.host_name);
    // HTA finds the rank with a regex that wants the space after the colon,
    // and stops reading metadata at traceEvents: keep this before them.
    out_ += "\",\n  "; key(schema::key_distributed_info); out_ += "{\"backend\":\"none\",";
    key(schema::key_rank); out_ += ' '; append_int(out_, m.rank);
    next_key(schema::key_world_size); append_int(out_, m.world_size);
    out_ += "},\n  "; key(schema::key_cuprof); out_ += "{\"version\":\"" CUPROF_VERSION_STRING "\"";
    next_key(schema::cuprof_dropped_gpu_records); append_int(out_, m.dropped_gpu_records);
    next_key(schema::cuprof_dropped_cpu_events); append_int(out_, m.dropped_cpu_events);
    out_ += ",\"unmatched_gpu_records\":"; append_int(out_, m.unmatched_gpu_records);
    next_key(schema::cuprof_cuda_status);
    out_ += '"'; append_json_escaped(out_, m.cuda_status.empty() ? schema::cuda_status_on : m.cuda_status); out_ += '"';
    next_key(schema::cuprof_window_start_ns); append_int(out_, m.window_start_ns);
    next_key(schema::cuprof_window_end_ns); append_int(out_, m.window_end_ns);
    out_ += "},\n  \"displayTimeUnit\":\"ms\",\n  ";
    key(schema::key_base_time); append_int(out_, base_ns_);
    out_ += ",\n  "; key(schema::key_trace_events); out_ += '[';
    (void)trace_name;
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
    std::set<std::uint32_t> devices;
    std::set<std::pair<std::uint32_t, std::uint32_t>> lanes;
    for (const device_info& d : m.devices) devices.insert(std::uint32_t(d.id));
    for (const gpu_activity& g : t_.gpu) {
      devices.insert(g.device);
      lanes.insert({g.device, g.kind == gpu_kind::sync ? sync_tid_offset + g.stream : g.stream});
    }
    for (std::uint32_t d : devices) {
      meta_event(schema::meta_process_name, d, 0, schema::meta_name, m.process_name, true);
      meta_event("process_labels", d, 0, "labels", "GPU " + std::to_string(d), true);
      meta_event("process_sort_index", d, 0, "sort_index", std::to_string(5000000u + d), false);
    }
    for (const auto& lane : lanes) {
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
      const std::vector<std::uint32_t> lanes = overhead_lanes();
      const std::uint32_t count = lanes.empty() ? 0 : *std::max_element(lanes.begin(), lanes.end()) + 1;
      for (std::uint32_t l = 0; l < count; ++l)
        meta_event(schema::meta_thread_name, overhead_pid, l, schema::meta_name, "overhead " + std::to_string(l), true);
    }
  }

  void cpu_events() {
    const std::uint32_t pid = t_.meta.pid;
    for (const cpu_span& s : t_.spans) {
      complete(schema::cat_user_annotation, escaped_name(s.name), pid, s.tid, s.start_ns, s.end_ns);
      out_ += ",\"args\":{";
      key(schema::arg_external_id);
      append_int(out_, s.id);
      scope_args(s);
      out_ += "}}";
    }
    // One flow start per GPU record the call caused; the first uses the
    // correlation id itself, later ones (graph nodes) a derived unique id.
    std::vector<std::uint32_t> records_per_call(t_.api_calls.size(), 0);
    for (const gpu_activity& g : t_.gpu)
      if (g.api != no_index) ++records_per_call[g.api];
    for (std::size_t i = 0; i < t_.api_calls.size(); ++i) {
      const api_call& a = t_.api_calls[i];
      complete(a.domain == api_domain::driver ? schema::cat_cuda_driver : schema::cat_cuda_runtime,
               escaped_name(a.name), pid, a.tid, a.start_ns, a.end_ns);
      out_ += ",\"args\":{";
      if (a.parent != no_index) {
        key(schema::arg_external_id);
        append_int(out_, t_.spans[a.parent].id);
        out_ += ',';
      }
      key(schema::arg_correlation);
      append_int(out_, a.correlation);
      if (a.external_id) {
        out_ += ",\"external correlation\":";
        append_int(out_, a.external_id);
      }
      out_ += "}}";
      if (a.has_flow)
        for (std::uint32_t k = 0; k < records_per_call[i]; ++k) flow('s', flow_id(a.correlation, k), pid, a.tid, a.start_ns);
    }
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
        case span_arg::type::text: out_ += '"'; out_ += escaped_name(a.text); out_ += '"'; break;
      }
    }
  }

  static std::uint64_t flow_id(std::uint32_t correlation, std::uint32_t ordinal) {
    return (std::uint64_t(ordinal) << 32) | correlation;
  }

  // "context" only where it tells something: on a device with work in more
  // than one context (most programs have one per device, the primary context).
  void context(const gpu_activity& g) {
    if (several_contexts_.empty() ||
        std::find(several_contexts_.begin(), several_contexts_.end(), g.device) == several_contexts_.end())
      return;
    next_key(schema::arg_context);
    append_int(out_, g.context);
  }

  void find_devices_with_several_contexts() {
    struct contexts {
      std::uint32_t device, first;
      bool several;
    };
    std::vector<contexts> seen;  // a few devices: a linear search
    for (const gpu_activity& g : t_.gpu) {
      const auto d = std::find_if(seen.begin(), seen.end(), [&](const contexts& c) { return c.device == g.device; });
      if (d == seen.end()) seen.push_back({g.device, g.context, false});
      else d->several |= d->first != g.context;
    }
    several_contexts_.clear();
    for (const contexts& c : seen)
      if (c.several) several_contexts_.push_back(c.device);
  }

  void gpu_common_args(const gpu_activity& g) {
    out_ += ",\"args\":{";
    const std::uint32_t span = launching_span(t_, g);
    if (span != no_index) {
      key(schema::arg_external_id);
      append_int(out_, t_.spans[span].id);
      out_ += ',';
    }
    key(schema::arg_device); append_int(out_, g.device);
    context(g);
    next_key(schema::arg_stream); append_int(out_, g.stream);
    next_key(schema::arg_correlation); append_int(out_, g.correlation);
  }

  void gpu_events() {
    for (const gpu_annotation& a : t_.gpu_annotations) {
      // 1 ns earlier and 2 ns longer than what it covers, so viewers that
      // break ties by duration still draw it as the parent.
      complete(schema::cat_gpu_user_annotation, escaped_name(t_.spans[a.span].name), a.device, a.stream,
               a.start_ns - 1, a.end_ns + 1);
      out_ += ",\"args\":{";
      key(schema::arg_external_id);
      append_int(out_, t_.spans[a.span].id);
      out_ += "}}";
    }
    std::vector<std::uint32_t> flows_done(t_.api_calls.size(), 0);  // per call: an index, no hashing per record
    // Launch configurations are shared by many launches: one occupancy estimate
    // each, per device for mixed GPUs ({device, percent}; percent -1: not yet).
    std::vector<std::pair<std::uint32_t, int>> occupancy(t_.kernels.size(), {0, -1});
    for (const gpu_activity& g : t_.gpu) {
      const std::uint32_t tid = g.kind == gpu_kind::sync ? sync_tid_offset + g.stream : g.stream;
      switch (g.kind) {
        case gpu_kind::kernel: {
          complete(schema::cat_kernel, escaped_name(g.name), g.device, tid, g.start_ns, g.end_ns);
          gpu_common_args(g);
          if (g.details != no_index) {
            const kernel_details& k = t_.kernels[g.details];
            next_key(schema::arg_registers_per_thread); append_int(out_, k.registers_per_thread);
            if (const std::uint32_t shared = k.static_shared_memory + k.dynamic_shared_memory) {
              next_key(schema::arg_shared_memory);
              append_int(out_, shared);
            }
            dims3(schema::arg_grid, k.grid);
            dims3(schema::arg_block, k.block);
            std::pair<std::uint32_t, int>& estimate = occupancy[g.details];
            if (estimate.second < 0 || estimate.first != g.device)
              estimate = {g.device, estimate_occupancy(k, find_device(t_, g.device)).percent};
            out_ += ",\"est. achieved occupancy %\":"; append_int(out_, estimate.second);
            if (k.graph_id) {
              next_key(schema::arg_graph_id); append_int(out_, k.graph_id);
              next_key(schema::arg_graph_node_id); append_int(out_, k.graph_node_id);
            }
          }
          out_ += "}}";
          break;
        }
        case gpu_kind::memcpy:
        case gpu_kind::memset: {
          complete(g.kind == gpu_kind::memcpy ? schema::cat_gpu_memcpy : schema::cat_gpu_memset,
                   escaped_name(g.name), g.device, tid, g.start_ns, g.end_ns);
          gpu_common_args(g);
          next_key(schema::arg_bytes);
          append_int(out_, g.bytes);
          if (g.end_ns > g.start_ns) {
            out_ += ",\"memory bandwidth (GB/s)\":";
            append_double(out_, double(g.bytes) / double(g.end_ns - g.start_ns));
          }
          out_ += "}}";
          break;
        }
        case gpu_kind::sync: {
          complete(schema::cat_cuda_sync, escaped_name(g.name), g.device, tid, g.start_ns, g.end_ns);
          out_ += ",\"args\":{";
          key(schema::arg_sync_kind); out_ += '"'; out_ += sync_kind_name(g.subkind); out_ += '"';
          next_key(schema::arg_device); append_int(out_, g.device);
          context(g);
          next_key(schema::arg_stream);
          if (g.subkind == 4) out_ += "-1"; else append_int(out_, g.stream);
          next_key(schema::arg_correlation); append_int(out_, g.correlation);
          out_ += "}}";
          break;
        }
      }
      if (g.api != no_index && t_.api_calls[g.api].has_flow)
        flow('f', flow_id(g.correlation, flows_done[g.api]++), g.device, tid, g.start_ns);
    }
  }

  // CUPTI's overhead records from several threads overlap: each goes on the
  // first lane of the overhead process that is free at its start.
  std::vector<std::uint32_t> overhead_lanes() const {
    std::vector<std::size_t> order(t_.overhead.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return t_.overhead[a].start_ns < t_.overhead[b].start_ns; });
    std::vector<std::uint32_t> lane(order.size(), 0);
    std::vector<std::uint64_t> busy_until;
    for (std::size_t i : order) {
      std::uint32_t l = 0;
      while (l < busy_until.size() && busy_until[l] > t_.overhead[i].start_ns) ++l;
      if (l == busy_until.size()) busy_until.push_back(0);
      busy_until[l] = t_.overhead[i].end_ns;
      lane[i] = l;
    }
    return lane;
  }

  void overhead_events() {
    const std::vector<std::uint32_t> lane = overhead_lanes();
    for (std::size_t i = 0; i < t_.overhead.size(); ++i) {
      const overhead_span& o = t_.overhead[i];
      complete(schema::cat_overhead, escaped_name(o.name), overhead_pid, lane[i], std::max(o.start_ns, base_ns_),
               o.end_ns);
      out_ += "}";
    }
  }

  const std::string& escaped_name(name_id id) const { return escaped_names_[id]; }

  const trace& t_;
  std::function<void(text_buffer&)> flush_;
  text_buffer out_;
  std::uint64_t base_ns_ = 0;
  std::size_t events_ = 0;
  std::vector<std::string> escaped_names_;  // each name escaped once per document
  std::vector<std::uint32_t> several_contexts_;  // devices with work in more than one context
};

}  // namespace detail


namespace detail {

// Hands filled buffers to other threads that write them, so formatting the
// next megabyte overlaps writing the last ones. For a ".gz" path each buffer
// becomes one gzip member, compressed on one worker per core (compression is
// the slow part); members are written in the order the buffers came.
class background_writer {
 public:
  explicit background_writer(atomic_file& file) : file_(file), libdeflate_(file.gzip() ? libdeflate() : nullptr) {
    // At most 8 compressors: one formatting thread does not feed more
    // (docs/performance.md), and each holds a block and its member in memory.
    const unsigned workers = file.gzip() ? std::min(8u, std::max(1u, std::thread::hardware_concurrency())) : 1;
    slot_count_ = workers + 1;  // one more block waiting, so no worker idles between blocks
    slots_.reset(new text_buffer[slot_count_]);
    // A member function, not a lambda: std::thread's code for a lambda type is
    // shared by every copy of cuprof in the process (architecture.md).
    for (unsigned i = 0; i < workers; ++i) threads_.emplace_back(&background_writer::run, this);
  }
  background_writer(const background_writer&) = delete;
  background_writer& operator=(const background_writer&) = delete;
  ~background_writer() {
    try {
      finish();
    } catch (...) {  // the error was the caller's to see through finish(); here only the threads must end
    }
  }

  // Takes `chunk`'s bytes, leaving it empty with a buffer of at least its
  // capacity (the one a block written earlier used); blocks while every slot
  // holds a block not yet written.
  void write(text_buffer& chunk) {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [&] { return next_queued_ - next_written_ < slot_count_; });
    rethrow_locked();
    text_buffer& slot = slots_[next_queued_ % slot_count_];  // free: blocks are written in order
    if (slot.capacity() < chunk.capacity()) text_buffer(chunk.capacity()).swap(slot);
    slot.swap(chunk);
    chunk.clear();
    ++next_queued_;
    ready_.notify_one();
  }

  // Waits for everything to be written; rethrows the first error, if any.
  void finish() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!threads_.empty()) {
      idle_.wait(lock, [&] { return next_written_ == next_queued_; });
      done_ = true;
      ready_.notify_all();
      lock.unlock();
      for (std::thread& t : threads_) t.join();
      threads_.clear();
      lock.lock();
    }
    rethrow_locked();
  }

 private:
  void rethrow_locked() {
    if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
  }

  // A worker: takes the next block, compresses it (".gz") unlocked, then
  // writes it when every block before it was written.
  void run() {
    std::unique_ptr<gzip_compressor> gzip;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ready_.wait(lock, [&] { return next_taken_ < next_queued_ || done_; });
      if (next_taken_ == next_queued_) return;
      const std::uint64_t order = next_taken_++;
      const text_buffer& block = slots_[order % slot_count_];
      const bool skip = failed_;
      lock.unlock();
      std::exception_ptr error;
      std::string_view out(block.data(), block.size());
      try {
        if (!skip && file_.gzip()) {
          if (!gzip) gzip.reset(new gzip_compressor(libdeflate_));
          out = gzip->compress(block.data(), block.size());
        }
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      turn_.wait(lock, [&] { return next_written_ == order; });
      if (!error && !failed_) {
        lock.unlock();  // only the block whose turn it is writes
        try {
          file_.write(out.data(), out.size());
        } catch (...) {
          error = std::current_exception();
        }
        lock.lock();
      }
      if (error && !failed_) {
        failure_ = error;
        failed_ = true;
      }
      ++next_written_;
      turn_.notify_all();
      idle_.notify_all();
    }
  }

  atomic_file& file_;
  const libdeflate_library* libdeflate_;  // null: zlib's gzip
  std::mutex mutex_;
  std::condition_variable ready_, idle_, turn_;
  // Block k is in slot k % slot_count_ from write() until it is written.
  std::unique_ptr<text_buffer[]> slots_;
  std::uint64_t slot_count_ = 1, next_queued_ = 0, next_taken_ = 0, next_written_ = 0;
  bool done_ = false, failed_ = false;
  std::exception_ptr failure_;
  std::vector<std::thread> threads_;
};

}  // namespace detail

export_result export_chrome_trace(const trace& t, const std::string& path) {
  detail::atomic_file file(path);
  export_result r{path, 0};
  {
    detail::background_writer writer(file);
    detail::chrome_trace_writer formatter(t, [&](detail::text_buffer& bytes) { writer.write(bytes); });
    r.events = formatter.write(path);
    writer.finish();
  }
  file.commit();
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) r.bytes = std::uint64_t(st.st_size);
  char size[32];
  std::snprintf(size, sizeof size, "%.1f MB", double(r.bytes) / 1e6);
  const std::uint64_t dropped = t.meta.dropped_gpu_records + t.meta.dropped_cpu_events;
  detail::log_info("trace written to " + path + " (" + std::to_string(r.events) + " events, " + size + ", " +
                   std::to_string(dropped) + " dropped records)");
  return r;
}

std::string chrome_trace_json(const trace& t, const std::string& trace_name) {
  std::string all;
  detail::chrome_trace_writer writer(t, [&](detail::text_buffer& bytes) {
    all.append(bytes.data(), bytes.size());
    bytes.clear();
  });
  writer.write(trace_name);
  return all;
}

}  // namespace cuprof
