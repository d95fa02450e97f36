// What cuprof reads from its environment variables, as pure functions of the
// variables' text (a null pointer: unset), so that they can be tested and
// fuzzed without touching the environment (tests/fuzz/fuzz_env_config.cpp).
// Their callers do the getenv(). Every switch and number goes through the one
// parser of its kind here, and a bad value gives one line naming the
// variable, the value and what is used instead (read_* below; log.hpp's
// use_setting prints it once per process). A window policy's own setting
// (CUPROF_CAPTURE_RANGE, CUPROF_SLOW_STEPS) is parsed beside its policy in
// runtime/windows/, from these.
#pragma once

#include "text.hpp"

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace cuprof::detail {

// RANK, WORLD_SIZE and their MPI/Slurm spellings: a decimal integer in
// [0, 2^30), as strtol reads it (leading blanks and a '+' allowed), with
// nothing after it.
inline std::optional<int> parse_env_int(const char* v) {
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (errno == 0 && end != v && *end == '\0' && x >= 0 && x < (1L << 30)) return int(x);
  return std::nullopt;
}

// CUPROF_MAX_RECORDS: a positive count, decimal digits only. strtoull alone
// would read "-1" as 2^64-1, turning a typo into "no cap". A count too large
// for the type means "no practical cap" and saturates.
inline std::optional<std::size_t> parse_record_cap(const char* v) {
  if (!v || !*v) return std::nullopt;
  for (const char* p = v; *p; ++p)
    if (*p < '0' || *p > '9') return std::nullopt;
  errno = 0;
  const unsigned long long n = std::strtoull(v, nullptr, 10);
  if (errno == ERANGE || n > std::uint64_t(SIZE_MAX)) return std::size_t(SIZE_MAX);
  if (n == 0) return std::nullopt;
  return std::size_t(n);
}

// CUPROF_QUIET, CUPROF_TABLE: 1/0, yes/no, true/false or on/off, in any case.
inline std::optional<bool> parse_switch(const char* v) {
  if (!v) return std::nullopt;
  const std::string s = ascii_lowercase(v);
  if (s == "1" || s == "yes" || s == "true" || s == "on") return true;
  if (s == "0" || s == "no" || s == "false" || s == "off") return false;
  return std::nullopt;
}

// CUPROF_DELAY, CUPROF_DURATION (and `cuprof run --delay/--duration`): a
// decimal number of seconds from 0 to 1e7 (115 days), nothing before or after
// it. strtod alone would also take blanks, hex, "inf", "nan" and "1e999".
inline std::optional<double> parse_seconds(const char* v) {
  if (!v || !((*v >= '0' && *v <= '9') || *v == '.') || std::strpbrk(v, "xX")) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (*end != '\0' || !std::isfinite(x) || x < 0 || x > 1e7) return std::nullopt;
  return x;
}

// CUPROF_CLOCK: "monotonic" (in any case) forces clock_gettime.
inline std::optional<bool> parse_clock_forced_monotonic(const char* v) {
  if (!v) return std::nullopt;
  const std::string s = ascii_lowercase(v);
  if (s == "monotonic") return true;
  return std::nullopt;
}

// CUPROF_TRACE_DETAIL (and `cuprof run --detail`): "kineto" or "lean", in any
// case; true for lean (trace_detail in output/chrome_trace.hpp).
inline std::optional<bool> parse_lean_trace(const char* v) {
  if (!v) return std::nullopt;
  const std::string s = ascii_lowercase(v);
  if (s == "lean") return true;
  if (s == "kineto") return false;
  return std::nullopt;
}

// A variable's value as a line quotes it: safe for a terminal, and cut after
// 64 characters, whole UTF-8 ones (a value can be kilobytes long; the line
// must stay one line), with its length in bytes.
inline std::string quoted_value(std::string_view text) {
  constexpr std::size_t shown = 64;
  if (utf8_length(text) <= shown) return terminal_safe(text);
  return terminal_safe(utf8_prefix(text, shown)) + "... (" + std::to_string(text.size()) + " bytes)";
}

// A setting as its variable gives it: the parsed value, or the default and the
// one line that says what was wrong and what is used instead. Unset or empty
// is the default, silently.
template <class T>
struct env_setting {
  T value;
  std::string problem;
};

template <class T>
env_setting<T> read_setting(const char* name, const char* text, const std::optional<T>& parsed, const T& fallback,
                            const char* expected, const std::string& used) {
  if (!text || !*text) return {fallback, {}};
  if (parsed) return {*parsed, {}};
  return {fallback, std::string(name) + "=" + quoted_value(text) + " is not " + expected + "; using " + used};
}

inline env_setting<bool> read_switch(const char* name, const char* text, bool fallback) {
  return read_setting(name, text, parse_switch(text), fallback, "1/0, yes/no, true/false or on/off", fallback ? "yes" : "no");
}

// CUPROF_MAX_RECORDS (GPU records) and CUPROF_MAX_CPU_EVENTS (CPU slots).
inline env_setting<std::size_t> read_record_cap(const char* name, const char* text, std::size_t fallback) {
  return read_setting(name, text, parse_record_cap(text), fallback, "a positive count in decimal digits",
                      std::to_string(fallback));
}

inline env_setting<double> read_seconds(const char* name, const char* text) {
  return read_setting(name, text, parse_seconds(text), 0.0, "a number of seconds from 0 to 1e7", "0");
}

// CUPROF_START_STEP and CUPROF_STEPS: a step's number or a count of steps.
inline env_setting<int> read_step_number(const char* name, const char* text, int fallback) {
  return read_setting(name, text, parse_env_int(text), fallback, "a whole number from 0 to 2^30",
                      fallback < 0 ? std::string("none") : std::to_string(fallback));
}

inline env_setting<bool> read_lean_trace(const char* text) {
  return read_setting("CUPROF_TRACE_DETAIL", text, parse_lean_trace(text), false, "kineto or lean", "kineto");
}

inline env_setting<bool> read_clock_forced_monotonic(const char* text) {
  return read_setting("CUPROF_CLOCK", text, parse_clock_forced_monotonic(text), false, "monotonic",
                      "the default clock (the TSC where it is invariant, else CLOCK_MONOTONIC)");
}

// The GPU metrics' sampling period unless one is asked for: a kernel of two
// periods gets its own samples. CUPTI's decoding costs about the same CPU
// time per second of GPU time at any period (a sample of the default set:
// about 60 us at 100 us, 90 at 200, H200), but its bursts grew with shorter
// periods: at 100 us the decoding fell behind now and then.
inline constexpr std::uint64_t default_gpu_metrics_interval_ns = 200000;

// CUPROF_GPU_METRICS (and `cuprof run --gpu-metrics[=LIST]`): 1, on, yes,
// true or "default" for the default set, 0/off for none, or a comma-separated
// list of CUPTI metric names (letters, digits, '_' and '.'). With it,
// CUPROF_GPU_METRICS_INTERVAL: the sampling period, "200us" (ns, us or ms; a
// bare number is microseconds), from 1 us to 1 s.
struct gpu_metrics_setting {
  bool on = false;
  std::vector<std::string> names;  // empty: the default set
  std::uint64_t interval_ns = default_gpu_metrics_interval_ns;
};

inline std::optional<std::uint64_t> parse_metric_interval(const char* v) {
  if (!v || !*v) return std::nullopt;
  std::string text = v;
  double scale = 1000;  // a bare number is microseconds
  static const struct {
    const char* suffix;
    double ns;
  } units[] = {{"ns", 1}, {"us", 1e3}, {"ms", 1e6}};
  for (const auto& u : units)
    if (ends_with(text, u.suffix)) {
      text.resize(text.size() - std::strlen(u.suffix));
      scale = u.ns;
      break;
    }
  if (text.empty() || text.find_first_not_of("0123456789.") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end) * scale;
  if (*end != '\0' || !std::isfinite(x) || x < 1000 || x > 1e9) return std::nullopt;
  return std::uint64_t(x + 0.5);
}

inline env_setting<gpu_metrics_setting> read_gpu_metrics(const char* list) {
  gpu_metrics_setting g;
  if (!list || !*list) return {g, {}};
  if (const std::optional<bool> on = parse_switch(list)) {
    g.on = *on;
  } else if (ascii_lowercase(list) == "default") {
    g.on = true;
  } else {
    const std::string spec = list;
    for (std::size_t at = 0; at <= spec.size();) {
      std::size_t comma = spec.find(',', at);
      if (comma == std::string::npos) comma = spec.size();
      const std::string name = spec.substr(at, comma - at);
      at = comma + 1;
      if (name.empty()) continue;
      if (name.size() > 200 ||
          name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.") != std::string::npos)
        return {{},
                "CUPROF_GPU_METRICS: '" + quoted_value(name) +
                    "' is not a CUPTI metric name (letters, digits, '_' and '.'); GPU metrics are off"};
      g.names.push_back(name);
    }
    g.on = !g.names.empty();
  }
  return {g, {}};
}

inline env_setting<std::uint64_t> read_gpu_metrics_interval(const char* text) {
  return read_setting("CUPROF_GPU_METRICS_INTERVAL", text, parse_metric_interval(text), default_gpu_metrics_interval_ns,
                      "a period from 1us to 1000ms (ns, us or ms)",
                      std::to_string(default_gpu_metrics_interval_ns / 1000) + "us");
}

// The libcupti paths to try, in order. An explicit CUPROF_CUPTI_LIBRARY is the
// only one; otherwise the loader path, then under $CUDA_HOME, $CUDA_PATH and
// /usr/local/cuda.
inline std::vector<std::string> cupti_library_candidates(const char* forced, const char* cuda_home, const char* cuda_path) {
  if (forced && *forced) return {forced};
  std::vector<std::string> candidates = {"libcupti.so.13", "libcupti.so"};
  for (const char* root : {cuda_home, cuda_path}) {
    if (!root || !*root) continue;
    candidates.push_back(std::string(root) + "/extras/CUPTI/lib64/libcupti.so.13");
    candidates.push_back(std::string(root) + "/lib64/libcupti.so.13");
  }
  candidates.push_back("/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13");
  candidates.push_back("/usr/local/cuda/lib64/libcupti.so.13");
  return candidates;
}

}  // namespace cuprof::detail
