// A file that only annotates: the scopes header, no runtime.
#include <cuprof/record_function.hpp>

int work(int n) {
  CUPROF_SCOPE("work_scope");
  int sum = 0;
  for (int i = 0; i < n; ++i) sum += i;
  return sum;
}
