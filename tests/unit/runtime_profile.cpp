// The profiler session on the CPU (include/cuprof/profile.hpp, schedule.hpp,
// trace_handler.hpp, runtime/profile_impl.hpp): start, stop, windows and
// schedules, on_trace_ready and the trace handler, and misuse of all of them.

#include <cuprof/cuprof.hpp>

#include "support/child_process.hpp"
#include "support/files.hpp"
#include "support/stderr_capture.hpp"
#include "support/traces.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace cuprof_test;

namespace {

using cuprof::no_index;

char letter(cuprof::profiler_action a) {
  switch (a) {
    case cuprof::profiler_action::none: return 'N';
    case cuprof::profiler_action::warmup: return 'W';
    case cuprof::profiler_action::record: return 'R';
    case cuprof::profiler_action::record_and_save: return 'S';
  }
  return '?';
}

// "N W R R S ..." for steps 0..n-1.
std::string actions(const cuprof::schedule& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    if (i) out += ' ';
    out += letter(s(i));
  }
  return out;
}

}  // namespace

TEST_SUITE("runtime_profile") {

TEST_CASE("profiler_action values and names match torch's ProfilerAction") {
  CHECK(int(cuprof::profiler_action::none) == 0);
  CHECK(int(cuprof::profiler_action::warmup) == 1);
  CHECK(int(cuprof::profiler_action::record) == 2);
  CHECK(int(cuprof::profiler_action::record_and_save) == 3);
  CHECK(std::string(cuprof::to_string(cuprof::profiler_action::none)) == "NONE");
  CHECK(std::string(cuprof::to_string(cuprof::profiler_action::warmup)) == "WARMUP");
  CHECK(std::string(cuprof::to_string(cuprof::profiler_action::record)) == "RECORD");
  CHECK(std::string(cuprof::to_string(cuprof::profiler_action::record_and_save)) == "RECORD_AND_SAVE");
}

TEST_CASE("schedule follows torch.profiler.schedule step by step") {
  // N = NONE, W = WARMUP, R = RECORD, S = RECORD_AND_SAVE.
  SUBCASE("wait=1 warmup=1 active=3 repeat=1 (torch's docs example)") {
    CHECK(actions(cuprof::schedule(1, 1, 3, 1), 8) == "N W R R S N N N");
  }
  SUBCASE("repeat=0 cycles forever") {
    CHECK(actions(cuprof::schedule(1, 1, 2, 0), 12) == "N W R S N W R S N W R S");
    const cuprof::schedule s(1, 1, 2, 0);
    CHECK(s(4000000001) == cuprof::profiler_action::warmup);  // mod 4 == 1, no overflow
    CHECK(s(4000000003) == cuprof::profiler_action::record_and_save);
  }
  SUBCASE("repeat=2 stops after two cycles") { CHECK(actions(cuprof::schedule(0, 2, 3, 2), 12) == "W W R R S W W R R S N N"); }
  SUBCASE("skip_first skips steps before the first cycle") {
    CHECK(actions(cuprof::schedule(1, 1, 2, 1, 3), 10) == "N N N N W R S N N N");
  }
  SUBCASE("skip_first_wait drops the first cycle's wait (the cycle still counts for repeat)") {
    CHECK(actions(cuprof::schedule(2, 1, 2, 2, 0, true), 11) == "W R S N N W R S N N N");
  }
  SUBCASE("skip_first and skip_first_wait together") {
    CHECK(actions(cuprof::schedule(3, 1, 1, 1, 2, true), 7) == "N N W S N N N");
  }
  SUBCASE("warmup=0, active=1: every recorded step is also a save") {
    CHECK(actions(cuprof::schedule(2, 0, 1, 3), 12) == "N N S N N S N N S N N N");
  }
  SUBCASE("wait=0 warmup=0 active=1 repeat=0: save every step") {
    CHECK(actions(cuprof::schedule(0, 0, 1, 0), 5) == "S S S S S");
  }
  SUBCASE("default-constructed schedule is wait=0 warmup=0 active=1 repeat=0") {
    const cuprof::schedule s;
    CHECK(s.wait == 0);
    CHECK(s.warmup == 0);
    CHECK(s.active == 1);
    CHECK(s.repeat == 0);
    CHECK(s.skip_first == 0);
    CHECK_FALSE(s.skip_first_wait);
    CHECK(actions(s, 3) == "S S S");
  }
  SUBCASE("negative steps are NONE") { CHECK(cuprof::schedule(0, 0, 1)(-1) == cuprof::profiler_action::none); }
}

TEST_CASE("invalid schedules throw cuprof::error naming the values") {
  const auto message = [](auto&& make) -> std::string {
    try {
      make();
    } catch (const cuprof::error& e) {
      return e.what();
    }
    return "(no throw)";
  };
  std::string m = message([] { cuprof::schedule(1, 1, 0); });
  CHECK(m.rfind("cuprof: ", 0) == 0);
  CHECK(m.find("active=0") != std::string::npos);
  CHECK(m.find("wait=1") != std::string::npos);
  m = message([] { cuprof::schedule(-1, 1, 1); });
  CHECK(m.find("wait=-1") != std::string::npos);
  m = message([] { cuprof::schedule(0, -2, 1); });
  CHECK(m.find("warmup=-2") != std::string::npos);
  m = message([] { cuprof::schedule(0, 0, 1, -1); });
  CHECK(m.find("repeat=-1") != std::string::npos);
  m = message([] { cuprof::schedule(0, 0, 1, 0, -5); });
  CHECK(m.find("skip_first=-5") != std::string::npos);
  m = message([] { cuprof::schedule(0, 0, -3); });
  CHECK(m.find("active=-3") != std::string::npos);
  CHECK_NOTHROW(cuprof::schedule(0, 0, 1, 0, 0));

  // A schedule edited after construction is checked again by validate() and by profile.
  cuprof::schedule s(1, 1, 1);
  s.active = 0;
  CHECK_THROWS_AS(s.validate(), cuprof::error);
  cuprof::profile_options o = cpu_only();
  o.schedule = s;
  CHECK_THROWS_AS(cuprof::profile{o}, cuprof::error);
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
    REQUIRE_NOTHROW(doc = json::parse(slurp(out / f)));
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

TEST_CASE("windows are independent; key_averages and export work on the last one") {
  cuprof::profile prof(cpu_only());
  CHECK(prof.key_averages().rows().empty());
  temp_dir dir;
  const std::string empty_path = (dir.path / "empty.json").string();
  CHECK_NOTHROW(prof.export_chrome_trace(empty_path));  // before any window: an empty, valid trace
  CHECK_NOTHROW(json::parse(slurp(empty_path)));
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

TEST_CASE(
    "misuse: on_trace_ready throwing what is not a std::exception: stop() passes it on, the profile stops; the destructor says "
    "it") {
  // In a child: std::terminate would end the test process.
  const int rc = in_child([] {
    stderr_capture err;
    {
      cuprof::profile_options o = cpu_only();
      o.on_trace_ready = [](cuprof::profile&) { throw 42; };
      cuprof::profile p(o);
      p.start();
      { CUPROF_SCOPE("thrown_window"); }
      try {
        p.stop();
        return 10;
      } catch (int v) {
        if (v != 42) return 11;
      }
      if (p.running()) return 12;
      cuprof::profile q(cpu_only());  // the process's slot was given back
      q.start();
      if (!q.running()) return 13;
      q.stop();
      p.start();  // restartable; destroyed running: ~profile stops, the handler throws again
      if (!p.running()) return 14;
      { CUPROF_SCOPE("second_window"); }
    }
    const std::string said = err.finish();
    std::size_t lines = 0;
    for (std::size_t at = said.find("stopping the profiler failed"); at != std::string::npos;
         at = said.find("stopping the profiler failed", at + 1))
      ++lines;
    std::fprintf(stderr, "%s", said.c_str());
    return lines == 1 ? 0 : 15;
  });
  CHECK(rc == 0);  // 128 + SIGABRT: std::terminate from ~profile
}

// The child half of the next test, in a fresh process: the line is said once per process.

TEST_CASE("[child] a refused profile started again and again") {
  if (!std::getenv("CUPROF_TEST_REFUSED") || !is_child_run()) return;
  cuprof::profile first(cpu_only());
  first.start();
  REQUIRE(first.running());
  stderr_capture err;
  for (int i = 0; i < 200; ++i) {
    cuprof::profile p(cpu_only());
    p.start();
    p.stop();
  }
  cuprof::profile again(cpu_only());
  for (int i = 0; i < 200; ++i) {
    again.start();
    again.step();
    again.stop();
  }
  const std::string said = err.finish();
  std::size_t lines = 0;
  for (std::size_t at = said.find("another cuprof profiler is already running"); at != std::string::npos;
       at = said.find("another cuprof profiler is already running", at + 1))
    ++lines;
  CAPTURE(said.substr(0, 2000));
  CHECK(lines == 1);
  first.stop();
}

TEST_CASE("misuse: a profile refused because another is running says so once per process, however often it is started") {
  temp_dir dir;
  const std::string err = (dir.path / "stderr.txt").string();
  const int rc = run_child_case("[child] a refused profile started again and again", {{"CUPROF_TEST_REFUSED", "1"}}, err);
  const std::string said = slurp(err);
  CAPTURE(said.substr(0, 4000));
  CHECK(rc == 0);
}

TEST_CASE("misuse: step() or stop() from on_trace_ready is refused with one line, not recursed into") {
  cuprof::profile_options o = cpu_only();
  o.schedule = cuprof::schedule(/*wait*/ 0, /*warmup*/ 0, /*active*/ 1);  // every step ends a window
  int handed_over = 0;
  o.on_trace_ready = [&](cuprof::profile& p) {
    ++handed_over;
    p.step();
    p.stop();
  };
  cuprof::profile prof(o);
  stderr_capture err;
  prof.start();
  prof.step();
  prof.stop();
  const std::string said = err.finish();
  CAPTURE(said);
  CHECK(handed_over == 2);  // the window step() ended, and the one stop() ended
  CHECK(prof.step_num() == 1);
  CHECK_FALSE(prof.running());
  CHECK(lines_containing(said, "step() called from on_trace_ready; ignored") == 2);
  CHECK(lines_containing(said, "stop() called from on_trace_ready; ignored") == 2);
}

}  // TEST_SUITE("runtime_profile")
