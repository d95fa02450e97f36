// The profiler session end to end on the CPU: threads, exceptions, misuse,
// scopes open across stop(), schedules and on_trace_ready, the CUPROF_TRACE
// autostart, and names that need escaping recorded by real scopes.
#include <cuprof/cuprof.hpp>
#include <cuprof/runtime/autostart.hpp>  // CUPROF_TRACE's session, started by the tests themselves

#include "child_process.hpp"
#include "stderr_capture.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using cuprof::no_index;

cuprof::profile_options cpu_only() {
  cuprof::profile_options o;
  o.activities = cuprof::activity::cpu;
  return o;
}

std::uint32_t gettid_now() { return std::uint32_t(::syscall(SYS_gettid)); }

void busy_wait_us(int us) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < until) {
  }
}

std::size_t count_spans(const cuprof::trace& t, const std::string& name) {
  std::size_t n = 0;
  for (const auto& s : t.spans) n += t.names.str(s.name) == name;
  return n;
}

const cuprof::cpu_span* find_span(const cuprof::trace& t, const std::string& name) {
  for (const auto& s : t.spans)
    if (t.names.str(s.name) == name) return &s;
  return nullptr;
}

std::uint32_t index_of(const cuprof::trace& t, const cuprof::cpu_span* s) {
  return std::uint32_t(s - t.spans.data());
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct temp_dir {
  fs::path path;
  temp_dir() {
    std::string tmpl = (fs::temp_directory_path() / "cuprof-profile-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// A one-shot gate for threads.
class gate {
 public:
  void open() {
    std::lock_guard<std::mutex> lock(m_);
    open_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Sets an environment variable for the lifetime of the object.
class scoped_env {
 public:
  scoped_env(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) ::setenv(name, value, 1); else ::unsetenv(name);
  }
  ~scoped_env() {
    if (had_) ::setenv(name_.c_str(), old_.c_str(), 1); else ::unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

using cuprof_test::stderr_capture;

}  // namespace

// =============================================================================
TEST_SUITE("profile") {

TEST_CASE("8 threads x 10,000 scopes: every span, each with its own thread's tid and name") {
  constexpr int threads = 8, pairs = 5000;  // 2 scopes per iteration
  cuprof::profile prof(cpu_only());
  prof.start();
  REQUIRE(prof.running());

  std::vector<std::uint32_t> tids(threads, 0);
  std::vector<std::thread> pool;
  gate stopped;
  std::mutex m;
  std::condition_variable cv;
  int done = 0;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      const std::string name = "cuprof-w" + std::to_string(i);
      pthread_setname_np(pthread_self(), name.c_str());
      tids[i] = gettid_now();
      for (int k = 0; k < pairs; ++k) {
        CUPROF_SCOPE("thread_outer");
        CUPROF_SCOPE("thread_inner");
      }
      {
        std::lock_guard<std::mutex> lock(m);
        ++done;
      }
      cv.notify_all();
      stopped.wait();  // alive (and named) until the profile stopped
    });
  }
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return done == threads; });
  }
  prof.stop();
  stopped.open();
  for (auto& th : pool) th.join();

  const cuprof::trace& t = prof.last_trace();
  CHECK(t.spans.size() == std::size_t(threads) * pairs * 2);
  CHECK(t.meta.dropped_cpu_events == 0);
  const std::set<std::uint32_t> expected(tids.begin(), tids.end());
  REQUIRE(expected.size() == std::size_t(threads));
  std::map<std::uint32_t, std::size_t> outer, inner;
  std::size_t bad_parent = 0, foreign = 0;
  for (const auto& s : t.spans) {
    if (!expected.count(s.tid)) ++foreign;
    const std::string& n = t.names.str(s.name);
    if (n == "thread_outer") {
      ++outer[s.tid];
      if (s.parent != no_index) ++bad_parent;
    } else if (n == "thread_inner") {
      ++inner[s.tid];
      if (s.parent == no_index || t.spans[s.parent].tid != s.tid || t.names.str(t.spans[s.parent].name) != "thread_outer")
        ++bad_parent;
    }
  }
  CHECK(foreign == 0);
  CHECK(bad_parent == 0);
  for (std::uint32_t tid : expected) {
    CAPTURE(tid);
    CHECK(outer[tid] == std::size_t(pairs));
    CHECK(inner[tid] == std::size_t(pairs));
  }
  // ids unique across threads
  std::set<std::uint32_t> ids;
  for (const auto& s : t.spans) ids.insert(s.id);
  CHECK(ids.size() == t.spans.size());

  // Thread metadata, and thread_name events in the trace.
  std::map<std::uint32_t, std::string> names;
  for (const auto& th : t.meta.threads) names[th.tid] = th.name;
  for (int i = 0; i < threads; ++i) {
    CAPTURE(i);
    REQUIRE(names.count(tids[i]));
    CHECK(names[tids[i]] == "cuprof-w" + std::to_string(i));
  }
  const json doc = json::parse(cuprof::chrome_trace_json(t));
  std::map<std::uint64_t, std::string> thread_names;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == t.meta.pid)
      thread_names[e["tid"].get<std::uint64_t>()] = e["args"]["name"];
  for (int i = 0; i < threads; ++i)
    CHECK(thread_names[tids[i]] ==
          "thread " + std::to_string(tids[i]) + " (cuprof-w" + std::to_string(i) + ")");
}

