// The Chrome trace the writer makes, checked as the tests read it: a hand-made
// trace with every kind of event (fixture), lookups in the parsed document, and
// check_contract(), every rule of docs/trace-format.md that holds for any trace.
#pragma once

#include <cuprof/cuprof.hpp>

#include "traces.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace cuprof_test {

using json = nlohmann::json;

// The window starts half a second into a UTC day, so that the writer's base
// (whole seconds below the first event; whole days for a rank of a
// multi-process job, as this fixture's rank 3 of 4 is) is the same either way.
constexpr std::uint64_t epoch = 1699920000500000000ull;  // window start, Unix-epoch ns
constexpr std::uint64_t base = 1699920000000000000ull;   // whole days (and seconds) below it
constexpr std::uint32_t pid = 4242;
constexpr std::uint32_t tid_main = 4242, tid_worker = 4243, tid_bare = 4244;

// The builder's trace, its times from the window's start (epoch), on this
// fixture's threads, CUDA context 1.
struct fixture : builder {
  std::uint32_t step, forward, linear, worker;

  std::uint32_t span(const std::string& name, std::uint64_t s, std::uint64_t e, std::uint32_t parent,
                     std::uint32_t tid = tid_main, bool is_step = false) {
    return builder::span(name, epoch + s, epoch + e, parent, tid, is_step);
  }
  void call(const std::string& name, std::uint64_t s, std::uint64_t e, std::uint32_t corr, bool flow = true,
            std::uint32_t tid = tid_main, cuprof::api_domain d = cuprof::api_domain::runtime, std::uint32_t cbid = 211) {
    builder::call(name, epoch + s, epoch + e, corr, tid, d, flow, cbid);
  }
  cuprof::gpu_activity& gpu(const std::string& name, std::uint64_t s, std::uint64_t e, std::uint32_t corr,
                            cuprof::gpu_kind kind = cuprof::gpu_kind::kernel, std::uint32_t stream = 7) {
    return t.gpu[builder::gpu(name, epoch + s, epoch + e, corr, kind, 0, stream, 1)];
  }
  void kernel_details(cuprof::gpu_activity& g, std::uint32_t graph_id = 0) {
    cuprof::kernel_details k;
    k.grid[0] = 264, k.grid[1] = 1, k.grid[2] = 1;
    k.block[0] = 256, k.block[1] = 1, k.block[2] = 1;
    k.registers_per_thread = 64;
    k.static_shared_memory = 16384 - 1024;
    k.dynamic_shared_memory = 1024;
    k.graph_id = graph_id;
    k.graph_node_id = graph_id ? 77 : 0;
    g.details = std::uint32_t(t.kernels.size());
    t.kernels.push_back(k);
  }

