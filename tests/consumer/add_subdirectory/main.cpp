// A downstream program: include the umbrella header, record one scope.
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
