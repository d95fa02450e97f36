"""Writes a large torch.profiler-shaped (Kineto) Chrome trace, for measuring
how fast `cuprof table` / `insights` / `diff` read one (docs/performance.md,
"Reading speed").

The events have the categories, fields and args of tests/data/kineto/*.json:
ProfilerStep spans (user_annotation), cpu_op ops, cuda_runtime / cuda_driver
launches with ac2g flow arrows, kernels with launch details, memcpys and
memsets, gpu_user_annotation extents, and the metadata events. The output is
deterministic: the same arguments give the same bytes. The templates below
spell the format's names as $cat_kernel, $arg_correlation, ... (the names of
include/cuprof/output/trace_schema.hpp, from tests/trace_schema.py); torch's
own args (Ev Idx, Sequence number, ...) are spelled out.

    bench/run make-large-trace /tmp/large.json            # 1.39 M events, 313 MB
    bench/run make-large-trace /tmp/small.json --steps 10
"""
if __name__ == "__main__":  # a module of bench/run, which sets up the imports of all of them
    raise SystemExit("run it as: bench/run make-large-trace (bench/README.md)")

import argparse
from string import Template

import trace_schema
from trace_schema import (CAT_CPU_OP, CAT_CUDA_RUNTIME, CAT_GPU_MEMCPY, CAT_GPU_MEMSET, CAT_KERNEL,
                          CAT_USER_ANNOTATION)


def kineto(text):
    """text with each $name replaced by trace_schema's NAME: '"$arg_correlation": %d' -> '"correlation": %d'."""
    return Template(text).substitute({k.lower(): v for k, v in vars(trace_schema).items() if k.isupper()})


HEADER = kineto(
    '{\n  "schemaVersion": 1,\n  "$key_device_properties": [\n    {\n      "$device_id": 0, "$device_name": "NVIDIA H200", '
    '"$device_total_global_mem": 150109880320,\n      "$device_compute_major": 9, "$device_compute_minor": 0,\n      '
    '"$device_max_threads_per_block": 1024, "$device_max_threads_per_multiprocessor": 2048,\n      '
    '"$device_regs_per_block": 65536, "$device_warp_size": 32,\n      "$device_shared_mem_per_block": 49152, '
    '"$device_num_sms": 132\n    , "$device_regs_per_multiprocessor": 65536, "$device_shared_mem_per_block_optin": 232448, '
    '"$device_shared_mem_per_multiprocessor": 233472\n    }\n  ],\n'
    '  "$key_cuda_driver_version": 13000,\n  "$key_cuda_runtime_version": 13000,\n  "$key_cupti_version": 130001,\n'
    '  "displayTimeUnit": "ms",\n  "$key_base_time": 1790857026000000000,\n  "$key_trace_events": [\n')
PROCESS_NAME = kineto('{"name": "$meta_process_name", "ph": "M", "ts": %s, "pid": %d, "tid": 0,"args": {"$meta_name": "python3"}}')
THREAD_NAME = kineto('{"name": "$meta_thread_name", "ph": "M", "ts": %s, "pid": %d, "tid": %d,'
                     '"args": {"$meta_name": "thread %d (python3)"}}')
SPAN = kineto('{"ph": "X", "cat": "%s", "name": "%s", "pid": %d, "tid": %d, "ts": %s, "dur": %s, '
              '"args": {"$arg_external_id": %d,"Record function id": 0%s, "Ev Idx": %d}}')
LAUNCH = kineto('{"ph": "X", "cat": "%s", "name": "%s", "pid": %d, "tid": %d, "ts": %s, "dur": %s, '
                '"args": {"$arg_external_id": %d, "$arg_cbid": %d, "$arg_correlation": %d}}')
FLOW_START = kineto('{"ph": "s", "id": %d, "pid": %d, "tid": %d, "ts": %s, "cat": "$cat_flow", "name": "$cat_flow"}')
GPU = kineto('{"ph": "X", "cat": "%s", "name": "%s", "pid": 0, "tid": %d, "ts": %s, "dur": %s, '
             '"args": {"$arg_external_id": %d, "$arg_device": 0, "$arg_context": 1, "$arg_stream": %d, '
             '"$arg_correlation": %d%s}}')
FLOW_END = kineto('{"ph": "f", "id": %d, "pid": 0, "tid": %d, "ts": %s, "cat": "$cat_flow", "name": "$cat_flow", "bp": "e"}')
COPY_ARGS = kineto(', "$arg_bytes": %d, "memory bandwidth (GB/s)": %s')
KERNEL_ARGS = kineto(', "$arg_registers_per_thread": %d, "$arg_shared_memory": %d, "blocks per SM": 1.0, '
                     '"warps per SM": 12.0, "$arg_grid": [%d, 66, 1], "$arg_block": [384, 1, 1], '
                     '"est. achieved occupancy %%": 0')
GPU_SPAN = kineto('{"ph": "X", "cat": "$cat_gpu_user_annotation", "name": "%s", "pid": 0, "tid": %d, '
                  '"ts": %s, "dur": %s, "args": {"$arg_external_id": %d}}')
SYNC = kineto('{"ph": "X", "cat": "$cat_cuda_runtime", "name": "cudaDeviceSynchronize", "pid": %d, "tid": %d, '
              '"ts": %s, "dur": %s, "args": {"$arg_external_id": %d, "$arg_cbid": 165, "$arg_correlation": %d}}')

PID, TID, GPU_TID = 495, 495, 7
BASE_US = 4448316270000  # microseconds after baseTimeNanoseconds, as Kineto writes them

