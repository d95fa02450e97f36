// The names of the trace format (docs/trace-format.md) that the writer
// (trace_header.hpp, trace_event_writer.hpp) emits and the reader
// (src/analysis/) looks for, each spelled once here. They are Kineto's, so
// that Perfetto, HTA and torch's tools read cuprof traces as torch's. The
// Chrome trace event fields themselves ("ph", "ts", "dur", "pid", "tid",
// "cat", "name", "args": the writer's event_builder), keys that only the
// writer emits for viewers, and older spellings that only the reader accepts
// stay where they are used.
#pragma once

#include "../model/event.hpp"

#include <cstdint>
#include <string_view>

namespace cuprof::detail::schema {

// A stream's sync records go on lane (tid) sync_tid_offset + stream, as Kineto
// puts them; public as cuprof::sync_tid_offset (chrome_trace.hpp).
inline constexpr std::uint32_t sync_tid_offset = 1000000u;

// Event categories ("cat").
inline constexpr std::string_view cat_user_annotation = "user_annotation";  // a scope (record_function, NVTX, step)
inline constexpr std::string_view cat_cpu_op = "cpu_op";                    // a torch operator (torch traces)
inline constexpr std::string_view cat_torch_trace = "Trace";                // torch's own profiler span (torch traces)
inline constexpr std::string_view cat_cuda_runtime = "cuda_runtime";
inline constexpr std::string_view cat_cuda_driver = "cuda_driver";
inline constexpr std::string_view cat_kernel = "kernel";
inline constexpr std::string_view cat_gpu_memcpy = "gpu_memcpy";
inline constexpr std::string_view cat_gpu_memset = "gpu_memset";
inline constexpr std::string_view cat_cuda_sync = "cuda_sync";  // CUPTI's synchronization record, on the sync lane
inline constexpr std::string_view cat_gpu_user_annotation = "gpu_user_annotation";  // a scope's extent on a GPU stream
inline constexpr std::string_view cat_overhead = "overhead";                        // CUPTI's own work
inline constexpr std::string_view cat_flow = "ac2g";  // the arrow from an API call to its GPU record (its name too)

// Event args.
inline constexpr std::string_view arg_external_id = "External id";  // the scope: a span's id, named by its work
inline constexpr std::string_view arg_correlation = "correlation";  // CUPTI's id linking a call and its GPU records
// CUPTI's callback id of an API call: read (Kineto's traces, older cuprof ones), not written (the name says it).
inline constexpr std::string_view arg_cbid = "cbid";
inline constexpr std::string_view arg_device = "device";
inline constexpr std::string_view arg_context = "context";  // written on a device with several contexts; absent: 0
inline constexpr std::string_view arg_stream = "stream";
inline constexpr std::string_view arg_bytes = "bytes";
inline constexpr std::string_view arg_sync_kind = "cuda_sync_kind";  // sync_kind_name()
// On an Event Sync and a Stream Wait Event (event_wait), Kineto's, read by HTA's critical path:
// the stream the waited-on event was recorded on, the correlation id of the call that recorded it
// (-1 both where not known), and a number for the event.
inline constexpr std::string_view arg_wait_on_stream = "wait_on_stream";
inline constexpr std::string_view arg_wait_on_record_correlation = "wait_on_cuda_event_record_corr_id";
inline constexpr std::string_view arg_wait_on_event = "wait_on_cuda_event_id";
inline constexpr std::string_view arg_registers_per_thread = "registers per thread";
inline constexpr std::string_view arg_shared_memory = "shared memory";  // static and dynamic, per block; absent: 0
inline constexpr std::string_view arg_grid = "grid";
inline constexpr std::string_view arg_block = "block";
inline constexpr std::string_view arg_graph_id = "graph id";
inline constexpr std::string_view arg_graph_node_id = "graph node id";
// On a kernel CUPTI could not time (gpu_timing_unknown): why its place and 0 ns are not measured.
inline constexpr std::string_view arg_timing = "timing";
inline constexpr std::string_view arg_input_dims = "Input Dims";  // a torch op's input shapes (record_shapes=True)
// A CUDA call's native stack (with_stack): an array of frames, innermost first, "fn (file.cpp:42)".
// cuprof writes a short form of it (model/call_stacks.hpp stack_summary) and the whole stack
// once in key_stack_frames, the call naming its innermost frame there (event_stack_frame).
inline constexpr std::string_view arg_call_stack = "Call stack";
// A collective kernel's args, as torch names them for record_param_comms (read where present;
// the bytes are arg_bytes).
inline constexpr std::string_view arg_collective_name = "Collective name";
inline constexpr std::string_view arg_collective_dtype = "dtype";
inline constexpr std::string_view arg_in_msg_nelems = "In msg nelems";
inline constexpr std::string_view arg_out_msg_nelems = "Out msg nelems";
inline constexpr std::string_view arg_group_size = "Group size";
// Which of the four above a collective's args lack because nothing shows them to cuprof
// (the element type, the counts, the communicator's size): their names, ", "-separated, e.g.
// "dtype, In msg nelems, Out msg nelems" on an all-gather, whose payload and kernel give bytes only.
inline constexpr std::string_view arg_not_known = "Not known";
// The rest of an NCCL call's args, on its NVTX range and its kernels (model/collectives.hpp):
// torch's "Process Group Name" holds NCCL's communicator hash in hex ("0x1f2e..."), torch's
// names being invisible to cuprof, and its "Rank" this process's rank in the communicator;
// the message's bytes are arg_bytes, as NCCL counts them; cuprof's own: the reduction op
// ("sum", "prod", "max", "min", "avg", "premul_sum") and the root or peer rank.
inline constexpr std::string_view arg_process_group_name = "Process Group Name";
inline constexpr std::string_view arg_collective_rank = "Rank";
inline constexpr std::string_view arg_reduction_op = "Reduction op";
inline constexpr std::string_view arg_collective_root = "Root";
inline constexpr std::string_view arg_collective_peer = "Peer";

// An allocation or free (memory_event): torch's instant event of category
// "cpu_instant_event" named "[memory]" ("ph":"i", "s":"t"), its args as torch
// names them; the top-level key_profile_memory says memory was recorded.
inline constexpr std::string_view cat_cpu_instant_event = "cpu_instant_event";
inline constexpr std::string_view memory_event_name = "[memory]";
inline constexpr std::string_view arg_memory_bytes = "Bytes";  // negative for a free
inline constexpr std::string_view arg_memory_addr = "Addr";
inline constexpr std::string_view arg_memory_total_allocated = "Total Allocated";
inline constexpr std::string_view arg_memory_total_reserved = "Total Reserved";
inline constexpr std::string_view arg_memory_device_id = "Device Id";      // -1: host memory
inline constexpr std::string_view arg_memory_device_type = "Device Type";  // torch's c10::DeviceType: 0 CPU, 1 CUDA
inline constexpr std::int64_t memory_device_type_cuda = 1;
// cuprof's, optional: CUPTI's memory kind by name ("Device", "Pinned", ...), and
// memory_event::flags as 1 where set.
inline constexpr std::string_view arg_memory_kind = "Memory Kind";
inline constexpr std::string_view arg_memory_pool = "Pool";
inline constexpr std::string_view arg_memory_virtual = "Virtual";
// The memory in use after each allocation and free, a counter ("ph":"C") per
// device on its GPU process, and one for pinned host memory on the CPU process.
inline constexpr std::string_view memory_counter_device = "CUDA memory";
inline constexpr std::string_view memory_counter_host = "Pinned host memory";
inline constexpr std::string_view arg_counter_allocated = "Allocated";
inline constexpr std::string_view arg_counter_reserved = "Reserved";
// GPU hardware metrics (PM sampling): per GPU and metric a counter track on the
// GPU's process, {"ph":"C","cat":"gpu_metric","name":LABEL,"pid":DEVICE,"tid":0,
// "ts":T,"args":{"value":V}} at a sample's start, when the value moved from the
// one last written on the track (gpu_metrics_held_values) or the sample begins
// or ends a stretch without gaps. A kernel's args hold each metric's average
// under its LABEL and the samples used; with 0 samples a metric note says why:
// metric_samples_short (shorter than the sampling interval) or a reason
// starting "not sampled: ".
inline constexpr std::string_view cat_gpu_metric = "gpu_metric";
inline constexpr std::string_view arg_counter_value = "value";
inline constexpr std::string_view arg_metric_samples = "metric samples";
inline constexpr std::string_view arg_metric_note = "metric note";
inline constexpr std::string_view metric_samples_short = "shorter than the sampling interval";

// Metadata events ("ph":"M") and the arg holding their value.
inline constexpr std::string_view meta_process_name = "process_name";
inline constexpr std::string_view meta_thread_name = "thread_name";
inline constexpr std::string_view meta_name = "name";

// Top-level keys.
inline constexpr std::string_view key_trace_events = "traceEvents";
// The Trace Event Format's stack frames: {"<id>": {"name": frame, "parent": "<caller's id>"}}, and
// an event's "sf", the id of its stack's innermost frame.
inline constexpr std::string_view key_stack_frames = "stackFrames";
inline constexpr std::string_view frame_name = "name";
inline constexpr std::string_view frame_parent = "parent";
inline constexpr std::string_view event_stack_frame = "sf";
inline constexpr std::string_view key_base_time = "baseTimeNanoseconds";  // every "ts" is microseconds after it
inline constexpr std::string_view key_cupti_version = "cupti_version";
inline constexpr std::string_view key_cuda_runtime_version = "cuda_runtime_version";
inline constexpr std::string_view key_cuda_driver_version = "cuda_driver_version";
inline constexpr std::string_view key_host_name = "host_name";
inline constexpr std::string_view key_distributed_info = "distributedInfo";
inline constexpr std::string_view key_rank = "rank";
inline constexpr std::string_view key_world_size = "world_size";
inline constexpr std::string_view key_backend = "backend";                // "nccl", "mpi", "gloo" or "none"
inline constexpr std::string_view key_nccl_version = "nccl_version";      // "2.21.5", where NCCL is loaded
inline constexpr std::string_view key_pg_count = "pg_count";              // NCCL communicators seen created
inline constexpr std::string_view key_profile_memory = "profile_memory";  // 1: allocations were recorded

// deviceProperties: one object per device.
inline constexpr std::string_view key_device_properties = "deviceProperties";
inline constexpr std::string_view device_id = "id";
inline constexpr std::string_view device_name = "name";
inline constexpr std::string_view device_total_global_mem = "totalGlobalMem";
// The integer members after those, in the order written, each with its device_info field:
// one list for the writer and the reader. `known_only`: written only when known (nonzero).
struct device_property {
  std::string_view key;
  int device_info::*field;
  bool known_only = false;
};
inline constexpr device_property device_properties[] = {
    {"computeMajor", &device_info::compute_major},
    {"computeMinor", &device_info::compute_minor},
    {"maxThreadsPerBlock", &device_info::max_threads_per_block},
    {"maxThreadsPerMultiprocessor", &device_info::max_threads_per_multiprocessor},
    {"regsPerBlock", &device_info::regs_per_block},
    {"warpSize", &device_info::warp_size},
    {"sharedMemPerBlock", &device_info::shared_mem_per_block},
    {"numSms", &device_info::num_sms},
    {"regsPerMultiprocessor", &device_info::regs_per_multiprocessor},
    {"sharedMemPerBlockOptin", &device_info::shared_mem_per_block_optin},
    {"sharedMemPerMultiprocessor", &device_info::shared_mem_per_multiprocessor},
    // cuprof's (cudaDeviceProp's names; torch writes none of them): the peaks of the analysis library's throughput.
    {"clockRate", &device_info::clock_rate_khz, true},               // kHz
    {"memoryClockRate", &device_info::memory_clock_rate_khz, true},  // kHz
    {"memoryBusWidth", &device_info::memory_bus_width, true},        // bits
};

// cuprof's own block: its presence marks a cuprof trace.
inline constexpr std::string_view key_cuprof = "cuprof";
inline constexpr std::string_view cuprof_dropped_gpu_records = "dropped_gpu_records";
inline constexpr std::string_view cuprof_dropped_cpu_events = "dropped_cpu_events";
inline constexpr std::string_view cuprof_cuda_status = "cuda_status";
inline constexpr std::string_view cuda_status_on = "on";  // the cuda_status of a trace with CUDA tracing on
inline constexpr std::string_view cuprof_window_start_ns = "window_start_ns";
inline constexpr std::string_view cuprof_window_end_ns = "window_end_ns";
inline constexpr std::string_view cuprof_trace_detail = "trace_detail";  // written only when not Kineto's
// Inside key_cuprof, what the window's edges cut and what came unpaired
// (model/event.hpp's window_edges): {"calls_without_gpu_work":{"kernel":N,
// "memcpy":N,"memset":N},"gpu_work_without_call":{...},"launched_before":{...},
// "calls_running_at_end":N}.
inline constexpr std::string_view cuprof_window_edges = "window_edges";
inline constexpr std::string_view edges_calls_without_gpu_work = "calls_without_gpu_work";
inline constexpr std::string_view edges_gpu_work_without_call = "gpu_work_without_call";
inline constexpr std::string_view edges_launched_before = "launched_before";
inline constexpr std::string_view edges_calls_running_at_end = "calls_running_at_end";
inline constexpr std::string_view edge_kind_names[3] = {"kernel", "memcpy", "memset"};  // window_edges' kinds
// Inside key_cuprof, where metrics were sampled: {"interval_ns":N,"dropped":N,
// "out_of_range":N,"devices":[D,...],"metrics":[{"name":CUPTI_NAME,"label":LABEL},...],
// "held_values":true,"alignment":[{"device":D,"shift_ns":S,"aligned":B},...],
// "gaps":[{"device":D,"ts":T,"dur":US,"cause":TEXT},...]}. held_values: a
// counter's value holds until the next event on its track or a gap; without
// it (older traces) each event is one sample. alignment: how far each GPU's
// samples were moved onto the kernels' clock. gaps: stretches of a GPU's time
// in the window without samples, "ts" and "dur" as events have them.
inline constexpr std::string_view cuprof_gpu_metrics = "gpu_metrics";
inline constexpr std::string_view gpu_metrics_interval_ns = "interval_ns";
inline constexpr std::string_view gpu_metrics_dropped = "dropped";
inline constexpr std::string_view gpu_metrics_out_of_range = "out_of_range";
inline constexpr std::string_view gpu_metrics_devices = "devices";
inline constexpr std::string_view gpu_metrics_metrics = "metrics";
inline constexpr std::string_view gpu_metrics_name = "name";
inline constexpr std::string_view gpu_metrics_label = "label";
inline constexpr std::string_view gpu_metrics_held_values = "held_values";
inline constexpr std::string_view gpu_metrics_alignment = "alignment";
inline constexpr std::string_view gpu_metrics_device = "device";
inline constexpr std::string_view gpu_metrics_shift_ns = "shift_ns";
inline constexpr std::string_view gpu_metrics_aligned = "aligned";
inline constexpr std::string_view gpu_metrics_gaps = "gaps";
inline constexpr std::string_view gpu_metrics_gap_ts = "ts";
inline constexpr std::string_view gpu_metrics_gap_dur = "dur";
inline constexpr std::string_view gpu_metrics_gap_cause = "cause";
inline constexpr std::string_view gap_cause_names[4] = {"overflow", "sample_cap", "skipped", "late"};  // metric_gap_cause's

}  // namespace cuprof::detail::schema
