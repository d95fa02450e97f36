// What cuprof reads from its environment variables, as pure functions of the
// variables' text (a null pointer: unset), so that they can be tested and
// fuzzed without touching the environment (tests/fuzz/fuzz_env_config.cpp).
// Their callers do the getenv().
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
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

// CUPROF_QUIET and other on/off switches: set, non-empty and not "0...".
inline bool parse_env_flag(const char* v) { return v && *v && *v != '0'; }

// The libcupti paths to try, in order. An explicit CUPROF_CUPTI_LIBRARY is the
// only one; otherwise the loader path, then under $CUDA_HOME, $CUDA_PATH and
// /usr/local/cuda.
inline std::vector<std::string> cupti_library_candidates(const char* forced, const char* cuda_home,
                                                         const char* cuda_path) {
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
