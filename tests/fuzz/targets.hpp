// The fuzz targets: one function per parser, shared by the libFuzzer harnesses
// (tests/fuzz/fuzz_*.cpp) and by tests/unit/analysis_reader.cpp, which replays the
// seed corpus and every regression input through them in the normal (and
// sanitizer) test builds. A target returns normally or throws cuprof::error;
// anything else (a crash, a sanitizer report, another exception, a broken
// invariant, reported through abort()) is a finding.
#pragma once

#include <cuprof/cuprof.hpp>
#include <cuprof/runtime/autostart.hpp>
#include <cuprof/base/env.hpp>
#include <cuprof/runtime/process_info.hpp>
#include <cuprof/analysis.hpp>
#include <cuprof/cuprof.hpp>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cuprof_fuzz {

[[noreturn]] inline void broken(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "fuzz invariant broken: %s %s\n", what, detail.c_str());
  std::abort();
}

// From the earliest to the latest time in a trace (ns), window included.
inline std::uint64_t time_extent_ns(const cuprof::trace& t) {
  cuprof::time_extent e;
  // Each interval both ways: a hostile file may end an event before it starts.
  const auto add = [&](std::uint64_t a, std::uint64_t b) { e.add(std::min(a, b), std::max(a, b)); };
  if (t.meta.window_start_ns || t.meta.window_end_ns) add(t.meta.window_start_ns, t.meta.window_end_ns);
  for (const auto& x : t.spans) add(x.start_ns, x.end_ns);
  for (const auto& x : t.api_calls) add(x.start_ns, x.end_ns);
  for (const auto& x : t.gpu) add(x.start_ns, x.end_ns);
  for (const auto& x : t.overhead) add(x.start_ns, x.end_ns);
  for (const auto& x : t.gpu_annotations) add(x.start_ns, x.end_ns);
  for (const auto& x : t.memory) add(x.ts_ns, x.ts_ns);
  return e.end_ns >= e.start_ns ? e.end_ns - e.start_ns : 0;
}
// 1e15 us less the writer's rounding of its base down to a whole second.
constexpr std::uint64_t max_round_trip_extent_ns = 1000000000000000000ull - 2000000000ull;

// The trace reader, and what the `cuprof` command does with what it read:
// table (with the opt-in columns), insights, diff, and the writer, whose
// output must read back.
inline void trace_reader(const std::uint8_t* data, std::size_t size) {
  cuprof::loaded_trace lt;
  try {
    lt = cuprof::read_trace_bytes(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const cuprof::error&) {
    return;  // rejected with a message: the expected outcome for most inputs
  }
  // Memory events in time order, each charged to a scope of the trace or to none.
  for (std::size_t i = 0; i < lt.t.memory.size(); ++i) {
    const cuprof::memory_event& m = lt.t.memory[i];
    if (i && m.ts_ns < lt.t.memory[i - 1].ts_ns) broken("memory events out of time order");
    if (m.span != cuprof::no_index && m.span >= lt.t.spans.size()) broken("a memory event charged to no span of the trace");
  }
  if (!lt.t.memory.empty() && !lt.t.meta.memory_recorded) broken("memory events read, memory_recorded not set");
  // GPU metric samples: per GPU in time order, each ending by the next one's start, a value per metric.
  for (const cuprof::detail::gpu_metric_series& s : lt.t.gpu_metrics) {
    if (s.metrics.empty() || s.size() == 0 || s.end_ns.size() != s.size() || s.values.size() != s.size() * s.metrics.size())
      broken("a GPU metric series with no samples, no metrics, or values that do not fill it");
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s.end_ns[i] < s.start_ns[i]) broken("a GPU metric sample ends before it starts");
      if (i && s.start_ns[i] <= s.start_ns[i - 1]) broken("GPU metric samples out of time order");
      if (i && s.end_ns[i - 1] > s.start_ns[i]) broken("GPU metric samples overlap");
    }
  }
  const cuprof::event_averages avg = cuprof::key_averages(lt.t);
  cuprof::table_options o;
  o.sort_by = "cuda_time_total";
  o.row_limit = -1;
  o.stats = true;
  o.metrics = true;
  o.describe_kernel = cuprof::compact_kernel_name;
  (void)avg.table(o);
  (void)avg.table("self_cpu_time_total", 10);
  cuprof::insights_options io;
  io.base_ns = lt.base_ns;
  (void)cuprof::format_insights(cuprof::analyze(lt.t, io), std::size_t(-1));
  (void)cuprof::format_diff(cuprof::diff_traces(lt.t, lt.t), std::size_t(-1));
  const std::string written = cuprof::chrome_trace_json(lt.t, "fuzz");
  try {
    const cuprof::loaded_trace back = cuprof::parse_trace(written, "fuzz (written back)");
    if (back.t.spans.size() != lt.t.spans.size() || back.t.gpu.size() != lt.t.gpu.size() ||
        back.t.memory.size() != lt.t.memory.size())
      broken("a trace read, written and read again changed its number of spans, GPU records or memory events");
  } catch (const cuprof::error& e) {
    // The reader takes "ts" up to 1e15 us (31 years) after the base; a trace
    // whose times span more than that (a damaged baseTimeNanoseconds or
    // window) is written, but cannot be read back: a clear error, as here.
    if (time_extent_ns(lt.t) < max_round_trip_extent_ns)
      broken("the writer's output of a trace the reader accepted does not read back:", e.what());
  }
}