TEST_CASE("threads that exited before stop() keep their spans") {
  cuprof::profile prof(cpu_only());
  prof.start();
  std::vector<std::uint32_t> tids(2, 0);
  std::vector<std::thread> pool;
  for (int i = 0; i < 2; ++i)
    pool.emplace_back([&, i] {
      tids[i] = gettid_now();
      for (int k = 0; k < 1000; ++k) {
        CUPROF_SCOPE("short_lived");
      }
    });
  for (auto& th : pool) th.join();
  prof.stop();
  const cuprof::trace& t = prof.last_trace();
  CHECK(count_spans(t, "short_lived") == 2000);
  std::set<std::uint32_t> meta_tids;
  for (const auto& th : t.meta.threads) meta_tids.insert(th.tid);
  CHECK(meta_tids.count(tids[0]));
  CHECK(meta_tids.count(tids[1]));
  // The next window is clean, and the exited threads' buffers are gone.
  prof.start();
  prof.stop();
  CHECK(prof.last_trace().spans.empty());
  CHECK(prof.last_trace().meta.threads.empty());
}

TEST_CASE("an exception unwinding through scopes closes them, nested correctly") {
  struct thrower {
    static void deepest() {
      CUPROF_FUNCTION();
      throw std::runtime_error("boom");
    }
  };
  cuprof::profile prof(cpu_only());
  prof.start();
  bool caught = false;
  try {
    CUPROF_SCOPE("try_outer");
    busy_wait_us(20);
    {
      cuprof::record_function mid(std::string("try_mid"));
      busy_wait_us(20);
      {
        CUPROF_SCOPE("try_inner");
        thrower::deepest();
      }
    }
  } catch (const std::runtime_error&) {
    caught = true;
  }
  CHECK(caught);
  {
    CUPROF_SCOPE("after");
    busy_wait_us(20);
  }
  prof.stop();
  const cuprof::trace& t = prof.last_trace();
  REQUIRE(t.spans.size() == 5);
  const auto* outer = find_span(t, "try_outer");
  const auto* mid = find_span(t, "try_mid");
  const auto* inner = find_span(t, "try_inner");
  const auto* fn = find_span(t, "deepest");
  const auto* after = find_span(t, "after");
  REQUIRE(outer);
  REQUIRE(mid);
  REQUIRE(inner);
  REQUIRE(fn);
  REQUIRE(after);
  CHECK(outer->parent == no_index);
  CHECK(mid->parent == index_of(t, outer));
  CHECK(inner->parent == index_of(t, mid));
  CHECK(fn->parent == index_of(t, inner));
  CHECK(after->parent == no_index);  // not left inside the unwound scopes
  CHECK(fn->end_ns <= inner->end_ns);
  CHECK(inner->end_ns <= mid->end_ns);
  CHECK(mid->end_ns <= outer->end_ns);
  CHECK(outer->end_ns <= after->start_ns);
  CHECK(after->end_ns <= t.meta.window_end_ns);  // closed by its own exit, not by the window
}

