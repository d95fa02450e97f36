#!/usr/bin/env python3
"""The names of cuprof's trace format, for the Python side: the trace checkers
(validate_trace.py, hta_check.py), the GPU suite (tests/gpu/) and the benchmark
drivers (bench/).

The first part is include/cuprof/output/trace_schema.hpp, name for name: each
constant there, `schema::cat_kernel = "kernel"`, is CAT_KERNEL = "kernel" here.
The Chrome trace event fields themselves ("ph", "ts", "dur", "pid", "tid",
"cat", "name", "args", "id", "bp", "s") are not names of cuprof's format and
stay literal where they are used, as in the C++.

The second part is what the header leaves to the writer (trace_event_writer.hpp)
and the checkers still need: the viewers' metadata events, the flow v2 members,
the values of trace_detail; then the groups of categories the checkers share.

  python3 tests/trace_schema.py      # checks the first part against the C++ header
  (validate_trace.py --self-test, which ctest runs, makes the same check)

Standard library only; nothing here runs on import.
"""
import os
import re
import sys

# ----------------------------------------------- include/cuprof/output/trace_schema.hpp
# A stream's sync records go on lane (tid) SYNC_TID_OFFSET + stream, as Kineto puts them.
SYNC_TID_OFFSET = 1000000

# Event categories ("cat").
CAT_USER_ANNOTATION = "user_annotation"  # a scope (record_function, NVTX, step)
CAT_CPU_OP = "cpu_op"                    # a torch operator (torch traces)
CAT_TORCH_TRACE = "Trace"                # torch's own profiler span (torch traces)
CAT_CUDA_RUNTIME = "cuda_runtime"
CAT_CUDA_DRIVER = "cuda_driver"
CAT_KERNEL = "kernel"
CAT_GPU_MEMCPY = "gpu_memcpy"
CAT_GPU_MEMSET = "gpu_memset"
CAT_CUDA_SYNC = "cuda_sync"  # CUPTI's synchronization record, on the sync lane
CAT_GPU_USER_ANNOTATION = "gpu_user_annotation"  # a scope's extent on a GPU stream
CAT_OVERHEAD = "overhead"                        # CUPTI's own work
CAT_FLOW = "ac2g"  # the arrow from an API call to its GPU record (its name too)

# Event args.
ARG_EXTERNAL_ID = "External id"  # the scope: a span's id, named by its work
ARG_CORRELATION = "correlation"  # CUPTI's id linking a call and its GPU records
ARG_CBID = "cbid"                # CUPTI's callback id of an API call (read, not written)
ARG_DEVICE = "device"
ARG_CONTEXT = "context"  # written on a device with several contexts; absent: 0
ARG_STREAM = "stream"
ARG_BYTES = "bytes"
ARG_SYNC_KIND = "cuda_sync_kind"
# On an Event Sync and a Stream Wait Event, Kineto's, read by HTA's critical path: the stream the
# waited-on event was recorded on, the correlation id of the call that recorded it (-1 both where not
# known), and a number for the event.
ARG_WAIT_ON_STREAM = "wait_on_stream"
ARG_WAIT_ON_RECORD_CORRELATION = "wait_on_cuda_event_record_corr_id"
ARG_WAIT_ON_EVENT = "wait_on_cuda_event_id"
# An NCCL call's args, on its NVTX range and its kernels (torch's record_param_comms names first).
ARG_COLLECTIVE_NAME = "Collective name"
ARG_COLLECTIVE_DTYPE = "dtype"
ARG_IN_MSG_NELEMS = "In msg nelems"
ARG_OUT_MSG_NELEMS = "Out msg nelems"
ARG_GROUP_SIZE = "Group size"
ARG_NOT_KNOWN = "Not known"  # the collective args above that cuprof cannot know
ARG_PROCESS_GROUP_NAME = "Process Group Name"
ARG_COLLECTIVE_RANK = "Rank"
ARG_REDUCTION_OP = "Reduction op"
ARG_COLLECTIVE_ROOT = "Root"
ARG_COLLECTIVE_PEER = "Peer"
ARG_REGISTERS_PER_THREAD = "registers per thread"
ARG_SHARED_MEMORY = "shared memory"  # static and dynamic, per block; absent: 0
ARG_GRID = "grid"
ARG_BLOCK = "block"
ARG_GRAPH_ID = "graph id"
ARG_GRAPH_NODE_ID = "graph node id"
ARG_TIMING = "timing"  # on a kernel CUPTI could not time: why its place and 0 ns are not measured
ARG_INPUT_DIMS = "Input Dims"  # a torch op's input shapes (record_shapes=True)
ARG_CALL_STACK = "Call stack"  # with_stack: a CUDA call's native frames, innermost first

