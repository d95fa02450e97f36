// cuprof::analysis: reading cuprof and torch.profiler traces back, and what
// the `cuprof` command says about them (insights, diff, kernel names,
// throughput). A compiled library (target cuprof::analysis), apart from the
// header-only instrumentation: programs that record never compile or link it,
// and only it needs simdjson.
#pragma once

// Interim: the library's parts, until each has its declarations here and its
// definitions in src/analysis/*.cpp.
#include <cuprof/model/event.hpp>
#include <cuprof/output/table.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

// --- Kernel names -------------------------------------------------------------
// What a cuBLAS, cuBLASLt, CUTLASS or nvjet kernel name says about the GEMM
// (architecture, data types, tile, stages, layout, alignment, split-K,
// epilogue), plus the family of other common kernels (Triton, ATen
// elementwise). Two runs that show the same name did the same math; a
// different tile, layout or dtype means the dispatcher took another branch.

namespace cuprof {

enum class kernel_category : std::uint8_t {
  other,
  gemm,            // a matrix multiply (GEMM, batched GEMM, GEMM template)
  gemv,            // matrix-vector
  gemm_reduction,  // the reduction kernel that finishes a split-K GEMM
  elementwise,     // pointwise / map kernels
  reduction,
};

// "GEMM", "split-K reduction", "elementwise", ...
const char* category_name(kernel_category c);

struct kernel_name_info {
  std::string library;   // "cuBLAS (nvjet)", "cuBLAS", "cuBLASLt", "CUTLASS", "CUTLASS 3", "Triton (Inductor)", "ATen"; empty: not recognised
  kernel_category category = kernel_category::other;
  std::string arch;      // "sm90", "sm80", ...
  std::string a_type;    // operand A (and B when equal): "bf16", "fp16", "fp32", "tf32", "fp8 e4m3", ...
  std::string b_type;    // operand B when it differs from A
  std::string accumulate;
  std::string output;    // C/D
  std::string op_class;  // CUTLASS: "tensorop", "wmma", "simt"
  std::string instruction;  // MMA shape: "m16n8k16"; "SIMT" for sgemm-style kernels
  std::uint32_t tile_m = 0, tile_n = 0, tile_k = 0;  // CTA tile; 0: not in the name
  std::uint32_t stages = 0;  // pipeline stages; 0: not in the name (CUTLASS 3: 0 means automatic)
  std::string cluster;   // CTA cluster, "1x2"
  std::string layout;    // as written: "NNT", "tn", "tnn" (N: not transposed, T: transposed)
  std::uint32_t alignment = 0;  // elements per vector access ("align8", "ldg8")
  std::string split_k;   // "split-K", "stream-K", "segment-K off", ...; empty: the name says nothing
  std::string epilogue;  // "beta=0 (no C)", "beta=1 (C added)", "bias", "relu", ...
  std::string schedule;  // "cooperative (coopA)", "warp-specialized cooperative", "sliced-K 1x2", ...
  std::string op;        // elementwise functor or Triton's fused ops
  std::vector<std::string> unknown;  // tokens not understood

  bool is_gemm() const { return category == kernel_category::gemm || category == kernel_category::gemv; }
  bool recognised() const { return !library.empty() || category != kernel_category::other; }

  // "bf16", or "fp8 e4m3 x fp8 e5m2" when A and B differ; the output type when the name gives no operand type.
  std::string dtype() const;
  // "256x128x64" (M x N x K, K when the name gives it); empty without a tile.
  std::string tile() const;
  // Shorter, for a table column: "GEMM sm90 bf16 256x128x64 4 stages cluster 1x2 coopA beta=0 NNT".
  std::string compact() const;
  // One line: "cuBLAS (nvjet) GEMM sm90 bf16 (acc fp32, out bf16) tile 256x128x64 4 stages ...".
  std::string summary() const;
};

// Pure string work: no CUDA, no allocation beyond the result.
kernel_name_info decode_kernel_name(std::string_view name);

// table_options::describe_kernel's decoder: the compact form of what a kernel's name says.
std::string compact_kernel_name(std::string_view name);

}  // namespace cuprof

// --- Diff ---------------------------------------------------------------------
// Comparing two traces, as the profiling articles compare eager and compiled
// runs: did the GPU run the same kernels (same names: the same math), which
// kernels went away or appeared, how each kernel's time changed, and how the
// CPU overhead changed.

namespace cuprof {

enum class change_status : std::uint8_t { same, removed, added };

struct gpu_work_change {
  std::string name;
  change_status status = change_status::same;
  std::uint64_t calls_a = 0, calls_b = 0;
  std::uint64_t total_a_ns = 0, total_b_ns = 0;
  kernel_name_info decoded;