TEST_CASE("misuse: stop() without start(), start() twice, step() without a schedule or while stopped") {
  cuprof::profile prof(cpu_only());
  SUBCASE("stop() without start()") {
    CHECK_NOTHROW(prof.stop());
    CHECK_FALSE(prof.running());
    CHECK(prof.last_trace().spans.empty());
    CHECK(prof.key_averages().rows().empty());
  }
  SUBCASE("start() twice keeps one window") {
    prof.start();
    { CUPROF_SCOPE("first"); }
    prof.start();  // ignored, said on stderr
    CHECK(prof.running());
    { CUPROF_SCOPE("second"); }
    prof.stop();
    CHECK_FALSE(prof.running());
    CHECK(count_spans(prof.last_trace(), "first") == 1);
    CHECK(count_spans(prof.last_trace(), "second") == 1);
    CHECK_NOTHROW(prof.stop());  // a second stop does nothing
    CHECK(count_spans(prof.last_trace(), "first") == 1);
  }
  SUBCASE("step() without a schedule only counts") {
    int ready = 0;
    cuprof::profile_options o = cpu_only();
    o.on_trace_ready = [&](cuprof::profile&) { ++ready; };
    cuprof::profile p(o);
    p.step();  // not running: ignored
    CHECK(p.step_num() == 0);
    p.start();
    CHECK(p.current_action() == cuprof::profiler_action::record);
    { CUPROF_SCOPE("before_step"); }
    p.step();
    p.step();
    CHECK(p.step_num() == 2);
    CHECK(p.current_action() == cuprof::profiler_action::record);
    CHECK(ready == 0);
    { CUPROF_SCOPE("after_step"); }
    p.stop();
    CHECK(ready == 1);
    const cuprof::trace& t = p.last_trace();
    CHECK(t.spans.size() == 2);  // no ProfilerStep#N without a schedule
    for (const auto& s : t.spans) CHECK_FALSE(s.is_step);
  }
}

TEST_CASE("misuse: a second profile started while one runs is ignored; the first keeps working") {
  cuprof::profile first(cpu_only());
  first.start();
  REQUIRE(first.running());
  { CUPROF_SCOPE("one"); }
  {
    cuprof::profile second(cpu_only());
    second.start();
    CHECK_FALSE(second.running());
    CHECK(first.running());
    { CUPROF_SCOPE("two"); }
    second.stop();  // must not stop the first
    CHECK(first.running());
    CHECK(second.last_trace().spans.empty());
  }  // destroying it must not stop the first either
  CHECK(first.running());
  { CUPROF_SCOPE("three"); }
  first.stop();
  const cuprof::trace& t = first.last_trace();
  CHECK(count_spans(t, "one") == 1);
  CHECK(count_spans(t, "two") == 1);
  CHECK(count_spans(t, "three") == 1);

  // Once the first stopped, another may run.
  cuprof::profile third(cpu_only());
  third.start();
  CHECK(third.running());
  third.stop();
}

TEST_CASE("on_trace_ready throwing from stop(): the profile still stops, once, and frees the slot") {
  int calls = 0;
  cuprof::profile_options o = cpu_only();
  o.on_trace_ready = [&](cuprof::profile&) {
    ++calls;
    throw cuprof::error("handler failed");  // e.g. tensorboard_trace_handler on an unwritable dir
  };
  {
    cuprof::profile p(o);
    p.start();
    { CUPROF_SCOPE("handled"); }
    try {
      p.stop();
    } catch (const cuprof::error&) {
      // propagating the handler's error is fine; leaving the profile half-stopped is not
    }
    CHECK_FALSE(p.running());
    CHECK(calls == 1);
    CHECK(count_spans(p.last_trace(), "handled") == 1);
  }  // the destructor must not deliver another window
  CHECK(calls == 1);
  // Nothing may still claim the process-wide "running profile" slot. If the
  // destroyed profile does, no profile could ever start again in this process:
  // clear it so the tests after this one see a sane process.
  if (cuprof::detail::process().running_profile.load() != nullptr) {
    FAIL_CHECK("a destroyed profile still holds the running-profile slot");
    cuprof::detail::process().running_profile.store(nullptr);
  }
  {
    CUPROF_SCOPE("after_failed_stop");  // recording is off
  }
  cuprof::profile next(cpu_only());
  next.start();
  CHECK(next.running());  // the process-wide slot was released
  { CUPROF_SCOPE("next_window"); }
  next.stop();
  CHECK(count_spans(next.last_trace(), "next_window") == 1);
  CHECK(count_spans(next.last_trace(), "after_failed_stop") == 0);
}

