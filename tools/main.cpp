// The `cuprof` executable: see cli.hpp and `cuprof --help`.
#include "cli.hpp"

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv, argv + argc);
  std::string out, err;
  const int rc = cuprof::cli::run(args, out, err);
  if (!out.empty() && (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0)) {
    std::fputs("cuprof: cannot write the output\n", stderr);
    return rc ? rc : 1;
  }
  if (!err.empty()) std::fwrite(err.data(), 1, err.size(), stderr);
  return rc;
}
