/* A C file of a program whose build forces <cuprof/cuprof.hpp> into every file (tests/CMakeLists.txt). */
#include <stdio.h>

int main(void) {
  printf("a C file\n");
  return 0;
}
