// The fuzz targets: one function per parser, shared by the libFuzzer harnesses
// (tests/fuzz/fuzz_*.cpp) and by tests/test_reliability.cpp, which replays the
// seed corpus and every regression input through them in the normal (and
// sanitizer) test builds. A target returns normally or throws cuprof::error;
// anything else (a crash, a sanitizer report, another exception, a broken
// invariant, reported through abort()) is a finding.
#pragma once

#include <cuprof/chrome_trace.hpp>
#include <cuprof/detail/env.hpp>
#include <cuprof/detail/process_info.hpp>
#include <cuprof/diff.hpp>
#include <cuprof/insights.hpp>
#include <cuprof/table.hpp>
#include <cuprof/trace_reader.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace cuprof_fuzz {

[[noreturn]] inline void broken(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "fuzz invariant broken: %s %s\n", what, detail.c_str());
  std::abort();
}

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
  const cuprof::event_averages avg = cuprof::key_averages(lt.t);
  cuprof::table_options o;
  o.sort_by = "cuda_time_total";
  o.row_limit = -1;
  o.stats = true;
  o.kernel_names = true;
  (void)avg.table(o);
  (void)avg.table("self_cpu_time_total", 10);
  cuprof::insights_options io;
  io.base_ns = lt.base_ns;
  (void)cuprof::format_insights(cuprof::analyze(lt.t, io), std::size_t(-1));
  (void)cuprof::format_diff(cuprof::diff_traces(lt.t, lt.t), std::size_t(-1));
  const std::string written = cuprof::chrome_trace_json(lt.t, "fuzz");
  try {
    const cuprof::loaded_trace back = cuprof::parse_trace(written, "fuzz (written back)");
    if (back.t.spans.size() != lt.t.spans.size() || back.t.gpu.size() != lt.t.gpu.size())
      broken("a trace read, written and read again changed its number of spans or GPU records");
  } catch (const cuprof::error& e) {
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
// the guide says, then the getenv-reading functions with the same values set.
inline void env_config(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::string> f = fields(data, size, 6);
  const auto opt = [](const std::string& s) { return s.c_str(); };

  // RANK and friends: [0, 2^30) or nothing.
  const std::optional<int> rank = cuprof::detail::parse_env_int(opt(f[0]));
  if (rank && (*rank < 0 || *rank >= (1 << 30))) broken("parse_env_int out of range", f[0]);
  if (all_digits(f[0]) && f[0].size() <= 9 && !rank) broken("parse_env_int rejected a small decimal", f[0]);
  if (rank && all_digits(f[0]) && std::to_string(*rank) != f[0].substr(std::min(f[0].find_first_not_of('0'), f[0].size() - 1)))
    broken("parse_env_int misread", f[0]);

  // CUPROF_MAX_RECORDS: digits only, positive; saturates.
  const std::optional<std::size_t> cap = cuprof::detail::parse_record_cap(opt(f[1]));
  if (cap && !all_digits(f[1])) broken("parse_record_cap accepted a non-decimal", f[1]);
  if (cap && *cap == 0) broken("parse_record_cap accepted 0", f[1]);
  if (!cap && all_digits(f[1]) && f[1].find_first_not_of('0') != std::string::npos)
    broken("parse_record_cap rejected a positive count", f[1]);

  // CUPROF_QUIET.
  if (cuprof::detail::parse_env_flag(opt(f[2])) != (!f[2].empty() && f[2][0] != '0'))
    broken("parse_env_flag", f[2]);

  // CUPROF_CUPTI_LIBRARY, CUDA_HOME, CUDA_PATH.
  const std::vector<std::string> c = cuprof::detail::cupti_library_candidates(
      f[3].empty() ? nullptr : f[3].c_str(), f[4].empty() ? nullptr : f[4].c_str(), f[5].c_str());
  if (!f[3].empty() && (c.size() != 1 || c[0] != f[3])) broken("an explicit CUPROF_CUPTI_LIBRARY is not the only candidate");
  if (f[3].empty() && (c.size() < 4 || c[0] != "libcupti.so.13")) broken("default libcupti candidates");
  for (const std::string& s : c)
    if (s.empty()) broken("an empty libcupti candidate");

  // The same values through the environment, read as the library reads them.
  ::setenv("RANK", f[0].c_str(), 1);
  ::setenv("WORLD_SIZE", f[1].c_str(), 1);
  ::setenv("CUPROF_QUIET", f[2].c_str(), 1);
  if (cuprof::detail::process_rank() != rank.value_or(0)) broken("process_rank differs from parse_env_int");
  if (cuprof::detail::quiet() != cuprof::detail::parse_env_flag(f[2].c_str())) broken("quiet() differs from parse_env_flag");
  cuprof::trace_metadata meta;
  cuprof::detail::fill_process_info(meta);
  if (meta.world_size < 0 || meta.rank < 0) broken("negative rank or world size");
}

}  // namespace cuprof_fuzz