KERNELS = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
    "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}, std::array<char*, 2ul> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}, std::array<char*, 2ul>)",
    "void cunn_SoftMaxForward<4, float, float, float, cunn::SoftMaxForwardEpilogue>(float*, float const*, int)",
]
# (op, kernel index) per layer of a step; each op launches one kernel.
OPS = [("aten::mm", 1), ("aten::add", 0), ("aten::gelu", 2), ("aten::mm", 1), ("aten::add", 0), ("aten::_softmax", 3)]


def ts(t_ns):
    # Kineto prints microseconds with three decimals.
    return "%d.%03d" % divmod(t_ns, 1000)


class Writer:
    def __init__(self, out):
        self.out = out
        self.first = True
        self.events = 0

    def event(self, text):
        self.out.write(("  " if self.first else ",\n  ") + text)
        self.first = False
        self.events += 1

    def span(self, cat, name, start, dur, ext, extra=""):
        self.event(SPAN % (cat, name, PID, TID, ts(start), ts(dur), ext, extra, self.events))

    def launch(self, cat, name, cbid, start, dur, ext, corr):
        self.event(LAUNCH % (cat, name, PID, TID, ts(start), ts(dur), ext, cbid, corr))
        self.event(FLOW_START % (corr, PID, TID, ts(start)))

    def gpu(self, cat, name, start, dur, ext, corr, args):
        self.event(GPU % (cat, name, GPU_TID, ts(start), ts(dur), ext, GPU_TID, corr, args))
        self.event(FLOW_END % (corr, GPU_TID, ts(start)))


def main(argv=None, prog=None):
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("output")
    p.add_argument("--steps", type=int, default=21060, help="ProfilerStep spans (66 events each; default 21060: 1.39 M events, 313 MB)")
    a = p.parse_args(argv)
    with open(a.output, "w") as out:
        out.write(HEADER)
        w = Writer(out)
        w.event(PROCESS_NAME % (ts(BASE_US * 1000), PID))
        w.event(THREAD_NAME % (ts(BASE_US * 1000), PID, TID, TID))
        ext, corr = 1, 1
        cpu = BASE_US * 1000 + 5000
        gpu_free = cpu
        for step in range(a.steps):
            step_start, step_ext = cpu, ext
            ext += 1
            cpu += 1500
            # A host-to-device copy of the batch, then the layers.
            w.launch(CAT_CUDA_RUNTIME, "cudaMemcpyAsync", 41, cpu, 6200, step_ext, corr)
            g = max(gpu_free, cpu + 4000)
            w.gpu(CAT_GPU_MEMCPY, "Memcpy HtoD (Pageable -> Device)", g, 2100, step_ext, corr,
                  COPY_ARGS % (4194304, "1.997"))
            gpu_free = g + 2100
            corr += 1
            cpu += 7000
            block_start, block_ext = cpu, ext
            ext += 1
            block_gpu_start = None
            for i, (op, k) in enumerate(OPS):
                op_start, op_ext = cpu, ext
                ext += 1
                cpu += 800 + 37 * (step % 7)
                # Kineto records the op's own small children (output allocation, views) too.
                for child in ("aten::empty", "aten::as_strided", "aten::resize_", "aten::view"):
                    w.span(CAT_CPU_OP, child, cpu, 400, ext, ', "Sequence number": -1, "Fwd thread id": 0')
                    ext += 1
                    cpu += 450
                w.launch(CAT_CUDA_RUNTIME, "cudaLaunchKernel", 211, cpu, 4100, op_ext, corr)
                g = max(gpu_free + (1 if i == 0 else 0), cpu + 3000)  # room for the span's padding
                dur = 9000 + 1300 * k + 11 * (step % 13) + 7 * i
                w.gpu(CAT_KERNEL, KERNELS[k], g, dur, op_ext, corr, KERNEL_ARGS % (32 + 8 * k, 1024 * k, 2 + k))
                block_gpu_start = g if block_gpu_start is None else block_gpu_start
                gpu_free = g + dur
                corr += 1
                cpu += 4100 + 900
                w.span(CAT_CPU_OP, op, op_start, cpu - op_start, op_ext, ', "Sequence number": %d, "Fwd thread id": 0' % step)
            w.span(CAT_USER_ANNOTATION, "layers", block_start, cpu - block_start, block_ext)
            w.event(GPU_SPAN % ("layers", GPU_TID, ts(block_gpu_start - 1), ts(gpu_free - block_gpu_start + 2), block_ext))
            # The step ends with a memset and a synchronize.
            w.launch(CAT_CUDA_RUNTIME, "cudaMemsetAsync", 51, cpu, 3000, step_ext, corr)
            g = max(gpu_free + 1, cpu + 2000)  # after the 'layers' span's padding: no overlap
            w.gpu(CAT_GPU_MEMSET, "Memset (Device)", g, 768, step_ext, corr, COPY_ARGS % (4, "0.0052"))
            gpu_free = g + 768
            corr += 1
            cpu += 3500
            sync_start = cpu
            cpu = max(cpu + 1000, gpu_free + 2000)
            w.event(SYNC % (PID, TID, ts(sync_start), ts(cpu - sync_start), step_ext, corr))
            corr += 1
            cpu += 500
            w.span(CAT_USER_ANNOTATION, "ProfilerStep#%d" % step, step_start, cpu - step_start, step_ext)
            cpu += 2000
        w.event('{"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": %s}' % ts(cpu))
        out.write('\n  ],\n  "traceName": "make_large_trace.py"\n}\n')
