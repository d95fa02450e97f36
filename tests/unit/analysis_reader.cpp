// The analysis library's trace reader (src/analysis/): torch.profiler and cuprof
// traces (tests/data/) read to the tables torch printed, in pieces, gzip, scope
// arguments and input shapes; malformed, hostile and huge input, pipes and FIFOs;
// and the fuzzing corpus and regression inputs replayed in every build.

#include <cuprof/cuprof.hpp>
#include <cuprof/analysis.hpp>

#include "support/child_process.hpp"
#include "support/cli.hpp"
#include "support/files.hpp"
#include "support/flow_arrows.hpp"
#include "support/traces.hpp"
#include "fuzz/targets.hpp"
#include "trace_reader.hpp"  // the reader's internals (src/analysis)

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace cuprof_test;

namespace {

// Writes `bytes` into a pipe or FIFO from another thread, so that a reader in
// this thread can take them. SIGPIPE is blocked in the writer: a reader that
// refuses the pipe and closes it ends the write with EPIPE, not the test.
class pipe_writer {
 public:
  // Into the write end `fd` (closed when done).
  pipe_writer(int fd, std::string bytes) : bytes_(std::move(bytes)) {
    thread_ = std::thread([this, fd] { write_all(fd); });
  }
  // Into the FIFO at `path`, once a reader opened it (or never, if none does within a while).
  pipe_writer(std::string fifo, std::string bytes) : bytes_(std::move(bytes)) {
    thread_ = std::thread([this, fifo] {
      int fd = -1;
      for (int tries = 0; tries < 3000 && fd < 0 && !stop_; ++tries) {  // ENXIO until a reader opens it
        fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (fd < 0) return;
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      write_all(fd);
    });
  }
  ~pipe_writer() {
    stop_ = true;
    thread_.join();
  }

 private:
  void write_all(int fd) {
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_only, nullptr);
    for (std::size_t at = 0; at < bytes_.size();) {
      const ssize_t n = ::write(fd, bytes_.data() + at, bytes_.size() - at);
      if (n <= 0) break;
      at += std::size_t(n);
    }
    ::close(fd);
  }

  std::string bytes_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

TEST_SUITE("analysis_reader") {

// --- Fuzzing corpus and regressions, replayed in every build ------------------------

TEST_CASE("fuzz findings stay fixed (tests/fuzz/regressions/trace_reader)") {
  const fs::path dir = source_dir() / "tests" / "fuzz" / "regressions" / "trace_reader";
  SUBCASE("baseTimeNanoseconds + ts beyond int64: a clear error, not signed overflow") {
    const std::string bytes = slurp(dir / "base_plus_ts_overflows_int64.json");
    REQUIRE_FALSE(bytes.empty());
    try {
      cuprof::read_trace_bytes(bytes, "overflow");
      FAIL("accepted");
    } catch (const cuprof::error& e) {
      CHECK(std::string(e.what()).find("64-bit nanoseconds") != std::string::npos);
    }
  }
  SUBCASE("CUPTI overhead events only, no window: written with a base near them, so they read back") {
    const std::string bytes = slurp(dir / "overhead_only_no_window");
    REQUIRE_FALSE(bytes.empty());
    const cuprof::loaded_trace lt = cuprof::read_trace_bytes(bytes, "overhead");
    REQUIRE(lt.t.overhead.size() == 1);
    CHECK(lt.t.meta.window_start_ns == 0);
    const cuprof::loaded_trace back = cuprof::parse_trace(cuprof::chrome_trace_json(lt.t), "back");
    REQUIRE(back.t.overhead.size() == 1);
    CHECK(back.t.overhead[0].start_ns == lt.t.overhead[0].start_ns);
    CHECK(back.t.overhead[0].end_ns == lt.t.overhead[0].end_ns);
    // A hand-made trace without a window start: ts relative to its events, not to the epoch.
    cuprof::trace t;
    cuprof::cpu_span s;
    s.start_ns = 1795308099181515213ull;
    s.end_ns = s.start_ns + 1000;
    s.name = t.names.intern("no window");
    s.tid = 1;
    t.spans.push_back(s);
    const json doc = json::parse(cuprof::chrome_trace_json(t));
    CHECK(doc["baseTimeNanoseconds"].get<std::uint64_t>() == 1795308099000000000ull);
    CHECK(cuprof::parse_trace(doc.dump(), "hand-made").t.spans.at(0).start_ns == s.start_ns);
  }
  SUBCASE("a window 31 years from the events: read; written back, a clear error (ts beyond 1e15 us)") {
    const std::string bytes = slurp(dir / "base_time_31_years_from_window");
    REQUIRE_FALSE(bytes.empty());
    const cuprof::loaded_trace lt = cuprof::read_trace_bytes(bytes, "window");
    CHECK(cuprof_fuzz::time_extent_ns(lt.t) >= cuprof_fuzz::max_round_trip_extent_ns);
    CHECK_THROWS_AS(cuprof::parse_trace(cuprof::chrome_trace_json(lt.t), "back"), cuprof::error);
    cuprof_fuzz::trace_reader(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
}

TEST_CASE("fuzz replay: the seed traces, damaged copies of them, and every regression input") {
  std::vector<fs::path> seeds = files_in(source_dir() / "tests" / "data" / "gpu");
  for (const char* dir : {"kineto", "metrics"})
    for (const fs::path& p : files_in(source_dir() / "tests" / "data" / dir))
      if (p.extension() == ".json") seeds.push_back(p);
  for (const fs::path& p : files_in(source_dir() / "tests" / "fuzz" / "seeds" / "trace_reader"))
    seeds.push_back(p);  // the writer's own output: flows v2 and v1
  REQUIRE(seeds.size() >= 9);
  std::size_t inputs = 0;
  const auto feed = [&](const std::string& bytes) {
    cuprof_fuzz::trace_reader(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    ++inputs;
  };
  for (const fs::path& p : seeds) {
    CAPTURE(p.string());
    const std::string text = slurp(p);
    REQUIRE_NOTHROW(cuprof::read_trace_bytes(text, p.string()));
    feed(text);
    // Cut at 64 places, and 64 single-byte changes: what a fuzzer tries first.
    std::uint64_t x = 0x9E3779B97F4A7C15ull ^ text.size();
    for (int i = 0; i < 64; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      feed(text.substr(0, x % text.size()));
      std::string changed = text;
      changed[x % text.size()] = "\"{}[],:0-.e\\\x01\xff"[(x >> 32) % 15];
      feed(changed);
    }
  }
  for (const fs::path& p : files_in(source_dir() / "tests" / "fuzz" / "regressions" / "trace_reader")) {
    CAPTURE(p.string());
    feed(slurp(p));
  }
  std::size_t env_inputs = 0;
  const scoped_env rank("RANK"), world("WORLD_SIZE"), quiet("CUPROF_QUIET");  // the target sets them
  for (const fs::path& p : files_in(source_dir() / "tests" / "fuzz" / "regressions" / "env_config")) {
    const std::string bytes = slurp(p);
    cuprof_fuzz::env_config(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    ++env_inputs;
  }
  using namespace std::string_literals;
  const std::vector<std::string> env_seeds = {""s, "7"s, "-1"s,
                                              "1\0"
                                              "2\0"
                                              "0\0"
                                              "/x\0"
                                              "/c\0"
                                              "/p"s,
                                              "\0"
                                              "-1\0"
                                              "00\0"
                                              "\0"
                                              "\0"s};
  for (const std::string& bytes : env_seeds) {
    cuprof_fuzz::env_config(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    ++env_inputs;
  }
  MESSAGE(inputs << " trace inputs and " << env_inputs << " environment inputs replayed");
}

// ---- the reader -----------------------------------------------------------------

TEST_CASE("reader: a torch.profiler trace gives torch's own table, character for character") {
  for (const std::string size : {"64", "4096"}) {
    CAPTURE(size);
    const std::string base = std::string("torch_matmul_add_") + size;
    const cuprof::loaded_trace lt = cuprof::read_trace_file(kineto_trace(base + ".json"));
    CHECK(lt.format == cuprof::trace_format::torch);
    CHECK(lt.unmatched_annotations == 0);
    const std::string ours = cuprof::key_averages(lt.t).table("cuda_time_total", 100);
    CHECK(ours == slurp(kineto_trace(base + ".txt")));
    // The same through the command.
    const cli_run r = cli({"table", kineto_trace(base + ".json"), "--sort", "cuda_time_total"});
    CHECK(r.rc == 0);
    CHECK(r.out == slurp(kineto_trace(base + ".txt")));
    CHECK(r.err.empty());
  }
}

TEST_CASE("reader: rows of the torch tables, by name, count and times") {
  // The 4096 case row by row, as torch printed them (kineto-samples/torch_matmul_add_4096.txt).
  const cuprof::loaded_trace lt = cuprof::read_trace_file(kineto_trace("torch_matmul_add_4096.json"));
  const cuprof::event_averages avg = cuprof::key_averages(lt.t);
  struct expected {
    const char* name;
    cuprof::row_kind kind;
    std::uint64_t self_cpu, cpu_total, self_cuda, cuda_total, count;
  };
  const expected rows[] = {
      {"matmul_add", cuprof::row_kind::gpu_annotation, 0, 0, 595328, 595328, 3},
      {"ProfilerStep*", cuprof::row_kind::cpu_scope, 41279, 232967, 0, 580896, 3},
      {"matmul_add", cuprof::row_kind::cpu_scope, 42861, 191688, 0, 580896, 3},
      {"aten::matmul", cuprof::row_kind::cpu_scope, 5917, 113787, 0, 513440, 3},
      {"aten::mm", cuprof::row_kind::cpu_scope, 74072, 107870, 513440, 513440, 3},
      {"nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", cuprof::row_kind::gpu_work, 0, 0, 511072, 511072, 3},
      {"aten::add", cuprof::row_kind::cpu_scope, 20154, 35040, 67456, 67456, 3},
      {"Memset (Device)", cuprof::row_kind::gpu_work, 0, 0, 2368, 2368, 3},
      {"cudaMemsetAsync", cuprof::row_kind::cuda_api, 15207, 15207, 0, 0, 3},
      {"cuLaunchKernelEx", cuprof::row_kind::cuda_api, 18591, 18591, 0, 0, 3},
      {"cudaLaunchKernel", cuprof::row_kind::cuda_api, 14886, 14886, 0, 0, 3},
      {"cudaDeviceSynchronize", cuprof::row_kind::cuda_api, 397362, 397362, 0, 0, 1},
  };
  for (const expected& e : rows) {
    CAPTURE(e.name);
    const cuprof::event_average* r = avg.find(e.name, e.kind);
    REQUIRE(r != nullptr);
    CHECK(r->self_cpu_ns == e.self_cpu);
    CHECK(r->cpu_total_ns == e.cpu_total);
    CHECK(r->self_cuda_ns == e.self_cuda);
    CHECK(r->cuda_total_ns == e.cuda_total);
    CHECK(r->count == e.count);
  }
  CHECK(avg.rows().size() == 13);
  CHECK(avg.self_cpu_time_total_ns() == 630329);
  CHECK(avg.self_cuda_time_total_ns() == 580896);
}

TEST_CASE("reader: cuprof traces; the file's GPU annotations equal the ones attribution derives") {
  for (const std::string name : gpu_traces) {
    CAPTURE(name);
    cuprof::loaded_trace lt = cuprof::read_trace_file(gpu_trace(name));
    CHECK(lt.format == cuprof::trace_format::cuprof);
    CHECK(lt.base_ns % 1000000000ull == 0);
    CHECK(lt.t.meta.pid != 0);
    CHECK_FALSE(lt.t.meta.devices.empty());
    CHECK(lt.unmatched_annotations == 0);
    CHECK(lt.t.meta.unmatched_gpu_records == 0);
    for (const cuprof::gpu_activity& g : lt.t.gpu)
      if (g.kind != cuprof::gpu_kind::sync) CHECK(cuprof::launching_span(lt.t, g) == lt.t.api_calls[g.api].parent);
    const std::vector<cuprof::gpu_annotation> from_file = lt.t.gpu_annotations;
    lt.t.gpu_launch_spans.clear();  // attribution by thread and time only
    const std::vector<cuprof::gpu_annotation> derived = cuprof::derive_gpu_annotations(lt.t);
    REQUIRE(from_file.size() == derived.size());
    for (std::size_t i = 0; i < derived.size(); ++i) {
      CHECK(from_file[i].span == derived[i].span);
      CHECK(from_file[i].start_ns == derived[i].start_ns);
      CHECK(from_file[i].end_ns == derived[i].end_ns);
    }
  }
}

TEST_CASE("reader: a trace read, written again and read back gives the same table and the same flow arrows") {
  temp_dir dir;
  // Flow starts in a cuprof trace: one per GPU record a call launched or waited on, syncs
  // included; v1 "s" events (the GPU fixtures) or v2 "flow_out" members (the writer's now).
  const auto flow_starts = [](const std::string& text) {
    std::size_t n = 0;
    for (std::size_t at = text.find("\"ph\":"); at != std::string::npos; at = text.find("\"ph\":", at + 1)) {
      const std::size_t value = text.find_first_not_of(' ', at + 5);
      n += text.compare(value, 3, "\"s\"") == 0;
    }
    for (std::size_t at = text.find("\"flow_out\":"); at != std::string::npos; at = text.find("\"flow_out\":", at + 1))
      n += text.compare(text.find_first_not_of(' ', at + 11), 4, "true") == 0;
    return n;
  };
  // Every GPU fixture; written again, each is kept in CUPROF_TEST_KEEP_TRACES (as rewritten_NAME,
  // and lean as rewritten_lean_NAME) for validate_kept_traces and for scripts/test-hta: today's
  // writer on work recorded on a GPU.
  const char* keep = std::getenv("CUPROF_TEST_KEEP_TRACES");
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(gpu_trace("")))
    if (entry.path().extension() == ".json") names.push_back(entry.path().filename().string());
  REQUIRE(names.size() >= 6);
  for (const std::string& name : names) {
    CAPTURE(name);
    const cuprof::loaded_trace first = cuprof::read_trace_file(gpu_trace(name));
    const std::string path = dir.file("again_" + name);
    cuprof::export_chrome_trace(first.t, path);
    const cuprof::loaded_trace second = cuprof::read_trace_file(path);
    CHECK(cuprof::key_averages(second.t).table("cuda_time_total", -1) ==
          cuprof::key_averages(first.t).table("cuda_time_total", -1));
    CHECK(second.t.overhead.size() == first.t.overhead.size());
    CHECK(flow_starts(cuprof::chrome_trace_json(first.t)) == flow_starts(slurp(gpu_trace(name))));
    // Lean: the same table, CPU and GPU, and the same arrows.
    const std::string lean_path = dir.file("lean_" + name);
    cuprof::export_chrome_trace(first.t, lean_path, {cuprof::trace_detail::lean});
    const cuprof::loaded_trace lean = cuprof::read_trace_file(lean_path);
    for (const char* key : {"cuda_time_total", "cpu_time_total", "self_cuda_time_total"})
      CHECK(cuprof::key_averages(lean.t).table(key, -1) == cuprof::key_averages(first.t).table(key, -1));
    CHECK(flow_starts(slurp(lean_path)) == flow_starts(slurp(path)));
    CHECK(std::filesystem::file_size(lean_path) < std::filesystem::file_size(path));
    if (keep && *keep) {
      std::filesystem::create_directories(keep);
      std::filesystem::copy_file(path, std::filesystem::path(keep) / ("rewritten_" + name),
                                 std::filesystem::copy_options::overwrite_existing);
      std::filesystem::copy_file(lean_path, std::filesystem::path(keep) / ("rewritten_lean_" + name),
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }
}

// A large trace's events are read in pieces on several threads
// (read_raw_trace_in_pieces); here with tiny pieces, so that small files cut too.
std::optional<cuprof::loaded_trace> read_in_pieces(const std::string& text, std::size_t piece_bytes) {
  std::string padded = text;
  cuprof::detail::pad_for_json(padded);
  std::optional<cuprof::detail::raw_trace> raw = cuprof::detail::read_raw_trace_in_pieces(padded, "t", {}, piece_bytes, 3);
  if (!raw) return std::nullopt;
  cuprof::loaded_trace out;
  out.source = "t";
  cuprof::detail::build_trace(*raw, out);
  return out;
}

TEST_CASE("reader: a trace read in pieces on several threads is the trace read serially") {
  std::vector<std::string> files;
  for (const char* name : {"matmul_add_4096.json", "mlp_fused.json", "occupancy.json", "linear_addmm.json"})
    files.push_back(gpu_trace(name));
  for (const char* name :
       {"torch_geglu_mlp.json", "torch_geglu_mlp_compiled.json", "torch_matmul_add_64.json", "torch_memory_synthetic.json"})
    files.push_back(kineto_trace(name));
  for (const std::string& file : files) {
    CAPTURE(file);
    const std::string text = slurp(file);
    const cuprof::loaded_trace serial = cuprof::parse_trace(text, "t");
    for (const std::size_t piece_bytes : {std::size_t(1), std::size_t(700), std::size_t(5000)}) {
      CAPTURE(piece_bytes);
      const std::optional<cuprof::loaded_trace> pieces = read_in_pieces(text, piece_bytes);
      REQUIRE(pieces);
      CHECK(cuprof::chrome_trace_json(pieces->t) == cuprof::chrome_trace_json(serial.t));
      CHECK(cuprof::key_averages(pieces->t).table("cuda_time_total", -1) ==
            cuprof::key_averages(serial.t).table("cuda_time_total", -1));
      CHECK(pieces->events == serial.events);
      CHECK(pieces->used == serial.used);
      CHECK(pieces->format == serial.format);
      CHECK(pieces->unmatched_annotations == serial.unmatched_annotations);
      CHECK(pieces->t.names.size() == serial.t.names.size());
      REQUIRE(pieces->t.memory.size() == serial.t.memory.size());
      for (std::size_t i = 0; i < serial.t.memory.size(); ++i) {
        CHECK(pieces->t.memory[i].ts_ns == serial.t.memory[i].ts_ns);
        CHECK(pieces->t.memory[i].bytes == serial.t.memory[i].bytes);
        CHECK(pieces->t.memory[i].span == serial.t.memory[i].span);
      }
      CHECK(pieces->t.meta.memory_recorded == serial.t.meta.memory_recorded);
    }
  }
  // What looks like a place between events inside a string, or inside an
  // event, is no place to cut: the pieces do not parse, and the trace is read serially.
  const std::string head = R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": ")";
  const std::string tail =
      R"(", "pid": 1, "tid": 1, "ts": 1, "dur": 2}, {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 1, "ts": 1.5, "dur": 1}]})";
  CHECK(!read_in_pieces(head + "a}, {x" + tail, 1));
  const std::string nested =
      R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2, "args": {"l": [{"k": 1}, {"k": 2}]}}]})";
  CHECK(!read_in_pieces(nested, 1));
  // An event in error: its piece fails, and the serial reader says what and where.
  std::string bad = slurp(kineto_trace("torch_matmul_add_64.json"));
  bad.insert(bad.find("\"dur\": ", bad.rfind("\"cat\": \"kernel\"")) + 7, "-");
  CHECK_THROWS_WITH_AS((void)cuprof::parse_trace(bad, "t"), doctest::Contains("\"dur\" is negative"), cuprof::error);
  CHECK(!read_in_pieces(bad, 1));
}

