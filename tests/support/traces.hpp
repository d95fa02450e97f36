// Traces for the tests: a profile that records the CPU side only, hand-made
// traces, queries on a trace's spans, and threads that record scopes.
#pragma once

#include <cuprof/cuprof.hpp>

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace cuprof_test {

// Options of a profile that records scopes only: no CUDA tracing is tried.
inline cuprof::profile_options cpu_only() {
  cuprof::profile_options o;
  o.activities = cuprof::activity::cpu;
  return o;
}

inline void busy_wait_us(int us) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < until) {}
}

inline std::uint32_t gettid_now() { return std::uint32_t(::syscall(SYS_gettid)); }

// The spans of that name (on thread `tid`, when not 0).
inline std::size_t count_spans(const cuprof::trace& t, const std::string& name, std::uint32_t tid = 0) {
  std::size_t n = 0;
  for (const cuprof::cpu_span& s : t.spans) n += t.names.str(s.name) == name && (tid == 0 || s.tid == tid);
  return n;
}

// The nth span of that name, or null.
inline const cuprof::cpu_span* find_span(const cuprof::trace& t, const std::string& name, int nth = 0) {
  for (const auto& s : t.spans)
    if (t.names.str(s.name) == name && nth-- == 0) return &s;
  return nullptr;
}

// Spans whose end precedes their start, or whose parent is on another thread or not around them.
inline std::size_t malformed_spans(const cuprof::trace& t) {
  std::size_t bad = 0;
  for (const cuprof::cpu_span& s : t.spans) {
    if (s.end_ns < s.start_ns) ++bad;
    if (s.parent == cuprof::no_index) continue;
    if (s.parent >= t.spans.size()) {
      ++bad;
      continue;
    }
    const cuprof::cpu_span& p = t.spans[s.parent];
    if (p.tid != s.tid || p.start_ns > s.start_ns || p.end_ns < s.end_ns) ++bad;
  }
  return bad;
}

// A trace made by hand, span by span, call by call, GPU record by GPU record.
struct builder {
  cuprof::trace t;

  std::uint32_t span(const std::string& name, std::uint64_t start, std::uint64_t end, std::uint32_t parent = cuprof::no_index,
                     std::uint32_t tid = 1, bool step = false) {
    cuprof::cpu_span s;
    s.start_ns = start;
    s.end_ns = end;
    s.name = t.names.intern(name);
    s.tid = tid;
    s.parent = parent;
    s.is_step = step;
    s.id = std::uint32_t(t.spans.size() + 1);
    t.spans.push_back(s);
    return std::uint32_t(t.spans.size() - 1);
  }
  std::uint32_t call(const std::string& name, std::uint64_t start, std::uint64_t end, std::uint32_t correlation,
                     std::uint32_t tid = 1, cuprof::api_domain domain = cuprof::api_domain::runtime, bool flow = true,
                     std::uint32_t cbid = 0) {
    cuprof::api_call c;
    c.start_ns = start;
    c.end_ns = end;
    c.kind = std::uint16_t(t.add_call_kind({t.names.intern(name), std::uint16_t(cbid), domain, flow}));
    c.tid = tid;
    c.correlation = correlation;
    t.api_calls.push_back(c);
    return std::uint32_t(t.api_calls.size() - 1);
  }
  std::uint32_t gpu(const std::string& name, std::uint64_t start, std::uint64_t end, std::uint32_t correlation,
                    cuprof::gpu_kind kind = cuprof::gpu_kind::kernel, std::uint32_t device = 0, std::uint32_t stream = 7,
                    std::uint32_t context = 0) {
    cuprof::gpu_activity g;
    g.start_ns = start;
    g.end_ns = end;
    g.name = t.names.intern(name);
    g.correlation = correlation;
    g.kind = kind;
    g.lane = t.add_gpu_lane({device, context, stream});
    t.gpu.push_back(g);
    return std::uint32_t(t.gpu.size() - 1);
  }
  // A copy's or memset's size and CUPTI kind (1 HtoD, 2 DtoH, 8 DtoD).
  void transfer(std::uint32_t gpu_index, std::uint64_t bytes, std::uint8_t memcpy_kind = 0) {
    t.set_bytes(t.gpu[gpu_index], bytes);
    t.gpu[gpu_index].subkind = memcpy_kind;
  }
  // An allocation (bytes > 0) or a free (bytes < 0) on `device` (-1: host
  // memory), in time order: the device's totals after it are counted from
  // `in_use` (what was allocated before the window) up, `reserved` at least.
  std::uint32_t memory(std::uint64_t ts, std::int64_t bytes, std::uint64_t address, std::int32_t device = 0,
                       std::uint32_t tid = 1, std::uint32_t correlation = 0) {
    device_memory& d = devices_[device];
    d.in_use += std::uint64_t(bytes);  // a free's negative count wraps back down
    cuprof::memory_event m;
    m.ts_ns = ts;
    m.bytes = bytes;
    m.address = address;
    m.device = device;
    m.tid = tid;
    m.correlation = correlation;
    m.total_allocated = d.in_use;
    m.total_reserved = std::max(d.reserved, d.in_use);
    t.memory.push_back(m);
    t.meta.memory_recorded = true;
    return std::uint32_t(t.memory.size() - 1);
  }
  // What `device` holds before the window's first memory event.
  void memory_before(std::int32_t device, std::uint64_t in_use, std::uint64_t reserved) { devices_[device] = {in_use, reserved}; }

 private:
  struct device_memory {
    std::uint64_t in_use = 0, reserved = 0;
  };
  std::map<std::int32_t, device_memory> devices_;
};

