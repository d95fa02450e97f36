// cuprof::analysis: reading cuprof and torch.profiler traces back, and what
// the `cuprof` command says about them (insights, diff, kernel names,
// throughput). A compiled library (target cuprof::analysis), apart from the
// header-only instrumentation: programs that record never compile or link it,
// and only it needs simdjson.
//
// Sections, in the order they build on each other: kernel names, diff,
// throughput, insights, reading traces.
#pragma once

#ifdef CUPROF_DISABLE
#error "cuprof: reading and analysing traces needs the real model; build this file without CUPROF_DISABLE"
#endif

#include <cuprof/base/error.hpp>
#include <cuprof/model/event.hpp>
#include <cuprof/model/stats.hpp>
#include <cuprof/output/key_averages.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
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
  std::string
      library;  // "cuBLAS (nvjet)", "cuBLAS", "cuBLASLt", "CUTLASS", "CUTLASS 3", "Triton (Inductor)", "ATen"; empty: not recognised
  kernel_category category = kernel_category::other;
  std::string arch;    // "sm90", "sm80", ...
  std::string a_type;  // operand A (and B when equal): "bf16", "fp16", "fp32", "tf32", "fp8 e4m3", ...
  std::string b_type;  // operand B when it differs from A
  std::string accumulate;
  std::string output;                                // C/D
  std::string op_class;                              // CUTLASS: "tensorop", "wmma", "simt"
  std::string instruction;                           // MMA shape: "m16n8k16"; "SIMT" for sgemm-style kernels
  std::uint32_t tile_m = 0, tile_n = 0, tile_k = 0;  // CTA tile; 0: not in the name
  std::uint32_t stages = 0;                          // pipeline stages; 0: not in the name (CUTLASS 3: 0 means automatic)
  std::string cluster;                               // CTA cluster, "1x2"
  std::string layout;                                // as written: "NNT", "tn", "tnn" (N: not transposed, T: transposed)
  std::uint32_t alignment = 0;                       // elements per vector access ("align8", "ldg8")
  std::string split_k;                               // "split-K", "stream-K", "segment-K off", ...; empty: the name says nothing
  std::string epilogue;                              // "beta=0 (no C)", "beta=1 (C added)", "bias", "relu", ...
  std::string schedule;                              // "cooperative (coopA)", "warp-specialized cooperative", "sliced-K 1x2", ...
  std::string op;                                    // elementwise functor or Triton's fused ops
  std::vector<std::string> unknown;                  // tokens not understood

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
  std::vector<count_change> api;  // runtime and driver calls by name
  std::vector<std::string> scopes_only_a, scopes_only_b;
  std::vector<count_change> cpu;         // CPU scopes/ops and CUDA calls but synchronize calls, by Self CPU time
  time_totals totals_a, totals_b;        // as the table and insights give them
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

// --- Throughput ---------------------------------------------------------------
// Achieved throughput where the trace holds the sizes, against the GPU's peak.
//
//   memcpy, memset: bytes / duration ("bytes" of the record). Peak: the DRAM
//     bandwidth of deviceProperties (2 transfers per memory clock x bus
//     width); a device-to-device copy reads and writes each byte, so half of
//     it. Copies to or from the host or a peer cross a link the trace does not
//     describe: their peak is unknown.
//   GEMM kernels (decoded names): 2*M*N*K FLOPs (times "batch" when given)
//     from the arguments of the nearest enclosing scope that has integer M, N
//     and K (CUPROF_SCOPE("gemm", {{"M", m}, {"N", n}, {"K", k}})), per
//     kernel: the scope's sizes describe each GEMM launched in it. Peak: dense
//     tensor FLOPs per SM per clock of the architecture and the operand type x
//     numSms x clockRate.