TEST_CASE("reader: gzip-compressed traces, and the JSON Array Format") {
  temp_dir dir;
  const std::string json = slurp(kineto_trace("torch_matmul_add_64.json"));
  write_gzip(dir.file("t.json.gz"), json);
  const cuprof::loaded_trace gz = cuprof::read_trace_file(dir.file("t.json.gz"));
  CHECK(cuprof::key_averages(gz.t).table("cuda_time_total", 100) == slurp(kineto_trace("torch_matmul_add_64.txt")));
  // gzip data under another name is still recognised by its magic bytes.
  write_gzip(dir.file("t.json"), json);
  CHECK(cuprof::read_trace_file(dir.file("t.json")).t.gpu.size() == gz.t.gpu.size());
  // Two concatenated gzip members read as one stream.
  write_gzip(dir.file("a.gz"), json.substr(0, 1000));
  write_gzip(dir.file("b.gz"), json.substr(1000));
  write_file(dir.file("ab.json.gz"), slurp(dir.file("a.gz")) + slurp(dir.file("b.gz")));
  CHECK(cuprof::read_trace_file(dir.file("ab.json.gz")).t.gpu.size() == gz.t.gpu.size());

  const cuprof::loaded_trace arr = cuprof::parse_trace(
      R"([{"ph": "X", "cat": "user_annotation", "name": "step", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 11, "dur": 1,
           "args": {"correlation": 3}},
          {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 12.5, "dur": 0.25,
           "args": {"correlation": 3, "stream": 7}}])",
      "array");
  REQUIRE(arr.t.gpu.size() == 1);
  // Older Kineto traces: capitalised categories and "external id".
  const cuprof::loaded_trace old = cuprof::parse_trace(
      R"({"traceEvents": [{"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
                           "args": {"External id": 4}},
                          {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 11, "dur": 1,
                           "args": {"correlation": 3, "external id": 4}},
                          {"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": 7, "ts": 30, "dur": 2,
                           "args": {"correlation": 3, "external id": 4}}]})",
      "old");
  REQUIRE(old.t.gpu.size() == 1);
  CHECK(old.t.gpu_launch_spans == std::vector<std::uint32_t>{0});
  CHECK(cuprof::key_averages(old.t).find("aten::mm", cuprof::row_kind::cpu_scope)->self_cuda_ns == 2000);
  CHECK(arr.t.gpu[0].start_ns == 12500);
  CHECK(arr.t.gpu[0].end_ns == 12750);
  CHECK(cuprof::launching_span(arr.t, arr.t.gpu[0]) == 0);  // no External id: by the call's nesting
}

TEST_CASE("reader: timestamps convert from their decimal text without rounding error") {
  std::int64_t ns = 0;
  CHECK(cuprof::detail::us_to_ns("4448316261137.712", ns));
  CHECK(ns == 4448316261137712ll);
  CHECK(cuprof::detail::us_to_ns("1.5", ns));
  CHECK(ns == 1500);
  CHECK(cuprof::detail::us_to_ns("0.0004", ns));
  CHECK(ns == 0);
  CHECK(cuprof::detail::us_to_ns("0.0005", ns));
  CHECK(ns == 1);
  CHECK(cuprof::detail::us_to_ns("-2", ns));
  CHECK(ns == -2000);
  CHECK(cuprof::detail::us_to_ns("1.5e3", ns));
  CHECK(ns == 1500000);
  CHECK_FALSE(cuprof::detail::us_to_ns("1e300", ns));
  CHECK_FALSE(cuprof::detail::us_to_ns("99999999999999999999", ns));
}

