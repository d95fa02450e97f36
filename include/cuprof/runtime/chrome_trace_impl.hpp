// The definitions of output/chrome_trace.hpp's entry points: the writer run
// on a file or into a string. Compiled once per program (runtime.hpp).
#pragma once

#include "../base/log.hpp"
#include "../base/text.hpp"
#include "../output/block_writer.hpp"
#include "../output/chrome_trace.hpp"
#include "../output/file_sink.hpp"
#include "../output/trace_event_writer.hpp"
#include "../output/trace_layout.hpp"

#include <cstdio>
#include <memory>
#include <string>

namespace cuprof {

export_result export_chrome_trace(const trace& t, const std::string& path, const export_options& options) {
  return export_chrome_trace(t, detail::trace_directory(path), path, options);
}

export_result export_chrome_trace(const trace& t, const detail::trace_directory& where, const std::string& path,
                                  const export_options& options) {
  // A path elsewhere than the bound directory is looked up now.
  std::unique_ptr<detail::trace_directory> elsewhere;
  if (!where.holds(path)) elsewhere = std::make_unique<detail::trace_directory>(path);
  detail::atomic_file file(elsewhere ? *elsewhere : where, path);
  const detail::chrome_trace_layout layout(t, path, detail::chrome_trace_layout::default_items_per_block, options);
  export_result r{path, detail::parallel_block_writer(layout, file).run()};
  file.commit();
  r.bytes = file.size();
  char size[32];
  std::snprintf(size, sizeof size, "%.1f MB", double(r.bytes) / 1e6);
  // "0 dropped" only when true: a call or GPU record left without its partner at the window's edges counts.
  const std::uint64_t dropped = t.meta.dropped_gpu_records + t.meta.dropped_cpu_events + t.meta.edges.lost_count();
  detail::log_info("trace written to " + detail::terminal_safe(path) + " (" + std::to_string(r.events) + " events, " + size +
                   ", " + std::to_string(dropped) + " dropped records)");
  return r;
}

std::string chrome_trace_json(const trace& t, const std::string& trace_name, const export_options& options) {
  const detail::chrome_trace_layout layout(t, trace_name, detail::chrome_trace_layout::default_items_per_block, options);
  return detail::chrome_trace_writer(layout).document();
}

}  // namespace cuprof
