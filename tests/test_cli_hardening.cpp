// The `cuprof` command and the analysis headers against hostile or unusual
// input: a CI gate given a trace without the data it compares, spreadsheet
// formulas in CSV, bidirectional-text controls and escape sequences in names
// and paths, deeply nested scopes with equal extents, traces read from pipes,
// exit statuses of `cuprof run`, and one "cuprof: " prefix a line.
#include <cuprof/cuprof.hpp>
#include <cuprof/analysis.hpp>
#include <cuprof/output/file_sink.hpp>

#include "../tools/cli/cli.hpp"
#include "stderr_capture.hpp"
#include "trace_reader.hpp"  // the reader's internals (src/analysis)

#include <doctest/doctest.h>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;

namespace {

std::string source_dir() {
#ifdef CUPROF_TEST_SOURCE_DIR
  return CUPROF_TEST_SOURCE_DIR;
#else
  return ".";
#endif
}

std::string fixture(const std::string& name) { return source_dir() + "/tests/fixtures/gpu/" + name; }

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}

struct temp_dir {
  fs::path path;
  temp_dir() {
    path = fs::temp_directory_path() / ("cuprof_test_cli_hardening_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

struct cli_run {
  int rc = -1;
  std::string out, err;
};

cli_run cli(std::vector<std::string> args) {
  args.insert(args.begin(), "cuprof");
  cli_run r;
  r.rc = cuprof::cli::run(args, r.out, r.err);
  return r;
}

bool has_control_byte(const std::string& s, bool newline_allowed) {
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if ((u < 0x20 && !(newline_allowed && c == '\n')) || u == 0x7F) return true;
  }
  return false;
}

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

std::string gzip_of(const std::string& bytes) {
  uLongf size = compressBound(uLong(bytes.size())) + 32;
  std::string out(size, '\0');
  z_stream z{};
  REQUIRE(deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = uInt(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

const char* const cpu_only_trace =
    R"({"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "work", "ts": 1.0, "dur": 5, "pid": 1, "tid": 1}]})";

}  // namespace

// ---- 1. the diff gate needs what it compares on both sides --------------------------

TEST_CASE("diff --fail-above: a side without GPU time, or whose CUDA tracing was off, cannot be compared (exit 2)") {
  temp_dir dir;
  const std::string gpu = fixture("matmul_add_64.json");
  write_file(dir.file("cpu.json"), cpu_only_trace);
  write_file(dir.file("empty.json"), R"({"traceEvents": []})");
  // A cuprof trace whose metadata says CUDA tracing was off.
  std::string off = slurp(gpu);
  const std::string on = "\"cuda_status\": \"on\"";
  REQUIRE(off.find(on) != std::string::npos);
  off.replace(off.find(on), on.size(), "\"cuda_status\": \"no CUDA driver (libcuda.so.1 not found)\"");
  write_file(dir.file("off.json"), off);

  for (const auto& [a, b, side] : {std::tuple{gpu, dir.file("cpu.json"), "B"}, std::tuple{dir.file("cpu.json"), gpu, "A"},
                                   std::tuple{gpu, dir.file("empty.json"), "B"}, std::tuple{gpu, dir.file("off.json"), "B"},
                                   std::tuple{dir.file("off.json"), gpu, "A"}}) {
    CAPTURE(a);
    CAPTURE(b);
    for (const char* format : {"text", "json", "csv"}) {
      CAPTURE(format);
      const cli_run r = cli({"diff", a, b, "--fail-above", "5", "--format", format});
      CHECK(r.rc == 2);
      CHECK(r.out.empty());
      CHECK(r.err.rfind(std::string("cuprof: --fail-above cannot compare GPU time: ") + side + " ", 0) == 0);
      CHECK(r.out.find("passed") == std::string::npos);
    }
  }
  const cli_run off_said = cli({"diff", gpu, dir.file("off.json"), "--fail-above", "5"});
  CHECK(off_said.err.find("CUDA tracing was off (no CUDA driver (libcuda.so.1 not found))") != std::string::npos);
  CHECK(cli({"diff", gpu, dir.file("empty.json"), "--fail-above", "5"}).err.find("B has no GPU time") != std::string::npos);

  // The CPU metric: both sides need CPU time, and CUDA tracing alike on both (synchronize
  // calls leave CPU time only where CUDA calls were recorded).
  CHECK(cli({"diff", gpu, dir.file("empty.json"), "--fail-above", "5", "--metric", "cpu"}).rc == 2);
  const cli_run mixed = cli({"diff", gpu, dir.file("off.json"), "--fail-above", "5", "--metric", "cpu"});
  CHECK(mixed.rc == 2);
  CHECK(mixed.err.rfind("cuprof: --fail-above cannot compare CPU time: ", 0) == 0);
  CHECK(cli({"diff", dir.file("cpu.json"), dir.file("cpu.json"), "--fail-above", "5", "--metric", "cpu"}).rc == 0);
  CHECK(cli({"diff", dir.file("off.json"), dir.file("off.json"), "--fail-above", "5", "--metric", "cpu"}).rc == 0);
  // Without the gate, such traces still diff; with GPU time on both sides the gate runs as before.
  CHECK(cli({"diff", gpu, dir.file("cpu.json")}).rc == 0);
  CHECK(cli({"diff", gpu, fixture("matmul_add_4096.json"), "--fail-above", "5"}).rc == 3);
  CHECK(cli({"diff", "--help"}).out.find("exit 2 when either trace lacks") != std::string::npos);
}

