// The base layer (include/cuprof/base/): the environment parsers and their
// warnings, text made safe for a terminal, the one-per-process state that
// every copy of cuprof finds, and a library's entry points bound at run time.

#include <cuprof/cuprof.hpp>
#include <cuprof/collect/cpu_collect.hpp>
#include <cuprof/base/threads.hpp>
#include <cuprof/runtime/autostart.hpp>

#include "support/child_process.hpp"
#include "support/cli.hpp"
#include "support/files.hpp"
#include "support/stderr_capture.hpp"
#include "support/traces.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace cuprof_test;

namespace {

std::string hex16(std::uintptr_t v) {
  static const char digits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[std::size_t(i)] = digits[v & 15];
  return out;
}

}  // namespace

TEST_SUITE("base") {

// --- The process state's variable ---------------------------------------------------

TEST_CASE("process state: a copy that joins after clearenv() or unsetenv() finds the process's state and publishes it again") {
  const int rc = in_child([] {
    cuprof::detail::process_state* const mine = &cuprof::detail::process();
    const char* value = std::getenv(CUPROF_PROCESS_STATE_VARIABLE);
    if (!value) return 1;
    const std::string published = value;
    ::clearenv();
    // What a plugin opened now does while its static initialisers run.
    if (cuprof::detail::find_or_create_process_state() != mine) return 2;
    value = std::getenv(CUPROF_PROCESS_STATE_VARIABLE);
    if (!value || published != value) return 3;
    ::unsetenv(CUPROF_PROCESS_STATE_VARIABLE);
    if (cuprof::detail::find_or_create_process_state() != mine) return 4;
    cuprof::profile prof(cpu_only());
    prof.start();
    { CUPROF_SCOPE("after_clearenv"); }
    prof.stop();
    if (count_spans(prof.last_trace(), "after_clearenv") != 1) return 5;
    return 0;
  });
  CHECK(rc == 0);
}

TEST_CASE("process state: a variable with this image's prefix and a bad address is refused, never dereferenced") {
  const int rc = in_child([] {
    cuprof::detail::process_state* const mine = &cuprof::detail::process();
    const char* value = std::getenv(CUPROF_PROCESS_STATE_VARIABLE);
    if (!value) return 1;
    const std::string published = value;
    const std::string prefix = published.substr(0, published.find(':') + 1);
    if (prefix.size() != 33) return 2;
    const long page = ::sysconf(_SC_PAGESIZE);
    // A heap object without the state's mark, an unmapped page, a page that cannot be read.
    auto* heap = new std::uint64_t[512]();
    void* gone = ::mmap(nullptr, std::size_t(page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void* sealed = ::mmap(nullptr, std::size_t(page), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (gone == MAP_FAILED || sealed == MAP_FAILED) return 3;
    ::munmap(gone, std::size_t(page));
    const auto at = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
    const std::string own = published.substr(prefix.size());
    const std::vector<std::string> hostile = {
        prefix + "zzzzzzzzzzzzzzzz",                                  // not hex
        prefix + "00007f00000000g0",                                  // one character not hex
        prefix,                                                       // no address
        prefix + "0000000000000000",                                  // null
        prefix + "12ab",                                              // short
        prefix + own + "0",                                           // one digit too many
        prefix + "0x" + own.substr(2),                                // a C prefix
        prefix + hex16(at(heap)),                                     // not a process state
        prefix + hex16(at(heap) + 4),                                 // misaligned
        prefix + hex16(at(gone)),                                     // unmapped
        prefix + hex16(at(sealed)),                                   // mapped, not readable
        prefix + hex16(at(mine) - 8),                                 // next to the state, not at it
        prefix + hex16(~std::uintptr_t(0) & ~std::uintptr_t(0xfff)),  // kernel space
    };
    for (std::size_t i = 0; i < hostile.size(); ++i) {
      ::setenv(CUPROF_PROCESS_STATE_VARIABLE, hostile[i].c_str(), 1);
      if (cuprof::detail::find_or_create_process_state() != mine) return int(10 + i);
    }
    // After all that, scopes and a profile work as before.
    cuprof::profile prof(cpu_only());
    prof.start();
    { CUPROF_SCOPE("after_hostile_values"); }
    prof.stop();
    if (count_spans(prof.last_trace(), "after_hostile_values") != 1) return 4;
    delete[] heap;
    return 0;
  });
  CHECK(rc == 0);
}

// --- Environment parsers (fuzzed by tests/fuzz/fuzz_env_config.cpp) ---------------

TEST_CASE("environment parsers: ranks, the record cap, flags, libcupti candidates") {
  using cuprof::detail::parse_env_int;
  using cuprof::detail::parse_record_cap;
  CHECK(parse_env_int(nullptr) == std::nullopt);
  CHECK(parse_env_int("") == std::nullopt);
  CHECK(parse_env_int("7") == 7);
  CHECK(parse_env_int("0") == 0);
  CHECK(parse_env_int("-1") == std::nullopt);
  CHECK(parse_env_int("7x") == std::nullopt);
  CHECK(parse_env_int("1073741824") == std::nullopt);  // 2^30
  CHECK(parse_env_int("99999999999999999999") == std::nullopt);

  CHECK(parse_record_cap(nullptr) == std::nullopt);
  CHECK(parse_record_cap("1000") == std::size_t(1000));
  CHECK(parse_record_cap("0") == std::nullopt);
  // Regression: strtoull read "-1" as 2^64-1, i.e. no cap at all.
  CHECK(parse_record_cap("-1") == std::nullopt);
  CHECK(parse_record_cap(" 5") == std::nullopt);
  CHECK(parse_record_cap("+5") == std::nullopt);
  CHECK(parse_record_cap("1e6") == std::nullopt);
  CHECK(parse_record_cap("99999999999999999999999") == std::size_t(SIZE_MAX));

  using cuprof::detail::parse_switch;
  CHECK(parse_switch(nullptr) == std::nullopt);
  CHECK(parse_switch("") == std::nullopt);
  for (const char* on : {"1", "yes", "YES", "true", "True", "on", "ON"}) CHECK(parse_switch(on) == true);
  for (const char* off : {"0", "no", "No", "false", "FALSE", "off", "Off"}) CHECK(parse_switch(off) == false);
  for (const char* neither : {"maybe", " 1", "1 ", "01", "y", "2", "-1", "onn"}) CHECK(parse_switch(neither) == std::nullopt);

  using cuprof::detail::cupti_library_candidates;
  CHECK(cupti_library_candidates("/x/libcupti.so", "/cuda", nullptr) == std::vector<std::string>{"/x/libcupti.so"});
  const auto c = cupti_library_candidates(nullptr, "/cuda", "");
  CHECK(c.front() == "libcupti.so.13");
  CHECK(std::find(c.begin(), c.end(), "/cuda/extras/CUPTI/lib64/libcupti.so.13") != c.end());
  CHECK(c.back() == "/usr/local/cuda/lib64/libcupti.so.13");
}

TEST_CASE(
    "environment: one parser per kind of setting; a bad value gives one warning naming it, its value and the default used") {
  using namespace cuprof::detail;
  // CUPROF_TABLE reads like CUPROF_QUIET.
  const auto config = [](std::map<std::string, std::string> vars) {
    return read_environment(
        [&vars](const char* name) -> const char* {
          const auto it = vars.find(name);
          return it == vars.end() ? nullptr : it->second.c_str();
        },
        false, 1, "host", 0, 1);
  };
  for (const char* off : {"0", "no", "false", "off", "NO"})
    CHECK_FALSE(config({{"CUPROF_TRACE", "t.json"}, {"CUPROF_TABLE", off}}).print_table);
  for (const char* on : {"1", "yes", "true", "on", ""})
    CHECK(config({{"CUPROF_TRACE", "t.json"}, {"CUPROF_TABLE", on}}).print_table);
  const environment_config metrics =
      config({{"CUPROF_TRACE", "t.json"}, {"CUPROF_GPU_METRICS", "1"}, {"CUPROF_GPU_METRICS_INTERVAL", "40us"}});
  CHECK(metrics.gpu_metrics.on);
  CHECK(metrics.gpu_metrics.interval_ns == 40000);
  CHECK(metrics.problems.empty());
  CHECK_FALSE(config({{"CUPROF_TRACE", "t.json"}}).gpu_metrics.on);
  const environment_config interval_alone = config({{"CUPROF_TRACE", "t.json"}, {"CUPROF_GPU_METRICS_INTERVAL", "5us"}});
  CHECK_FALSE(interval_alone.gpu_metrics.on);
  CHECK(interval_alone.problems == std::vector<std::string>{"CUPROF_GPU_METRICS_INTERVAL needs CUPROF_GPU_METRICS; ignored"});
  const environment_config bad = config({{"CUPROF_TRACE", "t.json"},
                                         {"CUPROF_TABLE", "maybe"},
                                         {"CUPROF_DELAY", "nan"},
                                         {"CUPROF_DURATION", "0x10"},
                                         {"CUPROF_ACTIVITIES", "gpu"}});
  CHECK(bad.print_table);
  CHECK(bad.delay_s == 0);
  CHECK(bad.duration_s == 0);
  // In the settings table's order (`cuprof run --help`'s), whatever the environment's.
  CHECK(bad.problems == std::vector<std::string>{"CUPROF_ACTIVITIES=gpu is not cpu, cuda or cpu,cuda; using cpu,cuda",
                                                 "CUPROF_DELAY=nan is not a number of seconds from 0 to 1e7; using 0",
                                                 "CUPROF_DURATION=0x10 is not a number of seconds from 0 to 1e7; using 0",
                                                 "CUPROF_TABLE=maybe is not 1/0, yes/no, true/false or on/off; using yes"});
  CHECK(config({{"CUPROF_TRACE", "t.json"}, {"CUPROF_DELAY", "1.5"}, {"CUPROF_DURATION", "2e1"}}).duration_s == 20);
  CHECK(config({{"CUPROF_TRACE", "t.json"}}).export_with.detail == cuprof::trace_detail::kineto);
  for (const char* lean : {"lean", "LEAN", "Lean"})
    CHECK(config({{"CUPROF_TRACE", "t.json"}, {"CUPROF_TRACE_DETAIL", lean}}).export_with.detail == cuprof::trace_detail::lean);
  const environment_config fat = config({{"CUPROF_TRACE", "t.json"}, {"CUPROF_TRACE_DETAIL", "full"}});
  CHECK(fat.export_with.detail == cuprof::trace_detail::kineto);
  CHECK(fat.problems == std::vector<std::string>{"CUPROF_TRACE_DETAIL=full is not kineto or lean; using kineto"});
  // CUPROF_START_STEP, CUPROF_STEPS, CUPROF_STEP_RANGE.
  const environment_config steps =
      config({{"CUPROF_TRACE", "t.json"}, {"CUPROF_START_STEP", "4"}, {"CUPROF_STEPS", "3"}, {"CUPROF_STEP_RANGE", "iter"}});
  CHECK(steps.start_step == 4);
  CHECK(steps.steps == 3);
  CHECK(steps.step_range == "iter");
  CHECK(steps.problems.empty());
  CHECK(config({{"CUPROF_TRACE", "t.json"}}).start_step == -1);
  const environment_config bad_steps =
      config({{"CUPROF_TRACE", "t.json"}, {"CUPROF_START_STEP", "-2"}, {"CUPROF_STEPS", "3"}, {"CUPROF_DELAY", "1"}});
  CHECK(bad_steps.start_step == -1);
  CHECK(bad_steps.steps == 0);
  CHECK(bad_steps.delay_s == 1);
  CHECK(bad_steps.problems ==
        std::vector<std::string>{"CUPROF_START_STEP=-2 is not a whole number from 0 to 2^30; using none",
                                 "CUPROF_STEPS needs CUPROF_START_STEP (the step the window opens at); ignored"});
  const environment_config both = config({{"CUPROF_TRACE", "t.json"}, {"CUPROF_START_STEP", "0"}, {"CUPROF_DELAY", "1"}});
  CHECK(both.start_step == 0);
  CHECK(both.delay_s == 0);
  CHECK(both.problems ==
        std::vector<std::string>{"CUPROF_DELAY and CUPROF_START_STEP both choose when the window opens; it opens at the step"});
  // Which NVTX ranges are steps.
  for (const char* yes : {"step", "step 3", "Step#3", "STEP_12", "step:4", "ProfilerStep#7", "step3"})
    CHECK_MESSAGE(is_step_range(yes, ""), yes);
  for (const char* no : {"steps", "stepper", "forward", "my step", "", "ste", "ProfilerStep"})
    CHECK_FALSE_MESSAGE(is_step_range(no, ""), no);
  CHECK(is_step_range("iter 5", "iter"));
  CHECK(is_step_range("iter", "iter"));
  CHECK_FALSE(is_step_range("Iter 5", "iter"));  // a given name is matched as written
  CHECK_FALSE(is_step_range("iteration 5", "iter"));
  CHECK_FALSE(is_step_range("step 5", "iter"));

  // The steps of a CUPROF_START_STEP window become ProfilerStep#N spans, numbered from the first,
  // each to the next step's start or the window's end, whatever NVTX ranges the trace holds.
  cuprof::trace t;
  t.meta.window_end_ns = 1000;
  step_marks::add_profiler_steps(t, 10, {100, 400, 700}, 7);
  REQUIRE(t.spans.size() == 3);
  CHECK(t.names.str(t.spans[0].name) == "ProfilerStep#10");
  CHECK(t.spans[0].start_ns == 100);
  CHECK(t.spans[0].end_ns == 400);
  CHECK(t.spans[0].is_step);
  CHECK(t.spans[0].tid == 7);
  CHECK(t.names.str(t.spans[2].name) == "ProfilerStep#12");
  CHECK(t.spans[2].end_ns == 1000);
  cuprof::trace late;
  late.meta.window_end_ns = 500;
  step_marks::add_profiler_steps(late, 0, {100, 600}, 7);  // a step starting after the window: none
  CHECK(late.spans.size() == 1);

  // A step starts a nanosecond before its NVTX range (the mark is the hook's time, a little after
  // CUPTI stamped the range): each range nests in its ProfilerStep, as Perfetto needs to draw both.
  cuprof::trace nested;
  nested.meta.window_end_ns = 20000000;
  auto range = [&](const char* name, std::uint64_t a, std::uint64_t b, std::uint32_t tid) {
    cuprof::cpu_span s;
    s.start_ns = a, s.end_ns = b, s.tid = tid, s.name = nested.names.intern(name);
    nested.spans.push_back(s);
  };
  range("step 4", 1000000, 5000000, 7);
  range("forward", 1001000, 3000000, 7);  // not a step range: never snapped to
  range("step 5", 5200000, 9000000, 7);
  range("step 6", 9100000, 12000000, 8);   // another thread's
  range("step 7", 80000000, 81000000, 7);  // too far from any mark
  // A mark 1.5 us after its range (the hook's time), one 10 us before (a slow step's lead), one with no range near.
  std::vector<std::uint64_t> marks{1001500, 5190000, 9102000};
  step_marks::snap_to_ranges(nested, "", 7, marks);
  CHECK(marks == std::vector<std::uint64_t>{999999, 5199999, 9102000});
  step_marks::add_profiler_steps(nested, 4, marks, 7);
  REQUIRE(nested.spans.size() == 8);
  for (std::size_t i : {0, 2}) {
    const cuprof::cpu_span& r = nested.spans[i];
    const cuprof::cpu_span& step = nested.spans[5 + i / 2];
    CHECK(step.is_step);
    CHECK(step.start_ns < r.start_ns);
    CHECK(r.end_ns <= step.end_ns);
  }

  for (const char* seconds : {"inf", "1e999", "-1", " 1", "1 ", "0x10", "1e8", "5s", "infinity"})
    CHECK_MESSAGE(parse_seconds(seconds) == std::nullopt, seconds);
  CHECK(parse_seconds(".5") == 0.5);
  CHECK(parse_seconds("10000000") == 1e7);

  for (const char* cap : {"-1", "abc", "0", " 1", "0x10", "1e6"}) {
    CAPTURE(cap);
    const env_setting<std::size_t> s = read_record_cap("CUPROF_MAX_RECORDS", cap, 16777216);
    CHECK(s.value == 16777216);
    CHECK(s.problem == std::string("CUPROF_MAX_RECORDS=") + cap + " is not a positive count in decimal digits; using 16777216");
  }
  CHECK(read_record_cap("CUPROF_MAX_RECORDS", "1000", 5).value == 1000);
  CHECK(read_record_cap("CUPROF_MAX_RECORDS", "1000", 5).problem.empty());
  CHECK(read_record_cap("CUPROF_MAX_RECORDS", nullptr, 5).problem.empty());
  CHECK(read_clock_forced_monotonic("garbage").problem ==
        "CUPROF_CLOCK=garbage is not monotonic; using the default clock (the TSC where it is invariant, else CLOCK_MONOTONIC)");
  CHECK(read_clock_forced_monotonic("MONOTONIC").value);
  CHECK(read_switch("CUPROF_QUIET", "on", false).value);
  // A value is quoted terminal-safe: the warning itself carries no escape sequence.
  CHECK(read_switch("CUPROF_QUIET", "\x1b]0;pwned\x07", false).problem ==
        "CUPROF_QUIET=\\x1b]0;pwned\\x07 is not 1/0, yes/no, true/false or on/off; using no");

  // Through the real environment: each warning once per process, however often the setting is read.
  temp_dir dir;
  const fs::path err = dir.path / "stderr.txt";
  const int rc = in_child([&] {
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ::dup2(fd, 2) < 0) return 10;
    ::setenv("CUPROF_QUIET", "maybe", 1);
    ::setenv("CUPROF_CLOCK", "garbage", 1);
    for (int i = 0; i < 3; ++i) {
      log_info("information");
      choose_clock();  // once per process in real use (clock_anchor); the warning must not depend on that
      (void)cuprof::detail::use_setting(read_record_cap("CUPROF_MAX_RECORDS", "0", 16777216));
    }
    return 0;
  });
  REQUIRE(rc == 0);
  const std::string printed = slurp(err);
  const auto count = [&](const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = 0; (at = printed.find(what, at)) != std::string::npos; at += what.size()) ++n;
    return n;
  };
  CHECK(count("cuprof: CUPROF_QUIET=maybe is not 1/0, yes/no, true/false or on/off; using no\n") == 1);
  CHECK(count("cuprof: CUPROF_CLOCK=garbage is not monotonic;") == 1);
  CHECK(count("cuprof: CUPROF_MAX_RECORDS=0 is not a positive count in decimal digits; using 16777216\n") == 1);
  CHECK(count("cuprof: information\n") == 3);
}

// ---- bidirectional-text controls --------------------------------------------------

TEST_CASE("CUPROF_GPU_METRICS and its interval: switches, the default set, named metrics, hostile names") {
  using cuprof::detail::read_gpu_metrics;
  using cuprof::detail::read_gpu_metrics_interval;
  for (const char* off : {static_cast<const char*>(nullptr), "", "off", "0"}) {
    const auto g = read_gpu_metrics(off);
    CHECK_FALSE(g.value.on);
    CHECK(g.problem.empty());
  }
  for (const char* on : {"1", "ON", "default", "Default"}) {
    const auto g = read_gpu_metrics(on);
    CHECK(g.value.on);
    CHECK(g.value.names.empty());
    CHECK(g.value.interval_ns == 200000);
    CHECK(g.problem.empty());
  }
  const auto g = read_gpu_metrics("dram__throughput.avg.pct_of_peak_sustained_elapsed,,sm__x.sum");
  CHECK(g.value.on);
  CHECK(g.value.names == std::vector<std::string>{"dram__throughput.avg.pct_of_peak_sustained_elapsed", "sm__x.sum"});
  CHECK(g.problem.empty());
  const std::pair<const char*, std::uint64_t> periods[] = {{"50us", 50000}, {"2ms", 2000000}, {"1500ns", 1500}, {"10", 10000}};
  for (const auto& [text, ns] : periods) {  // a bare number is microseconds
    CAPTURE(text);
    const auto p = read_gpu_metrics_interval(text);
    CHECK(p.value == ns);
    CHECK(p.problem.empty());
  }
  CHECK(read_gpu_metrics_interval(nullptr).value == 200000);
  for (const char* bad : {"0.5us", "2s", "-3us", "1e3us", "us", "20 us", "inf"}) {
    CAPTURE(bad);
    const auto p = read_gpu_metrics_interval(bad);
    CHECK(p.value == 200000);
    CHECK(p.problem.find("CUPROF_GPU_METRICS_INTERVAL=") == 0);
    CHECK(p.problem.find("; using 200us") != std::string::npos);
  }
  const auto hostile = read_gpu_metrics("dram__bytes.sum,\x1b[2J;rm -rf");
  CHECK_FALSE(hostile.value.on);  // one bad name turns metrics off rather than sampling something else
  CHECK(hostile.value.names.empty());
  CHECK(hostile.problem.find("is not a CUPTI metric name") != std::string::npos);
  CHECK(hostile.problem.find('\x1b') == std::string::npos);
}

TEST_CASE("terminal_safe: bidirectional overrides, isolates and marks are escaped like controls") {
  using cuprof::detail::terminal_safe;
  CHECK(terminal_safe("evil\xe2\x80\xae"
                      "txt.exe") == "evil\\xe2\\x80\\xaetxt.exe");  // U+202E RIGHT-TO-LEFT OVERRIDE
  for (const char* bidi : {"\xe2\x80\xaa", "\xe2\x80\xab", "\xe2\x80\xac", "\xe2\x80\xad", "\xe2\x80\xae",  // U+202A..E
                           "\xe2\x81\xa6", "\xe2\x81\xa7", "\xe2\x81\xa8", "\xe2\x81\xa9",                  // U+2066..9
                           "\xe2\x80\x8e", "\xe2\x80\x8f",                                                  // U+200E, U+200F
                           "\xd8\x9c"}) {                                                                   // U+061C
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

// Declared only: no library defines it, and nothing here calls it.
extern "C" int cuprof_test_no_such_entry_point(int);

#define CUPROF_TEST_ZLIB_ENTRY_POINTS(X)      \
  X(version, zlibVersion)                     \
  X(missing, cuprof_test_no_such_entry_point) \
  X(compress_bound, compressBound)

struct zlib_entry_points {
  CUPROF_ENTRY_POINTS(CUPROF_TEST_ZLIB_ENTRY_POINTS)
};
#undef CUPROF_TEST_ZLIB_ENTRY_POINTS

TEST_CASE("entry points named once: bound by their names in list order, up to the first one missing") {
  void* lib = cuprof::detail::open_first({"libz.so.1"});
  REQUIRE(lib);
  zlib_entry_points z;
  CHECK_FALSE(z.bind_entry_points(lib));
  const char* why = ::dlerror();  // the first missing symbol, by the name the list gives it
  REQUIRE(why);
  CHECK(std::string(why).find("cuprof_test_no_such_entry_point") != std::string::npos);
  const bool bound[] = {z.version != nullptr, z.missing != nullptr, z.compress_bound != nullptr};
  REQUIRE(bound[0]);
  CHECK(std::string(z.version()).rfind("1.", 0) == 0);
  CHECK_FALSE(bound[1]);
  CHECK_FALSE(bound[2]);  // after the missing one: not looked up
  ::dlclose(lib);
}

}  // TEST_SUITE("base")

TEST_CASE(
    "run_only_on_idle_cpu: a background thread yields the CPU to the program's threads (SCHED_IDLE), the caller's others keep "
    "theirs") {
  int policy = -1;
  std::thread([&] {
    cuprof::detail::run_only_on_idle_cpu();
    sched_param p{};
    pthread_getschedparam(pthread_self(), &policy, &p);
  }).join();
  CHECK(policy == SCHED_IDLE);
  sched_param mine{};
  int my_policy = -1;
  pthread_getschedparam(pthread_self(), &my_policy, &mine);
  CHECK(my_policy == SCHED_OTHER);
}
