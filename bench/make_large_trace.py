#!/usr/bin/env python3
"""Writes a large torch.profiler-shaped (Kineto) Chrome trace, for measuring
how fast `cuprof table` / `insights` / `diff` read one (docs/performance.md,
"Reading speed").

The events have the categories, fields and args of tools/testdata/kineto/*.json:
ProfilerStep spans (user_annotation), cpu_op ops, cuda_runtime / cuda_driver
launches with ac2g flow arrows, kernels with launch details, memcpys and
memsets, gpu_user_annotation extents, and the metadata events. The output is
deterministic: the same arguments give the same bytes.

    python3 bench/make_large_trace.py /tmp/large.json            # 1.39 M events, 313 MB
    python3 bench/make_large_trace.py /tmp/small.json --steps 10
"""

import argparse

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
        self.event('{"ph": "X", "cat": "%s", "name": "%s", "pid": %d, "tid": %d, "ts": %s, "dur": %s, '
                   '"args": {"External id": %d,"Record function id": 0%s, "Ev Idx": %d}}'
                   % (cat, name, PID, TID, ts(start), ts(dur), ext, extra, self.events))

    def launch(self, cat, name, cbid, start, dur, ext, corr):
        self.event('{"ph": "X", "cat": "%s", "name": "%s", "pid": %d, "tid": %d, "ts": %s, "dur": %s, '
                   '"args": {"External id": %d, "cbid": %d, "correlation": %d}}'
                   % (cat, name, PID, TID, ts(start), ts(dur), ext, cbid, corr))
        self.event('{"ph": "s", "id": %d, "pid": %d, "tid": %d, "ts": %s, "cat": "ac2g", "name": "ac2g"}'
                   % (corr, PID, TID, ts(start)))

    def gpu(self, cat, name, start, dur, ext, corr, args):
        self.event('{"ph": "X", "cat": "%s", "name": "%s", "pid": 0, "tid": %d, "ts": %s, "dur": %s, '
                   '"args": {"External id": %d, "device": 0, "context": 1, "stream": %d, "correlation": %d%s}}'
                   % (cat, name, GPU_TID, ts(start), ts(dur), ext, GPU_TID, corr, args))
        self.event('{"ph": "f", "id": %d, "pid": 0, "tid": %d, "ts": %s, "cat": "ac2g", "name": "ac2g", "bp": "e"}'
                   % (corr, GPU_TID, ts(start)))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("output")
    p.add_argument("--steps", type=int, default=21060, help="ProfilerStep spans (66 events each; default 21060: 1.39 M events, 313 MB)")
    a = p.parse_args()
    with open(a.output, "w") as out:
        out.write('{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {\n      "id": 0, "name": "NVIDIA H200", '
                  '"totalGlobalMem": 150109880320,\n      "computeMajor": 9, "computeMinor": 0,\n      '
                  '"maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,\n      "regsPerBlock": 65536, '
                  '"warpSize": 32,\n      "sharedMemPerBlock": 49152, "numSms": 132\n    , "regsPerMultiprocessor": 65536, '
                  '"sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472\n    }\n  ],\n'
                  '  "cuda_driver_version": 13000,\n  "cuda_runtime_version": 13000,\n  "cupti_version": 130001,\n'
                  '  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": 1790857026000000000,\n  "traceEvents": [\n')
        w = Writer(out)
        w.event('{"name": "process_name", "ph": "M", "ts": %s, "pid": %d, "tid": 0,"args": {"name": "python3"}}'
                % (ts(BASE_US * 1000), PID))
        w.event('{"name": "thread_name", "ph": "M", "ts": %s, "pid": %d, "tid": %d,"args": {"name": "thread %d (python3)"}}'
                % (ts(BASE_US * 1000), PID, TID, TID))
        ext, corr = 1, 1
        cpu = BASE_US * 1000 + 5000
        gpu_free = cpu
        for step in range(a.steps):
            step_start, step_ext = cpu, ext
            ext += 1
            cpu += 1500
            # A host-to-device copy of the batch, then the layers.
            w.launch("cuda_runtime", "cudaMemcpyAsync", 41, cpu, 6200, step_ext, corr)
            g = max(gpu_free, cpu + 4000)
            w.gpu("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", g, 2100, step_ext, corr,
                  ', "bytes": 4194304, "memory bandwidth (GB/s)": 1.997')
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
                    w.span("cpu_op", child, cpu, 400, ext, ', "Sequence number": -1, "Fwd thread id": 0')
                    ext += 1
                    cpu += 450
                w.launch("cuda_runtime", "cudaLaunchKernel", 211, cpu, 4100, op_ext, corr)
                g = max(gpu_free, cpu + 3000)
                dur = 9000 + 1300 * k + 11 * (step % 13) + 7 * i
                w.gpu("kernel", KERNELS[k], g, dur, op_ext, corr,
                      ', "registers per thread": %d, "shared memory": %d, "blocks per SM": 1.0, "warps per SM": 12.0, '
                      '"grid": [%d, 66, 1], "block": [384, 1, 1], "est. achieved occupancy %%": 0'
                      % (32 + 8 * k, 1024 * k, 2 + k))
                block_gpu_start = g if block_gpu_start is None else block_gpu_start
                gpu_free = g + dur
                corr += 1
                cpu += 4100 + 900
                w.span("cpu_op", op, op_start, cpu - op_start, op_ext, ', "Sequence number": %d, "Fwd thread id": 0' % step)
            w.span("user_annotation", "layers", block_start, cpu - block_start, block_ext)
            w.event('{"ph": "X", "cat": "gpu_user_annotation", "name": "layers", "pid": 0, "tid": %d, '
                    '"ts": %s, "dur": %s, "args": {"External id": %d}}'
                    % (GPU_TID, ts(block_gpu_start - 1), ts(gpu_free - block_gpu_start + 2), block_ext))
            # The step ends with a memset and a synchronize.
            w.launch("cuda_runtime", "cudaMemsetAsync", 51, cpu, 3000, step_ext, corr)
            g = max(gpu_free, cpu + 2000)
            w.gpu("gpu_memset", "Memset (Device)", g, 768, step_ext, corr, ', "bytes": 4, "memory bandwidth (GB/s)": 0.0052')
            gpu_free = g + 768
            corr += 1
            cpu += 3500
            sync_start = cpu
            cpu = max(cpu + 1000, gpu_free + 2000)
            w.event('{"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": %d, "tid": %d, '
                    '"ts": %s, "dur": %s, "args": {"External id": %d, "cbid": 165, "correlation": %d}}'
                    % (PID, TID, ts(sync_start), ts(cpu - sync_start), step_ext, corr))
            corr += 1
            cpu += 500
            w.span("user_annotation", "ProfilerStep#%d" % step, step_start, cpu - step_start, step_ext)
            cpu += 2000
        w.event('{"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": %s}' % ts(cpu))
        out.write('\n  ],\n  "traceName": "make_large_trace.py"\n}\n')


if __name__ == "__main__":
    main()