TEST_CASE("on_trace_ready throwing from step(): the error reaches the caller, the schedule goes on") {
  int calls = 0;
  cuprof::profile_options o = cpu_only();
  o.schedule = cuprof::schedule(0, 0, 1);
  o.on_trace_ready = [&](cuprof::profile&) {
    if (++calls == 1) throw cuprof::error("first window only");
  };
  cuprof::profile p(o);
  p.start();
  CHECK_THROWS_AS(p.step(), cuprof::error);
  CHECK(p.running());
  CHECK(p.step_num() == 1);
  p.step();
  CHECK(calls == 2);
  CHECK(count_spans(p.last_trace(), "ProfilerStep#1") == 1);
  p.stop();
  CHECK(calls == 3);
  CHECK_FALSE(p.running());
}

TEST_CASE("a running profile's destructor stops it and frees the slot") {
  {
    cuprof::profile p(cpu_only());
    p.start();
    { CUPROF_SCOPE("in_destroyed"); }
  }
  {
    CUPROF_SCOPE("not_recorded");  // recording is off again
  }
  cuprof::profile q(cpu_only());
  q.start();
  CHECK(q.running());
  q.stop();
  CHECK(q.last_trace().spans.empty());
}

TEST_CASE("a scope open across stop() ends at the window end") {
  cuprof::profile prof(cpu_only());
  SUBCASE("one scope") {
    prof.start();
    {
      CUPROF_SCOPE("open_across");
      busy_wait_us(50);
      prof.stop();
      busy_wait_us(50);
    }
    const cuprof::trace& t = prof.last_trace();
    REQUIRE(t.spans.size() == 1);
    CHECK(t.spans[0].end_ns == t.meta.window_end_ns);
    CHECK(t.spans[0].start_ns >= t.meta.window_start_ns);
    CHECK(t.spans[0].start_ns < t.spans[0].end_ns);
  }
  SUBCASE("nested scopes, then a new window while they are still open") {
    prof.start();
    {
      CUPROF_SCOPE("outer_open");
      {
        CUPROF_SCOPE("inner_open");
        busy_wait_us(20);
        prof.stop();
        const cuprof::trace& t = prof.last_trace();
        REQUIRE(t.spans.size() == 2);
        const auto* outer = find_span(t, "outer_open");
        const auto* inner = find_span(t, "inner_open");
        REQUIRE(outer);
        REQUIRE(inner);
        CHECK(outer->end_ns == t.meta.window_end_ns);
        CHECK(inner->end_ns == t.meta.window_end_ns);
        CHECK(inner->parent == index_of(t, outer));
        prof.start();  // both scopes still open: their exits land in this window
        { CUPROF_SCOPE("second_window"); }
      }
      { CUPROF_SCOPE("sibling_after_stale_exit"); }
    }
    { CUPROF_SCOPE("last"); }
    prof.stop();
    const cuprof::trace& t = prof.last_trace();
    CHECK(t.spans.size() == 3);
    CHECK(count_spans(t, "second_window") == 1);
    CHECK(count_spans(t, "sibling_after_stale_exit") == 1);
    CHECK(count_spans(t, "last") == 1);
    for (const auto& s : t.spans) CHECK(s.parent == no_index);
  }
  SUBCASE("a scope entered before start() does not close a recorded one") {
    {
      CUPROF_SCOPE("entered_before");
      prof.start();
      CUPROF_SCOPE("entered_during");
      busy_wait_us(20);
    }  // entered_during exits, then entered_before (which recorded nothing)
    { CUPROF_SCOPE("next"); }
    prof.stop();
    const cuprof::trace& t = prof.last_trace();
    REQUIRE(t.spans.size() == 2);
    CHECK(count_spans(t, "entered_before") == 0);
    const auto* during = find_span(t, "entered_during");
    const auto* next = find_span(t, "next");
    REQUIRE(during);
    REQUIRE(next);
    CHECK(during->end_ns < t.meta.window_end_ns);
    CHECK(next->parent == no_index);
  }
}

