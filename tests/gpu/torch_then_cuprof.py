"""torch.profiler and cuprof in one process (gpu_check.py runs this).

torch.profiler (Kineto) takes CUPTI first; then libcuprof_probe.so
(tests/gpu/cupti_probe.cpp) runs a cuprof profile through ctypes, while torch's
profile is still recording. Expected: cuprof says another tool holds CUPTI,
records its CPU side, and torch's own trace still has its kernels from before
and after cuprof's attempt. Prints one JSON object on stdout.

    python3 tests/gpu/torch_then_cuprof.py PROBE_LIBRARY TORCH_TRACE_PATH
"""
import ctypes
import json
import sys

import torch


def main():
    probe_path, torch_trace = sys.argv[1], sys.argv[2]
    probe = ctypes.CDLL(probe_path)
    probe.cuprof_probe_run.restype = ctypes.c_char_p
    probe.cuprof_probe_run.argtypes = [ctypes.c_int]

    x = torch.randn(256, 256, device="cuda")
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(3):
            y = x @ x
        torch.cuda.synchronize()
        with torch.profiler.record_function("cuprof_probe"):
            during = json.loads(probe.cuprof_probe_run(100).decode())
        for _ in range(3):
            y = x @ x
        torch.cuda.synchronize()
    prof.export_chrome_trace(torch_trace)
    # After torch's profile ended: cuprof's CUDA state was decided once for the process.
    after = json.loads(probe.cuprof_probe_run(10).decode())
    with open(torch_trace) as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    probe_ev = [e for e in events if e.get("name") == "cuprof_probe" and e.get("ph") == "X"]
    end_of_probe = probe_ev[0]["ts"] + probe_ev[0]["dur"] if probe_ev else None
    print(json.dumps({
        "during": during,
        "after": after,
        "torch_kernels": len(kernels),
        "torch_kernels_after_probe": sum(1 for k in kernels if end_of_probe is not None and k["ts"] >= end_of_probe),
        "y_sum_finite": bool(torch.isfinite(y.sum()).item()),
    }))


if __name__ == "__main__":
    main()