TEST_CASE("reader: malformed input throws cuprof::error with the place; nothing else escapes") {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "empty input"},
      {"   ", "empty input"},
      {"hello", "expected a JSON object"},
      {"{}", "no \"traceEvents\""},
      {"{\"traceEvents\": 5}", "\"traceEvents\" is a number, expected an array"},
      {"{\"traceEvents\": [", "unexpected end of input"},
      {"{\"traceEvents\": [1]}", "traceEvents[0] is a number, expected an object"},
      {"{\"traceEvents\": []} x", "unexpected data after the end"},
      {"{\"traceEvents\": [], }", "expected a member (\"name\": value), ',' or '}', found '}'"},
      {"{\"traceEvents\": [{\"ph\" \"X\"}]}", "expected a member (\"name\": value), ',' or '}', found '\"'"},
      {"{\"traceEvents\": [{} {}]}", "expected a value, ',' or ']', found '{'"},
      {"{\"traceEvents\": [{\"ph\": 1}]}", "\"ph\" is a number, expected a string"},
      {R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "1", "dur": 1, "pid": 0, "tid": 7}]})",
       "\"ts\" is a string, expected a number"},
      {R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "pid": 0, "tid": 7}]})", "has no \"dur\""},
      {R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": "GPU", "tid": 7}]})",
       "\"pid\" is not an integer"},
      {R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 0, "tid": 7, "args": []}]})",
       "\"args\" is an array"},
      {R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 0, "tid": 7,
          "args": {"correlation": "x"}}]})",
       "args \"correlation\" is a string"},
      {R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 0, "tid": 7,
          "args": {"grid": [1, 2]}}]})",
       "args \"grid\" is not an array of 3 integers"},
      {R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 70000, "tid": 7}]})",
       "device is 70000, expected a device number (0 to 65535)"},
      {R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 0, "tid": 7,
          "args": {"device": -1}}]})",
       "device is -1, expected a device number"},
      {R"({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "k", "ts": -5, "dur": 1, "pid": 0, "tid": 7}]})",
       "before the epoch"},
      {R"({"baseTimeNanoseconds": "soon", "traceEvents": []})", "\"baseTimeNanoseconds\" is not"},
      {R"({"deviceProperties": {}, "traceEvents": []})", "\"deviceProperties\" is an object"},
      {R"({"traceEvents": [{"ph": "X", "name": "bad\q"}]})", "invalid escape"},
      {R"({"traceEvents": [{"ph": "X", "name": "\u12"}]})", "invalid \\u escape"},
      {R"({"traceEvents": [{"ph": 01}]})", "invalid number"},
      {R"({"traceEvents": [-]})", "invalid number"},
      {R"({"traceEvents": [tru]})", "expected a value"},
      {std::string("{\"traceEvents\": ") + std::string(100, '['), "nesting deeper than"},
  };
  for (const auto& b : bad) {
    CAPTURE(b.first);
    try {
      (void)cuprof::parse_trace(b.first, "input.json");
      FAIL("no error for this input");
    } catch (const cuprof::error& e) {
      const std::string what = e.what();
      CHECK(what.rfind("cuprof: input.json", 0) == 0);
      CHECK_MESSAGE(what.find(b.second) != std::string::npos, what);
    }
  }
}

TEST_CASE("reader: calls share a kind per name and cbid; a file with more than 65536 kinds is refused") {
  const auto calls = [](std::size_t names, std::size_t repeats) {
    std::string json = "{\"traceEvents\": [";
    for (std::size_t r = 0; r < repeats; ++r)
      for (std::size_t i = 0; i < names; ++i)
        json += std::string(r + i ? "," : "") + R"({"ph": "X", "cat": "cuda_runtime", "name": "cudaCall)" + std::to_string(i) +
                R"(", "ts": 1, "dur": 1, "pid": 1, "tid": 1, "args": {"cbid": 7}})";
    return json + "]}";
  };
  const cuprof::loaded_trace few = cuprof::parse_trace(calls(3, 4), "few.json");
  CHECK(few.t.api_calls.size() == 12);
  CHECK(few.t.call_kinds.size() == 3);
  CHECK(few.t.kind_of(few.t.api_calls[0]).cbid == 7);
  CHECK(cuprof::parse_trace(calls(65536, 1), "most.json").t.call_kinds.size() == 65536);
  try {
    (void)cuprof::parse_trace(calls(65537, 1), "many.json");
    FAIL("no error for 65537 kinds of call");
  } catch (const cuprof::error& e) {
    CHECK(std::string(e.what()).find("many.json: more than 65536 different CUDA calls") != std::string::npos);
  }
}

TEST_CASE("reader: every truncation and many corruptions of a real trace either read or throw cuprof::error") {
  for (const char* name : {"matmul_add_64.json", "occupancy.json"}) {
    const std::string json = slurp(gpu_trace(name));
    std::size_t errors = 0, read = 0;
    for (std::size_t len = 0; len < json.size(); len += 13) {
      try {
        (void)cuprof::parse_trace(std::string_view(json).substr(0, len), name);
        ++read;
      } catch (const cuprof::error&) {
        ++errors;
      }
    }
    CHECK(read == 0);  // the document is only complete at its last byte
    CHECK(errors > 0);
    std::uint64_t state = 42;
    std::size_t corrupted_reads = 0;
    for (int i = 0; i < 1500; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      std::string copy = json;
      const std::size_t at = std::size_t(state >> 33) % copy.size();
      static const char replacements[] = {'"', '{', '}', '[', ']', ',', ':', '-', '0', '9', '.', 'e', '\\', '\0', 'x'};
      copy[at] = replacements[(state >> 20) % sizeof replacements];
      try {
        (void)cuprof::key_averages(cuprof::parse_trace(copy, name).t).table("cuda_time_total", -1);
        ++corrupted_reads;
      } catch (const cuprof::error&) {}
    }
    CHECK(corrupted_reads > 0);  // many single-byte changes (inside names, digits) still read
  }
}

TEST_CASE("reader: files that are not traces") {
  temp_dir dir;
  const auto fails = [](const std::string& path, const std::string& says) {
    CAPTURE(path);
    try {
      (void)cuprof::read_trace_file(path);
      FAIL("no error");
    } catch (const cuprof::error& e) {
      CHECK_MESSAGE(std::string(e.what()).find(says) != std::string::npos, e.what());
    }
  };
  fails(dir.file("missing.json"), "No such file or directory");
  fails(dir.path.string(), "it is a directory");
  fails("/dev/null", "not a regular file");
  write_file(dir.file("empty.json"), "");
  fails(dir.file("empty.json"), "is empty");
  write_file(dir.file("one.json.gz"), "\x1f");
  fails(dir.file("one.json.gz"), "ends in .gz but is not gzip data");
  write_file(dir.file("magic.json.gz"), "\x1f\x8b");
  fails(dir.file("magic.json.gz"), "truncated gzip data");
  write_gzip(dir.file("full.gz"), slurp(gpu_trace("matmul_add_64.json")));
  write_file(dir.file("cut.json.gz"), slurp(dir.file("full.gz")).substr(0, 300));
  fails(dir.file("cut.json.gz"), "truncated gzip data");
  std::string damaged = slurp(dir.file("full.gz"));
  for (std::size_t i = 20; i < 60; ++i) damaged[i] = char(0xA5);
  write_file(dir.file("damaged.json.gz"), damaged);
  fails(dir.file("damaged.json.gz"), "gzip");
  write_gzip(dir.file("nothing.json.gz"), "");
  fails(dir.file("nothing.json.gz"), "decompresses to nothing");
}

namespace {

// A gzip stream of `pattern` repeated to `n` bytes, made in memory: a
// decompression bomb about a thousand times smaller than what it inflates to.
std::string gzip_bomb(const std::string& pattern, std::size_t n) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string chunk;
  while (chunk.size() < (1u << 20)) chunk += pattern;
  std::string out;
  char buf[1 << 16];
  for (std::size_t done = 0; done < n; done += chunk.size()) {
    z.next_in = reinterpret_cast<Bytef*>(chunk.data());
    z.avail_in = uInt(chunk.size());
    const int flush = done + chunk.size() >= n ? Z_FINISH : Z_NO_FLUSH;
    do {
      z.next_out = reinterpret_cast<Bytef*>(buf);
      z.avail_out = sizeof buf;
      deflate(&z, flush);
      out.append(buf, sizeof buf - z.avail_out);
    } while (z.avail_out == 0);
  }
  deflateEnd(&z);
  return out;
}

// Reads `path` in a child; returns "" if it was refused with `says`, its peak
// memory growing less than `max_growth_mib` (how early it stopped; no time
// bound: a loaded or sanitized run is slow, and speed is a benchmark's), else
// what went wrong.
// Sanitizers' shadow memory counts in the peak RSS: the memory bound holds in plain builds only.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool peak_memory_is_the_readers = false;
#else
constexpr bool peak_memory_is_the_readers = true;
#endif

std::string refused_in_bounds(const std::string& path, const std::string& says, long max_growth_mib) {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    rusage before{}, after{};
    ::getrusage(RUSAGE_SELF, &before);
    std::string problem;
    try {
      (void)cuprof::read_trace_file(path);
      problem = "not refused";
    } catch (const cuprof::error& e) {
      if (std::string(e.what()).find(says) == std::string::npos) problem = std::string("refused as: ") + e.what();
    } catch (const std::exception& e) {
      problem = std::string("threw ") + e.what();
    }
    ::getrusage(RUSAGE_SELF, &after);
    const long growth_mib = (after.ru_maxrss - before.ru_maxrss) / 1024;
    if (peak_memory_is_the_readers && growth_mib >= max_growth_mib)
      problem += " peak memory grew by " + std::to_string(growth_mib) + " MiB";
    (void)!::write(pipe_fds[1], problem.data(), problem.size());
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string problem;
  char buf[512];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buf, sizeof buf)) > 0) problem.append(buf, std::size_t(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status)) problem += " the child died (signal " + std::to_string(WTERMSIG(status)) + ")";
  return problem;
}

}  // namespace

TEST_CASE("reader: gzip bombs (zeros, whitespace, valid-looking JSON) are refused early, in bounded memory") {
  temp_dir dir;
  // 512 MiB each once inflated, about 0.5 MB on disk. Zeros and blanks stop
  // at their first bytes; JSON-looking text at the 100x ratio past 256 MiB.
  write_file(dir.file("zeros.json.gz"), gzip_bomb(std::string(1, '\0'), 512u << 20));
  write_file(dir.file("blanks.json.gz"), gzip_bomb(" \n\t", 512u << 20));
  write_file(dir.file("json.json.gz"), gzip_bomb("[0,", 512u << 20));
  CHECK(refused_in_bounds(dir.file("zeros.json.gz"), "NUL byte", 64) == "");
  CHECK(refused_in_bounds(dir.file("blanks.json.gz"), "1 MiB of whitespace in a row", 64) == "");
  CHECK(refused_in_bounds(dir.file("json.json.gz"), "100 times its compressed size", 512) == "");
  // The message says where and why.
  try {
    (void)cuprof::read_trace_file(dir.file("zeros.json.gz"));
  } catch (const cuprof::error& e) {
    CHECK(std::string(e.what()) == "cuprof: '" + dir.file("zeros.json.gz") +
                                       "': byte 0 of its decompressed data is a NUL byte: not JSON text (a "
                                       "zero-filled or sparse file, or binary data)");
  }
}

