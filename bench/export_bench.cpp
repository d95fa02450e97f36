// The output targets of docs/performance.md: Chrome trace
// export speed, bytes per event and per launch, plain and gzip, on the CPU
// machine. Prints one key=value line per measurement.
//   export_bench [--shape launch|matmul] [--count N] [--dir DIR] [--keep]
// launch (default): launch_bench's loop, N launches (default 1 M);
// matmul: the matmul_add-shaped trace, N steps (default 100000 = 1.9 M events).
// --keep leaves DIR/cuprof_export_bench.json and .json.gz, and the lean trace's
// cuprof_export_bench.lean.json and .json.gz, for bench/run trace-bytes.
// "in_memory" is formatting alone on one thread (the export formats on one per core);
// last, one core's gzip speed and size with each compressor (libdeflate where installed, zlib).
#define CUPROF_IMPLEMENTATION  // the writer is compiled here
#include "synthetic_trace.hpp"

#include <cuprof/cuprof.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

static long file_size(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? long(st.st_size) : -1;
}

// Median seconds of `reps` runs of `f`.
static double median_seconds(int reps, const std::function<void()>& f) {
  std::vector<double> s;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

int main(int argc, char** argv) {
  std::string shape = "launch", dir = "/tmp";
  long count = 0;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--shape") && has_value) shape = argv[++i];
    else if (!std::strcmp(argv[i], "--count") && has_value) count = std::atol(argv[++i]);
    else if (!std::strcmp(argv[i], "--dir") && has_value) dir = argv[++i];
    else if (!std::strcmp(argv[i], "--keep")) keep = true;
    else {
      std::fprintf(stderr, "usage: export_bench [--shape launch|matmul] [--count N] [--dir DIR] [--keep]\n");
      return 2;
    }
  }
  const bool launch_shape = shape == "launch";
  if (!launch_shape && shape != "matmul") {
    std::fprintf(stderr, "export_bench: unknown shape '%s'\n", shape.c_str());
    return 2;
  }
  const cuprof::trace t = launch_shape ? bench::launch_loop_trace(std::size_t(count > 0 ? count : 1000000))
                                       : bench::synthetic_trace(std::size_t(count > 0 ? count : 100000));
  std::size_t launches = 0;  // kernel launches: the unit of the per-launch figures
  for (const cuprof::gpu_activity& g : t.gpu) launches += g.kind != cuprof::gpu_kind::sync;
  const std::string json = dir + "/cuprof_export_bench.json", gz = json + ".gz";

  // Formatting alone, on one thread: what each of the export's workers does per block.
  std::size_t events = 0, bytes = 0;
  const cuprof::detail::chrome_trace_layout layout(t, "bench");
  const auto format_all = [&](const std::function<void(const cuprof::detail::text_buffer&)>& take) {
    cuprof::detail::chrome_trace_writer w(layout);
    events = 0;
    for (std::size_t k = 0; k < layout.block_count(); ++k) {
      w.out().clear();
      events += w.write_block(k);
      take(w.out());
    }
  };
  const double in_memory = median_seconds(5, [&] {
    bytes = 0;
    format_all([&](const cuprof::detail::text_buffer& block) { bytes += block.size(); });
  });
  const double to_file = median_seconds(5, [&] { cuprof::export_chrome_trace(t, json); });
  const double gzip = median_seconds(3, [&] { cuprof::export_chrome_trace(t, gz); });
  const double json_size = double(file_size(json)), gz_size = double(file_size(gz));
  std::printf("export_shape=%s\n", shape.c_str());
  std::printf("export_events=%zu\n", events);
  std::printf("export_launches=%zu\n", launches);
  std::printf("export_events_per_s_in_memory=%.0f\n", double(events) / in_memory);
  std::printf("export_events_per_s_to_file=%.0f\n", double(events) / to_file);
  std::printf("export_bytes_per_event=%.1f\n", double(bytes) / double(events));
  std::printf("export_bytes_per_launch=%.1f\n", json_size / double(launches));
  std::printf("export_gzip_bytes_per_launch=%.1f\n", gz_size / double(launches));
  std::printf("export_gzip_ratio=%.1f\n", json_size / gz_size);
  std::printf("export_gzip_events_per_s=%.0f\n", double(events) / gzip);
  std::printf("export_gzip_compressor=%s\n", cuprof::detail::libdeflate() ? "libdeflate" : "zlib");

  // The same trace with trace_detail::lean (GPU records without launch configuration).
  const cuprof::export_options lean{cuprof::trace_detail::lean};
  const std::string lean_json = dir + "/cuprof_export_bench.lean.json", lean_gz = lean_json + ".gz";
  const double lean_to_file = median_seconds(3, [&] { cuprof::export_chrome_trace(t, lean_json, lean); });
  const double lean_gzip = median_seconds(3, [&] { cuprof::export_chrome_trace(t, lean_gz, lean); });
  std::printf("export_lean_events_per_s_to_file=%.0f\n", double(events) / lean_to_file);
  std::printf("export_lean_gzip_events_per_s=%.0f\n", double(events) / lean_gzip);
  std::printf("export_lean_bytes_per_launch=%.1f\n", double(file_size(lean_json)) / double(launches));
  std::printf("export_lean_gzip_bytes_per_launch=%.1f\n", double(file_size(lean_gz)) / double(launches));

  // One core's gzip of the writer's own blocks, per compressor: what the .gz speed is made
  // of, and what the zlib fallback costs where libdeflate is absent.
  std::vector<std::string> blocks;
  format_all([&](const cuprof::detail::text_buffer& block) { blocks.emplace_back(block.data(), block.size()); });
  std::vector<std::pair<const char*, const cuprof::detail::libdeflate_library*>> compressors = {{"zlib", nullptr}};
  if (cuprof::detail::libdeflate()) compressors.emplace_back("libdeflate", cuprof::detail::libdeflate());
  for (const auto& [name, backend] : compressors) {
    cuprof::detail::gzip_compressor compressor(backend);
    std::size_t compressed = 0;
    const double seconds = median_seconds(3, [&] {
      compressed = 0;
      for (const std::string& b : blocks) compressed += compressor.compress(b.data(), b.size()).size();
    });
    std::printf("export_gzip_one_core_mb_per_s_%s=%.0f\n", name, double(bytes) / seconds / 1e6);
    std::printf("export_gzip_bytes_per_launch_%s=%.1f\n", name, double(compressed) / double(launches));
  }
  if (!keep)
    for (const std::string* path : {&json, &gz, &lean_json, &lean_gz}) std::remove(path->c_str());
}
