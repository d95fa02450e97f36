// cuprof_rewrite_trace DIR TRACE...: reads each trace and writes it again with
// cuprof's writer as DIR/rewritten_<its file name>. scripts/test-hta runs HTA on
// the GPU fixtures rewritten so: the writer's current output (its flows
// included) of work recorded on a GPU.
#define CUPROF_IMPLEMENTATION  // a program of its own: cuprof's runtime (the writer) is compiled here
#include <cuprof/cuprof.hpp>
#include <cuprof/trace_reader.hpp>

#include <cstdio>
#include <exception>
#include <string>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: cuprof_rewrite_trace DIR TRACE...\n");
    return 2;
  }
  try {
    for (int i = 2; i < argc; ++i) {
      const std::string path = argv[i];
      const std::string name = path.substr(path.find_last_of('/') + 1);
      cuprof::export_chrome_trace(cuprof::read_trace_file(path).t, std::string(argv[1]) + "/rewritten_" + name);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuprof_rewrite_trace: %s\n", e.what());
    return 1;
  }
  return 0;
}