namespace cuprof {

// A peak and how it was computed; value 0: unknown, `basis` says why.
struct peak_rate {
  double value = 0;
  std::string basis;
};

// Dense FLOP/s for an operand type as kernel_name_info::a_type spells it, from
// NVIDIA's published figures (sm_80, sm_86, sm_89, sm_90; others unknown).
peak_rate peak_flops(const device_info* d, std::string_view dtype);

// DRAM bandwidth: two transfers per memory clock over the bus.
peak_rate peak_dram_bandwidth(const device_info* d);

// One GPU activity's achieved rate.
struct activity_throughput {
  enum class measure : std::uint8_t { flops, bytes };
  std::uint32_t gpu = no_index;  // index into trace::gpu
  measure what = measure::bytes;
  double amount = 0;  // FLOPs or bytes
  double seconds = 0;
  peak_rate peak;  // per second
  double per_second() const { return seconds > 0 ? amount / seconds : 0; }
  // NaN when the peak is unknown.
  double percent_of_peak() const { return peak.value > 0 ? 100.0 * per_second() / peak.value : NAN; }
};

// What a rate above its computed peak means; empty at or under the peak.
std::string above_peak_note(const activity_throughput& r);

// Every memcpy and memset with bytes, and every GEMM kernel whose sizes a
// scope gives, in the trace's order; work of zero duration is left out.
std::vector<activity_throughput> gpu_throughput(const trace& t);

// "412.3 TFLOP/s achieved, 41.7% of the peak (sm_90 bf16 dense tensor: ...)", or "..., peak unknown: why".
std::string throughput_text(const activity_throughput& r);

}  // namespace cuprof

// --- Insights -----------------------------------------------------------------
// What the PyTorch profiling articles teach a reader to look for, computed
// from a trace, ranked by what each could save: a verdict (overhead-bound,
// compute-bound or mixed) with the rule and the signals that gave it, and
// findings. Each finding carries its numbers, what it costs (a share of GPU
// time, of CPU time or of the window), what fixing it could save and how that
// was estimated, and where in the trace it is (step, scope, lane, ts as the
// trace file writes it).