  fixture() {
    cuprof::trace_metadata& m = t.meta;
    m.pid = pid;
    m.process_name = "proc";
    m.host_name = "host";
    m.window_start_ns = epoch;
    m.window_end_ns = epoch + 1000000;
    m.rank = 3;
    m.world_size = 4;
    m.threads = {{tid_main, "main"}, {tid_worker, ""}};
    cuprof::device_info d;
    d.id = 0;
    d.name = "NVIDIA Test GPU";
    d.num_sms = 132;
    d.warp_size = 32;
    d.max_threads_per_multiprocessor = 2048;
    d.max_blocks_per_multiprocessor = 32;
    d.regs_per_multiprocessor = 65536;
    d.shared_mem_per_multiprocessor = 233472;
    m.devices = {d};
    m.cupti_version = 130001;
    m.cuda_runtime_version = 13000;
    m.cuda_driver_version = 13000;
    m.dropped_gpu_records = 5;
    m.dropped_cpu_events = 6;
    m.edges.calls_without_gpu_work = {2, 0, 1};
    m.edges.gpu_work_without_call = {0, 3, 0};
    m.edges.launched_before = {7, 0, 0};
    m.edges.calls_running_at_end = 4;

    step = span("ProfilerStep#5", 1000, 900000, cuprof::no_index, tid_main, true);
    forward = span("forward", 2000, 800000, step);
    linear = span("linear", 3000, 100000, forward);
    worker = span("worker", 5000, 50000, cuprof::no_index, tid_worker);

    call("cudaLaunchKernel", 4000, 9000, 11);
    call("cudaMemcpyAsync", 10000, 12000, 12, true, tid_main, cuprof::api_domain::runtime, 41);
    call("cudaMemsetAsync", 13000, 14000, 13, true, tid_main, cuprof::api_domain::runtime, 51);
    call("cudaStreamSynchronize", 15000, 60000, 14, true, tid_main, cuprof::api_domain::runtime, 131);
    call("cuLaunchKernelEx", 200000, 205000, 15, true, tid_main, cuprof::api_domain::driver, 652);
    call("cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 210000, 211000, 16, false, tid_main,
         cuprof::api_domain::runtime, 251);
    call("cudaGraphLaunch", 300000, 301000, 17, true, tid_main, cuprof::api_domain::runtime, 311);
    call("cudaLaunchKernel", 6000, 7000, 18, true, tid_worker);
    call("cudaDeviceSynchronize", 700000, 710000, 19, true, tid_main, cuprof::api_domain::runtime, 165);
    call("cudaMalloc", 20000, 30000, 20, false, tid_bare, cuprof::api_domain::runtime, 20);

    kernel_details(gpu("gemm", 20000, 40000, 11));
    cuprof::gpu_activity& cp = gpu("Memcpy DtoD (Device -> Device)", 41000, 42000, 12, cuprof::gpu_kind::memcpy);
    t.set_bytes(cp, 1048576);
    cp.subkind = 8;
    t.set_bytes(gpu("Memset (Device)", 42500, 42600, 13, cuprof::gpu_kind::memset), 4);
    gpu("Stream Sync", 42600, 59000, 14, cuprof::gpu_kind::sync).subkind = 3;
    kernel_details(gpu("nvjet", 210000, 260000, 15));
    kernel_details(gpu("graph_node_a", 310000, 311000, 17), 2);
    kernel_details(gpu("graph_node_b", 311500, 312000, 17), 2);
    kernel_details(gpu("worker_kernel", 43000, 44000, 18, cuprof::gpu_kind::kernel, 9));
    kernel_details(gpu("orphan", 500000, 501000, 999));
    gpu("Context Sync", 700100, 709000, 19, cuprof::gpu_kind::sync, 0).subkind = 4;

    t.overhead.push_back({epoch - 5000, epoch + 500, t.names.intern("Activity Buffer Request")});
    t.overhead.push_back({epoch + 800000, epoch + 801000, t.names.intern("Buffer Flush")});
    cuprof::attribute(t);
  }
};

inline std::int64_t ns_of(const json& v) { return std::llround(v.get<double>() * 1000.0); }

inline const json* find_event(const json& events, const std::string& ph, const std::string& name) {
  for (const json& e : events)
    if (e.value("ph", "") == ph && e.value("name", "") == name) return &e;
  return nullptr;
}

inline std::vector<const json*> find_events(const json& events, const std::string& ph, const std::string& name) {
  std::vector<const json*> out;
  for (const json& e : events)
    if (e.value("ph", "") == ph && e.value("name", "") == name) out.push_back(&e);
  return out;
}

inline const json* find_meta(const json& events, const std::string& name, std::uint64_t p, std::uint64_t t) {
  for (const json& e : events)
    if (e.value("ph", "") == "M" && e.value("name", "") == name && e["pid"] == p && e["tid"] == t) return &e;
  return nullptr;
}

