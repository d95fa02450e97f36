// The Chrome trace writer against the contract of docs/trace-format.md, the
// JSON helpers, and file output (atomic, gzip, failures).
#include <cuprof/cuprof.hpp>
#include <cuprof/model/occupancy.hpp>
#include <cuprof/output/chrome_trace_writer.hpp>
#include <cuprof/output/file_sink.hpp>
#include <cuprof/output/json_text.hpp>
#include <cuprof/analysis.hpp>

#include "child_process.hpp"
#include "flow_arrows.hpp"
#include "trace_reader.hpp"  // the reader's internals (src/analysis)

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using cuprof::no_index;
using cuprof_test::in_child;

constexpr std::uint64_t epoch = 1700000000500000000ull;  // window start, Unix-epoch ns
constexpr std::uint64_t base = 1700000000000000000ull;   // whole seconds below it
constexpr std::uint32_t pid = 4242;
constexpr std::uint32_t tid_main = 4242, tid_worker = 4243, tid_bare = 4244;

struct fixture {
  cuprof::trace t;
  std::uint32_t step, forward, linear, worker;

  std::uint32_t span(const std::string& name, std::uint64_t s, std::uint64_t e, std::uint32_t parent,
                     std::uint32_t tid = tid_main, bool is_step = false) {
    cuprof::cpu_span x;
    x.start_ns = epoch + s;
    x.end_ns = epoch + e;
    x.name = t.names.intern(name);
    x.tid = tid;
    x.parent = parent;
    x.is_step = is_step;
    x.id = std::uint32_t(t.spans.size() + 1);
    t.spans.push_back(x);
    return std::uint32_t(t.spans.size() - 1);
  }
  void call(const std::string& name, std::uint64_t s, std::uint64_t e, std::uint32_t corr, bool flow = true,
            std::uint32_t tid = tid_main, cuprof::api_domain d = cuprof::api_domain::runtime, std::uint32_t cbid = 211) {
    cuprof::api_call c;
    c.start_ns = epoch + s;
    c.end_ns = epoch + e;
    c.kind = std::uint16_t(t.add_call_kind({t.names.intern(name), std::uint16_t(cbid), d, flow}));
    c.tid = tid;
    c.correlation = corr;
    t.api_calls.push_back(c);
  }
  cuprof::gpu_activity& gpu(const std::string& name, std::uint64_t s, std::uint64_t e, std::uint32_t corr,
                            cuprof::gpu_kind kind = cuprof::gpu_kind::kernel, std::uint32_t stream = 7) {
    cuprof::gpu_activity g;
    g.start_ns = epoch + s;
    g.end_ns = epoch + e;
    g.name = t.names.intern(name);
    g.correlation = corr;
    g.kind = kind;
    g.lane = t.add_gpu_lane({0, 1, stream});
    t.gpu.push_back(g);
    return t.gpu.back();
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

    step = span("ProfilerStep#5", 1000, 900000, no_index, tid_main, true);
    forward = span("forward", 2000, 800000, step);
    linear = span("linear", 3000, 100000, forward);
    worker = span("worker", 5000, 50000, no_index, tid_worker);

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

std::int64_t ns_of(const json& v) { return std::llround(v.get<double>() * 1000.0); }

const json* find_event(const json& events, const std::string& ph, const std::string& name) {
  for (const json& e : events)
    if (e.value("ph", "") == ph && e.value("name", "") == name) return &e;
  return nullptr;
}

std::vector<const json*> find_events(const json& events, const std::string& ph, const std::string& name) {
  std::vector<const json*> out;
  for (const json& e : events)
    if (e.value("ph", "") == ph && e.value("name", "") == name) out.push_back(&e);
  return out;
}

const json* find_meta(const json& events, const std::string& name, std::uint64_t p, std::uint64_t t) {
  for (const json& e : events)
    if (e.value("ph", "") == "M" && e.value("name", "") == name && e["pid"] == p && e["tid"] == t) return &e;
  return nullptr;
}

// Every rule of the contract that holds for any trace; returns the parsed document.
json check_contract(const std::string& text) {
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
    std::stable_sort(v.begin(), v.end(), [](const slice& a, const slice& b) {
      return a.start != b.start ? a.start < b.start : a.end > b.end;
    });
    std::vector<const slice*> stack;
    for (const slice& s : v) {
      while (!stack.empty() && stack.back()->end <= s.start) stack.pop_back();
      if (!stack.empty()) {
        if (s.end > stack.back()->end)
          FAIL_CHECK("overlap on pid " << lane.first.first << " tid " << lane.first.second << ": '" << s.name
                                       << "' crosses '" << stack.back()->name << "'");
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

// Keeps a document the writer made in CUPROF_TEST_KEEP_TRACES, where ctest's
// validate_test_traces runs tests/validate_trace.py on it after this suite.
void keep_trace(const std::string& name, const std::string& text) {
  const char* dir = std::getenv("CUPROF_TEST_KEEP_TRACES");
  if (!dir || !*dir) return;
  fs::create_directories(dir);
  std::ofstream(fs::path(dir) / name, std::ios::binary) << text;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string gunzip_file(const fs::path& p) {
  gzFile f = gzopen(p.c_str(), "rb");
  REQUIRE(f != nullptr);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, std::size_t(n));
  CHECK(n == 0);
  gzclose(f);
  return out;
}

struct temp_dir {
  fs::path path;
  temp_dir() {
    std::string tmpl = (fs::temp_directory_path() / "cuprof-test-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    for (auto& e : fs::recursive_directory_iterator(path, ec))
      if (e.is_directory(ec)) fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

bool leftover_temp(const fs::path& dir) {
  std::error_code ec;
  for (auto& e : fs::recursive_directory_iterator(dir, ec))
    if (e.path().filename().string().find(".tmp") != std::string::npos) return true;
  return false;
}

// 0: export threw cuprof::error whose message has `path` and `expect`; 1: no throw; 2: wrong message; 3: other.
int export_must_fail(const cuprof::trace& t, const std::string& path, const std::string& expect) {
  try {
    cuprof::export_chrome_trace(t, path);
    return 1;
  } catch (const cuprof::error& e) {
    const std::string m = e.what();
    if (m.rfind("cuprof: ", 0) != 0 || m.find(path) == std::string::npos || m.find(expect) == std::string::npos) {
      std::fprintf(stderr, "unexpected message: %s\n", m.c_str());
      return 2;
    }
    return 0;
  } catch (...) {
    return 3;
  }
}

cuprof::trace big_trace(std::size_t spans) {
  cuprof::trace t;
  t.meta.pid = 1;
  t.meta.window_start_ns = epoch;
  t.meta.window_end_ns = epoch + spans * 1000;
  t.meta.threads = {{1, "main"}};
  for (std::size_t i = 0; i < spans; ++i) {
    cuprof::cpu_span s;
    s.start_ns = epoch + i * 1000;
    s.end_ns = s.start_ns + 500 + i % 499;
    s.name = t.names.intern("scope number " + std::to_string(i * 7919 % 100003) + " of a rather long family of names");
    s.tid = 1;
    s.id = std::uint32_t(i + 1);
    t.spans.push_back(s);
  }
  return t;
}

// `rounds` rounds of every kind of event, with what the writer carries from
// one event to another: flows (some calls with three GPU records, the later
// two at the end of the GPU records), launch configurations shared over two
// devices, two contexts on one device, overlapping overhead records, names
// that need escapes or are not UTF-8.
cuprof::trace every_kind_trace(std::size_t rounds) {
  cuprof::trace t;
  cuprof::trace_metadata& m = t.meta;
  m.pid = pid;
  m.process_name = "proc \"quoted\" \x01";
  m.host_name = "host\\";
  m.window_start_ns = epoch;
  m.window_end_ns = epoch + rounds * 10000;
  m.threads = {{tid_main, "main"}, {tid_worker, "worker \xff"}};
  for (int id : {0, 1}) {
    cuprof::device_info d;
    d.id = id;
    d.name = "GPU \"" + std::to_string(id) + "\"";
    d.num_sms = id ? 108 : 132;
    d.max_threads_per_multiprocessor = 2048;
    d.max_blocks_per_multiprocessor = 32;
    d.regs_per_multiprocessor = 65536;
    d.shared_mem_per_multiprocessor = 233472;
    m.devices.push_back(d);
  }
  const cuprof::name_id names[] = {t.names.intern("plain"), t.names.intern("quote \" back \\ tab \t line \n"),
                                   t.names.intern("bad \xff\xfe utf-8 \xc3"), t.names.intern("control \x01\x1f \x7f"),
                                   t.names.intern("rocket \xf0\x9f\x9a\x80 \xc3\xa9")};
  for (std::uint32_t c = 0; c < 3; ++c) {
    cuprof::kernel_details k;
    k.grid[0] = 1 + c * 500, k.grid[1] = k.grid[2] = 1;
    k.block[0] = 128u << c, k.block[1] = k.block[2] = 1;
    k.registers_per_thread = 32 + 40 * c;
    k.dynamic_shared_memory = c * 4096;
    k.graph_id = c == 2 ? 9 : 0;
    t.kernels.push_back(k);
  }
  std::vector<cuprof::gpu_activity> later;  // graph nodes after the first: far from their call
  for (std::uint32_t r = 0; r < rounds; ++r) {
    const std::uint64_t now = epoch + std::uint64_t(r) * 10000;
    const std::uint32_t tid = r % 4 == 3 ? tid_worker : tid_main;
    cuprof::cpu_span s;
    s.start_ns = now;
    s.end_ns = now + 8000 + r % 7;
    s.name = names[r % 5];
    s.tid = tid;
    s.id = r + 1;
    s.first_arg = std::uint32_t(t.span_args.size());
    s.arg_count = 2;
    t.spans.push_back(s);
    cuprof::span_arg a;
    a.key = names[(r + 1) % 5];
    a.kind = r % 2 ? cuprof::span_arg::type::text : cuprof::span_arg::type::real;
    a.text = names[(r + 2) % 5];
    a.real = r * 0.125;
    t.span_args.push_back(a);
    a.key = t.names.intern("n");
    a.kind = cuprof::span_arg::type::integer;
    a.integer = -std::int64_t(r);
    t.span_args.push_back(a);
    cuprof::api_call c;
    c.start_ns = now + 1000;
    c.end_ns = now + 2000;
    c.kind = std::uint16_t(t.add_call_kind({names[(r + 3) % 5], 0,
                                            r % 2 ? cuprof::api_domain::driver : cuprof::api_domain::runtime,
                                            r % 11 != 10}));
    c.tid = tid;
    c.correlation = r + 1;
    t.api_calls.push_back(c);
    cuprof::gpu_activity g;
    g.start_ns = now + 3000;
    g.end_ns = now + 4000 + r % 13;
    g.name = names[(r + 4) % 5];
    g.correlation = r + 1;
    const std::uint32_t device = (r / 3) % 2;
    g.lane = t.add_gpu_lane({device, device == 1 ? 1 + r % 2 : 1, 7 + r % 2});
    g.kind = cuprof::gpu_kind(r % 4);
    g.subkind = g.kind == cuprof::gpu_kind::sync ? std::uint8_t(3 + r % 2) : std::uint8_t(r % 9);
    if (g.kind == cuprof::gpu_kind::memcpy || g.kind == cuprof::gpu_kind::memset) t.set_bytes(g, 4096 + r);
    if (g.kind == cuprof::gpu_kind::kernel) g.details = r % 3;
    t.gpu.push_back(g);
    if (g.kind == cuprof::gpu_kind::kernel && g.details == 2)
      for (std::uint64_t node = 1; node <= 2; ++node) {
        g.start_ns = now + 4500 + node * 1000;
        g.end_ns = g.start_ns + 500;
        later.push_back(g);
      }
    if (r % 10 == 0) {
      t.overhead.push_back({now, now + 3000, names[r % 5]});
      t.overhead.push_back({now + 1000, now + 5000, names[(r + 1) % 5]});
    }
  }
  t.gpu.insert(t.gpu.end(), later.begin(), later.end());
  cuprof::attribute(t);
  return t;
}

fs::path source_dir() {
#ifdef CUPROF_TEST_SOURCE_DIR
  return CUPROF_TEST_SOURCE_DIR;
#else
  return fs::path(__FILE__).parent_path().parent_path();
#endif
}

std::vector<fs::path> gpu_fixtures() {
  std::vector<fs::path> out;
  const fs::path dir = source_dir() / "tests" / "fixtures" / "gpu";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

// =============================================================================
TEST_SUITE("json") {

TEST_CASE("append_us: integer ns as us with the decimals needed, no trailing zero") {
  const auto us = [](std::uint64_t ns) {
    std::string s;
    cuprof::detail::append_us(s, ns);
    return s;
  };
  CHECK(us(0) == "0");
  CHECK(us(5) == "0.005");
  CHECK(us(50) == "0.05");
  CHECK(us(500) == "0.5");
  CHECK(us(999) == "0.999");
  CHECK(us(1000) == "1");
  CHECK(us(1010) == "1.01");
  CHECK(us(1234567) == "1234.567");
  CHECK(us(1000000000) == "1000000");
  for (std::uint64_t ns : {0ull, 1ull, 10ull, 100ull, 1001ull, 123456789ull, 999999999999ull}) {
    std::int64_t back = -1;  // what the reader makes of it
    REQUIRE(cuprof::detail::us_to_ns(us(ns), back));
    CHECK(back == std::int64_t(ns));
  }
  CHECK(us(18446744073709551615ull) == "18446744073709551.615");
  std::string s = "x=";
  cuprof::detail::append_us(s, 42);
  CHECK(s == "x=0.042");
}

TEST_CASE("append_int and append_double") {
  std::string s;
  cuprof::detail::append_int(s, 0);
  s += ',';
  cuprof::detail::append_int(s, -12);
  s += ',';
  cuprof::detail::append_int(s, std::uint64_t(18446744073709551615ull));
  CHECK(s == "0,-12,18446744073709551615");
  // The trace writer's own digits (text_buffer): every length of 32 and 64 bits, each side of it.
  const auto text = [](const cuprof::detail::text_buffer& b) { return std::string(b.data(), b.size()); };
  std::uint64_t power = 1;
  for (int digits = 1; digits <= 20; ++digits, power *= 10)
    for (std::uint64_t v : {power - 1, power, power + 1, power * 2 - 1, std::uint64_t(4294967295u), std::uint64_t(4294967296u)}) {
      CAPTURE(v);
      cuprof::detail::text_buffer b(1);
      cuprof::detail::append_int(b, v);
      b += ',';
      cuprof::detail::append_int(b, std::uint32_t(v));
      b += ',';
      cuprof::detail::append_us(b, v);
      std::string us;
      cuprof::detail::append_us(us, v);
      CHECK(text(b) == std::to_string(v) + ',' + std::to_string(std::uint32_t(v)) + ',' + us);
    }
  // Fixed notation, never an exponent, at least millesimal precision.
  for (double v : {2.0, 1048.576, 0.008, 123456789.125, 1e-9}) {
    CAPTURE(v);
    s.clear();
    cuprof::detail::append_double(s, v);
    CHECK(s.find_first_of("eE") == std::string::npos);
    CHECK(s.find('.') != std::string::npos);
    CHECK(std::fabs(std::stod(s) - v) <= 0.0005 + 1e-12 * v);
  }
}

TEST_CASE("utf8_sequence_length: valid lengths and every kind of invalid sequence") {
  const auto len = [](const std::string& s) { return cuprof::detail::utf8_sequence_length(s, 0); };
  CHECK(len("a") == 1);
  CHECK(len(std::string(1, '\0')) == 1);
  CHECK(len("\x7f") == 1);
  CHECK(len("\xC2\x80") == 2);          // U+0080, smallest 2-byte
  CHECK(len("\xC3\xA9") == 2);          // U+00E9
  CHECK(len("\xDF\xBF") == 2);          // U+07FF
  CHECK(len("\xE0\xA0\x80") == 3);      // U+0800, smallest 3-byte
  CHECK(len("\xE2\x82\xAC") == 3);      // U+20AC
  CHECK(len("\xED\x9F\xBF") == 3);      // U+D7FF, just below the surrogates
  CHECK(len("\xEE\x80\x80") == 3);      // U+E000, just above
  CHECK(len("\xEF\xBF\xBD") == 3);      // U+FFFD
  CHECK(len("\xF0\x90\x80\x80") == 4);  // U+10000
  CHECK(len("\xF0\x9F\x98\x80") == 4);  // U+1F600
  CHECK(len("\xF4\x8F\xBF\xBF") == 4);  // U+10FFFF
  CHECK(len("\x80") == 0);              // lone continuation
  CHECK(len("\xBF") == 0);
  CHECK(len("\xFF") == 0);
  CHECK(len("\xFE") == 0);
  CHECK(len("\xF8\x88\x80\x80\x80") == 0);  // 5-byte form
  CHECK(len("\xC0\x80") == 0);              // overlong NUL
  CHECK(len("\xC1\xBF") == 0);              // overlong
  CHECK(len("\xE0\x80\x80") == 0);          // overlong 3-byte
  CHECK(len("\xE0\x9F\xBF") == 0);          // overlong U+07FF
  CHECK(len("\xF0\x80\x80\x80") == 0);      // overlong 4-byte
  CHECK(len("\xF0\x8F\xBF\xBF") == 0);      // overlong U+FFFF
  CHECK(len("\xED\xA0\x80") == 0);          // U+D800
  CHECK(len("\xED\xBF\xBF") == 0);          // U+DFFF
  CHECK(len("\xF4\x90\x80\x80") == 0);      // U+110000
  CHECK(len("\xF5\x80\x80\x80") == 0);
  CHECK(len("\xE2\x82") == 0);              // truncated at the end
  CHECK(len("\xE2\x82x") == 0);             // truncated, followed by ASCII
  CHECK(len("\xF0\x9F\x98") == 0);
  CHECK(len("\xC3") == 0);
  // In the middle of a string.
  const std::string mid = "ab\xE2\x82\xAC";
  CHECK(cuprof::detail::utf8_sequence_length(mid, 2) == 3);
  CHECK(cuprof::detail::utf8_sequence_length(mid, 3) == 0);
}

TEST_CASE("json_escaped: escapes, U+FFFD for invalid bytes, raw multi-byte characters") {
  using cuprof::detail::json_escaped;
  CHECK(json_escaped("plain") == "plain");
  CHECK(json_escaped("a\"b") == "a\\\"b");
  CHECK(json_escaped("a\\b") == "a\\\\b");
  CHECK(json_escaped("\n\t\r") == "\\n\\t\\r");
  CHECK(json_escaped("\x01") == "\\u0001");
  CHECK(json_escaped("\x1f") == "\\u001f");
  CHECK(json_escaped(std::string(1, '\0')) == "\\u0000");
  CHECK(json_escaped("\b\f") == "\\u0008\\u000c");
  CHECK(json_escaped("\xFF") == "\xEF\xBF\xBD");
  CHECK(json_escaped("\xC0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(json_escaped("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(json_escaped("x\xE2\x82") == "x\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(json_escaped("\xE2\x82y") == "\xEF\xBF\xBD\xEF\xBF\xBDy");
  CHECK(json_escaped("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80") == "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80");
  // Whatever goes in, nlohmann reads a valid string back.
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(char(c));
  const std::string doc = "\"" + json_escaped(all) + "\"";
  json v;
  REQUIRE_NOTHROW(v = json::parse(doc));
  const std::string back = v.get<std::string>();
  CHECK(back.substr(0, 128) == all.substr(0, 128));  // ASCII round-trips exactly
  std::size_t replacements = 0;
  for (std::size_t p = 0; (p = back.find("\xEF\xBF\xBD", p)) != std::string::npos; p += 3) ++replacements;
  CHECK(replacements == 128);  // each byte 0x80..0xFF alone is invalid
}

}  // TEST_SUITE json

// =============================================================================
TEST_SUITE("chrome_trace") {

TEST_CASE("chrome_trace_json: header, metadata and every event of a hand-made trace") {
  fixture f;
  const std::string text = cuprof::chrome_trace_json(f.t, "my \"trace\"");
  keep_trace("writer_fixture.json", text);
  const json doc = check_contract(text);
  const json& ev = doc["traceEvents"];

  // Header.
  CHECK(doc["baseTimeNanoseconds"].get<std::uint64_t>() == base);
  CHECK(doc["distributedInfo"]["rank"] == 3);
  CHECK(doc["distributedInfo"]["world_size"] == 4);
  CHECK(doc["traceName"] == "my \"trace\"");
  CHECK(doc["host_name"] == "host");
  CHECK(doc["cupti_version"] == 130001);
  CHECK(doc["cuprof"]["dropped_gpu_records"] == 5);
  CHECK(doc["cuprof"]["dropped_cpu_events"] == 6);
  CHECK(doc["cuprof"]["unmatched_gpu_records"] == 1);
  CHECK(doc["cuprof"]["cuda_status"] == "on");
  REQUIRE(doc["deviceProperties"].size() == 1);
  CHECK(doc["deviceProperties"][0]["name"] == "NVIDIA Test GPU");
  CHECK(doc["deviceProperties"][0]["numSms"] == 132);
  CHECK(std::regex_search(text, std::regex("^\\{\\s*\"schemaVersion\":\\s*1,")));  // first key

  // CPU process and threads.
  const json* m = find_meta(ev, "process_name", pid, 0);
  REQUIRE(m);
  CHECK((*m)["args"]["name"] == "proc");
  REQUIRE(find_meta(ev, "process_labels", pid, 0));
  CHECK((*find_meta(ev, "process_labels", pid, 0))["args"]["labels"] == "CPU");
  REQUIRE(find_meta(ev, "process_sort_index", pid, 0));
  CHECK((*find_meta(ev, "process_sort_index", pid, 0))["args"]["sort_index"] == pid);
  REQUIRE(find_meta(ev, "thread_name", pid, tid_main));
  CHECK((*find_meta(ev, "thread_name", pid, tid_main))["args"]["name"] == "thread 4242 (main)");
  REQUIRE(find_meta(ev, "thread_name", pid, tid_worker));
  CHECK((*find_meta(ev, "thread_name", pid, tid_worker))["args"]["name"] == "thread 4243 (proc)");
  REQUIRE(find_meta(ev, "thread_sort_index", pid, tid_worker));
  CHECK((*find_meta(ev, "thread_sort_index", pid, tid_worker))["args"]["sort_index"] == tid_worker);

  // GPU process and stream lanes.
  REQUIRE(find_meta(ev, "process_name", 0, 0));
  CHECK((*find_meta(ev, "process_labels", 0, 0))["args"]["labels"] == "GPU 0");
  CHECK((*find_meta(ev, "process_sort_index", 0, 0))["args"]["sort_index"] == 5000000);
  REQUIRE(find_meta(ev, "thread_name", 0, 7));
  CHECK((*find_meta(ev, "thread_name", 0, 7))["args"]["name"] == "stream 7");
  REQUIRE(find_meta(ev, "thread_name", 0, 9));
  CHECK((*find_meta(ev, "thread_name", 0, 9))["args"]["name"] == "stream 9");
  REQUIRE(find_meta(ev, "thread_name", 0, 1000007));
  CHECK((*find_meta(ev, "thread_name", 0, 1000007))["args"]["name"] == "stream 7 (sync)");
  REQUIRE(find_meta(ev, "thread_name", 0, 1000000));
  CHECK((*find_meta(ev, "thread_name", 0, 1000000))["args"]["name"] == "stream 0 (sync)");
  CHECK(find_meta(ev, "process_name", 1, 0) == nullptr);  // no GPU 1

  // CPU spans: user_annotation, External id = span id, ts/dur exact.
  const json* step = find_event(ev, "X", "ProfilerStep#5");
  REQUIRE(step);
  CHECK((*step)["cat"] == "user_annotation");
  CHECK((*step)["pid"] == pid);
  CHECK((*step)["tid"] == tid_main);
  CHECK(ns_of((*step)["ts"]) == std::int64_t(epoch + 1000 - base));
  CHECK(ns_of((*step)["dur"]) == 899000);
  CHECK((*step)["args"]["External id"] == 1);
  const json* linear = find_event(ev, "X", "linear");
  REQUIRE(linear);
  CHECK((*linear)["args"]["External id"] == 3);
  CHECK(std::regex_search(text, std::regex("\"ts\":\\s*500003[,}]")));  // linear's start, raw

  // Runtime and driver calls.
  const auto launches = find_events(ev, "X", "cudaLaunchKernel");
  REQUIRE(launches.size() == 2);
  const json& launch = *launches[0];
  CHECK(launch["cat"] == "cuda_runtime");
  CHECK(launch["args"]["External id"] == 3);  // linear
  CHECK(launch["args"]["correlation"] == 11);
  CHECK_FALSE(launch["args"].contains("cbid"));  // the name says it; no consumer reads it
  CHECK(launch["tid"] == tid_main);
  CHECK((*launches[1])["tid"] == tid_worker);
  CHECK((*launches[1])["args"]["External id"] == 4);  // worker
  const json* ex = find_event(ev, "X", "cuLaunchKernelEx");
  REQUIRE(ex);
  CHECK((*ex)["cat"] == "cuda_driver");
  CHECK((*ex)["args"]["External id"] == 2);  // forward
  const json* malloc_call = find_event(ev, "X", "cudaMalloc");
  REQUIRE(malloc_call);
  CHECK_FALSE((*malloc_call)["args"].contains("External id"));  // no scope open on its thread
  CHECK_FALSE((*malloc_call)["args"].contains("stream"));       // CPU events carry no stream (HTA)

  // Kernel and its launch parameters.
  const json* gemm = find_event(ev, "X", "gemm");
  REQUIRE(gemm);
  CHECK((*gemm)["cat"] == "kernel");
  CHECK((*gemm)["pid"] == 0);
  CHECK((*gemm)["tid"] == 7);
  CHECK(ns_of((*gemm)["ts"]) == std::int64_t(epoch + 20000 - base));
  CHECK(ns_of((*gemm)["dur"]) == 20000);
  const json& ka = (*gemm)["args"];
  CHECK(ka["External id"] == 3);
  CHECK(ka["device"] == 0);
  CHECK_FALSE(ka.contains("context"));  // one context per device: written only when there are several
  CHECK(ka["stream"] == 7);
  CHECK(ka["correlation"] == 11);
  CHECK(ka["grid"] == json::array({264, 1, 1}));
  CHECK(ka["block"] == json::array({256, 1, 1}));
  CHECK(ka["registers per thread"] == 64);
  CHECK(ka["shared memory"] == 16384);
  CHECK_FALSE(ka.contains("blocks per SM"));  // derived from grid and numSms; no consumer reads it
  CHECK_FALSE(ka.contains("warps per SM"));
  // 8 warps per block; limits: threads 8, registers 65536/(64*256) = 4, smem 14: 2 blocks resident of 64 warps.
  CHECK(ka["est. achieved occupancy %"] == 25);
  CHECK_FALSE(ka.contains("graph id"));
  const json* node = find_event(ev, "X", "graph_node_b");
  REQUIRE(node);
  CHECK((*node)["args"]["graph id"] == 2);
  CHECK((*node)["args"]["graph node id"] == 77);
  CHECK((*node)["args"]["correlation"] == 17);
  const json* orphan = find_event(ev, "X", "orphan");
  REQUIRE(orphan);
  CHECK_FALSE((*orphan)["args"].contains("External id"));

  // Memcpy, memset, syncs.
  const json* cp = find_event(ev, "X", "Memcpy DtoD (Device -> Device)");
  REQUIRE(cp);
  CHECK((*cp)["cat"] == "gpu_memcpy");
  CHECK((*cp)["args"]["bytes"] == 1048576);
  CHECK((*cp)["args"]["memory bandwidth (GB/s)"].get<double>() == doctest::Approx(1048.576));
  CHECK((*cp)["args"]["stream"] == 7);
  CHECK((*cp)["args"]["correlation"] == 12);
  const json* ms = find_event(ev, "X", "Memset (Device)");
  REQUIRE(ms);
  CHECK((*ms)["cat"] == "gpu_memset");
  CHECK((*ms)["args"]["bytes"] == 4);
  CHECK((*ms)["args"]["memory bandwidth (GB/s)"].get<double>() == doctest::Approx(0.04));
  const json* ss = find_event(ev, "X", "Stream Sync");
  REQUIRE(ss);
  CHECK((*ss)["cat"] == "cuda_sync");
  CHECK((*ss)["pid"] == 0);
  CHECK((*ss)["tid"] == 1000007);
  CHECK((*ss)["args"]["cuda_sync_kind"] == "Stream Sync");
  CHECK((*ss)["args"]["stream"] == 7);
  const json* cs = find_event(ev, "X", "Context Sync");
  REQUIRE(cs);
  CHECK((*cs)["tid"] == 1000000);
  CHECK((*cs)["args"]["cuda_sync_kind"] == "Context Sync");
  CHECK((*cs)["args"]["stream"] == -1);

  // GPU user annotations: 1 ns earlier, 2 ns longer than the work they cover; steps have none.
  const auto fwd_ann = find_events(ev, "X", "forward");
  const json* fwd_gpu = nullptr;
  for (const json* e : fwd_ann)
    if ((*e)["cat"] == "gpu_user_annotation") fwd_gpu = e;
  REQUIRE(fwd_gpu);
  CHECK((*fwd_gpu)["pid"] == 0);
  CHECK((*fwd_gpu)["tid"] == 7);
  CHECK(ns_of((*fwd_gpu)["ts"]) == std::int64_t(epoch + 20000 - 1 - base));
  CHECK(ns_of((*fwd_gpu)["dur"]) == 312000 - 20000 + 2);
  CHECK((*fwd_gpu)["args"]["External id"] == 2);
  for (const json& e : ev)
    if (e.value("cat", "") == "gpu_user_annotation") CHECK(e["name"] != "ProfilerStep#5");

  // Overhead on its own labelled process; clamped to the trace base, never negative.
  const json* oh = find_event(ev, "X", "Activity Buffer Request");
  REQUIRE(oh);
  CHECK((*oh)["cat"] == "overhead");
  CHECK((*oh)["pid"] == cuprof::overhead_pid);
  CHECK((*oh)["tid"] == 0);
  CHECK(ns_of((*oh)["dur"]) == 5500);
  REQUIRE(find_meta(ev, "process_name", cuprof::overhead_pid, 0));
  CHECK((*find_meta(ev, "process_name", cuprof::overhead_pid, 0))["args"]["name"] == "CUPTI Overhead");

  // Flows. A call's first GPU record: flow v2, "bind_id" after "dur" with
  // "flow_out" on the call's slice and "flow_in" on the record's, no s/f event.
  // The fixture has a graph launch (a v1 flow), so the bind_id is 2^32 + correlation.
  const std::uint64_t v2_base = std::uint64_t(1) << 32;
  std::map<std::uint64_t, const json*> s_by_id, f_by_id, out_by_id, in_by_id;
  for (const json& e : ev) {
    if (e["ph"] == "s") s_by_id[e["id"].get<std::uint64_t>()] = &e;
    if (e["ph"] == "f") f_by_id[e["id"].get<std::uint64_t>()] = &e;
    if (e.contains("flow_out")) out_by_id[e["bind_id"].get<std::uint64_t>()] = &e;
    if (e.contains("flow_in")) in_by_id[e["bind_id"].get<std::uint64_t>()] = &e;
  }
  // gemm, memcpy, memset, stream sync, nvjet, the first graph node, worker kernel, ctx sync
  CHECK(in_by_id.size() == 8);
  CHECK(out_by_id.size() == 8);
  for (std::uint64_t corr : {11, 12, 13, 14, 15, 17, 18, 19}) {
    CAPTURE(corr);
    REQUIRE(out_by_id.count(v2_base | corr));
    REQUIRE(in_by_id.count(v2_base | corr));
    CHECK((*out_by_id[v2_base | corr])["args"]["correlation"] == corr);
    CHECK((*in_by_id[v2_base | corr])["args"]["correlation"] == corr);
    CHECK(s_by_id.count(corr) == 0);  // no v1 pair beside the v2 flow
    CHECK(f_by_id.count(corr) == 0);
  }
  const json& launch_call = *out_by_id[v2_base | 11];
  CHECK(launch_call["ph"] == "X");
  CHECK(launch_call["name"] == "cudaLaunchKernel");
  CHECK(launch_call["pid"] == pid);
  CHECK(launch_call["tid"] == tid_main);
  CHECK(ns_of(launch_call["ts"]) == std::int64_t(epoch + 4000 - base));
  CHECK(launch_call["flow_out"] == true);
  CHECK_FALSE(launch_call.contains("flow_in"));
  const json& gemm_record = *in_by_id[v2_base | 11];
  CHECK(gemm_record["name"] == "gemm");
  CHECK(gemm_record["pid"] == 0);
  CHECK(gemm_record["tid"] == 7);
  CHECK(ns_of(gemm_record["ts"]) == std::int64_t(epoch + 20000 - base));
  CHECK(gemm_record["flow_in"] == true);
  CHECK_FALSE(gemm_record.contains("flow_out"));
  CHECK((*in_by_id[v2_base | 14])["tid"] == 1000007);  // the sync's own lane
  CHECK(out_by_id.count(v2_base | 16) == 0);           // the occupancy query has no flow
  CHECK(in_by_id.count(v2_base | 999) == 0);           // nor the orphan kernel
  // The members sit right after "dur", before "args", the rest of the event as before.
  const std::regex launch_line(R"(\{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":\d+,"tid":\d+,)"
                               R"("ts":[0-9.]+,"dur":[0-9.]+,"bind_id":4294967307,"flow_out":true,"args":\{)");
  const std::regex gemm_line(R"(\{"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,)"
                             R"("ts":[0-9.]+,"dur":[0-9.]+,"bind_id":4294967307,"flow_in":true,"args":\{)");
  CHECK(std::regex_search(text, launch_line));
  CHECK(std::regex_search(text, gemm_line));
  // The graph launch's two kernels: the first by v2, the second by a v1 s/f pair
  // (a slice carries one bind_id), id 1 << 32 | correlation, starting on the launch.
  CHECK((*in_by_id[v2_base | 17])["name"] == "graph_node_a");
  CHECK((*out_by_id[v2_base | 17])["name"] == "cudaGraphLaunch");
  CHECK(s_by_id.size() == 1);
  CHECK(f_by_id.size() == 1);
  const std::uint64_t second = std::uint64_t(1) << 32 | 17;
  REQUIRE(s_by_id.count(second));
  REQUIRE(f_by_id.count(second));
  CHECK((*s_by_id[second])["tid"] == tid_main);
  CHECK(ns_of((*s_by_id[second])["ts"]) == std::int64_t(epoch + 300000 - base));
  CHECK(ns_of((*f_by_id[second])["ts"]) == std::int64_t(epoch + 311500 - base));
  CHECK((*f_by_id[second])["bp"] == "e");
  const flow_test::arrows arrows(ev);
  CHECK(arrows.v2 == 8);
  CHECK(arrows.v1 == 1);
  CHECK(arrows.out_of(ev, 17).size() == 2);
}

TEST_CASE("chrome_trace_json: flow v2 for a call's first GPU record, bind_id its correlation id without v1 flows") {
  fixture f;
  // No graph launch: every arrow is v2, no s/f event, bind_id = correlation.
  cuprof::trace& t = f.t;
  t.gpu.erase(std::remove_if(t.gpu.begin(), t.gpu.end(),
                             [&](const cuprof::gpu_activity& g) { return t.names.str(g.name) == "graph_node_b"; }),
              t.gpu.end());
  cuprof::attribute(t);
  const std::string text = cuprof::chrome_trace_json(t);
  const json doc = check_contract(text);
  const json& ev = doc["traceEvents"];
  CHECK(text.find("\"ph\":\"s\"") == std::string::npos);
  CHECK(text.find("\"ph\":\"f\"") == std::string::npos);
  const flow_test::arrows arrows(ev);
  CHECK(arrows.v1 == 0);
  CHECK(arrows.v2 == 8);
  for (const flow_test::arrow& a : arrows.all) {
    CAPTURE(a.id);
    CHECK((*a.from)["args"]["correlation"] == a.id);
    CHECK((*a.to)["args"]["correlation"] == a.id);
  }
  CHECK(text.find(R"("dur":5,"bind_id":11,"flow_out":true,"args":{)") != std::string::npos);
  // A call without a flow, or whose record is lost, gets no member.
  for (const json& e : ev)
    if (e.value("ph", "") == "X" && (e["name"] == "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags" ||
                                     e["name"] == "orphan" || e["name"] == "cudaMalloc"))
      CHECK_FALSE(e.contains("bind_id"));
}

TEST_CASE("chrome_trace_json: every category the writer emits is one the reader reads back") {
  namespace schema = cuprof::detail::schema;
  using cuprof::detail::event_category;
  fixture f;
  const std::string text = cuprof::chrome_trace_json(f.t);
  const json doc = json::parse(text);
  std::set<std::string> written;
  std::size_t complete = 0;
  for (const json& e : doc["traceEvents"]) {
    if (e.contains("cat")) written.insert(e["cat"].get<std::string>());
    complete += e["ph"] == "X";
  }
  // The fixture has an event of every category the writer knows.
  std::set<std::string> all;
  for (std::string_view cat : {schema::cat_user_annotation, schema::cat_cuda_runtime, schema::cat_cuda_driver,
                               schema::cat_kernel, schema::cat_gpu_memcpy, schema::cat_gpu_memset, schema::cat_cuda_sync,
                               schema::cat_gpu_user_annotation, schema::cat_overhead, schema::cat_flow})
    all.insert(std::string(cat));
  CHECK(written == all);
  for (const std::string& cat : written) {
    CAPTURE(cat);
    // Flow arrows are "s"/"f" events: the reader links work to calls by correlation instead.
    if (cat != schema::cat_flow) CHECK(cuprof::detail::category_of(cat) != event_category::skip);
  }
  const cuprof::loaded_trace back = cuprof::parse_trace(text, "fixture");
  CHECK(back.used == complete);  // no complete event skipped
  CHECK(back.t.meta.process_name == f.t.meta.process_name);
  CHECK(back.t.meta.threads.size() == f.t.meta.threads.size());
}

TEST_CASE("chrome_trace_json: a scope's arguments in its args; non-finite numbers as strings, no second External id") {
  cuprof::trace t;
  cuprof::cpu_span s;
  s.start_ns = 1000;
  s.end_ns = 2000;
  s.name = t.names.intern("scope");
  s.id = 7;
  s.arg_count = 6;
  const auto arg = [&](const char* key, cuprof::span_arg::type kind, double real, std::int64_t integer = 0,
                       const char* text = "") {
    cuprof::span_arg a;
    a.key = t.names.intern(key);
    a.kind = kind;
    a.real = real;
    a.integer = integer;
    a.text = t.names.intern(text);
    t.span_args.push_back(a);
  };
  using type = cuprof::span_arg::type;
  arg("big", type::integer, 0, std::numeric_limits<std::int64_t>::min());
  arg("tiny", type::real, 1e-300);
  arg("nan", type::real, std::nan(""));
  arg("inf", type::real, -HUGE_VAL);
  arg("External id", type::integer, 0, 99);
  arg("line\nbreak", type::text, 0, 0, "say \"hi\"");
  t.spans.push_back(s);
  t.meta.devices.push_back({});
  t.meta.devices[0].clock_rate_khz = 1980000;
  const std::string text = cuprof::chrome_trace_json(t);
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(text));
  CHECK(doc["deviceProperties"][0]["clockRate"] == 1980000);
  CHECK(!doc["deviceProperties"][0].contains("memoryClockRate"));  // 0: unknown, left out
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const json& args = e["args"];
    CHECK(args.size() == 6);
    CHECK(args["External id"] == 7);
    CHECK(args["big"] == std::numeric_limits<std::int64_t>::min());
    CHECK(args["tiny"] == 1e-300);
    CHECK(args["nan"] == "NaN");
    CHECK(args["inf"] == "-Infinity");
    CHECK(args["line\nbreak"] == "say \"hi\"");
  }
}

TEST_CASE("chrome_trace_json: an empty trace is a valid document") {
  cuprof::trace t;
  const std::string text = cuprof::chrome_trace_json(t);
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(text));
  CHECK(doc["schemaVersion"] == 1);
  CHECK(doc["baseTimeNanoseconds"] == 0);
  CHECK(doc["traceName"] == "cuprof");
  // Only the CPU process metadata.
  for (const json& e : doc["traceEvents"]) CHECK(e["ph"] == "M");
}

TEST_CASE("names with quotes, backslashes, control characters, invalid UTF-8 and 64 KiB") {
  struct named {
    std::string raw, expected;
  };
  const std::string fffd = "\xEF\xBF\xBD";
  const std::vector<named> names = {
      {"quote\"d", "quote\"d"},
      {"back\\slash", "back\\slash"},
      {"ctl\x01\n\t\r\x1f end", "ctl\x01\n\t\r\x1f end"},
      {"lone \xFF byte", "lone " + fffd + " byte"},
      {"truncated \xE2\x82", "truncated " + fffd + fffd},
      {"overlong \xC0\x80", "overlong " + fffd + fffd},
      {"surrogate \xED\xA0\x80", "surrogate " + fffd + fffd + fffd},
      {"too big \xF4\x90\x80\x80", "too big " + fffd + fffd + fffd + fffd},
      {"valid caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80", "valid caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"},
      {std::string(65536, 'n') + "\xF0\x9F\x98\x80", std::string(65536, 'n') + "\xF0\x9F\x98\x80"},
      {std::string("nul\0in", 6), std::string("nul\0in", 6)},
  };
  cuprof::trace t;
  t.meta.pid = 7;
  t.meta.process_name = "proc\"ess\x02\xFF";
  t.meta.host_name = "h\\o\nst";
  t.meta.threads = {{7, "th\"read\t\xC0"}};
  t.meta.window_start_ns = epoch;
  cuprof::device_info d;
  d.name = "dev\x01\xFE";
  t.meta.devices = {d};
  t.meta.cuda_status = "off: \"no\" driver\n";
  std::uint64_t at = epoch;
  for (const named& n : names) {
    cuprof::cpu_span s;
    s.start_ns = at;
    s.end_ns = at + 10;
    at += 100;
    s.name = t.names.intern(n.raw);
    s.tid = 7;
    t.spans.push_back(s);
  }
  const std::string text = cuprof::chrome_trace_json(t, "name\x7f\x80");
  const json doc = check_contract(text);
  std::vector<std::string> got;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "X") got.push_back(e["name"]);
  REQUIRE(got.size() == names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == names[i].expected);
  }
  // Characters beyond the BMP stay raw: no surrogate escapes (Perfetto rejects them).
  CHECK(text.find("\xF0\x9F\x98\x80") != std::string::npos);
  CHECK(text.find("\\ud83d") == std::string::npos);
  CHECK(text.find("\\uD83D") == std::string::npos);
  CHECK((*find_meta(doc["traceEvents"], "process_name", 7, 0))["args"]["name"] == "proc\"ess\x02" + fffd);
  CHECK((*find_meta(doc["traceEvents"], "thread_name", 7, 7))["args"]["name"] == "thread 7 (th\"read\t" + fffd + ")");
  CHECK(doc["host_name"] == "h\\o\nst");
  CHECK(doc["deviceProperties"][0]["name"] == "dev\x01" + fffd);
  CHECK(doc["cuprof"]["cuda_status"] == "off: \"no\" driver\n");
  CHECK(doc["traceName"] == "name\x7f" + fffd);
}

TEST_CASE("occupancy estimate: limits by threads, registers, shared memory and grid size") {
  cuprof::device_info d;
  d.num_sms = 100;
  d.warp_size = 32;
  d.max_threads_per_multiprocessor = 2048;
  d.max_blocks_per_multiprocessor = 32;
  d.regs_per_multiprocessor = 65536;
  d.shared_mem_per_multiprocessor = 100000;
  cuprof::kernel_details k;
  k.grid[0] = 1000, k.grid[1] = 1, k.grid[2] = 1;
  k.block[0] = 128, k.block[1] = 1, k.block[2] = 1;  // 4 warps
  SUBCASE("no device: zeros") {
    const auto e = cuprof::detail::estimate_occupancy(k, nullptr);
    CHECK(e.percent == 0);
    CHECK(e.blocks_per_sm == 0.0);
  }
  SUBCASE("grid-limited: 10 blocks per SM of 4 warps") {
    const auto e = cuprof::detail::estimate_occupancy(k, &d);
    CHECK(e.blocks_per_sm == doctest::Approx(10.0));
    CHECK(e.warps_per_sm == doctest::Approx(40.0));
    CHECK(e.percent == 62);  // 10 resident blocks (grid-limited) * 4 / 64 = 62.5
  }
  SUBCASE("register-limited") {
    k.grid[0] = 100000;
    k.registers_per_thread = 255;  // 65536 / (255 * 128) = 2 blocks
    CHECK(cuprof::detail::estimate_occupancy(k, &d).percent == 12);  // 8 / 64
  }
  SUBCASE("shared-memory-limited") {
    k.grid[0] = 100000;
    k.static_shared_memory = 40000;  // 2 blocks
    k.dynamic_shared_memory = 10000;
    CHECK(cuprof::detail::estimate_occupancy(k, &d).percent == 12);
  }
  SUBCASE("a single block on a big device") {
    k.grid[0] = 1;
    const auto e = cuprof::detail::estimate_occupancy(k, &d);
    CHECK(e.blocks_per_sm == doctest::Approx(0.01));
    CHECK(e.percent == 6);  // 1 block of 4 warps / 64
  }
}

}  // TEST_SUITE chrome_trace

// =============================================================================
TEST_SUITE("file_output") {

TEST_CASE("export_chrome_trace writes the same document as chrome_trace_json, atomically") {
  fixture f;
  temp_dir dir;
  const std::string path = (dir.path / "trace.pt.trace.json").string();
  const cuprof::export_result r = cuprof::export_chrome_trace(f.t, path);
  CHECK(r.path == path);
  const std::string text = read_file(path);
  CHECK(text == cuprof::chrome_trace_json(f.t, path));
  const json doc = check_contract(text);
  CHECK(r.events == doc["traceEvents"].size());
  CHECK(dir.entries() == std::vector<std::string>{"trace.pt.trace.json"});  // no temporary left
  // Overwrites an existing file.
  std::ofstream(path) << "old";
  cuprof::export_chrome_trace(f.t, path);
  CHECK(read_file(path) == text);
  CHECK(dir.entries().size() == 1);
}

TEST_CASE("export_chrome_trace compresses when the path ends in .gz") {
  fixture f;
  temp_dir dir;
  const std::string path = (dir.path / "trace.pt.trace.json.gz").string();
  const cuprof::export_result r = cuprof::export_chrome_trace(f.t, path);
  const std::string raw = read_file(path);
  REQUIRE(raw.size() > 2);
  CHECK(static_cast<unsigned char>(raw[0]) == 0x1f);
  CHECK(static_cast<unsigned char>(raw[1]) == 0x8b);
  const std::string text = gunzip_file(path);
  CHECK(text == cuprof::chrome_trace_json(f.t, path));
  const json doc = check_contract(text);
  CHECK(r.events == doc["traceEvents"].size());
  CHECK(dir.entries() == std::vector<std::string>{"trace.pt.trace.json.gz"});
}

TEST_CASE("large traces stream through several flushes, plain and gzip") {
  const cuprof::trace t = big_trace(30000);  // several MiB of JSON
  temp_dir dir;
  const std::string plain = (dir.path / "big.json").string();
  const std::string gz = (dir.path / "big.json.gz").string();
  const cuprof::export_result a = cuprof::export_chrome_trace(t, plain);
  const cuprof::export_result b = cuprof::export_chrome_trace(t, gz);
  const std::string text = read_file(plain);
  CHECK(text.size() > (3u << 20));
  CHECK(text == cuprof::chrome_trace_json(t, plain));
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(text));
  std::size_t spans = 0;
  for (const json& e : doc["traceEvents"]) spans += e["ph"] == "X";
  CHECK(spans == 30000);
  CHECK(a.events == doc["traceEvents"].size());
  CHECK(b.events == a.events);
  json doc_gz;
  REQUIRE_NOTHROW(doc_gz = json::parse(gunzip_file(gz)));
  CHECK(doc_gz["traceEvents"].size() == doc["traceEvents"].size());
  const std::string compressed = read_file(gz);
  CHECK(compressed.size() < text.size() / 4);
  // One gzip member per flushed block (compressed in parallel); the reader takes them all.
  std::size_t members = 0;
  for (std::size_t at = compressed.find("\x1f\x8b\x08"); at != std::string::npos; at = compressed.find("\x1f\x8b\x08", at + 1))
    ++members;
  CHECK(members > 1);
  const cuprof::loaded_trace back = cuprof::read_trace_file(gz);
  CHECK(back.events == doc["traceEvents"].size());
  CHECK(back.t.spans.size() == 30000);
}

TEST_CASE("blocks formatted on several threads make the serial writer's document, byte for byte, plain and gzip") {
  const cuprof::trace t = every_kind_trace(3000);
  temp_dir dir;
  const std::string plain = (dir.path / "blocks.json").string(), gz = plain + ".gz";
  // The serial writer: the whole document as one block, on this thread.
  const auto serial = [](const cuprof::trace& t, const std::string& trace_name) {
    const cuprof::detail::chrome_trace_layout whole(t, trace_name, std::numeric_limits<std::size_t>::max());
    REQUIRE(whole.block_count() == 1);
    cuprof::detail::chrome_trace_writer writer(whole);
    writer.write_block(0);
    return std::string(writer.out().data(), writer.out().size());
  };
  const std::string expected = serial(t, plain), expected_gz = serial(t, gz);
  keep_trace("writer_every_kind.json", expected);
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(expected));
  const std::size_t events = doc["traceEvents"].size();
  // What crosses blocks is there: a call's first flow (v2, 2^32 + correlation: the trace
  // has v1 flows) and its second (v1, ordinal 1 in the id's high half), contexts (two on
  // device 1), GPU annotations, overhead lanes, escapes and U+FFFD.
  for (const char* part : {"\"bind_id\":4294967297,\"flow_out\":true,", "\"bind_id\":4294967297,\"flow_in\":true,",
                           "\"id\":4294967305,", "\"context\":2", "\"gpu_user_annotation\"", "\"tid\":1,",
                           "\\u0001", "\xEF\xBF\xBD", "\xf0\x9f\x9a\x80", "quote \\\" back \\\\"})
    CHECK_MESSAGE(expected.find(part) != std::string::npos, std::string(part));

  SUBCASE("export_chrome_trace: blocks of the default size, one worker per core") {
    REQUIRE(cuprof::detail::chrome_trace_layout(t, plain).block_count() > 2);
    CHECK(cuprof::export_chrome_trace(t, plain).events == events);
    CHECK(read_file(plain) == expected);
    CHECK(cuprof::export_chrome_trace(t, gz).events == events);
    CHECK(gunzip_file(gz) == expected_gz);
    CHECK(cuprof::chrome_trace_json(t, plain) == expected);
  }
  SUBCASE("small blocks; one worker, and more workers than blocks per core") {
    for (unsigned workers : {1u, 2u, 5u})
      for (const std::string& path : {plain, gz}) {
        CAPTURE(workers);
        CAPTURE(path);
        const cuprof::detail::chrome_trace_layout layout(t, path, 97);
        REQUIRE(layout.block_count() > 100);
        cuprof::detail::atomic_file file(path);
        CHECK(cuprof::detail::parallel_block_writer(layout, file, workers).run() == events);
        file.commit();
        if (path == plain) {
          CHECK(read_file(plain) == expected);
        } else {
          CHECK(gunzip_file(gz) == expected_gz);
          const cuprof::loaded_trace back = cuprof::read_trace_file(gz);
          CHECK(back.events == events);
        }
      }
  }
  SUBCASE("a first block far slower than the rest: later blocks finish first, fill every slot and wait their turn") {
    // The process name, escaped byte by byte in each of block 0's metadata
    // events, makes block 0 take milliseconds, the others microseconds.
    cuprof::trace slow_first = t;
    slow_first.meta.process_name.assign(4 << 20, '"');
    for (const std::string& path : {plain, gz}) {
      CAPTURE(path);
      const cuprof::detail::chrome_trace_layout layout(slow_first, path, 97);
      cuprof::detail::atomic_file file(path);
      CHECK(cuprof::detail::parallel_block_writer(layout, file, 2).run() == events);
      file.commit();
      CHECK((path == plain ? read_file(plain) : gunzip_file(gz)) == serial(slow_first, path));
    }
  }
}

TEST_CASE("gzip members from libdeflate and from zlib (its fallback) read back whole, concatenated") {
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "{\"ph\":\"X\",\"ts\":" + std::to_string(i * 7919 % 100003) + "},\n";
  const std::string first = text.substr(0, text.size() / 3), second = text.substr(text.size() / 3);
  // libdeflate is loaded at run time, where installed: scripts/test installs it (libdeflate0).
  const cuprof::detail::libdeflate_library* libdeflate = cuprof::detail::libdeflate();
  std::vector<const cuprof::detail::libdeflate_library*> backends = {nullptr};  // null: zlib
  if (libdeflate) backends.push_back(libdeflate);
  std::string all;
  for (const cuprof::detail::libdeflate_library* backend : backends) {
    CAPTURE(backend != nullptr);
    cuprof::detail::gzip_compressor gzip(backend);
    std::string members;
    for (const std::string* block : {&first, &second}) {
      const std::string_view member = gzip.compress(block->data(), block->size());
      CHECK(member.substr(0, 3) == "\x1f\x8b\x08");
      CHECK(member.size() < block->size() / 4);
      members.append(member.data(), member.size());
    }
    CHECK(cuprof::detail::gunzip(members, "members") == text);  // the reader's, the cuprof command's
    all += members;
  }
  temp_dir dir;
  const fs::path path = dir.path / "members.gz";
  std::ofstream(path, std::ios::binary) << all;
  CHECK(gunzip_file(path) == (libdeflate ? text + text : text));  // zlib's gzread; Python's gzip (HTA) alike
  CHECK_MESSAGE(libdeflate, "libdeflate.so.0 not found (Debian: libdeflate0): only the zlib path was tested");
}

TEST_CASE("context is written for devices with work in several contexts; shared memory always, 0 included") {
  fixture f;
  cuprof::trace t = f.t;
  const auto kernel_args = [](const cuprof::trace& tr, const std::string& name) {
    const json doc = json::parse(cuprof::chrome_trace_json(tr));
    for (const json& e : doc["traceEvents"])
      if (e.value("cat", "") == "kernel" && e["name"] == name) return e["args"];
    return json();
  };
  CHECK_FALSE(kernel_args(t, "gemm").contains("context"));  // every record in context 1 of device 0
  for (cuprof::gpu_activity& g : t.gpu)
    if (t.names.str(g.name) == "nvjet") g.lane = t.add_gpu_lane({0, 2, 7});
  CHECK(kernel_args(t, "gemm")["context"] == 1);
  CHECK(kernel_args(t, "nvjet")["context"] == 2);
  const cuprof::loaded_trace back = cuprof::parse_trace(cuprof::chrome_trace_json(t), "two contexts");
  for (const cuprof::gpu_activity& g : back.t.gpu)  // the reader takes them back
    if (g.kind == cuprof::gpu_kind::kernel) CHECK(back.t.lane_of(g).context == (back.t.names.str(g.name) == "nvjet" ? 2u : 1u));
  CHECK(kernel_args(t, "gemm")["shared memory"] == 16384);
  for (cuprof::kernel_details& k : t.kernels) k.static_shared_memory = k.dynamic_shared_memory = 0;
  CHECK(kernel_args(t, "gemm")["shared memory"] == 0);  // a resource-light kernel's footprint, as Kineto writes it
}

TEST_CASE("trace_detail::lean: GPU records lose device, External id and launch configuration, nothing else; the table reads back the same") {
  fixture f;
  cuprof::trace t = f.t;
  for (cuprof::gpu_activity& g : t.gpu)
    if (t.names.str(g.name) == "nvjet") g.lane = t.add_gpu_lane({0, 2, 7});  // context still says which, where it tells something
  const std::string kineto = cuprof::chrome_trace_json(t);
  const std::string lean = cuprof::chrome_trace_json(t, "cuprof", {cuprof::trace_detail::lean});
  const json dk = check_contract(kineto), dl = check_contract(lean);
  CHECK_FALSE(dk["cuprof"].contains("trace_detail"));
  CHECK(dl["cuprof"]["trace_detail"] == "lean");
  const json &ek = dk["traceEvents"], &el = dl["traceEvents"];
  REQUIRE(ek.size() == el.size());
  const std::set<std::string> dropped = {"device", "External id", "registers per thread", "shared memory",
                                         "grid", "block", "est. achieved occupancy %"};
  std::size_t lean_records = 0;
  for (std::size_t i = 0; i < ek.size(); ++i) {
    json expected = ek[i];
    const std::string cat = expected.value("cat", "");
    CAPTURE(cat);
    CAPTURE(expected.value("name", ""));
    if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset") {
      ++lean_records;
      for (const std::string& key : dropped) expected["args"].erase(key);
      CHECK(el[i]["args"].contains("stream"));
      CHECK(el[i]["args"].contains("correlation"));
    }
    CHECK(el[i] == expected);  // the same slice, flow members and other args, in the same place
  }
  CHECK(lean_records == 8);  // six kernels, a copy, a memset
  for (const json& e : el)
    if (e.value("name", "") == "graph_node_a") CHECK(e["args"]["graph id"] == 2);  // a node's identity stays
  const cuprof::loaded_trace back = cuprof::parse_trace(lean, "lean");
  CHECK(back.unmatched_annotations == 0);
  for (const char* key : {"cuda_time_total", "cpu_time_total", "self_cuda_time_total", "count"}) {
    CAPTURE(key);
    CHECK(cuprof::key_averages(back.t).table(key, -1) == cuprof::key_averages(t).table(key, -1));
  }
  for (const cuprof::gpu_activity& g : back.t.gpu) {
    CHECK(back.t.lane_of(g).device == 0);  // from the lane
    if (g.kind == cuprof::gpu_kind::kernel) CHECK(back.t.lane_of(g).context == (back.t.names.str(g.name) == "nvjet" ? 2u : 1u));
  }
}

TEST_CASE("export failures throw cuprof::error, leave no temporary file and keep the old target") {
  fixture f;
  temp_dir dir;

  SUBCASE("the path is a directory") {
    const fs::path target = dir.path / "a_directory.json";
    fs::create_directory(target);
    CHECK(export_must_fail(f.t, target.string(), "not a regular file") == 0);
    CHECK(fs::is_directory(target));
    CHECK(fs::is_empty(target));
  }
  SUBCASE("the parent directory does not exist") {
    const std::string target = (dir.path / "missing" / "trace.json").string();
    CHECK(export_must_fail(f.t, target, "No such file or directory") == 0);
    CHECK(export_must_fail(f.t, target + ".gz", "cannot create") == 0);
    CHECK_FALSE(fs::exists(dir.path / "missing"));
  }
  SUBCASE("an empty path") {
    CHECK_THROWS_AS(cuprof::export_chrome_trace(f.t, ""), cuprof::error);
  }
  SUBCASE("an unwritable directory (as an unprivileged user)") {
    const fs::path ro = dir.path / "read_only";
    fs::create_directory(ro);
    fs::permissions(dir.path, fs::perms::owner_all | fs::perms::others_exec | fs::perms::group_exec);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::others_read |
                            fs::perms::others_exec | fs::perms::group_read | fs::perms::group_exec);
    std::ofstream(ro / "existing.json") << "old";  // root may still write it
    const std::string target = (ro / "existing.json").string();
    const std::string fresh = (ro / "new.json.gz").string();
    const int rc = in_child([&] {
      if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) return 77;  // cannot drop root
      const int a = export_must_fail(f.t, target, "Permission denied");
      if (a) return 20 + a;
      const int b = export_must_fail(f.t, fresh, "cannot create");
      return b ? 30 + b : 0;
    });
    if (rc == 77) {
      MESSAGE("running as root without the right to change user: skipped");
      return;
    }
    CHECK(rc == 0);
    CHECK(read_file(target) == "old");
    CHECK_FALSE(fs::exists(fresh));
    CHECK_FALSE(leftover_temp(dir.path));
  }
  SUBCASE("a write that fails midway (file size limit) keeps the previous file") {
    const cuprof::trace big = big_trace(20000);
    for (const char* name : {"limited.json", "limited.json.gz"}) {
      CAPTURE(name);
      const std::string target = (dir.path / name).string();
      std::ofstream(target) << "previous contents";
      const int rc = in_child([&] {
        ::signal(SIGXFSZ, SIG_IGN);
        rlimit lim{};
        lim.rlim_cur = lim.rlim_max = 64 * 1024;
        if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) return 10;
        return export_must_fail(big, target, "cannot write");
      });
      CHECK(rc == 0);
      CHECK(read_file(target) == "previous contents");
    }
  }
  CHECK_FALSE(leftover_temp(dir.path));
}