TEST_CASE("reader: NUL-filled, sparse and binary files say what they are, not \"empty input\"") {
  temp_dir dir;
  const auto refused_as = [](const std::string& path) -> std::string {
    try {
      (void)cuprof::read_trace_file(path);
      return "read";
    } catch (const cuprof::error& e) {
      return e.what();
    }
  };
  write_file(dir.file("zeros.json"), std::string(1 << 20, '\0'));
  CHECK(refused_as(dir.file("zeros.json")) ==
        "cuprof: '" + dir.file("zeros.json") +
            "': byte 0 is a NUL byte: not JSON text (a zero-filled or sparse file, or binary data)");
  // A sparse file of 64 GiB: refused at its first bytes, never held (nor reserved) whole.
  write_file(dir.file("sparse.json"), "");
  REQUIRE(::truncate(dir.file("sparse.json").c_str(), off_t(64) << 30) == 0);
  CHECK(refused_in_bounds(dir.file("sparse.json"), "byte 0 is a NUL byte", 64) == "");
  // A trace cut off by zeros (a crash, a disk that lost its tail): where the zeros start.
  write_file(dir.file("zero_tail.json"), "{\"traceEvents\": [" + std::string(4096, '\0'));
  CHECK(refused_as(dir.file("zero_tail.json")).find("byte 17 is a NUL byte") != std::string::npos);
  write_file(dir.file("binary.json"), std::string("\x7f"
                                                  "ELF\x02\x01\x01",
                                                  7));
  CHECK(refused_as(dir.file("binary.json")).find("byte 4 is a control byte (0x02): not JSON text") != std::string::npos);
  // The same from bytes in memory, and from the parser given NULs directly.
  CHECK_THROWS_WITH(cuprof::read_trace_bytes(std::string(16, '\0'), "mem"), doctest::Contains("byte 0 is a NUL byte"));
  try {
    (void)cuprof::parse_trace(std::string_view("\0\0", 2), "mem");
    FAIL("no error");
  } catch (const cuprof::error& e) {
    CHECK(std::string(e.what()).find("empty input") == std::string::npos);
  }
  // Whitespace alone is empty of JSON, and said so.
  write_file(dir.file("blank.json"), "  \n\t ");
  CHECK(refused_as(dir.file("blank.json")).find("empty input") != std::string::npos);
}

TEST_CASE("reader: JSON errors give the line and column, at a truncated end too; the command prints one line") {
  const auto message = [](const std::string& text) {
    try {
      (void)cuprof::parse_trace(text, "x.json");
    } catch (const cuprof::error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message("{\n  \"traceEvents\": [\n    {\"ph\": 01}\n  ]\n}") == "cuprof: x.json: line 3, column 12: invalid number");
  CHECK(message("{\n  \"traceEvents\": [\n    {\"ph\": \"X\",\n     \"cat\" 1}\n  ]\n}") ==
        "cuprof: x.json: line 4, column 12: expected a member (\"name\": value), ',' or '}', found '1'");
  CHECK(message("{\"traceEvents\": [\n") ==
        "cuprof: x.json: line 2, column 1: unexpected end of input (truncated?): expected a value");
  // Megabytes in, past text whose memory the reader has given back as it went: the place is still right.
  std::string big = "{\"traceEvents\": [\n";
  for (int i = 0; i < 40000; ++i)
    big += "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"op\", \"pid\": 1, \"tid\": 1, \"ts\": 1, \"dur\": 1},\n";
  CHECK(message(big + "{\"ph\": 01}]}") == "cuprof: x.json: line 40002, column 8: invalid number");
  CHECK(cuprof::parse_trace(big + "{}]}", "big.json").t.spans.size() == 40000);
  // Raw tabs and line breaks inside strings are not JSON, but some torch traces have them: read as themselves.
  const cuprof::loaded_trace raw = cuprof::parse_trace(
      "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"a\tb\nc\", \"pid\": 1, \"tid\": 1, \"ts\": 1, "
      "\"dur\": 1}]}",
      "raw.json");
  REQUIRE(raw.t.spans.size() == 1);
  CHECK(raw.t.names.str(raw.t.spans[0].name) == "a\tb\nc");
  // Invalid UTF-8 (a name cut inside a character) reads, the byte replaced by U+FFFD as the writer does.
  const cuprof::loaded_trace cut = cuprof::parse_trace(
      "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"caf\xC3\", \"pid\": 1, \"tid\": 1, \"ts\": 1, "
      "\"dur\": 1}]}",
      "cut.json");
  REQUIRE(cut.t.spans.size() == 1);
  CHECK(cut.t.names.str(cut.t.spans[0].name) == "caf\xEF\xBF\xBD");
  CHECK(message("{\"traceEvents\": [{\"ph\": \"X\",\n \"name\": \"a\tb\", \"ts\": x}]}") ==
        "cuprof: x.json: line 2, column 23: expected a value, found 'x'");
  // A name from the trace in the message holds a line break and an escape: still one line on stderr.
  temp_dir dir;
  write_file(
      dir.file("bad.json"),
      R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "a\nb\u001b[2J", "ts": "1", "dur": 1, "pid": 0, "tid": 7}]})");
  const cli_run r = cli({"table", dir.file("bad.json")});
  CHECK(r.rc == 1);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("(\"a\\x0ab\\x1b[2J\"): \"ts\" is a string, expected a number") != std::string::npos);
  CHECK(r.err.find("line 1, column ") != std::string::npos);
}

// ---- scope arguments ---------------------------------------------------------

namespace {

// A torch trace recorded with record_shapes=True: two shapes of aten::mm.
const char* const torch_shapes_trace = R"json({
  "traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10,
     "args": {"External id": 1, "Ev Idx": 0, "Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20, "dur": 10,
     "args": {"External id": 2, "Ev Idx": 1, "Input Dims": [[128, 128], [128, 128]]}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 40, "dur": 10,
     "args": {"External id": 3, "Ev Idx": 2, "Input Dims": [[64, 64], [64, 64]]}},
    {"ph": "X", "cat": "user_annotation", "name": "step", "pid": 1, "tid": 1, "ts": 60, "dur": 10,
     "args": {"External id": 4, "Record function id": 0, "Ev Idx": 3}}
  ]})json";

}  // namespace

TEST_CASE("reader: torch's [memory] events: allocations and frees in time order, charged to the scope open at them") {
  const cuprof::loaded_trace lt = cuprof::read_trace_file(kineto_trace("torch_memory_synthetic.json"));
  const cuprof::trace& t = lt.t;
  CHECK(lt.format == cuprof::trace_format::torch);
  CHECK(t.meta.memory_recorded);
  // Three steps: 4 MiB allocated in aten::empty and freed at the step's end, 1 MiB kept by cache_append;
  // 4 KiB of CPU memory allocated in the second step's aten::empty and freed after it.
  REQUIRE(t.memory.size() == 11);
  CHECK(lt.used == 30 + 11);  // the instants that are not [memory] (Iteration Start) are not used
  CHECK(std::is_sorted(t.memory.begin(), t.memory.end(),
                       [](const cuprof::memory_event& a, const cuprof::memory_event& b) { return a.ts_ns < b.ts_ns; }));
  const auto scope = [&](const cuprof::memory_event& m) {
    return m.span == cuprof::no_index ? std::string("-") : t.names.str(t.spans[m.span].name);
  };
  const std::uint64_t base = 1700000000000000000ull;
  const cuprof::memory_event& first = t.memory[0];
  CHECK(first.ts_ns == base + 15000);
  CHECK(first.bytes == 4194304);
  CHECK(first.address == 139637976727552ull);
  CHECK(first.device == 0);
  CHECK(first.total_allocated == 109051904);
  CHECK(first.total_reserved == 134217728);
  CHECK(first.tid == 4242);
  CHECK(first.correlation == 0);
  CHECK(first.memory_kind == 0);
  CHECK(first.flags == 0);
  CHECK(scope(first) == "aten::empty");
  std::vector<std::string> scopes;
  std::vector<std::int64_t> bytes;
  std::vector<std::int32_t> devices;
  for (const cuprof::memory_event& m : t.memory) {
    scopes.push_back(scope(m));
    bytes.push_back(m.bytes);
    devices.push_back(m.device);
  }
  const std::int64_t MiB = 1 << 20;
  CHECK(bytes == std::vector<std::int64_t>{4 * MiB, MiB, -4 * MiB, 4 * MiB, 4096, -4096, MiB, -4 * MiB, 4 * MiB, MiB, -4 * MiB});
  CHECK(devices == std::vector<std::int32_t>{0, 0, 0, 0, -1, -1, 0, 0, 0, 0, 0});
  CHECK(scopes == std::vector<std::string>{"aten::empty", "cache_append", "ProfilerStep#0", "aten::empty", "aten::empty",
                                           "ProfilerStep#1", "cache_append", "ProfilerStep#1", "aten::empty", "cache_append",
                                           "ProfilerStep#2"});

  // What `cuprof insights` says of it.
  cuprof::insights_options o;
  o.base_ns = lt.base_ns;
  const cuprof::insights in = cuprof::analyze(t, o);
  // The headline of the finding about `cause` (its kind, or its kind and what it is about).
  const auto headline = [&](const std::string& cause) {
    for (const cuprof::finding& f : in.findings)
      if (f.kind == cause || f.cause == cause) return f.headline;
    return std::string("(none)");
  };
  CHECK(headline("memory not freed") ==
        "cache_append: 3 MiB on GPU 0 still allocated at the end of the window, 3 allocations made in it");
  CHECK(headline("memory peak: GPU 0") ==
        "GPU 0: at most 107 MiB in use, at ts 2305.000us, reached by an allocation of 1 MiB in ProfilerStep#2 > cache_append");
  CHECK(headline("memory peak: host memory") ==
        "host memory: at most 4 KiB in use, at ts 1020.000us, reached by an allocation of 4 KiB in ProfilerStep#1 > aten::empty");
  // torch reports no reserve for CPU memory: nothing said of it.
  for (const cuprof::finding& f : in.findings)
    if (f.cause == "memory peak: host memory") CHECK(f.details.size() == 1);
  CHECK(headline("allocation in the loop") == "cudaMalloc: 1 call in 1 of the 2 steps after the first, 150.000us of CPU time");
  CHECK(headline("pageable memcpy") == "Memcpy HtoD with pageable host memory: 2 copies, 16 MiB in 1.280ms (13.1 GB/s)");
}

TEST_CASE("reader: memory events written by cuprof's writer read back as they were") {
  for (const char* file : {"torch_memory_synthetic.json", "torch_memory_step.json"}) {
    CAPTURE(file);
    const cuprof::loaded_trace lt = cuprof::read_trace_file(kineto_trace(file));
    const cuprof::loaded_trace back = cuprof::parse_trace(cuprof::chrome_trace_json(lt.t), "written");
    CHECK(back.t.meta.memory_recorded);
    REQUIRE(back.t.memory.size() == lt.t.memory.size());
    for (std::size_t i = 0; i < lt.t.memory.size(); ++i) {
      const cuprof::memory_event &a = lt.t.memory[i], &b = back.t.memory[i];
      CAPTURE(i);
      CHECK(b.ts_ns == a.ts_ns);
      CHECK(b.bytes == a.bytes);
      CHECK(b.address == a.address);
      CHECK(b.device == a.device);
      CHECK(b.total_allocated == a.total_allocated);
      CHECK(b.total_reserved == a.total_reserved);
      CHECK(b.tid == a.tid);
      REQUIRE((b.span == cuprof::no_index) == (a.span == cuprof::no_index));
      if (a.span != cuprof::no_index) CHECK(back.t.spans[b.span].start_ns == lt.t.spans[a.span].start_ns);
    }
  }
}

