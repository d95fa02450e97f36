#!/usr/bin/env python3
"""Writes gpu_metrics.json: a small cuprof trace with GPU hardware metric
samples (PM sampling, every 20 us) over five kernels on GPU 0, as the trace
schema (include/cuprof/output/trace_schema.hpp) lays them out:

  GEMM      1000-1200 us  tensor pipe 72%, SM 85%, DRAM 20%, occupancy 40%: tensor-bound
  GeLU      1300-1400 us  DRAM 70%, SM 8%:  memory-bound, chained with the mul
  mul       1420-1480 us  DRAM 92%, SM 10%: memory-bound
  small     1500-1580 us  occupancy 10%, SM 5%, DRAM 3%: latency-bound
  tiny      1590-1595 us  shorter than the sampling interval: not judged

Samples run from 960 us to 1600 us; the GPU's counters are 0 while it is idle.
Run it from this directory to regenerate the file."""
import json

BASE = 1700000000000000000
INTERVAL_US = 20
LABELS = ["SM throughput %", "DRAM throughput %", "Tensor pipe active %", "Achieved occupancy %"]
NAMES = ["TriageCompute.sm__throughput.avg.pct_of_peak_sustained_elapsed",
         "dram__throughput.avg.pct_of_peak_sustained_elapsed",
         "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
         "sm__warps_active_realtime.avg.pct_of_peak_sustained_active"]
# name, start us, duration us, grid, block, counters (SM, DRAM, tensor, occupancy)
KERNELS = [
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 1000, 200, [264, 1, 1], [384, 1, 1], (85, 20, 72, 40)),
    ("void ex::map_kernel<gelu_op>(gelu_op, __nv_bfloat16*, __nv_bfloat16 const*, unsigned long)", 1300, 100,
     [1056, 1, 1], [256, 1, 1], (8, 70, 0, 60)),
    ("void ex::map_kernel<mul_op>(mul_op, __nv_bfloat16*, __nv_bfloat16 const*, unsigned long)", 1420, 60,
     [1056, 1, 1], [256, 1, 1], (10, 92, 0, 60)),
    ("small_kernel(int)", 1500, 80, [4, 1, 1], [128, 1, 1], (5, 3, 0, 10)),
    ("tiny_kernel()", 1590, 5, [1, 1, 1], [32, 1, 1], (1, 1, 0, 1)),
]

events = [{"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {"name": "GPU 0"}}]
for i, (name, ts, dur, grid, block, _) in enumerate(KERNELS):
    events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                   "args": {"device": 0, "stream": 7, "correlation": 10 + i, "registers per thread": 32,
                            "shared memory": 0, "grid": grid, "block": block}})
for ts in range(960, 1600, INTERVAL_US):
    values = (0, 0, 0, 0)
    for _, start, dur, _, _, v in KERNELS:
        if start <= ts and ts + INTERVAL_US <= start + dur:
            values = v
    for label, value in zip(LABELS, values):
        events.append({"ph": "C", "cat": "gpu_metric", "name": label, "pid": 0, "tid": 0, "ts": ts,
                       "args": {"value": value}})

trace = {
    "schemaVersion": 1,
    "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984, "computeMajor": 9,
                          "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
                          "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132,
                          "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448,
                          "sharedMemPerMultiprocessor": 233472}],
    "cuprof": {"version": "0.1.0", "dropped_gpu_records": 0, "dropped_cpu_events": 0, "cuda_status": "on",
               "gpu_metrics": {"interval_ns": INTERVAL_US * 1000, "dropped": 2, "devices": [0],
                               "metrics": [{"name": n, "label": l} for n, l in zip(NAMES, LABELS)]}},
    "baseTimeNanoseconds": BASE,
    "traceEvents": events,
}
with open("gpu_metrics.json", "w") as f:
    f.write("{\n")
    items = list(trace.items())
    for k, v in items[:-1]:
        f.write(f'  "{k}":{json.dumps(v, separators=(",", ":"))},\n')
    f.write('  "traceEvents":[\n' + ",\n".join(json.dumps(e, separators=(",", ":")) for e in events) + "\n  ]\n}\n")
