"""How a traced program ends, on the GPU machine (part of gpu_check.py, the GPU suite).

tests/gpu/exit_modes ends in each way a program can, with 100 kernels still in
flight, built three ways: cuprof included with the shared and with the static
CUDA runtime (traced with CUPROF_TRACE), and cuprof compiled out (traced with
`cuprof run`). Each run must exit as the program does, and its trace must be
valid and hold every kernel and the copy.
"""
import os
import sys

import validate_trace
from trace_schema import CAT_GPU_MEMCPY, CAT_KERNEL, KEY_TRACE_EVENTS

MODES = {  # mode: the exit status the program gives (negative: killed by that signal)
    "return": 0,
    "exit_thread": 3,
    "device_reset": 0,
    "driver_context": 0,
    "sigterm": -15,
}
LAUNCHES = 100


def exit_checks(build, out, summary, check, run):
    gpu = os.path.join(build, "tests", "gpu")
    cli = os.path.join(build, "tools", "cuprof")
    rows = summary.setdefault("exit_modes", {})
    for mode, expected_exit in MODES.items():
        for how in ("header", "header_static", "cuprof_run"):
            label = f"exit_{mode}_{how}"
            trace = os.path.join(out, label + ".json")
            if how == "cuprof_run":
                cmd = [cli, "run", "--output", trace, "--no-table", "--", os.path.join(gpu, "exit_modes_plain"), mode]
                env = {}
            else:
                binary = "exit_modes" if how == "header" else "exit_modes_static"
                cmd, env = [os.path.join(gpu, binary), mode], {"CUPROF_TRACE": trace, "CUPROF_TABLE": "0"}
            try:
                proc = run(cmd, out, label, env=env, timeout=120)
            except Exception as e:  # a hang is a failed check, not the end of gpu-check
                check(f"{label}: ends", False, f"{type(e).__name__}: {e}")
                continue
            kernels = copies = 0
            problems = ["no trace written"]
            if os.path.exists(trace):
                raw, obj = validate_trace.load_trace(trace)
                problems = validate_trace.validate(raw, obj, require_gpu=True)
                events = [e for e in obj[KEY_TRACE_EVENTS] if e.get("ph") == "X"]
                kernels = sum(1 for e in events if e.get("cat") == CAT_KERNEL and "mark_kernel" in e["name"])
                copies = sum(1 for e in events if e.get("cat") == CAT_GPU_MEMCPY and "HtoD" in e["name"])
            said = [l for l in proc.stderr.splitlines() if l.startswith("cuprof:")]
            rows[label] = {"exit": proc.returncode, "kernels": kernels, "copies": copies, "lines": said}
            check(f"{label}: exits as the program does ({expected_exit}), the trace is valid and holds all "
                  f"{LAUNCHES} kernels and the copy",
                  proc.returncode == expected_exit and not problems and kernels == LAUNCHES and copies >= 1
                  and "launched" in proc.stdout,
                  f"exit {proc.returncode}; kernels {kernels}, HtoD copies {copies}; {'; '.join(problems[:2])}; "
                  f"{' | '.join(said)[-300:]}")

    # A program that never initialises CUDA, on a machine with a driver: one line and a CPU-only trace.
    trace = os.path.join(out, "exit_no_cuda_cuprof_run.json")
    proc = run([cli, "run", "--output", trace, "--no-table", "--", sys.executable, "-c", "import sys; sys.exit(7)"],
               out, "exit_no_cuda_cuprof_run", timeout=120)
    said = [l for l in proc.stderr.splitlines() if l.startswith("cuprof:")]
    problems = ["no trace written"]
    if os.path.exists(trace):
        raw, obj = validate_trace.load_trace(trace)
        problems = validate_trace.validate(raw, obj, require_gpu=False)
    rows["exit_no_cuda_cuprof_run"] = {"exit": proc.returncode, "lines": said}
    check("cuprof run of a program that never initialises CUDA: its exit status (7), one line saying so, a valid "
          "CPU-only trace", proc.returncode == 7 and not problems
          and sum("the program never initialised CUDA" in l for l in said) == 1,
          f"exit {proc.returncode}; {' | '.join(said)}; {'; '.join(problems[:2])}")