TEST_CASE("reader: a window's edge counts read back as written; hostile values are left at 0") {
  cuprof::trace t;
  t.meta.edges.calls_without_gpu_work = {3, 1, 0};
  t.meta.edges.gpu_work_without_call = {0, 0, 2};
  t.meta.edges.launched_before = {9, 0, 0};
  t.meta.edges.calls_running_at_end = 5;
  const cuprof::loaded_trace back = cuprof::parse_trace(cuprof::chrome_trace_json(t), "written");
  const cuprof::window_edges& e = back.t.meta.edges;
  CHECK(e.calls_without_gpu_work == t.meta.edges.calls_without_gpu_work);
  CHECK(e.gpu_work_without_call == t.meta.edges.gpu_work_without_call);
  CHECK(e.launched_before == t.meta.edges.launched_before);
  CHECK(e.calls_running_at_end == 5);
  CHECK(e.lost_count() == 3 + 1 + 2 + 5);  // launched_before is the rule's cut, not a loss
  CHECK(e.lost());
  CHECK(cuprof::window_losses(e) ==
        "3 kernel calls without their GPU record, 1 copy call without their GPU record, 2 memset records on the GPU without "
        "their call, 5 calls still running when the window was taken");
  const std::string hostile = R"({"traceEvents":[],"cuprof":{"version":"0.1.0","window_edges":{
      "calls_without_gpu_work":{"kernel":-4,"memcpy":"7","memset":1e308},
      "gpu_work_without_call":[1,2,3],"launched_before":null,"calls_running_at_end":-1}}})";
  const cuprof::loaded_trace h = cuprof::parse_trace(hostile, "hostile");
  CHECK_FALSE(h.t.meta.edges.lost());
  CHECK(h.t.meta.edges.launched_before == std::array<std::uint64_t, 3>{});
}

TEST_CASE("reader: a recorded torch trace's [memory] events charged as torch charges them (its Self CUDA Mem and Self CPU Mem)") {
  const cuprof::loaded_trace lt = cuprof::read_trace_file(kineto_trace("torch_memory_step.json"));
  const cuprof::trace& t = lt.t;
  CHECK(t.meta.memory_recorded);
  REQUIRE(t.memory.size() == 199);
  std::map<std::string, std::int64_t> self_cuda, self_cpu;
  std::size_t on_gpu = 0, outside = 0;
  for (const cuprof::memory_event& m : t.memory) {
    on_gpu += m.device == 0;
    if (m.span == cuprof::no_index) {
      ++outside;
      continue;
    }
    (m.device < 0 ? self_cpu : self_cuda)[t.names.str(t.spans[m.span].name)] += m.bytes;
  }
  CHECK(on_gpu == 163);  // the rest are CPU memory (Device Type 0, Device Id -1)
  CHECK(outside == 44);  // on threads or at times with no op open
  // torch_memory_step.txt: Self CUDA Mem 480.18 MB, 248.00 MB, 60.00 MB, 24.00 MB, 3.00 MB, 72.00 KB; Self CPU Mem 96.04 MB.
  CHECK(self_cuda["aten::empty_strided"] == 503501824);
  CHECK(self_cuda["aten::mm"] == 260046848);
  CHECK(self_cuda["aten::addmm"] == 62914560);
  CHECK(self_cuda["aten::gelu_backward"] == 25165824);
  CHECK(self_cuda["aten::empty"] == 3145728);
  CHECK(self_cuda["aten::sum"] == 73728);
  CHECK(self_cpu["aten::empty"] == 100700192);
  CHECK(self_cpu["aten::mm"] == 0);
}

namespace {

// A table's lines, each split into its cells (runs of text two spaces or more apart).
std::vector<std::vector<std::string>> table_cells(const std::string& text) {
  std::vector<std::vector<std::string>> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::size_t at = 0;
    while (at < line.size()) {
      while (at < line.size() && line[at] == ' ') ++at;
      if (at == line.size()) break;
      std::size_t end = line.find("  ", at);
      if (end == std::string::npos) end = line.size();
      cells.push_back(line.substr(at, end - at));
      at = end;
    }
    lines.push_back(std::move(cells));
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();  // a file's final blank line
  return lines;
}

}  // namespace

TEST_CASE("table: torch's own tables of profile_memory=True traces, every memory sort key, row for row") {
  // torch gives some of CUPTI's overhead events (an activity buffer requested,
  // a function loaded lazily) the GPU time of a kernel they are linked to by
  // a correlation the trace does not hold, and counts it again in the ops
  // around them: in those rows, and only there, the CUDA cells (Self CUDA,
  // Self CUDA %, CUDA total, CUDA time avg) may differ. Every other cell of
  // every row, the rows' order and the footer are torch's.
  struct fixture {
    std::string trace, table, sort;
    int rows;
    std::set<std::string> linked;
  };
  std::vector<fixture> fixtures;
  for (const char* key : {"self_cuda_memory_usage", "cuda_memory_usage", "self_cpu_memory_usage", "cpu_memory_usage"})
    fixtures.push_back({"torch_memory_mlp.json",
                        std::string("torch_memory_mlp.") + key + ".txt",
                        key,
                        -1,
                        {"aten::addmm", "aten::linear", "forward", "Activity Buffer Request"}});
  fixtures.push_back({"torch_memory_step.json",
                      "torch_memory_step.txt",
                      "self_cuda_memory_usage",
                      12,
                      {"aten::addmm", "aten::gelu", "aten::pow", "aten::mean"}});
  for (const fixture& f : fixtures) {
    CAPTURE(f.table);
    const cuprof::loaded_trace lt = cuprof::read_trace_file(kineto_trace(f.trace));
    const auto ours = table_cells(cuprof::key_averages(lt.t).table(f.sort, f.rows));
    const auto torch = table_cells(slurp(kineto_trace(f.table)));
    REQUIRE(ours.size() == torch.size());
    REQUIRE(torch.size() > 10);
    const std::vector<std::string>& header = torch[1];
    REQUIRE(header.size() == 15);
    CHECK(header[6] == "Self CUDA");
    CHECK(header[9] == "CUDA time avg");
    std::size_t differing = 0;
    for (std::size_t i = 0; i < torch.size(); ++i) {
      CAPTURE(i);
      REQUIRE(ours[i].size() == torch[i].size());
      if (ours[i] == torch[i]) continue;
      ++differing;
      REQUIRE(!torch[i].empty());
      CAPTURE(torch[i][0]);
      CHECK(f.linked.count(torch[i][0]) == 1);
      for (std::size_t c = 0; c < torch[i].size(); ++c)
        if (c < 6 || c > 9) CHECK(ours[i][c] == torch[i][c]);
    }
    CHECK(differing <= f.linked.size());
  }
  // The rows torch's way of counting makes, each checked: the backward scope
  // around loss.backward() counts what the autograd thread allocated meanwhile
  // (torch: -30.00 MB, self -5.97 MB), frees outside every op are a [memory]
  // row, an op recorded twice by the dispatcher counts once (aten::mean: 2
  // calls in torch_memory_step, not 4).
  const auto mlp = table_cells(
      cuprof::key_averages(cuprof::read_trace_file(kineto_trace("torch_memory_mlp.json")).t).table("self_cuda_memory_usage", -1));
  bool backward_seen = false, memory_seen = false;
  for (const auto& row : mlp) {
    if (row.size() != 15) continue;
    if (row[0] == "backward" && row[2] != "0.000us") {
      backward_seen = true;
      CHECK(row[12] == "-30.00 MB");
      CHECK(row[13] == "-5.97 MB");
      CHECK(row[14] == "3");
    }
    if (row[0] == "[memory]") {
      memory_seen = true;
      CHECK(row[13] == "-6.00 MB");
      CHECK(row[14] == "3");
    }
  }
  CHECK(backward_seen);
  CHECK(memory_seen);
  const auto step = table_cells(cuprof::key_averages(cuprof::read_trace_file(kineto_trace("torch_memory_step.json")).t)
                                    .table("self_cuda_memory_usage", 12));
  bool mean_seen = false;
  for (const auto& row : step)
    if (!row.empty() && row[0] == "aten::mean") {
      mean_seen = true;
      CHECK(row.back() == "2");
    }
  CHECK(mean_seen);
}

TEST_CASE("reader: damaged [memory] events are skipped or their figures clamped; the trace is read") {
  const std::string doc = R"({"profile_memory": 0, "baseTimeNanoseconds": 1000000000000, "traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "outer", "pid": 1, "tid": 1, "ts": 0, "dur": 100, "args": {"External id": 1}},
    {"ph": "X", "cat": "user_annotation", "name": "other", "pid": 1, "tid": 2, "ts": 0, "dur": 100, "args": {"External id": 2}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaMallocManaged", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "args": {"correlation": 7}},
    {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 2, "ts": 12,
     "args": {"Bytes": 512, "Addr": 4096, "Device Id": 1, "Device Type": 1, "Total Allocated": 512, "Total Reserved": 2097152,
              "Memory Kind": "Managed", "Pool": 1, "Virtual": true, "correlation": 7}},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 20, "args": {"Bytes": "lots", "Device Id": 0, "Device Type": 1}},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 21, "args": {"Bytes": 1.5, "Device Id": 0, "Device Type": 1}},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 22, "args": {"Bytes": 1e30, "Device Id": 0, "Device Type": 1}},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 23, "args": {"Bytes": 99999999999999999999999}},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 24, "args": {"Bytes": 4611686018427387905}},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 25},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 26, "args": {"Addr": 1}},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": "27", "args": {"Bytes": 1}},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 28, "args": {"Bytes": 1, "Device Id": -1, "Device Type": 1}},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 29, "args": {"Bytes": 1, "Device Id": "0", "Device Type": 1}},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1e20, "args": {"Bytes": 1}},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": -2000000000, "args": {"Bytes": 1}},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 30,
     "args": {"Bytes": -4611686018427387904, "Addr": -5, "Device Id": 0, "Device Type": 0, "Total Allocated": -3,
              "Total Reserved": 9223372036854775807, "Memory Kind": "Exotic"}},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 40, "args": {"Bytes": 64, "External id": 2}},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 41, "args": {"Bytes": 64, "External id": 99}},
    {"ph": "C", "name": "GPU 0 Memory", "pid": 0, "ts": 12, "args": {"Allocated": 512, "Reserved": 2097152}},
    {"ph": "i", "name": "[memory] ", "pid": 1, "tid": 1, "ts": 31, "args": {"Bytes": 1}},
    {"ph": "i", "cat": "cpu_instant_event", "name": "Record Window End", "pid": 1, "tid": 1, "ts": 99}
  ]})";
  const cuprof::loaded_trace lt = cuprof::parse_trace(doc, "damaged");
  const cuprof::trace& t = lt.t;
  // Events say memory was recorded, whatever the key says.
  CHECK(t.meta.memory_recorded);
  REQUIRE(t.memory.size() == 4);
  const cuprof::memory_event& managed = t.memory[0];
  CHECK(managed.ts_ns == 1000000000000ull + 12000);
  CHECK(managed.bytes == 512);
  CHECK(managed.address == 4096);
  CHECK(managed.device == 1);
  CHECK(managed.total_allocated == 512);
  CHECK(managed.total_reserved == 2097152);
  CHECK(managed.memory_kind == cuprof::memory_kind_managed);
  CHECK(managed.flags == (cuprof::memory_from_pool | cuprof::memory_virtual));
  CHECK(managed.correlation == 7);
  // Charged by its call: the call's thread and scope, not the thread the event names.
  CHECK(managed.tid == 1);
  REQUIRE(managed.span != cuprof::no_index);
  CHECK(t.names.str(t.spans[managed.span].name) == "outer");
  // A free of 2^62 bytes, the most read; a negative address and total are unknown, a huge total clamped;
  // Device Type 0 is host memory whatever its Device Id.
  const cuprof::memory_event& odd = t.memory[1];
  CHECK(odd.bytes == -(std::int64_t(1) << 62));
  CHECK(odd.address == 0);
  CHECK(odd.device == -1);
  CHECK(odd.total_allocated == 0);
  CHECK(odd.total_reserved == std::uint64_t(1) << 62);
  CHECK(odd.memory_kind == 0);
  CHECK(t.names.str(t.spans[odd.span].name) == "outer");
  // The scope the file names (cuprof writes its External id), else the one open on the thread at the time.
  CHECK(t.names.str(t.spans[t.memory[2].span].name) == "other");
  CHECK(t.names.str(t.spans[t.memory[3].span].name) == "outer");
  // The insights read it without overflow.
  (void)cuprof::format_insights(cuprof::analyze(t));

  const auto recorded = [](const std::string& key) {
    const std::string events =
        R"("traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 1}]})";
    return cuprof::parse_trace("{" + key + events, "key").t.meta.memory_recorded;
  };
  CHECK(recorded(R"("profile_memory": 1, )"));
  CHECK(recorded(R"("profile_memory": true, )"));
  CHECK_FALSE(recorded(R"("profile_memory": 0, )"));
  CHECK_FALSE(recorded(R"("profile_memory": false, )"));
  CHECK_FALSE(recorded(""));
}