// Splits the input into fields at NUL bytes (environment values cannot hold one).
inline std::vector<std::string> fields(const std::uint8_t* data, std::size_t size, std::size_t n) {
  std::vector<std::string> out(n);
  std::size_t f = 0;
  for (std::size_t i = 0; i < size && f < n; ++i) {
    if (data[i] == 0) ++f;
    else out[f].push_back(char(data[i]));
  }
  return out;
}

inline bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// cuprof's environment variables: each parser against a simple model of what
// the guide says, then the whole CUPROF_TRACE configuration (read_environment,
// expand_trace_path) through a lookup that serves the same fields. Nothing is
// set in the real environment (setenv keeps every value it ever saw).
inline void env_config(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::string> f = fields(data, size, 13);
  const auto opt = [](const std::string& s) { return s.c_str(); };

  // RANK and friends: [0, 2^30) or nothing.
  const std::optional<int> rank = cuprof::detail::parse_env_int(opt(f[0]));
  if (rank && (*rank < 0 || *rank >= (1 << 30))) broken("parse_env_int out of range", f[0]);
  if (all_digits(f[0]) && f[0].size() <= 9 && !rank) broken("parse_env_int rejected a small decimal", f[0]);
  if (rank && all_digits(f[0]) && std::to_string(*rank) != f[0].substr(std::min(f[0].find_first_not_of('0'), f[0].size() - 1)))
    broken("parse_env_int misread", f[0]);
  const int world = cuprof::detail::parse_env_int(opt(f[1])).value_or(1);

  // CUPROF_MAX_RECORDS: digits only, positive; saturates.
  const std::optional<std::size_t> cap = cuprof::detail::parse_record_cap(opt(f[1]));
  if (cap && !all_digits(f[1])) broken("parse_record_cap accepted a non-decimal", f[1]);
  if (cap && *cap == 0) broken("parse_record_cap accepted 0", f[1]);
  if (!cap && all_digits(f[1]) && f[1].find_first_not_of('0') != std::string::npos)
    broken("parse_record_cap rejected a positive count", f[1]);

  // CUPROF_QUIET and CUPROF_TABLE: the eight words, in any case; anything else is no value.
  const auto lower = [](std::string s) {
    for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    return s;
  };
  const auto switch_model = [&](const std::string& s) -> std::optional<bool> {
    const std::string l = lower(s);
    if (l == "1" || l == "yes" || l == "true" || l == "on") return true;
    if (l == "0" || l == "no" || l == "false" || l == "off") return false;
    return std::nullopt;
  };
  if (cuprof::detail::parse_switch(opt(f[2])) != switch_model(f[2])) broken("parse_switch", f[2]);
  const cuprof::detail::env_setting<bool> quiet = cuprof::detail::read_switch("CUPROF_QUIET", opt(f[2]), false);
  if (quiet.problem.empty() != (f[2].empty() || switch_model(f[2]).has_value()))
    broken("read_switch: a problem for a valid value, or none for an invalid one", f[2]);
  if (quiet.problem.find_first_of("\x1b\r\n") != std::string::npos) broken("a control character in a warning", f[2]);

  // CUPROF_CUPTI_LIBRARY, CUDA_HOME, CUDA_PATH.
  const std::vector<std::string> c = cuprof::detail::cupti_library_candidates(
      f[3].empty() ? nullptr : f[3].c_str(), f[4].empty() ? nullptr : f[4].c_str(), f[5].c_str());
  if (!f[3].empty() && (c.size() != 1 || c[0] != f[3])) broken("an explicit CUPROF_CUPTI_LIBRARY is not the only candidate");
  if (f[3].empty() && (c.size() < 4 || c[0] != "libcupti.so.13")) broken("default libcupti candidates");
  for (const std::string& s : c)
    if (s.empty()) broken("an empty libcupti candidate");

  // CUPROF_TRACE, CUPROF_TABLE, CUPROF_ACTIVITIES, CUPROF_DELAY, CUPROF_DURATION;
  // an empty field is an unset variable, except where a byte says otherwise.
  const bool injected = !f[12].empty() && (f[12][0] & 1);
  const bool set_empty = !f[12].empty() && (f[12][0] & 2);
  const char* names[] = {"CUPROF_TRACE", "CUPROF_TABLE", "CUPROF_ACTIVITIES", "CUPROF_DELAY", "CUPROF_DURATION"};
  const auto lookup = [&](const char* name) -> const char* {
    for (int i = 0; i < 5; ++i)
      if (std::strcmp(name, names[i]) == 0) return f[6 + i].empty() && !set_empty ? nullptr : f[6 + i].c_str();
    return nullptr;
  };
  const std::string host = f[11].empty() ? "localhost" : f[11];  // host_name() is never empty in practice
  const cuprof::detail::environment_config e =
      cuprof::detail::read_environment(lookup, injected, 4242, host, rank.value_or(0), world);
  if (e.enabled != (injected || !f[6].empty())) broken("CUPROF_TRACE: enabled");
  if (!e.enabled) return;
  if (e.trace_path.empty()) broken("an enabled configuration with no trace path");
  if (!f[6].empty() && f[6].find('%') == std::string::npos && world <= 1 && e.trace_path != f[6])
    broken("a trace path without % changed", f[6]);
  if (world > 1 && f[6].find("%r") == std::string::npos &&
      e.trace_path.find(".rank" + std::to_string(rank.value_or(0))) == std::string::npos && f[6].find('%') == std::string::npos)
    broken("ranks of a multi-rank run would overwrite each other", e.trace_path);
  if (e.print_table != switch_model(f[7]).value_or(true)) broken("CUPROF_TABLE", f[7]);
  const std::string& a = f[8];
  const bool known = a.empty() || a == "cpu" || a == "cuda" || a == "cpu,cuda" || a == "cuda,cpu";
  if (known == std::any_of(e.problems.begin(), e.problems.end(),
                           [](const std::string& p) { return p.rfind("CUPROF_ACTIVITIES", 0) == 0; }))
    broken("CUPROF_ACTIVITIES: a problem reported for a valid value, or none for an invalid one", a);
  for (double v : {e.delay_s, e.duration_s})
    if (!(v >= 0 && v <= 1e7)) broken("a delay or duration out of range");
  if (e.problems.size() > 4) broken("more problems than variables");
  // The path pattern alone, with another rank and world size.
  const std::string p = cuprof::detail::expand_trace_path(f[6], 1, host, 3, 2);
  if (f[6].find("%r") == std::string::npos && p.find(".rank3") == std::string::npos && f[6].find('%') == std::string::npos)
    broken("expand_trace_path: no rank in a multi-rank path", p);
}

}  // namespace cuprof_fuzz
