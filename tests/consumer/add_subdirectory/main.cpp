// A downstream program: include the umbrella header, record one scope. One
// file, so it is also the one that compiles cuprof's runtime.
#define CUPROF_IMPLEMENTATION
#include <cuprof/cuprof.hpp>

#include <cstdio>

int main() {
  cuprof::profile p;
  p.start();
  { CUPROF_SCOPE("hello"); }
  p.stop();
  std::puts("cuprof consumer: ok");
  return 0;
}