TEST_CASE("schedule: warmup discarded, one trace per cycle, ProfilerStep#N wraps each step") {
  std::vector<std::vector<std::string>> windows;  // span names per ready trace
  std::vector<std::int64_t> ready_at;
  cuprof::profile_options o = cpu_only();
  o.schedule = cuprof::schedule(1, 1, 2, 2);  // N W R S  N W R S  N N
  o.on_trace_ready = [&](cuprof::profile& p) {
    ready_at.push_back(p.step_num());
    std::vector<std::string> names;
    for (const auto& s : p.last_trace().spans) names.push_back(p.last_trace().names.str(s.name));
    windows.push_back(names);
    // Parent links: each "work" inside its ProfilerStep.
    const cuprof::trace& t = p.last_trace();
    for (const auto& s : t.spans) {
      if (t.names.str(s.name) != "work") continue;
      REQUIRE(s.parent != no_index);
      CHECK(t.spans[s.parent].is_step);
    }
  };
  cuprof::profile prof(o);
  const char* expected = "NWRSNWRSNN";
  prof.start();
  for (int step = 0; step < 10; ++step) {
    CAPTURE(step);
    CHECK(prof.step_num() == step);
    const char got = "NWRS"[int(prof.current_action())];
    CHECK(got == expected[step]);
    {
      cuprof::record_function r("work");
      busy_wait_us(10);
    }
    { cuprof::record_function r("step " + std::to_string(step)); }
    prof.step();
  }
  prof.stop();
  REQUIRE(windows.size() == 2);
  CHECK(ready_at == std::vector<std::int64_t>{4, 8});  // on the step() leaving each RECORD_AND_SAVE
  CHECK(windows[0] == std::vector<std::string>{"ProfilerStep#2", "work", "step 2", "ProfilerStep#3", "work", "step 3"});
  CHECK(windows[1] == std::vector<std::string>{"ProfilerStep#6", "work", "step 6", "ProfilerStep#7", "work", "step 7"});
  const cuprof::trace& t = prof.last_trace();
  for (const auto& s : t.spans)
    if (t.names.str(s.name).rfind("ProfilerStep#", 0) == 0) CHECK(s.is_step);
  const cuprof::event_averages avg = prof.key_averages();
  const auto* steps = avg.find("ProfilerStep*", cuprof::row_kind::cpu_scope);
  REQUIRE(steps);
  CHECK(steps->count == 2);
  CHECK(avg.find("work", cuprof::row_kind::cpu_scope)->count == 2);
}

TEST_CASE("schedule: stop() in the middle of an active window hands it over; in warmup it does not") {
  int ready = 0;
  cuprof::profile_options o = cpu_only();
  o.on_trace_ready = [&](cuprof::profile&) { ++ready; };
  SUBCASE("during RECORD") {
    o.schedule = cuprof::schedule(0, 0, 3);
    cuprof::profile prof(o);
    prof.start();
    { CUPROF_SCOPE("s0"); }
    prof.step();
    { CUPROF_SCOPE("s1"); }
    prof.stop();
    CHECK(ready == 1);
    const cuprof::trace& t = prof.last_trace();
    CHECK(count_spans(t, "ProfilerStep#0") == 1);
    CHECK(count_spans(t, "ProfilerStep#1") == 1);
    CHECK(count_spans(t, "s1") == 1);
    CHECK(find_span(t, "ProfilerStep#1")->end_ns <= t.meta.window_end_ns);
  }
  SUBCASE("during WARMUP") {
    o.schedule = cuprof::schedule(0, 2, 1);
    cuprof::profile prof(o);
    prof.start();
    CHECK(prof.current_action() == cuprof::profiler_action::warmup);
    { CUPROF_SCOPE("warm"); }
    prof.stop();
    CHECK(ready == 0);
    CHECK(prof.last_trace().spans.empty());
  }
  SUBCASE("every step saves") {
    o.schedule = cuprof::schedule(0, 0, 1);
    cuprof::profile prof(o);
    prof.start();
    for (int i = 0; i < 3; ++i) {
      { CUPROF_SCOPE("each"); }
      prof.step();
      CHECK(ready == i + 1);
      CHECK(count_spans(prof.last_trace(), "ProfilerStep#" + std::to_string(i)) == 1);
      CHECK(count_spans(prof.last_trace(), "each") == 1);
    }
    prof.stop();
    CHECK(ready == 4);  // the step opened by the last step() is saved at stop
  }
}