# An allocation or free: torch's instant event "[memory]" (category cpu_instant_event), its args as
# torch names them, cuprof's optional ones, and the counter of memory in use after it.
CAT_CPU_INSTANT_EVENT = "cpu_instant_event"
MEMORY_EVENT_NAME = "[memory]"
ARG_MEMORY_BYTES = "Bytes"  # negative for a free
ARG_MEMORY_ADDR = "Addr"
ARG_MEMORY_TOTAL_ALLOCATED = "Total Allocated"
ARG_MEMORY_TOTAL_RESERVED = "Total Reserved"
ARG_MEMORY_DEVICE_ID = "Device Id"      # -1: host memory
ARG_MEMORY_DEVICE_TYPE = "Device Type"  # 0 CPU, 1 CUDA
ARG_MEMORY_KIND = "Memory Kind"
ARG_MEMORY_POOL = "Pool"
ARG_MEMORY_VIRTUAL = "Virtual"
MEMORY_COUNTER_DEVICE = "CUDA memory"
MEMORY_COUNTER_HOST = "Pinned host memory"
ARG_COUNTER_ALLOCATED = "Allocated"
ARG_COUNTER_RESERVED = "Reserved"
# GPU hardware metrics (PM sampling): per GPU and metric a counter track on the GPU's process,
# {"ph": "C", "cat": "gpu_metric", "name": LABEL, "pid": DEVICE, "tid": 0, "ts": T, "args": {"value": V}}
# at each sample's start. A kernel's args hold each metric's average under its LABEL and the samples
# used; 0 samples with METRIC_SAMPLES_SHORT: shorter than the sampling interval.
CAT_GPU_METRIC = "gpu_metric"
ARG_COUNTER_VALUE = "value"
ARG_METRIC_SAMPLES = "metric samples"
ARG_METRIC_NOTE = "metric note"
METRIC_SAMPLES_SHORT = "shorter than the sampling interval"

# Metadata events ("ph": "M") and the arg holding their value.
META_PROCESS_NAME = "process_name"
META_THREAD_NAME = "thread_name"
META_NAME = "name"

# Top-level keys.
KEY_TRACE_EVENTS = "traceEvents"
# The Trace Event Format's stack frames: {"<id>": {"name": frame, "parent": "<caller's id>"}}, and an
# event's "sf", the id of its stack's innermost frame (cuprof's calls: the whole stack; their
# "Call stack" arg is its short form).
KEY_STACK_FRAMES = "stackFrames"
FRAME_NAME = "name"
FRAME_PARENT = "parent"
EVENT_STACK_FRAME = "sf"
KEY_BASE_TIME = "baseTimeNanoseconds"  # every "ts" is microseconds after it
KEY_CUPTI_VERSION = "cupti_version"
KEY_CUDA_RUNTIME_VERSION = "cuda_runtime_version"
KEY_CUDA_DRIVER_VERSION = "cuda_driver_version"
KEY_HOST_NAME = "host_name"
KEY_DISTRIBUTED_INFO = "distributedInfo"
KEY_RANK = "rank"
KEY_WORLD_SIZE = "world_size"
KEY_BACKEND = "backend"
KEY_NCCL_VERSION = "nccl_version"
KEY_PG_COUNT = "pg_count"
KEY_PROFILE_MEMORY = "profile_memory"  # 1: allocations were recorded