TEST_CASE("reader: scope arguments of a cuprof trace, input shapes of a torch trace; group_by::args") {
  const cuprof::loaded_trace lt = cuprof::parse_trace(sized_trace, "sized");
  const cuprof::trace& t = lt.t;
  REQUIRE(t.spans.size() == 4);
  CHECK(cuprof::format_span_args(t, t.spans[0]) == "M=4096 N=4096 K=4096");
  CHECK(cuprof::format_span_args(t, t.spans[3]) == "scale=0.5 tag=x");
  REQUIRE(t.meta.devices.size() == 1);
  CHECK(t.meta.devices[0].clock_rate_khz == 1980000);
  CHECK(t.meta.devices[0].memory_clock_rate_khz == 2619000);
  CHECK(t.meta.devices[0].memory_bus_width == 5120);

  // By name (the default): one gemm row, no Args column.
  const cuprof::event_averages by_name = cuprof::key_averages(t);
  REQUIRE(by_name.find("gemm", cuprof::row_kind::cpu_scope));
  CHECK(by_name.find("gemm", cuprof::row_kind::cpu_scope)->count == 3);
  CHECK(by_name.table("", -1).find("Args") == std::string::npos);
  // By args: a row per shape, CPU and GPU extent alike.
  const cuprof::event_averages by_args = cuprof::key_averages(t, cuprof::group_by::args);
  std::map<std::string, std::uint64_t> gemm_rows, gpu_rows;
  for (const auto& r : by_args.rows()) {
    if (r.key != "gemm") continue;
    (r.kind == cuprof::row_kind::cpu_scope ? gemm_rows : gpu_rows)[r.args] = r.count;
  }
  CHECK(gemm_rows == std::map<std::string, std::uint64_t>{{"M=1024 N=1024 K=1024", 1}, {"M=4096 N=4096 K=4096", 2}});
  CHECK(gpu_rows == gemm_rows);
  const std::string table = by_args.table("", -1);
  REQUIRE(table.find(" Args  \n") != std::string::npos);  // the last column, after the calls
  CHECK(table.find("# of Calls") < table.find(" Args  \n"));
  CHECK(table.find("M=4096 N=4096 K=4096") != std::string::npos);

  // Torch: "Input Dims" is the argument; its bookkeeping args (Ev Idx, ...) are not.
  const cuprof::loaded_trace torch = cuprof::parse_trace(torch_shapes_trace, "torch");
  const cuprof::event_averages shapes = cuprof::key_averages(torch.t, cuprof::group_by::args);
  std::map<std::string, std::uint64_t> mm;
  for (const auto& r : shapes.rows())
    if (r.key == "aten::mm") mm[r.args] = r.count;
  CHECK(mm == std::map<std::string, std::uint64_t>{{"[[128, 128], [128, 128]]", 1}, {"[[64, 64], [64, 64]]", 2}});
  REQUIRE(shapes.find("step", cuprof::row_kind::cpu_scope));
  CHECK(shapes.find("step", cuprof::row_kind::cpu_scope)->args.empty());
}

// ---- deeply nested scopes with equal extents -------------------------------------

TEST_CASE("reader and attribution: 50,000 nested scopes with equal extents, annotations ordered by depth") {
  constexpr std::uint32_t n = 50000;
  // The reader: every scope covers the same interval, each with its GPU annotation.
  std::string json = R"({"traceEvents": [)";
  for (std::uint32_t i = 1; i <= n; ++i)
    json +=
        R"({"ph": "X", "cat": "user_annotation", "name": "s", "pid": 1, "tid": 1, "ts": 0, "dur": 100, "args": {"External id": )" +
        std::to_string(i) + "}},\n";
  for (std::uint32_t i = 1; i <= n; ++i)
    json +=
        R"({"ph": "X", "cat": "gpu_user_annotation", "name": "s", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {"External id": )" +
        std::to_string(i) + "}},\n";
  json += R"({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.001, "dur": 4.998,
              "args": {"External id": )" +
          std::to_string(n) + R"(, "device": 0, "stream": 7, "correlation": 1}}]})";
  const cuprof::loaded_trace lt = cuprof::parse_trace(json, "nested.json");
  REQUIRE(lt.t.spans.size() == n);
  REQUIRE(lt.t.gpu_annotations.size() == n);
  for (std::uint32_t i = 0; i < n; ++i) {
    if (lt.t.gpu_annotations[i].span != i) FAIL("annotation " << i << " is of span " << lt.t.gpu_annotations[i].span);
  }
  const cuprof::event_averages avg = cuprof::key_averages(lt.t);
  const cuprof::event_average* s = nullptr;
  for (const cuprof::event_average& r : avg.rows())
    if (r.key == "s" && r.kind == cuprof::row_kind::cpu_scope) s = &r;
  REQUIRE(s != nullptr);
  // Each the only child of one of its name: counted once, as torch counts an op recorded twice.
  CHECK(s->count == 1);
  CHECK(s->cpu_total_ns == 100000);

  // Attribution, as stop() runs it in the profiled program: one launch from the innermost scope.
  cuprof::trace t;
  const cuprof::name_id name = t.names.intern("s");
  for (std::uint32_t i = 0; i < n; ++i) {
    cuprof::cpu_span sp;
    sp.start_ns = 1000;
    sp.end_ns = 2000;
    sp.name = name;
    sp.tid = 1;
    t.spans.push_back(sp);
  }
  cuprof::link_spans(t);
  cuprof::api_call call;
  call.start_ns = 1100;
  call.end_ns = 1200;
  call.tid = 1;
  call.correlation = 5;
  t.call_kinds.push_back({t.names.intern("cudaLaunchKernel"), 0, cuprof::api_domain::runtime, true});
  call.kind = 0;
  t.api_calls.push_back(call);
  cuprof::gpu_activity g;
  g.start_ns = 1300;
  g.end_ns = 1400;
  g.name = t.names.intern("k");
  g.correlation = 5;
  t.gpu_lanes.push_back({0, 0, 7});
  g.lane = 0;
  t.gpu.push_back(g);
  cuprof::attribute(t);
  REQUIRE(t.api_calls[0].parent == n - 1);
  REQUIRE(t.gpu_annotations.size() == n);
  for (std::uint32_t i = 0; i < n; ++i) {
    if (t.gpu_annotations[i].span != i) FAIL("derived annotation " << i << " is of span " << t.gpu_annotations[i].span);
  }
}

// ---- traces from pipes and FIFOs --------------------------------------------------

TEST_CASE("reader: a FIFO or /dev/fd/N (process substitution) is read to its end; devices are refused") {
  temp_dir dir;
  const std::string trace_file = gpu_trace("matmul_add_64.json");
  const std::string bytes = slurp(trace_file);
  const cli_run expected = cli({"table", trace_file});
  REQUIRE(expected.rc == 0);

  const std::string fifo = dir.file("trace.fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const bool gzip : {false, true}) {
    CAPTURE(gzip);
    cli_run r;
    {
      pipe_writer writer(fifo, gzip ? gzip_of(bytes) : bytes);
      r = cli({"table", fifo});
    }
    CHECK(r.rc == 0);
    CHECK(r.err.empty());
    CHECK(r.out == expected.out);
  }
  // `cuprof table <(zcat trace.json.gz)`: the shell passes /dev/fd/N, a pipe.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  cli_run piped;
  {
    pipe_writer writer(fds[1], bytes);
    piped = cli({"table", "/dev/fd/" + std::to_string(fds[0])});
    ::close(fds[0]);
  }
  CHECK(piped.rc == 0);
  CHECK(piped.out == expected.out);
  // Devices and directories are no traces.
  const cli_run device = cli({"table", "/dev/null"});
  CHECK(device.rc == 1);
  CHECK(device.err == "cuprof: cannot read '/dev/null': not a regular file or a pipe\n");
  CHECK(cli({"stacks", dir.path.string()}).err.find("it is a directory") !=
        std::string::npos);  // table reads a directory's traces
}

TEST_CASE("reader: a pipe is held in memory once, at its size: no buffer doubled while it is read") {
  // A trace of about 6 MiB through a pipe; what malloc holds is sampled as it is read.
  std::string text = R"({"traceEvents":[)";
  for (int i = 0; i < 60000; ++i)
    text += std::string(i ? "," : "") + R"({"ph":"X","cat":"user_annotation","name":"scope","pid":1,"tid":1,"ts":)" +
            std::to_string(i) + R"(,"dur":1})";
  text += "]}";
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::FILE* f = ::fdopen(fds[0], "rb");
  REQUIRE(f != nullptr);
  std::size_t before = 0, most = 0;
  {
    pipe_writer writer(fds[1], text);
    before = ::mallinfo2().uordblks;
    cuprof::read_progress sample;
    sample.context = &most;
    sample.report = [](void* most_held, cuprof::read_stage stage, std::uint64_t, std::uint64_t) {
      std::size_t& m = *static_cast<std::size_t*>(most_held);
      if (stage == cuprof::read_stage::reading) m = std::max(m, std::size_t(::mallinfo2().uordblks));
    };
    const cuprof::loaded_trace lt = cuprof::detail::read_stream(f, "-", 0, sample);
    CHECK(lt.t.spans.size() == 60000);
    std::fclose(f);
  }
  // Held while reading: the one buffer of the text's size, not twice it (under sanitizers malloc's figures are theirs).
  CAPTURE(text.size());
  CHECK(most <= before + text.size() + (1u << 20));
}

TEST_CASE("reader: what a pipe gives is read up to a cap, then refused") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::FILE* f = ::fdopen(fds[0], "rb");
  REQUIRE(f != nullptr);
  {
    pipe_writer writer(fds[1], std::string(1 << 20, ' '));
    try {
      (void)cuprof::detail::read_stream(f, "big", 0, {}, 4096);
      FAIL("read more than the cap");
    } catch (const cuprof::error& e) {
      CHECK(std::string(e.what()) == "cuprof: 'big' holds more than 4096 bytes, more than cuprof reads from a pipe");
    }
    std::fclose(f);
  }
}

namespace {

// The GPU's one series, its samples' values at sample `i` as the default metrics' order gives them.
std::vector<double> metric_values(const cuprof::detail::gpu_metric_series& s, std::size_t i) {
  std::vector<double> v;
  for (std::size_t m = 0; m < s.metrics.size(); ++m) v.push_back(s.value(i, m));
  return v;
}

// tests/data/metrics/gpu_metrics.json, its events edited by `edit`.
std::string edited_metrics_trace(const std::function<void(json&)>& edit) {
  json doc = json::parse(slurp(metrics_trace("gpu_metrics.json")));
  edit(doc);
  return doc.dump();
}

json metric_event(const json& name, const json& pid, const json& ts, const json& args) {
  return {{"ph", "C"}, {"cat", "gpu_metric"}, {"name", name}, {"pid", pid}, {"tid", 0}, {"ts", ts}, {"args", args}};
}

}  // namespace

