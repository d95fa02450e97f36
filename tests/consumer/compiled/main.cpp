// Drives the profiler with the runtime compiled in cuprof::runtime.
//   consumer              records work() and checks the trace it exported
//   consumer annotate     only runs work(): with CUPROF_TRACE set, the
//                         runtime's autostart writes the trace at exit
#include <cuprof/cuprof.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#ifndef CUPROF_COMPILED_RUNTIME
#error "cuprof::runtime defines CUPROF_COMPILED_RUNTIME for its users"
#endif

int work(int n);

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "annotate") == 0) return work(10) == 45 ? 0 : 1;
  cuprof::profile_options options;
  options.activities = cuprof::activity::cpu;
  cuprof::profile p(options);
  p.start();
  const int sum = work(10);
  p.stop();
  p.export_chrome_trace("compiled.json");
  std::ifstream in("compiled.json");
  std::stringstream text;
  text << in.rdbuf();
  if (sum != 45 || text.str().find("\"work_scope\"") == std::string::npos) {
    std::puts("cuprof compiled consumer: work_scope missing from the trace");
    return 1;
  }
  std::puts("cuprof compiled consumer: ok");
  return 0;
}