TEST_CASE("two threads exporting to the same path at once leave one whole, valid trace") {
  // Each export must write its own temporary file: sharing one interleaves
  // the two documents and makes the second rename fail.
  const cuprof::trace a = big_trace(30000), b = big_trace(20000);
  temp_dir dir;
  const std::string path = (dir.path / "shared.json").string();
  const std::string text_a = cuprof::chrome_trace_json(a, path), text_b = cuprof::chrome_trace_json(b, path);
  int failures = 0, corrupt = 0;
  for (int round = 0; round < 3; ++round) {
    std::atomic<int> threw{0};
    const auto export_one = [&](const cuprof::trace& t) {
      try {
        cuprof::export_chrome_trace(t, path);
      } catch (const std::exception&) {
        ++threw;
      }
    };
    std::thread t1(export_one, std::cref(a));
    std::thread t2(export_one, std::cref(b));
    t1.join();
    t2.join();
    failures += threw.load();
    const std::string text = read_file(path);
    corrupt += text != text_a && text != text_b;
  }
  CHECK(failures == 0);
  CHECK(corrupt == 0);
  CHECK_FALSE(leftover_temp(dir.path));
}

}  // TEST_SUITE file_output

// =============================================================================
TEST_SUITE("real_traces") {

TEST_CASE("traces written on a GPU (tests/fixtures/gpu) satisfy the contract") {
  const std::vector<fs::path> files = gpu_fixtures();
  REQUIRE(files.size() >= 6);
  for (const fs::path& file : files) {
    CAPTURE(file.string());
    const std::string text = read_file(file);
    const json doc = check_contract(text);
    const json& ev = doc["traceEvents"];
    const flow_test::arrows arrows(ev);  // v1 (recorded before flow v2) or v2
    std::size_t kernels = 0;
    for (const json& e : ev) {
      if (e["ph"] != "X") continue;
      const std::string cat = e["cat"];
      if (cat == "cuda_runtime" || cat == "cuda_driver") {
        const std::string name = e["name"];
        CHECK_MESSAGE(!std::regex_search(name, std::regex("_v[0-9]+$")), name);
        CHECK(name[0] != '_');
        CHECK(e["pid"] == doc["traceEvents"][0]["pid"]);
        CHECK(e["args"].contains("correlation"));
      }
      if (cat == "kernel") {
        ++kernels;
        const json& a = e["args"];
        // Recorded by an earlier cuprof, these also carry "blocks per SM", "warps per SM", a "shared memory" of 0.
        for (const char* key : {"device", "stream", "correlation", "grid", "block", "registers per thread",
                                "est. achieved occupancy %"})
          CHECK_MESSAGE(a.contains(key), key);
        CHECK(e["pid"] == a["device"]);
        CHECK(e["tid"] == a["stream"]);
      }
      if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset") {
        // Every launch, copy and memset is linked to its call by a flow.
        const std::uint64_t corr = e["args"]["correlation"];
        CAPTURE(corr);
        const flow_test::arrow* in = arrows.into(e);
        REQUIRE(in);
        CHECK((*in->to)["ts"] == e["ts"]);
        std::size_t from_call = 0;
        for (const flow_test::arrow* a : arrows.out_of(ev, corr)) from_call += a == in;
        CHECK(from_call == 1);
        CHECK(e["args"].contains("External id"));  // the examples launch everything inside scopes
      }
    }
    CHECK(kernels > 0);
    CHECK(doc["cuprof"]["cuda_status"] == "on");
    CHECK(doc["cuprof"]["dropped_gpu_records"] == 0);
  }
}

TEST_CASE("trace_reader reads the writer's output back to the same table (test_tools covers the reader itself)") {
  fixture f;
  const cuprof::loaded_trace back = cuprof::parse_trace(cuprof::chrome_trace_json(f.t), "fixture");
  CHECK(back.format == cuprof::trace_format::cuprof);
  CHECK(back.base_ns == base);
  CHECK(back.unmatched_annotations == 0);
  for (const char* key : {"cuda_time_total", "cpu_time_total", "count"}) {
    CAPTURE(key);
    CHECK(cuprof::key_averages(back.t).table(key, -1) == cuprof::key_averages(f.t).table(key, -1));
  }
  CHECK(back.t.spans.size() == f.t.spans.size());
  CHECK(back.t.api_calls.size() == f.t.api_calls.size());
  CHECK(back.t.gpu.size() == f.t.gpu.size());
}

}  // TEST_SUITE real_traces