TEST_CASE("reader: GPU metric samples become one series per GPU, with the cuprof block's metrics and interval") {
  const std::uint64_t base = 1700000000000000000ull;
  const cuprof::loaded_trace lt = cuprof::read_trace_file(metrics_trace("gpu_metrics.json"));
  CHECK(lt.format == cuprof::trace_format::cuprof);
  CHECK(lt.used == 5 + 32 * 4);  // the kernels and every counter event
  REQUIRE(lt.t.gpu_metrics.size() == 1);
  const cuprof::detail::gpu_metric_series& s = lt.t.gpu_metrics[0];
  CHECK(s.device == 0);
  CHECK(s.interval_ns == 20000);
  CHECK(s.dropped == 2);
  const std::vector<cuprof::detail::gpu_metric> defaults = cuprof::detail::labelled_gpu_metrics();  // recorded with the four
  REQUIRE(s.metrics.size() == defaults.size());
  for (std::size_t m = 0; m < defaults.size(); ++m) {
    CHECK(s.metrics[m].name == defaults[m].name);
    CHECK(s.metrics[m].label == defaults[m].label);
  }
  REQUIRE(s.size() == 32);  // 960 us to 1580 us, every 20 us
  for (std::size_t i = 0; i < s.size(); ++i) {
    CHECK(s.start_ns[i] == base + 960000 + i * 20000);
    CHECK(s.end_ns[i] == s.start_ns[i] + 20000);
  }
  CHECK(metric_values(s, 0) == std::vector<double>{0, 0, 0, 0});
  CHECK(metric_values(s, 2) == std::vector<double>{85, 20, 72, 40});  // 1000 us: the GEMM
  CHECK(metric_values(s, 31) == std::vector<double>{0, 0, 0, 0});     // 1580 us: around the 5 us kernel
  // Each kernel's averages over the samples inside it; the 5 us kernel is shorter than the interval.
  const std::vector<std::pair<std::uint32_t, std::vector<double>>> expected = {
      {10, {85, 20, 72, 40}}, {5, {8, 70, 0, 60}}, {3, {10, 92, 0, 60}}, {4, {5, 3, 0, 10}}, {0, {NAN, NAN, NAN, NAN}}};
  REQUIRE(lt.t.gpu.size() == expected.size());
  for (std::size_t k = 0; k < expected.size(); ++k) {
    CAPTURE(k);
    const cuprof::detail::kernel_metric_averages a = cuprof::detail::average_metrics(s, lt.t.gpu[k].start_ns, lt.t.gpu[k].end_ns);
    CHECK(a.samples == expected[k].first);
    CHECK(a.too_short == (k == 4));
    for (std::size_t m = 0; m < 4; ++m)
      if (k < 4) CHECK(a.values[m] == doctest::Approx(expected[k].second[m]));
      else CHECK(std::isnan(a.values[m]));
  }
  // Read in pieces on several threads: the same series.
  for (const std::size_t piece_bytes : {std::size_t(1), std::size_t(700)}) {
    const std::optional<cuprof::loaded_trace> pieces = read_in_pieces(slurp(metrics_trace("gpu_metrics.json")), piece_bytes);
    REQUIRE(pieces);
    REQUIRE(pieces->t.gpu_metrics.size() == 1);
    const cuprof::detail::gpu_metric_series& p = pieces->t.gpu_metrics[0];
    CHECK(p.start_ns == s.start_ns);
    CHECK(p.end_ns == s.end_ns);
    CHECK(p.values == s.values);
    CHECK(p.interval_ns == s.interval_ns);
    CHECK(p.dropped == s.dropped);
  }
}

TEST_CASE("reader: GPU metric samples without the cuprof block: labels from the counters, the interval from their gaps") {
  const std::string text = edited_metrics_trace([](json& doc) {
    doc.erase("cuprof");
    // The last sample 10 us after the one before: the end of the trace, not the interval.
    doc["traceEvents"].push_back(metric_event("SM throughput %", 0, 1590, {{"value", 1}}));
    // A metric of another tool's: labelled and named by its counter.
    doc["traceEvents"].push_back(metric_event("L2 hit rate", 0, 1000, {{"value", 55.5}}));
  });
  const cuprof::loaded_trace lt = cuprof::parse_trace(text, "t");
  CHECK(lt.format == cuprof::trace_format::chrome);
  REQUIRE(lt.t.gpu_metrics.size() == 1);
  const cuprof::detail::gpu_metric_series& s = lt.t.gpu_metrics[0];
  CHECK(s.interval_ns == 20000);  // the median gap
  CHECK(s.dropped == 0);
  REQUIRE(s.metrics.size() == 5);
  CHECK(s.metrics[0].name == "TriageCompute.sm__throughput.avg.pct_of_peak_sustained_elapsed");  // a default label keeps its name
  CHECK(s.metrics[4].name == "L2 hit rate");
  CHECK(s.metrics[4].label == "L2 hit rate");
  REQUIRE(s.size() == 33);
  CHECK(s.end_ns[31] == s.start_ns[32]);          // 1580 us ends at the next sample, 10 us on
  CHECK(s.end_ns[32] == s.start_ns[32] + 20000);  // the last one an interval after its start
  CHECK(s.value(2, 4) == 55.5);                   // 1000 us
  CHECK(std::isnan(s.value(3, 4)));               // no L2 figure at 1020 us
  CHECK(metric_values(s, 32)[0] == 1);
  CHECK(std::isnan(metric_values(s, 32)[1]));
}

TEST_CASE("reader: GPU metric values no metric can take are left out and counted, a trace of only those is not unsampled") {
  const std::uint64_t base = 1700000000000000000ull;
  std::string text = edited_metrics_trace([](json& doc) {
    json& events = doc["traceEvents"];
    // After the file's samples: 393 % of peak, -50 % occupancy, a string, and a percentage a little over 100.
    events.push_back(metric_event("DRAM throughput %", 0, 1700, {{"value", 393}}));
    events.push_back(metric_event("Achieved occupancy %", 0, 1700, {{"value", -50}}));
    events.push_back(metric_event("SM throughput %", 0, 1700, {{"value", "high"}}));
    events.push_back(metric_event("Tensor pipe active %", 0, 1700, {{"value", 103.5}}));
    doc["cuprof"]["gpu_metrics"]["out_of_range"] = 2;  // what the recording left out
  });
  text.insert(text.rfind(']'),
              R"(,{"ph":"C","cat":"gpu_metric","name":"SM throughput %","pid":0,"tid":0,"ts":1720,"args":{"value":1e400}})");
  const cuprof::loaded_trace lt = cuprof::parse_trace(text, "t");
  REQUIRE(lt.t.gpu_metrics.size() == 1);
  const cuprof::detail::gpu_metric_series& s = lt.t.gpu_metrics[0];
  CHECK(s.out_of_range == 2 + 4);
  REQUIRE(s.size() == 34);
  CHECK(s.start_ns[32] == base + 1700000);
  const std::vector<double> at_1700 = metric_values(s, 32);
  CHECK(std::isnan(at_1700[0]));
  CHECK(std::isnan(at_1700[1]));
  CHECK(at_1700[2] == 103.5);
  CHECK(std::isnan(at_1700[3]));
  // Written again, the count stays: the values left out are not written.
  const cuprof::loaded_trace again = cuprof::parse_trace(cuprof::chrome_trace_json(lt.t), "again");
  REQUIRE(again.t.gpu_metrics.size() == 1);
  CHECK(again.t.gpu_metrics[0].out_of_range == 6);
  // Only broken values: a series of nothing but none, counted; not a trace recorded without sampling.
  const cuprof::loaded_trace broken = cuprof::parse_trace(
      R"({"traceEvents":[{"ph":"C","cat":"gpu_metric","name":"SM throughput %","pid":0,"tid":0,"ts":5,"args":{"value":"inf"}},)"
      R"({"ph":"C","cat":"gpu_metric","name":"DRAM throughput %","pid":0,"tid":0,"ts":5,"args":{"value":5000}}]})",
      "t");
  REQUIRE(broken.t.gpu_metrics.size() == 1);
  CHECK(broken.t.gpu_metrics[0].out_of_range == 2);
}

TEST_CASE("reader: the block's gaps and alignment are read; hostile entries are skipped, a gap list past its cap cut") {
  const std::string text = edited_metrics_trace([](json& doc) {
    json& g = doc["cuprof"]["gpu_metrics"];
    g["alignment"] = json::parse(R"([{"device":0,"shift_ns":-250000,"aligned":true},{"device":0,"shift_ns":7,"aligned":false},
        {"device":-1,"shift_ns":1},{"device":"1","shift_ns":1},{"device":1,"shift_ns":"far"},{"device":2,"shift_ns":1e300},5,null])");
    g["gaps"] = json::parse(R"([{"device":0,"ts":1100,"dur":40,"cause":"overflow"},
        {"device":0,"ts":1200,"dur":20,"cause":"meteor"},{"device":0,"ts":1200,"dur":-20,"cause":"skipped"},
        {"device":0,"ts":1200,"dur":0,"cause":"skipped"},{"device":0,"ts":"1200","dur":20,"cause":"skipped"},
        {"device":70000,"ts":1200,"dur":20,"cause":"skipped"},{"device":0,"ts":1e300,"dur":20,"cause":"skipped"},
        {"device":0,"ts":1200,"dur":20,"cause":7},{"device":0,"ts":1200,"dur":20},[],"gap",
        {"device":0,"ts":1300,"dur":1e300,"cause":"sample_cap"}])");
  });
  const cuprof::loaded_trace lt = cuprof::parse_trace(text, "t");
  REQUIRE(lt.t.gpu_metrics.size() == 1);
  const cuprof::detail::gpu_metric_series& s = lt.t.gpu_metrics[0];
  CHECK(s.shift_ns == -250000);  // the first entry for a GPU
  CHECK(s.aligned);
  REQUIRE(s.gaps.size() >= 1);
  const std::uint64_t base = 1700000000000000000ull;
  CHECK(s.gaps[0].start_ns == base + 1100000);
  CHECK(s.gaps[0].end_ns == base + 1140000);
  CHECK(s.gaps[0].cause == cuprof::detail::metric_gap_cause::overflow);
  for (const cuprof::detail::gpu_metric_gap& gap : s.gaps) CHECK(gap.start_ns != base + 1200000);  // none of the broken ones

  // More gaps than any recording has: the reader keeps max_metric_gaps of them.
  std::string many =
      R"({"traceEvents":[{"ph":"C","cat":"gpu_metric","name":"SM throughput %","pid":0,"tid":0,"ts":5,"args":{"value":1}}],)"
      R"("cuprof":{"gpu_metrics":{"interval_ns":1000,"gaps":[)";
  for (int i = 0; i < 150000; ++i)
    many += std::string(i ? "," : "") + R"({"device":0,"ts":)" + std::to_string(10 + i) + R"(,"dur":1,"cause":"skipped"})";
  many += "]}}}";
  const cuprof::loaded_trace capped = cuprof::parse_trace(many, "many");
  REQUIRE(capped.t.gpu_metrics.size() == 1);
  CHECK(capped.t.gpu_metrics[0].gaps.size() == 100000);
}

