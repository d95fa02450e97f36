// The `cuprof` executable: see cli.hpp and `cuprof --help`.
#include "cli.hpp"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv, argv + argc);
  std::string out, err;
  cuprof::cli::launch_plan plan;
  cuprof::cli::terminal term;
  term.stdout_columns = cuprof::cli::terminal_columns(STDOUT_FILENO);
  if (::isatty(STDERR_FILENO)) term.progress_fd = STDERR_FILENO;
  term.live_fd = STDOUT_FILENO;
  const int rc = cuprof::cli::run(args, out, err, plan, term);
  if (!out.empty() && (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0)) {
    std::fputs("cuprof: cannot write the output\n", stderr);
    return rc ? rc : 1;
  }
  if (!err.empty()) std::fwrite(err.data(), 1, err.size(), stderr);
  if (rc == 0 && !plan.command.empty()) return cuprof::cli::exec_plan(plan);  // cuprof run: become the program
  return rc;
}