namespace cuprof {

struct insights_options {
  // The time base that "ts" values are shown against: a trace file's
  // baseTimeNanoseconds. 0: whole seconds below the first event, as cuprof's
  // writer chooses it, so ts values match cuprof's trace files.
  std::uint64_t base_ns = 0;
  // The verdict's signals. The GPU idle this share of the window or more: removing
  // the idle time would make the run at least 1.4x faster, more than step-to-step
  // noise or the trace's ragged edges explain.
  double idle_share = 0.3;
  // Launch-to-start deeper than this many launch-call durations (and queue_min_ns):
  // work waited behind earlier work on its stream, the CPU ran ahead. A kernel
  // launched onto an idle stream starts within a launch call or two.
  double queue_factor = 3.0;
  std::uint64_t queue_min_ns = 20000;
  // Elementwise kernels of one scope call chain across at most this many other kernels
  // (torch's eager GeGLU runs up_proj's GEMM between the GeLU and its mul); more, and
  // they are likely separate stages of the computation.
  std::size_t chain_gap_kernels = 1;
  double cold_factor = 1.5;        // first step at least this many times the median of the others
  double variation_factor = 1.25;  // a kernel's slowest step at least this many times its median step
  double sync_share = 0.25;        // synchronizations taking at least this share of Self CPU time
  // Memory allocated in the window and not freed in it, per scope: at least this much.
  std::uint64_t unfreed_min_bytes = std::uint64_t(1) << 20;
  // Copies from pageable host memory, per direction: at least this many bytes.
  std::uint64_t pageable_copy_min_bytes = std::uint64_t(1) << 20;
  // A trace with GPU hardware metrics (trace::gpu_metrics) judges each kernel
  // name by its counters, over at least metric_min_samples samples (a kernel
  // shorter than the sampling interval has none), against Nsight Compute's
  // speed-of-light reading: a unit at 60% of its peak or more is what limits
  // the kernel; the tensor pipe active half the time or more makes a GEMM
  // bound by its matrix units; both SM and DRAM under 30% with under a quarter
  // of the warps resident: too few warps to hide latency, neither unit is fed.
  std::uint32_t metric_min_samples = 3;
  double compute_sm_pct = 60;      // SM throughput at least this, DRAM below it: compute-bound
  double compute_tensor_pct = 50;  // tensor pipe active at least this, DRAM below it: tensor-bound
  double memory_dram_pct = 60;     // DRAM throughput at least this, SM below it: memory-bound
  // SM at most this many points above DRAM still leaves a kernel memory-bound when DRAM is at
  // memory_dram_pct or more: both units near their peaks (an elementwise GeLU in bf16 on an H200
  // reads SM 84%, DRAM 83%), and bytes are what fusing or a smaller type takes away.
  double memory_tie_pct = 5;
  double latency_occupancy_pct = 25;   // achieved occupancy under this,
  double latency_throughput_pct = 30;  // SM and DRAM throughput under this: latency-bound
  std::size_t max_items = 8;           // per finding list
  std::size_t summary_items = 3;       // findings in the summary
};

enum class bound_verdict : std::uint8_t { no_gpu_work, overhead_bound, compute_bound, mixed };

const char* verdict_name(bound_verdict v);

// What a finding's cost is a share of.
enum class cost_base : std::uint8_t { none, gpu_time, cpu_time, window };

const char* cost_base_name(cost_base b);  // "GPU time", "CPU time", "the window"; "" for none

struct finding {
  std::string kind;                  // "elementwise chain", "memset before GEMM", ...
  std::string cause;                 // what it is about (kind and kernel or scope): one finding per cause
  std::string headline;              // one line, with the numbers
  std::vector<std::string> details;  // further lines
  std::string where;                 // where in the trace
  std::uint64_t cost_ns = 0;         // what it costs now
  cost_base cost_of = cost_base::none;
  double cost_share = 0;        // cost_ns over Self CUDA, Self CPU or the window
  std::uint64_t saving_ns = 0;  // what fixing it could save, estimated; findings are ranked by it
  std::string estimate;         // how saving_ns was estimated
};

// A trace of host scopes only: no CUDA calls and no GPU work were recorded.
bool is_cpu_only(const trace& t);

// What a CPU-only trace's figures mean (insights, and the table's last line).
extern const char cpu_only_note[];

// GPU hardware counters over GPU work (trace::gpu_metrics): the default
// metrics' time-weighted averages over the samples its runs cover, in % of
// peak; NaN where none was sampled. The samples are GPU-wide: work running
// alongside counts too.
struct kernel_counters {
  std::uint32_t samples = 0;    // samples used
  std::uint32_t too_short = 0;  // runs shorter than the sampling interval: not measured
  std::uint64_t interval_ns = 0;
  double sm = NAN, dram = NAN, tensor = NAN, occupancy = NAN;
};

// One row per GPU kernel, memcpy or memset name.
struct kernel_summary {
  std::string name;
  gpu_kind kind = gpu_kind::kernel;
  distribution duration;
  distribution launch_to_start;  // launching call's start to the GPU start; count 0 if no call is known
  kernel_name_info decoded;
  std::uint64_t first_start_ns = 0;
  // Achieved rate over the instances whose size the trace gives (gpu_throughput):
  // FLOPs or bytes over their GPU time, and the peak; amount 0 where unknown.
  activity_throughput throughput;
  kernel_counters counters;  // over its runs; samples 0 without gpu_metrics
};

struct insights {
  bound_verdict verdict = bound_verdict::no_gpu_work;
  std::string verdict_rule;     // the rule that gave the verdict, with its thresholds
  std::string verdict_signals;  // the three signals as measured
  std::string verdict_reason;   // what the verdict means here
  // The table's time_totals (Self CPU, of it in synchronize calls, Self CUDA).
  std::uint64_t self_cpu_ns = 0;   // Self CPU time total
  std::uint64_t sync_cpu_ns = 0;   // of it, in synchronize calls (the CPU waiting)
  std::uint64_t self_cuda_ns = 0;  // Self CUDA time total
  time_totals totals() const { return {self_cpu_ns, sync_cpu_ns, self_cuda_ns}; }
  std::uint64_t window_start_ns = 0, window_end_ns = 0;  // first to last event, CPU and GPU
  std::uint64_t gpu_busy_ns = 0;                         // union of GPU work inside the window
  double gpu_idle_share = 0;
  distribution launch_to_start;             // all GPU work with a known launching call
  kernel_counters gpu_counters;             // over the time each GPU was busy; samples 0 without gpu_metrics
  std::uint64_t launch_call_median_ns = 0;  // the launching calls' own duration
  bool cpu_only = false;                    // no CUDA calls and no GPU work: host scopes only
  std::size_t steps = 0;
  long first_step = -1;  // N of the first ProfilerStep#N; -1 without steps
  std::uint64_t base_ns = 0;
  std::vector<finding> findings;     // ranked: the largest estimated saving first
  std::vector<std::string> summary;  // the top findings, one line each
  std::vector<kernel_summary> kernels;