# deviceProperties: one object per device.
KEY_DEVICE_PROPERTIES = "deviceProperties"
DEVICE_ID = "id"
DEVICE_NAME = "name"
DEVICE_TOTAL_GLOBAL_MEM = "totalGlobalMem"
DEVICE_COMPUTE_MAJOR = "computeMajor"
DEVICE_COMPUTE_MINOR = "computeMinor"
DEVICE_MAX_THREADS_PER_BLOCK = "maxThreadsPerBlock"
DEVICE_MAX_THREADS_PER_MULTIPROCESSOR = "maxThreadsPerMultiprocessor"
DEVICE_REGS_PER_BLOCK = "regsPerBlock"
DEVICE_REGS_PER_MULTIPROCESSOR = "regsPerMultiprocessor"
DEVICE_WARP_SIZE = "warpSize"
DEVICE_NUM_SMS = "numSms"
DEVICE_SHARED_MEM_PER_BLOCK = "sharedMemPerBlock"
DEVICE_SHARED_MEM_PER_BLOCK_OPTIN = "sharedMemPerBlockOptin"
DEVICE_SHARED_MEM_PER_MULTIPROCESSOR = "sharedMemPerMultiprocessor"
DEVICE_CLOCK_RATE = "clockRate"              # kHz
DEVICE_MEMORY_CLOCK_RATE = "memoryClockRate"  # kHz
DEVICE_MEMORY_BUS_WIDTH = "memoryBusWidth"    # bits

# cuprof's own block: its presence marks a cuprof trace.
KEY_CUPROF = "cuprof"
CUPROF_DROPPED_GPU_RECORDS = "dropped_gpu_records"
CUPROF_DROPPED_CPU_EVENTS = "dropped_cpu_events"
CUPROF_CUDA_STATUS = "cuda_status"
CUDA_STATUS_ON = "on"  # the cuda_status of a trace with CUDA tracing on
CUPROF_WINDOW_START_NS = "window_start_ns"
CUPROF_WINDOW_END_NS = "window_end_ns"
CUPROF_TRACE_DETAIL = "trace_detail"  # written only when not Kineto's
# Inside KEY_CUPROF, what the window's edges cut and what came unpaired:
# {"calls_without_gpu_work": {"kernel": N, "memcpy": N, "memset": N}, "gpu_work_without_call": {...},
# "launched_before": {...}, "calls_running_at_end": N}.
CUPROF_WINDOW_EDGES = "window_edges"
EDGES_CALLS_WITHOUT_GPU_WORK = "calls_without_gpu_work"
EDGES_GPU_WORK_WITHOUT_CALL = "gpu_work_without_call"
EDGES_LAUNCHED_BEFORE = "launched_before"
EDGES_CALLS_RUNNING_AT_END = "calls_running_at_end"
EDGE_KIND_NAMES = ("kernel", "memcpy", "memset")
# Inside KEY_CUPROF, where metrics were sampled: {"interval_ns": N, "dropped": N, "out_of_range": N,
# "devices": [D, ...], "metrics": [{"name": CUPTI_NAME, "label": LABEL}, ...], "held_values": true,
# "alignment": [{"device": D, "shift_ns": S, "aligned": B}, ...],
# "gaps": [{"device": D, "ts": T, "dur": US, "cause": one of GAP_CAUSE_NAMES}, ...]}.
CUPROF_GPU_METRICS = "gpu_metrics"
GPU_METRICS_INTERVAL_NS = "interval_ns"
GPU_METRICS_DROPPED = "dropped"
GPU_METRICS_OUT_OF_RANGE = "out_of_range"
GPU_METRICS_DEVICES = "devices"
GPU_METRICS_METRICS = "metrics"
GPU_METRICS_NAME = "name"
GPU_METRICS_LABEL = "label"
GPU_METRICS_HELD_VALUES = "held_values"
GPU_METRICS_ALIGNMENT = "alignment"
GPU_METRICS_DEVICE = "device"
GPU_METRICS_SHIFT_NS = "shift_ns"
GPU_METRICS_ALIGNED = "aligned"
GPU_METRICS_GAPS = "gaps"
GPU_METRICS_GAP_TS = "ts"
GPU_METRICS_GAP_DUR = "dur"
GPU_METRICS_GAP_CAUSE = "cause"
GAP_CAUSE_NAMES = ("overflow", "sample_cap", "skipped", "late")

