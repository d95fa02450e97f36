// Built with -DCUPROF_DISABLE: every scope and profiler call compiles to
// nothing, but the API still compiles. Exit status 0 when nothing at all was
// recorded; otherwise the number of failed checks (each named on stderr).
#ifndef CUPROF_DISABLE
#define CUPROF_DISABLE
#endif
#include <cuprof/cuprof.hpp>

#include <cstdio>
#include <string>

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
  return t.spans.empty() && t.api_calls.empty() && t.gpu.empty() && p.key_averages().rows().empty();
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

  // The table and the trace writer still work on what (not) was recorded.
  cuprof::profile idle;
  check(idle.key_averages().table().empty(), "table() of nothing is empty, as torch's");
  check(cuprof::chrome_trace_json(idle.last_trace()).find("\"traceEvents\"") != std::string::npos,
        "chrome_trace_json() still works");

  if (failures == 0) std::puts("compile_out: nothing recorded under CUPROF_DISABLE");
  return failures;
}