TEST_CASE("tensorboard_trace_handler writes one valid file per window, with the export options it was given") {
  temp_dir dir;
  const fs::path out = dir.path / "nested" / "traces";
  cuprof::profile_options o = cpu_only();
  o.schedule = cuprof::schedule(0, 1, 1, 2);  // W S W S
  o.on_trace_ready = cuprof::tensorboard_trace_handler(out.string(), "worker0", false, {cuprof::trace_detail::lean});
  cuprof::profile prof(o);
  prof.start();
  for (int i = 0; i < 5; ++i) {
    { CUPROF_SCOPE("tb_work"); }
    prof.step();
  }
  prof.stop();
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(out)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() == 2);
  const std::regex name_re("worker0\\.\\d+\\.pt\\.trace\\.json");
  for (const auto& f : files) {
    CAPTURE(f);
    CHECK(std::regex_match(f, name_re));
    json doc;
    REQUIRE_NOTHROW(doc = json::parse(read_file(out / f)));
    std::size_t work = 0;
    for (const json& e : doc["traceEvents"]) work += e["ph"] == "X" && e["name"] == "tb_work";
    CHECK(work == 1);
    CHECK(doc["cuprof"]["trace_detail"] == "lean");  // the handler's export options reach the file
  }
  // gzip variant, default worker name <host>_<pid>.
  const fs::path gz = dir.path / "gz";
  o.on_trace_ready = cuprof::tensorboard_trace_handler(gz.string(), "", true);
  o.schedule = cuprof::schedule(0, 0, 1, 1);
  cuprof::profile p2(o);
  p2.start();
  p2.step();
  p2.stop();
  std::vector<std::string> gz_files;
  for (const auto& e : fs::directory_iterator(gz)) gz_files.push_back(e.path().filename().string());
  REQUIRE(gz_files.size() == 1);
  CHECK(std::regex_match(gz_files[0], std::regex(".+_" + std::to_string(::getpid()) + "\\.\\d+\\.pt\\.trace\\.json\\.gz")));
}

TEST_CASE("names needing escapes, invalid UTF-8 and 64 KiB, recorded by real scopes") {
  cuprof::profile prof(cpu_only());
  prof.start();
  const std::string big = std::string(64 * 1024, 'x') + "\xF0\x9F\x98\x80";
  const std::string huge(300 * 1024, 'h');
  { cuprof::record_function r(std::string("q\"b\\c\x01\n\t")); }
  { cuprof::record_function r(std::string("bad \xFF \xC0\x80 \xED\xA0\x80 \xE2\x82")); }
  { cuprof::record_function r(big); }
  { cuprof::record_function r(huge); }  // longer than a chunk holds: cut
  prof.stop();
  const cuprof::trace& t = prof.last_trace();
  REQUIRE(t.spans.size() == 4);
  CHECK(t.names.str(t.spans[2].name) == big);
  const std::string& cut = t.names.str(t.spans[3].name);
  CHECK(cut.size() == cuprof::detail::max_dynamic_name);
  CHECK(cut == huge.substr(0, cuprof::detail::max_dynamic_name));

  temp_dir dir;
  const std::string path = (dir.path / "names.json").string();
  prof.export_chrome_trace(path);
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(read_file(path)));
  std::vector<std::string> names;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "X") names.push_back(e["name"]);
  const std::string r = "\xEF\xBF\xBD";
  REQUIRE(names.size() == 4);
  CHECK(names[0] == "q\"b\\c\x01\n\t");
  CHECK(names[1] == "bad " + r + " " + r + r + " " + r + r + r + " " + r + r);
  CHECK(names[2] == big);
  CHECK(names[3].size() == cuprof::detail::max_dynamic_name);
}

TEST_CASE("windows are independent; key_averages and export work on the last one") {
  cuprof::profile prof(cpu_only());
  CHECK(prof.key_averages().rows().empty());
  temp_dir dir;
  const std::string empty_path = (dir.path / "empty.json").string();
  CHECK_NOTHROW(prof.export_chrome_trace(empty_path));  // before any window: an empty, valid trace
  CHECK_NOTHROW(json::parse(read_file(empty_path)));
  for (int w = 0; w < 3; ++w) {
    prof.start();
    for (int i = 0; i <= w; ++i) {
      CUPROF_SCOPE("per_window");
    }
    prof.stop();
    CHECK(count_spans(prof.last_trace(), "per_window") == std::size_t(w + 1));
    CHECK(prof.key_averages().find("per_window", cuprof::row_kind::cpu_scope)->count == std::uint64_t(w + 1));
  }
  const cuprof::export_result r = prof.export_chrome_trace((dir.path / "last.json").string());
  CHECK(r.events > 3);
}