# ----------------------------------------------- the writer's, not in the header
# Metadata events for viewers (Perfetto, chrome://tracing): name -> the arg holding the value.
META_PROCESS_LABELS = "process_labels"
META_PROCESS_SORT_INDEX = "process_sort_index"
META_THREAD_SORT_INDEX = "thread_sort_index"
META_LABELS = "labels"          # process_labels' arg: "CPU", "GPU N", "CUPTI Overhead"
META_SORT_INDEX = "sort_index"  # the sort indices' arg
LABEL_CPU = "CPU"               # the process_labels of the process whose lanes are CPU threads

# Flow v2: members of the two slices an arrow links (no event of its own).
FLOW_BIND_ID = "bind_id"
FLOW_OUT = "flow_out"  # on the API call's slice
FLOW_IN = "flow_in"    # on its GPU record's
FLOW_V2_KEYS = (FLOW_BIND_ID, FLOW_IN, FLOW_OUT)

TRACE_DETAIL_LEAN = "lean"  # cuprof.trace_detail of a lean trace (GPU records may leave out args.device)

# ----------------------------------------------- groups the checkers share
GPU_WORK_CATS = frozenset({CAT_KERNEL, CAT_GPU_MEMCPY, CAT_GPU_MEMSET})  # GPU records of work a call launched
API_CATS = frozenset({CAT_CUDA_RUNTIME, CAT_CUDA_DRIVER})                # CUDA calls on CPU threads
SCOPE_CATS = frozenset({CAT_USER_ANNOTATION, CAT_GPU_USER_ANNOTATION})   # scopes, on a CPU thread or a stream


# ----------------------------------------------- the check against the C++ header
HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include", "cuprof", "output",
                      "trace_schema.hpp")
_STRING_RE = re.compile(r'inline constexpr std::string_view (\w+) = "((?:[^"\\]|\\.)*)";')
_INT_RE = re.compile(r"inline constexpr std::uint32_t (\w+) = (\d+)u?;")


def header_names(path=HEADER):
    """{C++ name: value} of every constant in trace_schema.hpp."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    names = {m.group(1): m.group(2) for m in _STRING_RE.finditer(text)}
    names.update({m.group(1): int(m.group(2)) for m in _INT_RE.finditer(text)})
    return names


def compare_with_header(path=HEADER):
    """Problems (empty: none) between this module and the C++ header: a constant missing here, or
    spelled differently. The header's `cat_kernel` is this module's CAT_KERNEL."""
    names = header_names(path)
    if not names:
        return [f"{path}: no constants found (has its form changed?)"]
    here = globals()
    problems = []
    for cxx, value in sorted(names.items()):
        py = cxx.upper()
        if py not in here:
            problems.append(f"{cxx} = {value!r}: no {py} in trace_schema.py")
        elif here[py] != value:
            problems.append(f"{cxx} = {value!r}: trace_schema.py has {py} = {here[py]!r}")
    return problems


def main():
    problems = compare_with_header()
    for p in problems:
        print(f"trace_schema: {p}")
    print(f"trace_schema: {len(header_names())} names of {os.path.relpath(HEADER)}, "
          f"{'all' if not problems else len(header_names()) - len(problems)} as here")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