// ---- 2. CSV cells that a spreadsheet would run as formulas --------------------------

TEST_CASE("csv: names starting with = + - @ tab or CR are written as text, quoted, after a single quote") {
  using cuprof::cli::csv_field;
  using cuprof::cli::str;
  CHECK(csv_field(str("=HYPERLINK(\"http://x\",\"y\")")) == "\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\"");
  CHECK(csv_field(str("+1+2")) == "\"'+1+2\"");
  CHECK(csv_field(str("-2+3")) == "\"'-2+3\"");
  CHECK(csv_field(str("@SUM(A1)")) == "\"'@SUM(A1)\"");
  CHECK(csv_field(str("\t=1")) == "\"'\\x09=1\"");
  CHECK(csv_field(str("\r=1")) == "\"'\\x0d=1\"");
  CHECK(csv_field(str("a=b")) == "a=b");  // only a leading character starts a formula
  CHECK(csv_field(str("aten::mm")) == "aten::mm");
  CHECK(csv_field(cuprof::cli::real(-1.5)) == "-1.500");  // numbers stay numbers

  temp_dir dir;
  write_file(dir.file("formula.json"), R"json({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "=cmd|' /C calc'!A0", "ts": 1, "dur": 5, "pid": 1, "tid": 1},
    {"ph": "X", "cat": "user_annotation", "name": "@SUM(1,2)", "ts": 10, "dur": 5, "pid": 1, "tid": 1}]})json");
  const cli_run r = cli({"table", dir.file("formula.json"), "--format", "csv"});
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("\n\"'=cmd|' /C calc'!A0\",cpu_scope,1,") != std::string::npos);
  CHECK(r.out.find("\n\"'@SUM(1,2)\",cpu_scope,1,") != std::string::npos);
  CHECK(r.out.find("\n=") == std::string::npos);
  CHECK(r.out.find("\n@") == std::string::npos);
}

// ---- 3. deeply nested scopes with equal extents -------------------------------------