  std::uint64_t window_ns() const { return window_end_ns - window_start_ns; }
  double ts_us(std::uint64_t ns) const { return ns >= base_ns ? double(ns - base_ns) / 1000.0 : 0.0; }
  // Self CPU time without synchronize calls: the CPU's own work.
  std::uint64_t cpu_work_ns() const { return self_cpu_ns - sync_cpu_ns; }
  // Where CPU time is worth spending effort on: the GPU is not what limits the run.
  bool cpu_time_matters() const {
    return verdict == bound_verdict::overhead_bound || verdict == bound_verdict::no_gpu_work ||
           (verdict == bound_verdict::mixed && cpu_work_ns() > self_cuda_ns);
  }
};

insights analyze(const trace& t, const insights_options& options = {});

// The report as text: the summary, the verdict, the findings, then the GPU
// kernels (the kernel_rows longest in total).
std::string format_insights(const insights& in, std::size_t kernel_rows = 15);

}  // namespace cuprof

// --- Reading traces -----------------------------------------------------------
// Reads a Chrome trace back into a cuprof::trace: cuprof's own traces and
// torch.profiler (Kineto) traces, plain or gzip-compressed. key_averages(),
// insights and diffs then work on either.
//
// Attribution is taken from the file, not re-derived, so that a torch trace
// gives torch's own table: GPU work is charged to the op whose "External id"
// it carries, scope extents on the GPU are the file's gpu_user_annotation
// events, and CPU parents are found by interval nesting per thread, as
// torch's key_averages() does. Timestamps convert to integer nanoseconds from
// their decimal text, without floating-point rounding.
//
// Throws cuprof::error, with the file name and the place, for anything it
// cannot read: missing files, directories, devices, bad gzip data, invalid
// JSON, fields of the wrong type.

namespace cuprof {

// How far a read has come, for a progress display: called often (each 64 KiB
// read or decompressed, each MiB parsed), cheap when `report` is null.
// `done` and `total` count bytes of that stage's input; `total` is 0 when
// unknown (a pipe).
enum class read_stage : std::uint8_t { reading, decompressing, parsing };

struct read_progress {
  void (*report)(void* context, read_stage stage, std::uint64_t done, std::uint64_t total) = nullptr;
  void* context = nullptr;

  void operator()(read_stage stage, std::uint64_t done, std::uint64_t total) const {
    if (report) report(context, stage, done, total);
  }
};

enum class trace_format : std::uint8_t {
  cuprof,  // written by cuprof (has the "cuprof" metadata block)
  torch,   // written by torch.profiler / Kineto
  chrome,  // another Chrome trace with Kineto's categories
};

// "cuprof trace", "torch.profiler trace", "Chrome trace".
const char* trace_format_name(trace_format f);

// What a collective kernel's args say, where the trace has them (torch's
// record_param_comms names: "Collective name", "dtype", "In msg nelems",
// "Out msg nelems", "Group size", and "bytes"); -1 and 0: not given.
struct collective_args {
  std::string name;  // "allreduce", "_allgather_base", ...
  std::string dtype;
  std::int64_t in_nelems = -1, out_nelems = -1, group_size = -1;
  std::uint64_t bytes = 0;
};

struct loaded_trace {
  trace t;
  trace_format format = trace_format::chrome;
  std::uint64_t base_ns = 0;              // baseTimeNanoseconds: the file's ts are microseconds after it
  std::string source;                     // the path, or the name given to parse_trace()
  std::size_t events = 0;                 // entries of traceEvents
  std::size_t used = 0;                   // of them, turned into spans, calls, GPU work, annotations, overhead
  std::size_t unmatched_annotations = 0;  // gpu_user_annotation events naming no known scope
  std::int64_t rank = -1;                 // distributedInfo's rank as written; -1 without distributedInfo
  // The kernels whose args name a collective: (index into t.gpu, the args), by index.
  std::vector<std::pair<std::uint32_t, collective_args>> collectives;