// Row names in table order (the first cell of each row line).
inline std::vector<std::string> row_names(const std::string& table) {
  std::vector<std::string> names;
  std::size_t pos = 0;
  int separators = 0;
  while (pos < table.size()) {
    const std::size_t eol = table.find('\n', pos);
    const std::string line = table.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.empty() && line[0] == '-') {
      ++separators;
      continue;
    }
    if (separators != 2) continue;  // rows lie between the 2nd and 3rd separators
    const std::size_t first = line.find_first_not_of(' ');
    const std::size_t end = line.find("  ", first);
    names.push_back(line.substr(first, end - first));
  }
  return names;
}

// A cuprof trace with sizes: three GEMM scopes (two shapes) each launching one
// nvjet bf16 GEMM of 1 ms, a 1 MB DtoD copy of 1 us, a 4 KiB HtoD copy, and a
// scope with a double and a string argument. An H100-like device (sm_90, 132
// SMs, 1.98 GHz, HBM at 2.619 GHz x 5120 bits).
inline const char* const sized_trace = R"json({
  "deviceProperties": [{"id": 0, "name": "GPU", "computeMajor": 9, "computeMinor": 0, "numSms": 132,
                        "clockRate": 1980000, "memoryClockRate": 2619000, "memoryBusWidth": 5120}],
  "cuprof": {"version": "0.1.0"},
  "baseTimeNanoseconds": 1700000000000000000,
  "traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "gemm", "pid": 1, "tid": 1, "ts": 0, "dur": 1500,
     "args": {"External id": 1, "M": 4096, "N": 4096, "K": 4096}},
    {"ph": "X", "cat": "user_annotation", "name": "gemm", "pid": 1, "tid": 1, "ts": 2000, "dur": 1500,
     "args": {"External id": 2, "M": 1024, "N": 1024, "K": 1024}},
    {"ph": "X", "cat": "user_annotation", "name": "gemm", "pid": 1, "tid": 1, "ts": 4000, "dur": 1500,
     "args": {"External id": 3, "M": 4096, "N": 4096, "K": 4096}},
    {"ph": "X", "cat": "user_annotation", "name": "scaled", "pid": 1, "tid": 1, "ts": 6000, "dur": 10,
     "args": {"External id": 4, "scale": 0.5, "tag": "x"}},
    {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "pid": 0, "tid": 7,
     "ts": 100, "dur": 1000, "args": {"External id": 1, "device": 0, "stream": 7, "correlation": 11}},
    {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "pid": 0, "tid": 7,
     "ts": 2100, "dur": 1000, "args": {"External id": 2, "device": 0, "stream": 7, "correlation": 12}},
    {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "pid": 0, "tid": 7,
     "ts": 4100, "dur": 1000, "args": {"External id": 3, "device": 0, "stream": 7, "correlation": 13}},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "gemm", "pid": 0, "tid": 7, "ts": 99.999, "dur": 1000.002,
     "args": {"External id": 1}},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "gemm", "pid": 0, "tid": 7, "ts": 2099.999, "dur": 1000.002,
     "args": {"External id": 2}},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "gemm", "pid": 0, "tid": 7, "ts": 4099.999, "dur": 1000.002,
     "args": {"External id": 3}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7,
     "ts": 6002, "dur": 1, "args": {"External id": 4, "device": 0, "stream": 7, "correlation": 14, "bytes": 1000000}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
     "ts": 6004, "dur": 2, "args": {"External id": 4, "device": 0, "stream": 7, "correlation": 15, "bytes": 4096}}
  ]})json";

// Recording threads must not outrun memory: a thread recording as fast as it
// can writes GB/s. A pause every `burst` loops keeps each worker to some
// 10-100 MB/s.
inline void pace(std::uint64_t loop, std::uint64_t burst) {
  if (loop % burst == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
}

// A thread that enters and leaves nested scopes (static and dynamic names)
// until told to stop, free-running unless given a budget of loops.
class scope_worker {
 public:
  explicit scope_worker(std::size_t dynamic_name_bytes = 24)
      : name_(dynamic_name_bytes, 'd'), burst_(dynamic_name_bytes > 256 ? 2 : 16) {
    thread_ = std::thread([this] {
      while (!stop_.load(std::memory_order_relaxed)) {
        if (loops_.load(std::memory_order_relaxed) >= budget_end_.load(std::memory_order_relaxed)) {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
          continue;
        }
        {
          CUPROF_SCOPE("worker_outer");
          cuprof::record_function mid(name_);
          CUPROF_SCOPE("worker_inner");
        }
        pace(loops_.fetch_add(1, std::memory_order_relaxed) + 1, burst_);
      }
    });
  }
  ~scope_worker() { finish(); }
  void finish() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  std::uint64_t loops() const { return loops_.load(); }
  void wait_loops(std::uint64_t n) const {
    const std::uint64_t target = loops() + n;
    while (loops() < target) std::this_thread::yield();
  }
  // From now on the worker runs n more loops at most, then idles until given more:
  // what a window holds then depends on the test's steps, not on how fast the
  // machine is (a sanitizer's slowdown otherwise grows each window, as a window
  // also holds the processing of the one before it).
  void allow_loops(std::uint64_t n) { budget_end_.store(loops() + n); }
  void run_loops(std::uint64_t n) {
    const std::uint64_t target = loops() + n;
    budget_end_.store(target);
    while (loops() < target) std::this_thread::yield();
  }

 private:
  std::string name_;
  std::uint64_t burst_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> loops_{0};
  std::atomic<std::uint64_t> budget_end_{UINT64_MAX};
  std::thread thread_;
};

}  // namespace cuprof_test
