// Built with -DCUPROF_DISABLE: every scope and profiler call compiles to
// nothing, but the API still compiles: the umbrella then holds only macros and
// empty stubs (disabled_api.hpp), so this file uses the API as a
// program would. Exit status 0 when nothing at all was
// recorded; otherwise the number of failed checks (each named on stderr).
#ifndef CUPROF_DISABLE
#define CUPROF_DISABLE
#endif
#include <cuprof/cuprof.hpp>

#include <cstdio>
#include <string>
#include <sys/stat.h>

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "compile_out: FAILED: %s\n", what);
    ++failures;
  }
}

int traced_function(int x) {
  CUPROF_FUNCTION();
  CUPROF_SCOPE("inside traced_function");
  return x + 1;
}

bool nothing_recorded(const cuprof::profile& p) {
  const cuprof::trace& t = p.last_trace();
  return t.spans.empty() && t.api_calls.empty() && t.gpu.empty() && p.key_averages().rows().empty() &&
         p.key_averages(cuprof::group_by::args).rows().empty();
}

}  // namespace

int main() {
  // Scopes are empty objects.
  static_assert(sizeof(cuprof::record_function) == 1, "record_function holds nothing under CUPROF_DISABLE");

  {
    cuprof::profile_options options;
    options.activities = cuprof::activity::cpu;
    cuprof::profile prof(options);
    prof.start();
    {
      CUPROF_SCOPE("static scope");
      cuprof::record_function dynamic(std::string("dynamic ") + "scope");
      cuprof::record_function by_static_name(cuprof::static_name{"static name"});
      CUPROF_SCOPE("with arguments", {{"M", 8192}, {"alpha", 0.5}});
      cuprof::record_function dynamic_with_args(std::string("dynamic"), {{"N", 3}});
      check(traced_function(1) == 2, "code inside scopes still runs");
    }
    prof.step();
    prof.stop();
    check(nothing_recorded(prof), "no span recorded without a schedule");
  }

  {
    // With a schedule the session wraps steps in ProfilerStep#N scopes: those
    // must go too, and on_trace_ready must see an empty trace if it is called.
    bool ready_saw_spans = false;
    cuprof::profile_options options;
    options.activities = cuprof::activity::cpu;
    options.schedule = cuprof::schedule(0, 0, 2, 1);
    options.on_trace_ready = [&](cuprof::profile& p) { ready_saw_spans = ready_saw_spans || !nothing_recorded(p); };
    cuprof::profile prof(options);
    prof.start();
    for (int i = 0; i < 3; ++i) {
      CUPROF_SCOPE("step body");
      traced_function(i);
      prof.step();
    }
    prof.stop();
    check(!ready_saw_spans, "on_trace_ready saw no span");
    check(nothing_recorded(prof), "no ProfilerStep#N or other span recorded with a schedule");
  }

  {
    // slow_steps keeps compiling, its settings assigned as in a real build, and keeps nothing.
    bool ready_called = false;
    cuprof::profile_options options;
    options.activities = cuprof::activity::cpu;
    cuprof::slow_steps slow;
    slow.threshold_ms = 1;
    slow.before = 0;
    slow.validate();
    options.slow_steps = slow;
    options.on_trace_ready = [&](cuprof::profile&) { ready_called = true; };
    cuprof::profile prof(options, cuprof::start_now);
    for (int i = 0; i < 3; ++i) prof.step();
    prof.stop();
    check(!ready_called && nothing_recorded(prof), "slow_steps keeps nothing");
  }

  // Summaries are empty texts and nothing reaches the disk.
  cuprof::profile idle(cuprof::profile_options{}, cuprof::start_now);
  check(idle.key_averages().table().empty(), "table() of nothing is empty, as torch's");
  cuprof::table_options table;
  table.sort_by = "cuda_time_total";
  table.row_limit = 10;
  const std::string text = idle.key_averages().table(table);
  std::fputs(idle.key_averages().table("self_cpu_time_total", 5).c_str(), stdout);
  check(text.empty() && cuprof::chrome_trace_json(idle.last_trace()).empty(), "texts are empty");
  const char* path = "compile_out_trace.json";
  const cuprof::export_result written = idle.export_chrome_trace(std::string(path));
  cuprof::export_chrome_trace(idle.last_trace(), path);
  const cuprof::export_options lean{cuprof::trace_detail::lean};
  idle.export_chrome_trace(path, lean);
  cuprof::export_chrome_trace(idle.last_trace(), path, lean);
  struct stat st;
  check(written.events == 0 && written.bytes == 0 && ::stat(path, &st) != 0, "export_chrome_trace writes no file");
  cuprof::profile_options with_handler;
  with_handler.on_trace_ready = cuprof::tensorboard_trace_handler("compile_out_traces", "", true, lean);
  with_handler.activities = cuprof::activity::cpu | cuprof::activity::cuda;
  check(!with_handler.on_trace_ready, "a handler is never called");
  check(idle.cuda_status().empty() && !idle.running() && idle.step_num() == 0 &&
            idle.current_action() == cuprof::profiler_action::none,
        "the session reports nothing running");
  check(cuprof::schedule(1, 1, 2)(3) == cuprof::profiler_action::record_and_save, "schedule still computes actions");

  if (failures == 0) std::puts("compile_out: nothing recorded under CUPROF_DISABLE");
  return failures;
}