TEST_CASE("reader and attribution: 50,000 nested scopes with equal extents, annotations ordered by depth") {
  constexpr std::uint32_t n = 50000;
  // The reader: every scope covers the same interval, each with its GPU annotation.
  std::string json = R"({"traceEvents": [)";
  for (std::uint32_t i = 1; i <= n; ++i)
    json += R"({"ph": "X", "cat": "user_annotation", "name": "s", "pid": 1, "tid": 1, "ts": 0, "dur": 100, "args": {"External id": )" +
            std::to_string(i) + "}},\n";
  for (std::uint32_t i = 1; i <= n; ++i)
    json += R"({"ph": "X", "cat": "gpu_user_annotation", "name": "s", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {"External id": )" +
            std::to_string(i) + "}},\n";
  json += R"({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.001, "dur": 4.998,
              "args": {"External id": )" + std::to_string(n) + R"(, "device": 0, "stream": 7, "correlation": 1}}]})";
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
  CHECK(s->count == n);

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

// ---- 4. bidirectional-text controls --------------------------------------------------

TEST_CASE("terminal_safe: bidirectional overrides, isolates and marks are escaped like controls") {
  using cuprof::detail::terminal_safe;
  CHECK(terminal_safe("evil\xe2\x80\xae" "txt.exe") == "evil\\xe2\\x80\\xaetxt.exe");  // U+202E RIGHT-TO-LEFT OVERRIDE
  for (const char* bidi : {"\xe2\x80\xaa", "\xe2\x80\xab", "\xe2\x80\xac", "\xe2\x80\xad", "\xe2\x80\xae",  // U+202A..E
                           "\xe2\x81\xa6", "\xe2\x81\xa7", "\xe2\x81\xa8", "\xe2\x81\xa9",                  // U+2066..9
                           "\xe2\x80\x8e", "\xe2\x80\x8f",                                                    // U+200E, U+200F
                           "\xd8\x9c"}) {                                                                     // U+061C
    CAPTURE(bidi);
    const std::string safe = terminal_safe(std::string("a") + bidi + "b");
    CHECK(safe.find(bidi) == std::string::npos);
    CHECK(safe.rfind("a\\x", 0) == 0);
    CHECK(safe.back() == 'b');
  }
  // Neighbours that are ordinary text stay as they are.
  for (const char* text : {"\xe2\x80\x90", "\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\xa5", "\xe2\x81\xaa", "\xe2\x82\xac",
                           "\xd8\x9b", "\xd8\x9d", "\xc3\xa9"})
    CHECK(terminal_safe(text) == text);
  CHECK(terminal_safe("cut\xe2\x80") == "cut\xe2\x80");  // a truncated sequence is no override

  temp_dir dir;
  write_file(dir.file("bidi.json"), R"({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "step\u202e1pets", "ts": 1, "dur": 5, "pid": 1, "tid": 1}]})");
  for (const char* cmd : {"table", "insights"}) {
    const cli_run r = cli({cmd, dir.file("bidi.json")});
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("\xe2\x80\xae") == std::string::npos);
  }
  CHECK(cli({"table", dir.file("bidi.json")}).out.find("step\\xe2\\x80\\xae1pets") != std::string::npos);
}

// ---- 5. paths in messages ------------------------------------------------------------

