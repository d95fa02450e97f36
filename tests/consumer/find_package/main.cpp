// A downstream program, header-only: include the umbrella header, record one scope.
//   consumer            with its own profile
//   consumer annotate   the scope only: with CUPROF_TRACE set, the autostart
//                       this file asks for writes the trace at exit
#define CUPROF_IMPLEMENTATION
#include <cuprof/cuprof.hpp>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "annotate") == 0) {
    CUPROF_SCOPE("hello");
    return 0;
  }
  cuprof::profile p;
  p.start();
  { CUPROF_SCOPE("hello"); }
  p.stop();
  std::puts("cuprof consumer: ok");
  return 0;
}