TEST_CASE("without a CUDA driver, CUDA tracing is off with a reason and the CPU side still records") {
  void* libcuda = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (libcuda) {
    ::dlclose(libcuda);
    MESSAGE("a CUDA driver is present: skipped (this test covers machines without one)");
    return;
  }
  cuprof::profile prof;  // default: cpu | cuda
  prof.start();
  CHECK(prof.running());
  CHECK_FALSE(prof.cuda_status().empty());
  { CUPROF_SCOPE("cpu_side"); }
  prof.stop();
  CHECK(count_spans(prof.last_trace(), "cpu_side") == 1);
  CHECK(prof.last_trace().meta.cuda_status == prof.cuda_status());
  const json doc = json::parse(cuprof::chrome_trace_json(prof.last_trace()));
  CHECK(doc["cuprof"]["cuda_status"] == prof.cuda_status());
}

// Runs in a fresh process (the next case starts it): the environment's profile installs signal
// handlers, std::terminate and a thread for the whole process.
TEST_CASE("[child] CUPROF_TRACE autostart") {
  if (!cuprof_test::is_child_run()) return;
  using cuprof::detail::environment_profile;
  using cuprof::detail::finish_environment_profile;
  using cuprof::detail::start_environment_profile;
  REQUIRE(environment_profile() == nullptr);  // the test binary runs without CUPROF_TRACE
  temp_dir dir;
  const std::string path = (dir.path / "autostart.pt.trace.json").string();
  const scoped_env activities("CUPROF_ACTIVITIES", "cpu");

  SUBCASE("unset: nothing starts") {
    const scoped_env trace("CUPROF_TRACE", nullptr);
    CHECK_FALSE(start_environment_profile());
    CHECK(environment_profile() == nullptr);
    CHECK_NOTHROW(finish_environment_profile());  // nothing to finish
  }
  SUBCASE("set: profiles until finish, writes the trace, prints the table") {
    const scoped_env trace("CUPROF_TRACE", path.c_str());
    const scoped_env table("CUPROF_TABLE", nullptr);
    REQUIRE(start_environment_profile());
    cuprof::profile* p = environment_profile();
    REQUIRE(p != nullptr);
    CHECK(p->running());
    CHECK_FALSE(start_environment_profile());  // only once
    {
      CUPROF_SCOPE("from_autostart");
      busy_wait_us(10);
    }
    stderr_capture err;
    finish_environment_profile();
    const std::string said = err.finish();
    CHECK(environment_profile() == nullptr);
    CHECK_FALSE(p->running());
    CHECK(said.find("trace written to " + path) != std::string::npos);
    CHECK(said.find("from_autostart") != std::string::npos);  // the table
    CHECK(said.find("Self CPU time total:") != std::string::npos);
    json doc;
    REQUIRE_NOTHROW(doc = json::parse(read_file(path)));
    std::size_t found = 0;
    for (const json& e : doc["traceEvents"]) found += e["ph"] == "X" && e["name"] == "from_autostart";
    CHECK(found == 1);
    delete p;  // finish leaves it allocated for later exit handlers; the test owns it now
  }
  SUBCASE("CUPROF_TABLE=0 silences the table") {
    const scoped_env trace("CUPROF_TRACE", path.c_str());
    const scoped_env table("CUPROF_TABLE", "0");
    REQUIRE(start_environment_profile());
    cuprof::profile* p = environment_profile();
    { CUPROF_SCOPE("quiet"); }
    stderr_capture err;
    finish_environment_profile();
    const std::string said = err.finish();
    CHECK(said.find("Self CPU time total:") == std::string::npos);
    CHECK(fs::exists(path));
    delete p;
  }
  SUBCASE("an unwritable CUPROF_TRACE path is reported, not thrown") {
    const std::string bad = (dir.path / "no" / "such" / "dir" / "t.json").string();
    const scoped_env trace("CUPROF_TRACE", bad.c_str());
    const scoped_env table("CUPROF_TABLE", "0");
    REQUIRE(start_environment_profile());
    cuprof::profile* p = environment_profile();
    stderr_capture err;
    CHECK_NOTHROW(finish_environment_profile());
    const std::string said = err.finish();
    CHECK(said.find("could not write the trace") != std::string::npos);
    CHECK(said.find(bad) != std::string::npos);
    delete p;
  }
  SUBCASE("a program's own profile is refused while CUPROF_TRACE runs, and its export leaves the file alone") {
    const scoped_env trace("CUPROF_TRACE", path.c_str());
    const scoped_env table("CUPROF_TABLE", "0");
    REQUIRE(start_environment_profile());
    cuprof::profile* p = environment_profile();
    const std::string own_path = (dir.path / "own.json").string();
    { std::ofstream(own_path) << "the program's earlier trace"; }
    stderr_capture err;
    {
      cuprof::profile own(cpu_only());
      own.start();
      CHECK_FALSE(own.running());
      { CUPROF_SCOPE("recorded_by_the_environment"); }
      const cuprof::export_result r = own.export_chrome_trace(own_path);
      CHECK(r.events == 0);
    }
    finish_environment_profile();
    const std::string said = err.finish();
    CHECK(read_file(own_path) == "the program's earlier trace");
    CHECK(said.find("this profile records nothing and will not write over its output files") != std::string::npos);
    CHECK(said.find("'" + own_path + "' left as it was") != std::string::npos);
    CHECK(read_file(path).find("recorded_by_the_environment") != std::string::npos);
    delete p;
  }
  SUBCASE("a relative CUPROF_TRACE is resolved when recording starts, not after the program changed directory") {
    const fs::path started_in = dir.path / "started_here", moved_to = dir.path / "moved_there";
    fs::create_directories(started_in);
    fs::create_directories(moved_to);
    const fs::path cwd = fs::current_path();
    const scoped_env trace("CUPROF_TRACE", "relative.json");
    const scoped_env table("CUPROF_TABLE", "0");
    fs::current_path(started_in);
    REQUIRE(start_environment_profile());
    cuprof::profile* p = environment_profile();
    fs::current_path(moved_to);
    stderr_capture err;
    finish_environment_profile();
    const std::string said = err.finish();
    fs::current_path(cwd);
    CHECK(fs::exists(started_in / "relative.json"));
    CHECK_FALSE(fs::exists(moved_to / "relative.json"));
    CHECK(said.find("trace written to " + (started_in / "relative.json").string()) != std::string::npos);
    delete p;
  }
  SUBCASE("CUPROF_DELAY longer than the run: says recording never started and keeps the existing file") {
    const scoped_env trace("CUPROF_TRACE", path.c_str());
    const scoped_env delay("CUPROF_DELAY", "1000");
    { std::ofstream(path) << "an earlier trace"; }
    REQUIRE(start_environment_profile());
    cuprof::profile* p = environment_profile();
    stderr_capture err;
    finish_environment_profile();
    const std::string said = err.finish();
    CHECK(said.find("recording never started") != std::string::npos);
    CHECK(read_file(path) == "an earlier trace");
    delete p;
  }
  CHECK(environment_profile() == nullptr);
}