  // A time of the model as the file writes it: microseconds after base_ns.
  double file_us(std::uint64_t ns) const { return ns >= base_ns ? double(ns - base_ns) / 1000.0 : 0.0; }
};

// Parses trace JSON (already decompressed). `source` names it in messages.
loaded_trace parse_trace(std::string_view json, const std::string& source, const read_progress& progress = {});

// Reads a trace from its bytes: JSON, or gzip-compressed JSON (recognised by
// its magic bytes). `source` names it in messages.
loaded_trace read_trace_bytes(std::string bytes, const std::string& source);

// Reads a trace file: .json, or gzip-compressed (.json.gz, or any file that
// starts with the gzip magic bytes). A pipe is read to its end, as standard
// input is: a named FIFO, or the /dev/fd/N of `cuprof table <(zcat t.json.gz)`.
loaded_trace read_trace_file(const std::string& path, const read_progress& progress = {});

// Reads a trace from an open stream (standard input, a pipe): JSON, or gzip
// recognised by its magic bytes, as a file. `source` names it in messages.
loaded_trace read_trace_stream(std::FILE* f, const std::string& source, const read_progress& progress = {});

}  // namespace cuprof

// --- Several ranks ------------------------------------------------------------
// A multi-GPU job's traces, one per rank (torchrun with NCCL): how much GPU
// time each rank spends in collectives, how much of it no compute hides, which
// rank reaches the collectives last, and how far the hosts' clocks are apart.
//
//   Collectives are kernels whose name contains "nccl" (HTA's rule); their
//     kind from the args ("Collective name") where given, else from the name.
//   Exposed communication: the union of a device's collective kernels minus
//     the union of its other kernels (HTA's comm/comp overlap, per device).
//   Matching: the k-th collective of a kind on each rank is the same
//     collective (NCCL ranks issue collectives in one order); a rank's traces
//     of one rank (repeat windows) are matched window by window, in time order.
//   Clocks: a collective ends at nearly the same moment on every rank. Per
//     host, offset = median(end - end of the reference rank), precision = the
//     median absolute deviation of those differences; subtracted from that
//     host's times before matching. Ranks of one host share a clock: their
//     spread is measured, no offset applied.
//   Straggler: the rank whose collective kernel starts last makes the others
//     wait; its lateness is its start minus the next-to-last start, each other
//     rank's wait its start to the last one's.

namespace cuprof {

// A kernel that does NCCL's communication: its name contains "nccl", any case.
bool is_collective_kernel(std::string_view kernel_name);

// "all-reduce", "all-gather", "reduce-scatter", "broadcast", "reduce",
// "all-to-all", "send/recv", "barrier", from the args' name when given, else
// from the kernel's name (ncclDevKernel_AllReduce_Sum_f32_RING_LL, older
// ncclKernel_AllReduce_RING_LL_Sum_float); "collective" when neither says.
std::string collective_kind(std::string_view kernel_name, const collective_args* args = nullptr);

struct rank_options {
  std::size_t max_items = 8;  // per finding list
  // A rank is the straggler when it is last in at least this share of the matched collectives.
  double straggler_share = 0.5;
};

struct collective_total {
  std::string kind;
  std::uint64_t count = 0, total_ns = 0, bytes = 0;  // bytes: where the args give them
};

// One rank, its windows (traces) together.
struct rank_summary {
  std::int64_t rank = 0;
  std::string host;
  std::vector<std::string> sources;  // its traces, in time order: window 0, 1, ...
  std::uint64_t gpu_ns = 0;          // GPU work, each record's time (Self CUDA)
  std::uint64_t compute_ns = 0;      // union of its non-collective kernels, per device
  std::uint64_t collective_ns = 0;   // each collective kernel's time
  std::uint64_t comm_ns = 0;         // union of its collective kernels, per device
  std::uint64_t exposed_ns = 0;      // of comm_ns, with no compute kernel on the device (HTA's)
  // Of exposed_ns, what follows the last rank's arrival at each matched collective: the
  // communication's own exposed time. The rest is waiting for the last rank (wait_ns), the
  // straggler's cost, not the communication's.
  std::uint64_t exposed_after_wait_ns = 0;
  std::vector<collective_total> kinds;
  std::size_t steps = 0;
  std::uint64_t step_ns = 0;         // its steps' time (ProfilerStep#N spans)
  std::uint64_t span_ns = 0;         // first to last GPU work: the window without steps
  std::int64_t clock_offset_ns = 0;  // subtracted from its times before matching
  // Matched collectives: those it reached last, its lateness in them, and the time it waited for the last rank.
  std::size_t matched = 0, last = 0;
  std::uint64_t late_ns = 0, wait_ns = 0;

