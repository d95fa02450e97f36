// Runs the `cuprof` command in this process: its exit status, stdout and stderr.
#pragma once

#include "../../tools/cli/cli.hpp"

#include <string>
#include <vector>

namespace cuprof_test {

struct cli_run {
  int rc = -1;
  std::string out, err;
};

// `cuprof ARGS...`.
inline cli_run cli(std::vector<std::string> args) {
  args.insert(args.begin(), "cuprof");
  cli_run r;
  r.rc = cuprof::cli::run(args, r.out, r.err);
  return r;
}

// The lines of the command's output.
inline std::size_t lines(const std::string& s) {
  std::size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace cuprof_test
