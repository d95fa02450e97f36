#!/usr/bin/env python3
"""Writes the synthetic rank traces of tests/data/ranks/: what follows says what they hold.

Each rank: three ProfilerStep#N of 1000 us; per step a GEMM on stream 7 and two
all-reduces on stream 20, each launched by a cudaLaunchKernel inside the step.
Rank 1's GEMM runs 100 us longer, so it reaches the all-reduces late:
150 us at the first, 10 us at the second (160 us a step); both ranks' all-reduces
end together. two_hosts/: rank 1 on another host whose clock is 3200 us ahead,
its all-reduce ends jittered by a few us, and another baseTimeNanoseconds.
"""
import json
import os
import sys

BASE = 1700000000000000000
STEP_US = 1000
GEMM = "ampere_sgemm_128x64_nn"
NEW_AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
OLD_AR = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
# Per step, relative to its start: (gemm end, [(all-reduce start, end)])
PLAN = {
    0: (500, [(400, 700), (750, 800)]),
    1: (600, [(550, 700), (760, 800)]),
}
JITTER_US = [0, 2, -2, 4, -2, 1]  # two_hosts: rank 1's all-reduce ends, in order


def rank_trace(rank, host, base, shift_us, jitter, args, kernel_name):
    pid, tid = 1000 + rank, 1000 + rank
    ev = [
        {"name": "process_name", "ph": "M", "ts": 0, "pid": pid, "tid": 0, "args": {"name": "python"}},
        {"name": "thread_name", "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": {"name": "python"}},
    ]
    ext, corr, n = 1, 100, 0
    gemm_end, ars = PLAN[rank]
    for step in range(1, 4):
        s = (step - 1) * STEP_US + shift_us
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": pid, "tid": tid,
                   "ts": s, "dur": STEP_US - 1, "args": {"External id": ext}})
        ext += 1
        # The GEMM.
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": tid, "ts": s + 10, "dur": 40,
                   "args": {"External id": ext}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": tid, "ts": s + 20,
                   "dur": 20, "args": {"External id": ext, "correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": GEMM, "pid": 0, "tid": 7, "ts": s + 100, "dur": gemm_end - 100,
                   "args": {"External id": ext, "device": 0, "stream": 7, "correlation": corr}})
        ext += 1
        corr += 1
        for i, (a, b) in enumerate(ars):
            end = b + (jitter[n] if jitter else 0)
            n += 1
            cpu = s + 60 + 40 * i
            ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": pid, "tid": tid, "ts": cpu,
                       "dur": 30, "args": {"External id": ext}})
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": tid,
                       "ts": cpu + 5, "dur": 20, "args": {"External id": ext, "correlation": corr}})
            kargs = {"External id": ext, "device": 0, "stream": 20, "correlation": corr}
            if args:
                kargs.update({"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 1048576,
                              "Out msg nelems": 1048576, "Group size": 2, "bytes": 4194304})
            ev.append({"ph": "X", "cat": "kernel", "name": kernel_name, "pid": 0, "tid": 20, "ts": s + a,
                       "dur": end - a, "args": kargs})
            ext += 1
            corr += 1
    # ts are microseconds after this file's base.
    delta_us = (BASE - base) // 1000
    for e in ev:
        if e["ph"] != "M":
            e["ts"] += delta_us
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
            "hostName": host, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}],
            "displayTimeUnit": "ms", "baseTimeNanoseconds": base, "traceEvents": ev}


def write(path, doc):
    with open(path, "w") as f:
        f.write('{\n')
        keys = [k for k in doc if k != "traceEvents"]
        for k in keys:
            f.write(f'  {json.dumps(k)}: {json.dumps(doc[k])},\n')
        f.write('  "traceEvents": [\n')
        f.write(",\n".join("    " + json.dumps(e) for e in doc["traceEvents"]))
        f.write("\n  ]\n}\n")


def main():
    here = os.path.dirname(os.path.abspath(sys.argv[0]))
    os.makedirs(os.path.join(here, "same_host"), exist_ok=True)
    os.makedirs(os.path.join(here, "two_hosts"), exist_ok=True)
    write(os.path.join(here, "same_host", "rank0.json"), rank_trace(0, "node-a", BASE, 0, None, True, NEW_AR))
    write(os.path.join(here, "same_host", "rank1.json"), rank_trace(1, "node-a", BASE, 0, None, False, OLD_AR))
    write(os.path.join(here, "two_hosts", "rank0.json"), rank_trace(0, "node-a", BASE, 0, None, True, NEW_AR))
    write(os.path.join(here, "two_hosts", "rank1.json"),
          rank_trace(1, "node-b", BASE - 1000000000, 3200, JITTER_US, True, NEW_AR))


if __name__ == "__main__":
    main()
