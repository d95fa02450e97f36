// Target 4 of docs/performance.md: Chrome trace export speed, bytes per event
// and gzip ratio, on the CPU machine. Prints one line per measurement.
//   export_bench [steps]   (default 100000 steps = 1.9 M events)
#define CUPROF_IMPLEMENTATION  // the writer is compiled here
#include "synthetic_trace.hpp"

#include <cuprof/chrome_trace.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

static double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

static long file_size(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? long(st.st_size) : -1;
}

int main(int argc, char** argv) {
  const std::size_t steps = argc > 1 ? std::size_t(std::atol(argv[1])) : 100000;
  const cuprof::trace t = bench::synthetic_trace(steps);
  const std::string dir = argc > 2 ? argv[2] : "/tmp";
  const std::string json = dir + "/cuprof_export_bench.json", gz = json + ".gz";

  std::vector<double> in_memory, to_file;
  std::size_t events = 0, bytes = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    std::size_t n = 0;
    cuprof::detail::chrome_trace_writer w(t, [&](cuprof::detail::text_buffer& chunk) { n += chunk.size(); chunk.clear(); });
    events = w.write("bench");
    in_memory.push_back(seconds_since(t0));
    bytes = n;
    t0 = std::chrono::steady_clock::now();
    cuprof::export_chrome_trace(t, json);
    to_file.push_back(seconds_since(t0));
  }
  auto t0 = std::chrono::steady_clock::now();
  cuprof::export_chrome_trace(t, gz);
  const double gz_seconds = seconds_since(t0);
  std::sort(in_memory.begin(), in_memory.end());
  std::sort(to_file.begin(), to_file.end());
  const double json_size = double(file_size(json)), gz_size = double(file_size(gz));
  std::printf("export_events=%zu\n", events);
  std::printf("export_events_per_s_in_memory=%.0f\n", double(events) / in_memory[2]);
  std::printf("export_events_per_s_to_file=%.0f\n", double(events) / to_file[2]);
  std::printf("export_bytes_per_event=%.1f\n", double(bytes) / double(events));
  std::printf("export_gzip_ratio=%.1f\n", json_size / gz_size);
  std::printf("export_gzip_events_per_s=%.0f\n", double(events) / gz_seconds);
  std::remove(json.c_str());
  std::remove(gz.c_str());
}
