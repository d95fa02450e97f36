// Chrome trace JSON in the flavour torch.profiler (Kineto) writes, so Perfetto,
// chrome://tracing and HolisticTraceAnalysis open cuprof traces as they open
// torch's. The contract is docs/trace-format.md. Streaming: no DOM is built.
#pragma once

#include "trace_schema.hpp"
#include "../base/config.hpp"
#include "../model/event.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace cuprof {

// Lanes that are not a CPU process or a GPU device.
constexpr std::uint32_t overhead_pid = 0x40000000u;  // above any Linux pid_max
using detail::schema::sync_tid_offset;               // overlapping sync records, as Kineto

struct export_result {
  std::string path;
  std::size_t events = 0;
  std::uint64_t bytes = 0;  // on disk (compressed for .gz)
};

// How much of each GPU record's detail a trace carries (docs/trace-format.md).
enum class trace_detail : std::uint8_t {
  // Every arg Kineto writes that cuprof has, as torch.profiler's trace shows them.
  kineto,
  // What the viewers draw and HTA reads, for long windows: kernels, copies and
  // memsets lose the args their lane or their call already gives (device,
  // External id), kernels their launch configuration (registers, shared memory,
  // grid, block, estimated occupancy). A quarter smaller on empty kernels:
  // 361 bytes a launch against 496 (docs/performance.md).
  lean,
};

struct export_options {
  trace_detail detail = trace_detail::kineto;
};

// Writes `t` to `path` atomically (".gz" compresses). Throws cuprof::error.
export_result export_chrome_trace(const trace& t, const std::string& path, const export_options& options = {});

namespace detail {
class trace_directory;  // output/file_sink.hpp
}
// The same, `path` being in the directory `where` held since it was bound
// (CUPROF_TRACE's, at start), whatever the directory's name resolves to now.
export_result export_chrome_trace(const trace& t, const detail::trace_directory& where, const std::string& path,
                                  const export_options& options = {});

// The same document as a string, for tests and tools.
std::string chrome_trace_json(const trace& t, const std::string& trace_name = "cuprof", const export_options& options = {});

}  // namespace cuprof