// Every rule of the contract that holds for any trace; returns the parsed document.
inline json check_contract(const std::string& text) {
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(text));
  REQUIRE(doc.is_object());
  CHECK(doc["schemaVersion"] == 1);
  REQUIRE(doc.contains("baseTimeNanoseconds"));
  CHECK(doc["baseTimeNanoseconds"].is_number_unsigned());
  CHECK(doc["displayTimeUnit"] == "ms");
  REQUIRE(doc.contains("traceEvents"));
  REQUIRE(doc["traceEvents"].is_array());

  // distributedInfo before traceEvents, "rank": with a space (HTA's regex).
  const std::size_t dist = text.find("\"distributedInfo\"");
  const std::size_t events_at = text.find("\"traceEvents\"");
  REQUIRE(dist != std::string::npos);
  CHECK(dist < events_at);
  CHECK(std::regex_search(text.substr(0, events_at), std::regex("\"rank\": \\d+")));

  // ts and dur: microseconds, at most three decimals (cuprof writes the ones needed, older
  // traces and Kineto three), never negative.
  static const std::regex number_field("\"(ts|dur)\":\\s*([^,}\\s]*)");
  static const std::regex three_decimals("\\d+(\\.\\d{1,3})?");
  std::size_t fields = 0;
  for (std::sregex_iterator it(text.begin(), text.end(), number_field), end; it != end; ++it) {
    ++fields;
    const std::string v = (*it)[2];
    if (!std::regex_match(v, three_decimals)) FAIL_CHECK("bad " << (*it)[1] << " value: " << v);
  }
  CHECK(fields > 0);

  struct slice {
    std::int64_t start, end;
    std::size_t order;
    std::string name;
  };
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::vector<slice>> lanes;
  std::size_t order = 0;
  for (const json& e : doc["traceEvents"]) {
    ++order;
    REQUIRE(e.is_object());
    REQUIRE(e.contains("ph"));
    REQUIRE(e["ph"].is_string());
    REQUIRE(e.contains("name"));
    CHECK(e["name"].is_string());
    REQUIRE(e.contains("pid"));
    REQUIRE(e.contains("tid"));
    CHECK(e["pid"].is_number_unsigned());
    CHECK(e["tid"].is_number_unsigned());
    CHECK(e["pid"].get<std::uint64_t>() < (1ull << 32));
    CHECK(e["tid"].get<std::uint64_t>() < (1ull << 32));
    const std::string ph = e["ph"];
    if (ph != "M") {
      REQUIRE(e.contains("ts"));
      CHECK(e["ts"].is_number());
      CHECK(e["ts"].get<double>() >= 0.0);
    }
    if (ph == "X") {
      REQUIRE(e.contains("cat"));
      CHECK(e["cat"].is_string());
      REQUIRE(e.contains("dur"));
      CHECK(e["dur"].get<double>() >= 0.0);
      const std::int64_t s = ns_of(e["ts"]);
      lanes[{e["pid"].get<std::uint64_t>(), e["tid"].get<std::uint64_t>()}].push_back({s, s + ns_of(e["dur"]), order, e["name"]});
    }
    if (ph == "s" || ph == "f") {
      CHECK(e["cat"] == "ac2g");
      CHECK(e["name"] == "ac2g");
      CHECK(e["id"].is_number_unsigned());
      if (ph == "f") CHECK(e["bp"] == "e");
    }
    // Flow v2 members: on X events only, an unsigned bind_id and one direction, true.
    if (e.contains("bind_id") || e.contains("flow_in") || e.contains("flow_out")) {
      CHECK(ph == "X");
      CHECK(e["bind_id"].is_number_unsigned());
      CHECK_MESSAGE(e.contains("flow_in") != e.contains("flow_out"), "flow_in and flow_out on one slice: " << e.dump());
      const std::string cat = e.value("cat", "");
      if (e.contains("flow_out")) {
        CHECK(e["flow_out"] == true);
        CHECK_MESSAGE((cat == "cuda_runtime" || cat == "cuda_driver"), "flow_out on " << cat);
      }
      if (e.contains("flow_in")) {
        CHECK(e["flow_in"] == true);
        CHECK_MESSAGE((cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset" || cat == "cuda_sync"),
                      "flow_in on " << cat);
      }
    }
  }

  // Slices on one (pid, tid) nest or are disjoint; on equal starts the
  // enclosing one comes first in the file.
  for (auto& lane : lanes) {
    auto& v = lane.second;
    std::stable_sort(v.begin(), v.end(),
                     [](const slice& a, const slice& b) { return a.start != b.start ? a.start < b.start : a.end > b.end; });
    std::vector<const slice*> stack;
    for (const slice& s : v) {
      while (!stack.empty() && stack.back()->end <= s.start) stack.pop_back();
      if (!stack.empty()) {
        if (s.end > stack.back()->end)
          FAIL_CHECK("overlap on pid " << lane.first.first << " tid " << lane.first.second << ": '" << s.name << "' crosses '"
                                       << stack.back()->name << "'");
        if (s.start == stack.back()->start && s.order < stack.back()->order)
          FAIL_CHECK("'" << s.name << "' precedes its enclosing '" << stack.back()->name << "' at the same ts");
      }
      stack.push_back(&s);
    }
  }

  // Flows v1: every f has its s (same id, cat, name) and every s its f; each end
  // sits at the start of a slice on its own pid/tid.
  std::map<std::uint64_t, const json*> starts, finishes;
  // Flows v2: each bind_id on one flow_out slice and one flow_in slice.
  std::map<std::uint64_t, const json*> outs, ins;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "s") CHECK(starts.emplace(e["id"].get<std::uint64_t>(), &e).second);
    if (e["ph"] == "f") CHECK(finishes.emplace(e["id"].get<std::uint64_t>(), &e).second);
    if (e.value("flow_out", false)) CHECK(outs.emplace(e["bind_id"].get<std::uint64_t>(), &e).second);
    if (e.value("flow_in", false)) CHECK(ins.emplace(e["bind_id"].get<std::uint64_t>(), &e).second);
  }
  for (const auto& in : ins) CHECK_MESSAGE(outs.count(in.first), "flow_in without flow_out, bind_id " << in.first);
  for (const auto& out : outs) CHECK_MESSAGE(ins.count(out.first), "flow_out without flow_in, bind_id " << out.first);
  // Perfetto numbers v1 flows 0, 1, 2, ... in the space of the bind_ids: a
  // bind_id below their count would cross arrows.
  std::set<std::uint64_t> v1_ids;
  for (const auto& s : starts) v1_ids.insert(s.first);
  for (const auto& f : finishes) v1_ids.insert(f.first);
  if (!outs.empty() && !v1_ids.empty())
    CHECK_MESSAGE(outs.begin()->first >= v1_ids.size(),
                  "bind_id " << outs.begin()->first << " among the ids Perfetto gives the " << v1_ids.size() << " v1 flows");
  CHECK(starts.size() == finishes.size());
  for (const auto& f : finishes) CHECK_MESSAGE(starts.count(f.first), "flow f without s, id " << f.first);
  for (const auto& s : starts) CHECK_MESSAGE(finishes.count(s.first), "flow s without f, id " << s.first);
  const auto slice_starts_at = [&](const json& flow) {
    const auto it = lanes.find({flow["pid"].get<std::uint64_t>(), flow["tid"].get<std::uint64_t>()});
    if (it == lanes.end()) return false;
    for (const slice& s : it->second)
      if (s.start == ns_of(flow["ts"])) return true;
    return false;
  };
  for (const auto& s : starts) CHECK_MESSAGE(slice_starts_at(*s.second), "flow s " << s.first << " not at a slice start");
  for (const auto& f : finishes) CHECK_MESSAGE(slice_starts_at(*f.second), "flow f " << f.first << " not at a slice start");
  return doc;
}

}  // namespace cuprof_test