TEST_CASE("CUPROF_TRACE autostart: start_environment_profile / finish_environment_profile") {
  temp_dir dir;
  const std::string output = (dir.path / "child.txt").string();
  const int rc = cuprof_test::run_child_case("[child] CUPROF_TRACE autostart", {}, output);
  const std::string said = read_file(output);
  CAPTURE(said);
  CHECK(rc == 0);
  CHECK(said.find("Status: SUCCESS!") != std::string::npos);
  CHECK(std::regex_search(said, std::regex(R"(test cases: +1 \| +1 passed)")));  // it ran
}

TEST_CASE("a profile used as a scope: start_now starts it, leaving the scope stops it and hands the trace over") {
  int ready = 0;
  std::size_t spans = 0;
  cuprof::profile_options options;
  options.activities = cuprof::activity::cpu;
  options.on_trace_ready = [&](cuprof::profile& p) {
    ++ready;
    spans = p.last_trace().spans.size();
  };
  {
    cuprof::profile prof(options, cuprof::start_now);
    CHECK(prof.running());
    CUPROF_SCOPE("inside_the_profile_scope");
  }
  CHECK(ready == 1);
  CHECK(spans == 1);
  cuprof::profile next(options, cuprof::start_now);  // the slot was freed
  CHECK(next.running());
}

}  // TEST_SUITE profile