  double avg_a_ns() const { return calls_a ? double(total_a_ns) / double(calls_a) : 0.0; }
  double avg_b_ns() const { return calls_b ? double(total_b_ns) / double(calls_b) : 0.0; }
};

struct count_change {
  std::string name;
  std::uint64_t calls_a = 0, calls_b = 0;
  std::uint64_t total_a_ns = 0, total_b_ns = 0;
};

// A removed and an added kernel of one family: what their names say differs.
struct kernel_swap {
  std::string from, to;
  std::vector<std::string> differences;  // "layout NNT -> TNT", "tile 256x128x64 -> 192x128x64"
};

struct trace_diff {
  std::vector<gpu_work_change> gpu;  // same (by A's total time), then removed, then added
  std::vector<kernel_swap> swaps;
  std::vector<count_change> api;     // runtime and driver calls by name
  std::vector<std::string> scopes_only_a, scopes_only_b;
  std::vector<count_change> cpu;     // CPU scopes/ops and CUDA calls but synchronize calls, by Self CPU time
  time_totals totals_a, totals_b;    // as the table and insights give them
  std::size_t steps_a = 0, steps_b = 0;  // ProfilerStep#N scopes

  // Per step: divided by each trace's steps when both have steps, else the
  // totals, so that A and B are always divided alike.
  bool per_step() const { return steps_a && steps_b; }
  double per_step_a(std::uint64_t ns) const { return per_step() ? double(ns) / double(steps_a) : double(ns); }
  double per_step_b(std::uint64_t ns) const { return per_step() ? double(ns) / double(steps_b) : double(ns); }

  // GPU work of that status; GEMMs and GEMVs only with gemms_only.
  std::size_t count(change_status s, bool gemms_only = false) const;
};

// What `cuprof diff --fail-above` compares: GPU work, or the CPU's own work
// (time_totals::cpu_ns: synchronize calls, the CPU waiting, left out).
enum class diff_metric : std::uint8_t { gpu, cpu };

// A kernel (gpu) or a CPU scope, op or CUDA call (cpu), and its time per step in A and B.
struct growth {
  std::string name;
  double a_ns = 0, b_ns = 0;
};

// Did the metric's time per step grow by more than threshold_pct percent from
// A to B, and what grew most.
struct diff_gate {
  diff_metric metric = diff_metric::gpu;
  double threshold_pct = 0;
  double a_ns = 0, b_ns = 0;  // per step
  bool failed = false;
  std::vector<growth> grew_most;  // most first

  // B against A in percent; infinite when A had none and B has some.
  double growth_pct() const {
    if (a_ns == 0) return b_ns == 0 ? 0.0 : std::numeric_limits<double>::infinity();
    return (b_ns - a_ns) * 100.0 / a_ns;
  }
};

trace_diff diff_traces(const trace& a, const trace& b);

// The text of `cuprof diff`: GPU work (at most max_rows kernels), kernels
// swapped for another of their family, totals, CUDA calls, scopes only in one
// trace, and a summary.
std::string format_diff(const trace_diff& d, std::size_t max_rows = 30);

// The gate of `cuprof diff --fail-above`: the metric per step (totals without
// steps in both), failed when B grew by more than threshold_pct percent over
// A; the `max_items` kernels (gpu) or CPU scopes, ops and calls (cpu) that
// grew most per step.
diff_gate check_growth(const trace_diff& d, diff_metric metric, double threshold_pct, std::size_t max_items = 5);

// Why the gate cannot compare A and B on `metric`, or empty when it can. A
// trace without the metric's time would read as -100% (a pass) or +inf; a
// trace recorded with CUDA tracing off (cuda_status in its metadata) has no
// GPU time to compare, and counts the CPU's time in synchronize calls as CPU
// time, which a trace with CUDA tracing on leaves out. `a` and `b` are the
// traces `d` was made from.
std::string gate_blocker(const trace& a, const trace& b, const trace_diff& d, diff_metric metric);

// The gate's verdict and what grew most, after format_diff's text.
std::string format_gate(const trace_diff& d, const diff_gate& g);

// The `cuprof` command's own lines (what it read, the gate's message) count
// and write as the diff does.
namespace detail {
std::size_t steps_in(const trace& t);                 // ProfilerStep#N scopes
std::string us_text(double ns);                       // in torch's units: "12.345us", "1.500ms", "2.000s"
std::string signed_percent_text(double a, double b);  // from a to b: "+12.5%"; "new" when a is 0 and b is not
}  // namespace detail

}  // namespace cuprof
#include "../../insights.hpp"
#include "../../throughput.hpp"
#include "../../trace_reader.hpp"