TEST_CASE("messages: paths with escape sequences or line breaks are printed terminal-safe") {
  temp_dir dir;
  const std::string hostile = "t\x1b]0;owned\x07\n\x1b[2J";
  // The file sink's errors name the path.
  try {
    cuprof::detail::atomic_file file(dir.file("no/such/dir/" + hostile + ".json"));
    FAIL("created a file in a directory that does not exist");
  } catch (const cuprof::error& e) {
    const std::string what = e.what();
    CHECK(what.find("cannot create '") != std::string::npos);
    CHECK_FALSE(has_control_byte(what, false));
    CHECK(what.find("t\\x1b]0;owned\\x07\\x0a\\x1b[2J.json") != std::string::npos);
  }
  // "trace written to PATH".
  {
    cuprof::trace t;
    const std::string path = dir.file(hostile + ".json");
    cuprof_test::stderr_capture err;
    cuprof::export_chrome_trace(t, path);
    const std::string said = err.finish();
    CHECK(fs::exists(path));
    CHECK(said.find("trace written to ") != std::string::npos);
    CHECK_FALSE(has_control_byte(said.substr(0, said.size() - 1), false));  // one line
    CHECK(said.back() == '\n');
  }
  // The command's own lines naming a file, on stderr and stdout.
  write_file(dir.file(hostile + "empty.json"), R"({"traceEvents": []})");
  const cli_run table = cli({"table", dir.file(hostile + "empty.json")});
  CHECK(table.rc == 0);
  CHECK(table.err.find("no scopes, CUDA calls or GPU work in the trace") != std::string::npos);
  CHECK_FALSE(has_control_byte(table.err, true));
  CHECK(std::count(table.err.begin(), table.err.end(), '\n') == 1);
  write_file(dir.file(hostile + "cpu.json"), cpu_only_trace);
  for (const std::vector<std::string>& args : {std::vector<std::string>{"insights", dir.file(hostile + "cpu.json")},
                                               std::vector<std::string>{"diff", dir.file(hostile + "cpu.json"),
                                                                        dir.file(hostile + "cpu.json")}}) {
    const cli_run r = cli(args);
    CHECK(r.rc == 0);
    CHECK(r.out.find("t\\x1b]0;owned\\x07\\x0a\\x1b[2Jcpu.json") != std::string::npos);
    CHECK_FALSE(has_control_byte(r.out, true));
  }
  const cli_run missing = cli({"table", dir.file(hostile + "missing.json")});
  CHECK(missing.rc == 1);
  CHECK_FALSE(has_control_byte(missing.err, true));
}

// ---- 6. traces from pipes and FIFOs --------------------------------------------------

TEST_CASE("reader: a FIFO or /dev/fd/N (process substitution) is read to its end; devices are refused") {
  temp_dir dir;
  const std::string trace_file = fixture("matmul_add_64.json");
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
  CHECK(cli({"table", dir.path.string()}).err.find("it is a directory") != std::string::npos);
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

// ---- 7. one prefix a line --------------------------------------------------------------

TEST_CASE("messages: an exception's message printed in a log line or by the command has one \"cuprof: \" prefix") {
  CHECK(cuprof::detail::message_of(cuprof::error("cannot create 'x'")) == "cannot create 'x'");
  CHECK(cuprof::detail::message_of(std::runtime_error("plain")) == "plain");
  CHECK(cuprof::detail::message_of(std::runtime_error("cuprof: cuprof: twice")) == "twice");
  const cli_run r = cli({"table", "/no/such/trace.json"});
  CHECK(r.err == "cuprof: cannot read '/no/such/trace.json': No such file or directory\n");
}

// ---- 8. cuprof run's exit status when the program cannot run --------------------------

TEST_CASE("cli: run exits 126 for a program found but not executable (a directory), 127 for none") {
  temp_dir dir;
  write_file(dir.file("script.sh"), "#!/bin/sh\nexit 0\n");  // not executable: mode 0644
  ::chmod(dir.file("script.sh").c_str(), 0644);
  const std::string hostile = dir.file("no\x1b[2Jsuch");
  struct expectation {
    std::string program;
    int rc;
    const char* says;
  };
  for (const expectation& e : {expectation{dir.path.string(), 126, "Permission denied"},
                               expectation{dir.file("script.sh"), 126, "Permission denied"},
                               expectation{dir.file("missing"), 127, "No such file or directory"},
                               expectation{"cuprof-no-such-program-anywhere", 127, "No such file or directory"},
                               expectation{hostile, 127, "No such file or directory"}}) {
    CAPTURE(e.program);
    cuprof::cli::launch_plan plan;
    plan.command = {e.program, "arg"};
    cuprof_test::stderr_capture err;
    const int rc = cuprof::cli::exec_plan(plan);  // returns only when the exec failed
    const std::string said = err.finish();
    CHECK(rc == e.rc);
    CHECK(said.rfind("cuprof: cannot run ", 0) == 0);
    CHECK(said.find(e.says) != std::string::npos);
    CHECK_FALSE(has_control_byte(said.substr(0, said.size() - 1), false));
  }
}