  // HTA's comm/comp overlap: the share of communication time that compute hides, in percent.
  double overlap_pct() const { return comm_ns ? 100.0 * double(comm_ns - exposed_ns) / double(comm_ns) : 0.0; }
  // Steps' time, or the window without steps: what waiting is a share of.
  std::uint64_t basis_ns() const { return steps ? step_ns : span_ns; }
};

// A host's clock against the reference host's (the lowest rank's), or, for
// the reference host, how closely its ranks' collective ends agree.
struct clock_alignment {
  std::string host;
  std::vector<std::int64_t> ranks;
  bool reference = false;       // the reference rank's host: one clock, no offset applied
  std::int64_t offset_ns = 0;   // median(end - reference end); positive: ahead
  std::uint64_t spread_ns = 0;  // median absolute deviation of the differences
  std::size_t samples = 0;      // matched collective ends compared
  bool applied = false;         // offset_ns was subtracted from its ranks' times
};

// Per step (ProfilerStep#N, window by window), or per collective kind without steps.
struct straggler_group {
  std::string name;  // "ProfilerStep#3", or the kind ("all-reduce")
  std::size_t window = 0;
  std::size_t collectives = 0;  // matched collectives in it
  std::int64_t slowest = -1;    // the rank with the most lateness; -1: none was late
  std::size_t last = 0;         // collectives the slowest reached last
  std::uint64_t late_ns = 0;    // its lateness, summed
  struct rank_part {
    std::int64_t rank = 0;
    std::size_t last = 0;        // collectives it reached last
    std::uint64_t late_ns = 0;   // its lateness in them
    std::uint64_t wait_ns = 0;   // the time it waited for the last rank
    std::uint64_t basis_ns = 0;  // its step's time (per step), else its window's
  };
  std::vector<rank_part> ranks;  // every rank of the window, by rank
};

struct rank_report {
  std::vector<rank_summary> ranks;  // by rank
  std::size_t traces = 0, hosts = 1;
  std::vector<clock_alignment> clocks;  // the reference host first
  bool by_step = false;                 // groups are steps, else kinds
  std::vector<straggler_group> groups;
  std::size_t matched = 0;         // collectives matched across ranks
  std::string matched_kinds;       // "all-reduces", or "collectives" when of several kinds
  std::int64_t straggler = -1;     // the rank reported as the straggler; -1: none
  std::vector<std::string> notes;  // what the matching could not do, windows grouped
  std::vector<finding> findings;   // ranked by estimated saving
  std::vector<std::string> summary;

  const rank_summary* rank(std::int64_t r) const {
    for (const rank_summary& s : ranks)
      if (s.rank == r) return &s;
    return nullptr;
  }
};

// The traces of one job, one or more per rank (by distributedInfo's rank;
// a trace without one is rank 0). Times are the traces' own (absolute: each
// file's baseTimeNanoseconds added), corrected by the hosts' offsets.
rank_report analyze_ranks(const std::vector<loaded_trace>& traces, const rank_options& options = {});

// `cuprof insights DIR`: the ranks, clocks, stragglers per step, findings.
std::string format_rank_insights(const rank_report& r);

// `cuprof table DIR`: a row per rank (GPU, compute, collectives, exposed, overlap, waiting), then each rank's collectives by kind.
std::string format_rank_table(const rank_report& r);

}  // namespace cuprof