TEST_CASE("reader: damaged GPU metric samples and blocks are skipped, never refused; time order is the reader's") {
  const std::uint64_t base = 1700000000000000000ull;
  const cuprof::loaded_trace clean = cuprof::read_trace_file(metrics_trace("gpu_metrics.json"));
  const std::string text = edited_metrics_trace([](json& doc) {
    json& events = doc["traceEvents"];
    std::reverse(events.begin(), events.end());  // out of time order
    for (const json& bad : {
             metric_event("SM throughput %", 0, 1000, {{"value", "NaN"}}),
             metric_event("SM throughput %", 0, 1000, {{"value", nullptr}}),
             metric_event("SM throughput %", 0, 1000, {{"value", true}}),
             metric_event("SM throughput %", 0, 1000, json::object()),
             metric_event("SM throughput %", 0, 1000, json::array()),
             metric_event("SM throughput %", -1, 1000, {{"value", 1}}),
             metric_event("SM throughput %", 70000, 1000, {{"value", 1}}),
             metric_event("SM throughput %", "0", 1000, {{"value", 1}}),
             metric_event("SM throughput %", 1, 1000, {{"value", 1}}),  // a GPU the block does not name
             metric_event("SM throughput %", 0, "1000", {{"value", 1}}),
             metric_event("SM throughput %", 0, 1e20, {{"value", 1}}),
             metric_event("", 0, 1000, {{"value", 1}}),
             metric_event(7, 0, 1000, {{"value", 1}}),
             metric_event("L2 hit rate", 0, 1000, {{"value", 1}}),  // a metric the block does not name
             metric_event("SM throughput %", 0, 1600.5, {{"value", 1}}),
         })
      events.push_back(bad);
    events.push_back({{"ph", "C"}, {"cat", "gpu_metric"}, {"name", "SM throughput %"}, {"pid", 0}, {"ts", 1000}});
    events.push_back({{"ph", "C"}, {"name", "SM throughput %"}, {"pid", 0}, {"ts", 1000}, {"args", {{"value", 1}}}});
    events.push_back({{"ph", "C"}, {"cat", 5}, {"name", "SM throughput %"}, {"pid", 0}, {"ts", 1000}, {"args", {{"value", 1}}}});
  });
  // 1e400 is no double: written by hand, as JSON libraries refuse to.
  std::string with_huge = text;
  with_huge.insert(with_huge.rfind(']'),
                   R"(,{"ph":"C","cat":"gpu_metric","name":"SM throughput %","pid":0,"tid":0,"ts":1000,"args":{"value":1e400}})");
  const cuprof::loaded_trace lt = cuprof::parse_trace(with_huge, "t");
  REQUIRE(lt.t.gpu_metrics.size() == 1);
  const cuprof::detail::gpu_metric_series& s = lt.t.gpu_metrics[0];
  const cuprof::detail::gpu_metric_series& c = clean.t.gpu_metrics[0];
  // One sample more: the one at 1600.5 us (well-formed); the rest as the clean file's.
  REQUIRE(s.size() == c.size() + 1);
  for (std::size_t i = 0; i < c.size(); ++i) {
    CHECK(s.start_ns[i] == c.start_ns[i]);
    CHECK(s.end_ns[i] == c.end_ns[i]);
    CHECK(metric_values(s, i) == metric_values(c, i));
  }
  CHECK(s.start_ns.back() == base + 1600500);
  CHECK(s.end_ns.back() == base + 1620500);

  // A damaged block: what can be read of it is.
  const auto with_block = [&](const json& block) {
    return cuprof::parse_trace(edited_metrics_trace([&](json& doc) { doc["cuprof"]["gpu_metrics"] = block; }), "t");
  };
  const cuprof::loaded_trace huge = with_block(json::parse(R"({"interval_ns": 9000000000000000000, "dropped": "many",
      "devices": ["0", -1, 70000, null, 0, 0],
      "metrics": [{"label": "SM throughput %"}, {"name": "DRAM throughput %"}, 5, {"name": 7}]})"));
  REQUIRE(huge.t.gpu_metrics.size() == 1);
  CHECK(huge.t.gpu_metrics[0].interval_ns == 9000000000000000000ull);
  CHECK(huge.t.gpu_metrics[0].dropped == 0);
  REQUIRE(huge.t.gpu_metrics[0].metrics.size() == 2);
  CHECK(huge.t.gpu_metrics[0].metrics[0].name == "SM throughput %");  // no CUPTI name: its label
  CHECK(huge.t.gpu_metrics[0].metrics[1].label == "DRAM throughput %");
  CHECK(huge.t.gpu_metrics[0].size() == 32);
  CHECK(huge.t.gpu_metrics[0].end_ns.back() == huge.t.gpu_metrics[0].start_ns.back() + 9000000000000000000ull);
  // More metrics than a trace reads: the first max_gpu_metrics; a block that is no object counts as none.
  json many = json::array();
  for (int i = 0; i < 100; ++i) many.push_back({{"name", "m" + std::to_string(i)}, {"label", "m" + std::to_string(i)}});
  const cuprof::loaded_trace capped = with_block({{"metrics", many}});
  CHECK(capped.t.gpu_metrics.empty());  // none of the file's counters is among them
  CHECK(with_block("broken").t.gpu_metrics[0].metrics.size() == 4);
  for (const json& interval : {json(0), json(-5), json("20000"), json(1.5)})
    CHECK(with_block({{"interval_ns", interval}}).t.gpu_metrics[0].interval_ns == 20000);
  // One sample and no interval: it ends where it starts.
  const cuprof::loaded_trace one = cuprof::parse_trace(
      R"({"traceEvents":[{"ph":"C","cat":"gpu_metric","name":"SM throughput %","pid":3,"tid":0,"ts":5,"args":{"value":50}}]})",
      "t");
  REQUIRE(one.t.gpu_metrics.size() == 1);
  CHECK(one.t.gpu_metrics[0].device == 3);
  CHECK(one.t.gpu_metrics[0].interval_ns == 0);
  CHECK(one.t.gpu_metrics[0].start_ns == std::vector<std::uint64_t>{5000});
  CHECK(one.t.gpu_metrics[0].end_ns == std::vector<std::uint64_t>{5000});
}

}  // TEST_SUITE("analysis_reader")

// A run recorded on an H200 with `cuprof run --gpu-metrics` (tests/gpu/metrics_kernels.cu with
// three of its families: 8 bf16 GEMMs of 4096 back to back, a GELU over 256 Mi floats and a copy
// of 1 GiB, 5 times each), its
// counters trimmed to the kernels' time (gpu_check_metrics.py): the samples as CUPTI decoded them,
// the kernels' averages as the GPU machine's runtime wrote them.
TEST_CASE("a recorded H200 run: its samples, each kernel's averages as recorded, table columns and verdicts") {
  const std::string path = metrics_trace("gpu_metrics_h200.json.gz");
  const cuprof::loaded_trace lt = cuprof::read_trace_file(path);
  REQUIRE(lt.t.gpu_metrics.size() == 1);
  const cuprof::detail::gpu_metric_series& s = lt.t.gpu_metrics[0];
  CHECK(s.interval_ns == 100000);
  const std::vector<cuprof::detail::gpu_metric> defaults = cuprof::detail::labelled_gpu_metrics();  // recorded with the four
  REQUIRE(s.metrics.size() == defaults.size());
  for (std::size_t m = 0; m < defaults.size(); ++m) CHECK(s.metrics[m].label == defaults[m].label);
  CHECK(s.size() > 5000);
  for (std::size_t i = 1; i < s.size(); ++i) REQUIRE(s.start_ns[i] >= s.end_ns[i - 1]);  // in order, not overlapping

  // Each kernel's averages, computed again from the samples read back, are those the runtime wrote.
  const json doc = json::parse(gunzip_file(path));
  std::map<std::uint64_t, json> args_by_correlation;
  for (const json& e : doc["traceEvents"])
    if (e.value("cat", "") == "kernel") args_by_correlation[e["args"]["correlation"].get<std::uint64_t>()] = e["args"];
  int compared = 0, memory_bound_copies = 0;
  for (const cuprof::gpu_activity& g : lt.t.gpu) {
    if (g.kind != cuprof::gpu_kind::kernel) continue;
    const json& args = args_by_correlation.at(g.correlation);
    const cuprof::detail::kernel_metric_averages a = cuprof::detail::average_metrics(s, g.start_ns, g.end_ns);
    CAPTURE(lt.t.names.str(g.name));
    CHECK(a.samples == args.value("metric samples", 0u));
    if (!a.samples) continue;
    for (std::size_t m = 0; m < s.metrics.size(); ++m)
      CHECK(std::abs(a.values[m] - args[s.metrics[m].label].get<double>()) <= 0.02);  // written with 2 decimals
    ++compared;
    if (lt.t.names.str(g.name).find("metrics_copy") != std::string::npos && a.values[1] > 80) ++memory_bound_copies;
  }
  CHECK(compared >= 40);
  CHECK(memory_bound_copies >= 2);

  // The table's columns: per kernel name, duration-weighted.
  const cuprof::event_averages avg = cuprof::key_averages(lt.t);
  REQUIRE(avg.metric_labels().size() == 4);
  const cuprof::event_average* copy = nullptr;
  const cuprof::event_average* gelu = nullptr;
  for (const cuprof::event_average& r : avg.rows()) {
    if (r.key.find("metrics_copy") != std::string::npos && !r.metrics.empty()) copy = &r;
    if (r.key.find("metrics_gelu") != std::string::npos && !r.metrics.empty()) gelu = &r;
  }
  REQUIRE(copy);
  REQUIRE(gelu);
  CHECK(copy->metrics[1] > 80);  // DRAM: Nsight Compute measured 82.6 % on the same GPU
  CHECK(copy->metrics[0] < 10);  // SM: 6.0 %
  CHECK(gelu->metrics[1] > 55);  // DRAM 60.2 %
  cuprof::table_options o;
  o.metrics = true;
  const std::string table = avg.table(o);
  CHECK(table.find("DRAM throughput %") != std::string::npos);

  // Written again, a counter event only where a value moved by more than half a point (the file has
  // one per sample and metric): far fewer, and read back every kernel's averages within that step.
  const std::string again_text = cuprof::chrome_trace_json(lt.t);
  const json again = json::parse(again_text);
  std::size_t counters = 0, counters_before = 0;
  for (const json& e : again["traceEvents"]) counters += e.value("cat", "") == "gpu_metric";
  for (const json& e : doc["traceEvents"]) counters_before += e.value("cat", "") == "gpu_metric";
  CHECK(counters * 10 < counters_before);
  const cuprof::loaded_trace back = cuprof::parse_trace(again_text, "again");
  REQUIRE(back.t.gpu_metrics.size() == 1);
  std::size_t kernels_compared = 0;
  for (const cuprof::gpu_activity& g : lt.t.gpu) {
    if (g.kind != cuprof::gpu_kind::kernel || g.end_ns - g.start_ns < 4 * s.interval_ns) continue;
    const auto before_avg = cuprof::detail::average_metrics(s, g.start_ns, g.end_ns);
    const auto after_avg = cuprof::detail::average_metrics(back.t.gpu_metrics[0], g.start_ns, g.end_ns);
    for (std::size_t m = 0; m < before_avg.values.size(); ++m)
      if (before_avg.values[m] == before_avg.values[m]) {
        CHECK(std::fabs(after_avg.values[m] - before_avg.values[m]) <= 0.5 + 1e-9);
        ++kernels_compared;
      }
  }
  CHECK(kernels_compared > 20);

  // The verdicts rest on the counters: the copy memory-bound, the GEMM tensor-bound.
  const cuprof::insights in = cuprof::analyze(lt.t);
  bool copy_memory = false, gemm_tensor = false;
  for (const cuprof::finding& f : in.findings) {
    copy_memory |= f.kind == "memory-bound kernel" && f.cause.find("metrics_copy") != std::string::npos;
    gemm_tensor |= f.kind == "tensor-bound kernel" && f.cause.find("nvjet") != std::string::npos;
  }
  CHECK(copy_memory);
  CHECK(gemm_tensor);
}
