"""The training-loop benchmark (docs/performance.md, "Overhead on a training loop"): what tracing
costs a real training loop, against torch.profiler and against CUPTI alone.

  bench/run training-loop --build build-gpu-carry --out $OUT/training_loop.json   # GPU machine
  bench/run training-loop --build build-gpu-carry --dry-run                        # command lines only
  (--keep-traces DIR: the first repetition's traces, gzipped, to see which calls were recorded)

Two programs; each mode is one process; modes are interleaved, their order rotated every
repetition, over --reps repetitions:

  bench/train_step.py   PyTorch: a 9-layer MLP + AdamW, batch 64 (bench/run train-step)
  bench/mlp_loop        C++: a 9-layer cuBLAS MLP forward (mlp_loop_plain: cuprof compiled out)

Reported per mode: the median over repetitions of each process's median step time (p10/p90 over
repetitions), its ratio to the program's untraced mode, the time added per step (each process
paired with the same repetition's untraced one) and per kernel; for modes that write a trace, the
end-to-end cost per traced kernel: the process's wall time minus the untraced process's (profiler
start-up, the traced steps, collection, the trace on disk, exit), over the kernels in its trace.
The paired modes measure within one process what differs too much between processes: the time a
tracer and torch.profiler add to a step, and their end-to-end costs per traced kernel.
Anchors (the minimal CUPTI tracer injected) run every --anchor-every repetitions.

Everything a repetition measured goes to --out after each repetition, so a run cut short keeps
what it had; the runs stop early rather than overrun --budget-s.
"""
if __name__ == "__main__":  # a module of bench/run, which sets up the imports of all of them
    raise SystemExit("run it as: bench/run training-loop (bench/README.md)")

import argparse
import datetime
import gzip
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from trace_schema import CAT_KERNEL

RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run")  # bench/run: the programs it starts
TRACE = "{trace}"  # replaced by the process's own trace path in argv and env
# No tracing variable is inherited: each mode sets its own.
TRACING_VARIABLES = ("CUPROF_TRACE", "CUPROF_TABLE", "CUPROF_ACTIVITIES", "CUPROF_DELAY", "CUPROF_DURATION",
                     "CUPROF_MEMORY", "CUPROF_STACKS",
                     "CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "MINIMAL_CUPTI_ACTIVITY", "MINIMAL_CUPTI_WINDOW",
                     "MINIMAL_CUPTI_ONLY_CALLS", "MINIMAL_CUPTI_CALLBACKS")
# The minimal tracer's activity sets (bench/minimal_cupti_inject.cpp): the floor for GPU records,
# then every runtime API record, then every driver API record too. PyTorch launches through the
# runtime, whose launch makes a driver call (cudaLaunchKernel -> cuLaunchKernel): the last step
# is what recording the driver domain costs on such work.
# "_launches": only the launch calls keep their records (the runtime's cudaLaunchKernel, the driver's
# cuLaunchKernel, nested in it, and cuLaunchKernelEx, cuBLAS's), about the API records cuprof keeps on
# this work: the CUPTI cost of cuprof's activity set, without cuprof.
# "_launch_callbacks": the same launch calls recorded through the callback API instead (a timestamp at
# entry and exit kept per thread): what a callback-based cuprof would pay for them.
LAUNCH_CALLS = "runtime:211,driver:307,driver:652"
ANCHOR_KINDS = {
    "cupti_gpu": ("kernel,memcpy,memset", {}, "kernel, memcpy, memset"),
    "cupti_gpu_launches": ("kernel,memcpy,memset,runtime,driver", {"MINIMAL_CUPTI_ONLY_CALLS": LAUNCH_CALLS},
                           "+ the launch calls' runtime and driver records only"),
    "cupti_gpu_launch_callbacks": ("kernel,memcpy,memset", {"MINIMAL_CUPTI_CALLBACKS": LAUNCH_CALLS},
                                   "+ the launch calls through callbacks, no API record"),
    "cupti_gpu_runtime": ("kernel,memcpy,memset,runtime", {}, "+ every runtime API record"),
    "cupti_gpu_api": ("kernel,memcpy,memset,runtime,driver", {}, "+ every runtime and driver API record"),
}
KERNEL_EVENT = re.compile(rb'"cat":\s*"%s"' % CAT_KERNEL.encode())  # cuprof's and torch's Chrome traces alike


@dataclass
class Mode:
    name: str
    program: str  # "py" or "cxx": modes compare with the untraced mode of their program
    what: str
    argv: list
    env: dict = field(default_factory=dict)
    anchor: bool = False
    whole_process: bool = True  # the trace holds every step, not only the timed ones
    steps_in_trace_key: str = ""  # the output line counting the steps its trace holds, when neither of the above

    @property
    def traced(self):
        return any(TRACE in a for a in self.argv + list(self.env.values()))

    @property
    def baseline(self):
        return f"{self.program}_untraced"


def use_carried_libraries(build):
    """The libraries scripts/gpu-check --build-only carries in BUILD/lib (the CLI's simdjson, libdeflate),
    for this process's children."""
    carried = os.path.join(build, "lib")
    if os.path.isdir(carried):
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (os.path.abspath(carried), os.environ.get("LD_LIBRARY_PATH")) if p)


def make_modes(a):
    cuprof = os.path.join(a.build, "tools", "cuprof")
    cuprof_run = [cuprof, "run", "--output", TRACE, "--no-table", "--"]
    inject = os.path.join(a.build, "bench", "libminimal_cupti_inject.so")
    python = [a.python, RUN, "train-step", "--warmup", str(a.py_warmup), "--steps", str(a.py_steps)]
    cxx_args = ["--warmup", str(a.cxx_warmup), "--steps", str(a.cxx_steps)]
    cxx = [os.path.join(a.build, "bench", "mlp_loop_plain")] + cxx_args
    cxx_scoped = [os.path.join(a.build, "bench", "mlp_loop")] + cxx_args
    paired_args = ["--mode", "paired", "--window-file", TRACE, "--trace", TRACE + ".torch.json"]
    side = os.path.join(tempfile.gettempdir(), "cuprof_bench_side_%p_%n.json")

    def idle_run(options):
        return [cuprof, "run", "--output", side, "--no-table"] + options + ["--"]

    modes = [
        Mode("py_untraced", "py", "PyTorch training step, nothing attached", python),
        Mode("py_cuprof", "py", "cuprof run --no-table", cuprof_run + python),
        Mode("py_cuprof_memory", "py", "cuprof run --memory --no-table (allocations recorded too)",
             cuprof_run[:2] + ["--memory"] + cuprof_run[2:] + python),
        Mode("py_cuprof_stacks", "py", "cuprof run --stacks --no-table (native call stacks captured)",
             cuprof_run[:2] + ["--stacks"] + cuprof_run[2:] + python),
        Mode("py_cuprof_metrics", "py", "cuprof run --gpu-metrics --no-table (GPU hardware metrics, the default set at the default interval)",
             cuprof_run[:2] + ["--gpu-metrics"] + cuprof_run[2:] + python),
        Mode("py_cuprof_nvtx", "py", "cuprof run --no-table, emit_nvtx() in the script", cuprof_run + python + ["--emit-nvtx"]),
        # Windows chosen by the program or on demand: what waiting for one costs (no window ever
        # opens, so no trace), and keeping only slow steps against an always-on window of the same
        # steps. Their files go to a side path, not TRACE: no whole-run trace is expected of them.
        Mode("py_cuprof_steps", "py", "cuprof run --no-table, an NVTX range \"step N\" per step",
             cuprof_run + python + ["--step-ranges"]),
        Mode("py_cuprof_slow_steps", "py", "cuprof run --slow-steps 5x --no-table, an NVTX range per step",
             idle_run(["--slow-steps", "5x"]) + python + ["--step-ranges"]),
        Mode("py_cuprof_idle_nvtx", "py", "cuprof run --capture-range nvtx:NAME, a range that never comes, "
             "an NVTX range per step (waiting: hooks and the control endpoint)",
             idle_run(["--capture-range", "nvtx:no such range"]) + python + ["--step-ranges"]),
        Mode("py_cuprof_idle_cuda", "py", "cuprof run --capture-range cuda, cudaProfilerStart never called",
             idle_run(["--capture-range", "cuda"]) + python),
        Mode("py_cuprof_idle_trigger", "py", "cuprof run --capture-range trigger, never triggered (the control "
             "endpoint's thread polling)", idle_run(["--capture-range", "trigger"]) + python),
        Mode("py_torch_cuda", "py", "torch.profiler CUDA only, timed steps, trace exported",
             python + ["--mode", "torch_cuda", "--trace", TRACE], whole_process=False),
        Mode("py_torch_cpu_cuda", "py", "torch.profiler CPU+CUDA, timed steps, trace exported",
             python + ["--mode", "torch_cpu_cuda", "--trace", TRACE], whole_process=False),
        # A tracer and torch.profiler in one process, each against the untraced steps just before it
        # (train_step.py --mode paired); the anchors' paired modes are added below.
        Mode("py_paired", "py", "one process: untraced, cuprof run's window, untraced, torch.profiler CUDA only, "
             "untraced, torch.profiler CPU+CUDA",
             [cuprof, "run", "--output", TRACE, "--no-table", "--delay", str(a.paired_delay_s),
              "--duration", str(a.paired_window_s), "--"] + python + paired_args,
             whole_process=False, steps_in_trace_key="paired_window_steps"),
        # The same with GPU metrics: what sampling adds to a step is this mode's window_added_us less
        # py_paired's, each measured against untraced steps of its own process.
        Mode("py_paired_metrics", "py", "py_paired with cuprof run --gpu-metrics (the default set and interval)",
             [cuprof, "run", "--output", TRACE, "--no-table", "--gpu-metrics", "--delay", str(a.paired_delay_s),
              "--duration", str(a.paired_window_s), "--"] + python + paired_args,
             whole_process=False, steps_in_trace_key="paired_window_steps"),
        Mode("cxx_untraced", "cxx", "C++ cuBLAS MLP (mlp_loop_plain), nothing attached", cxx),
        Mode("cxx_cuprof", "cxx", "cuprof run --no-table mlp_loop_plain", cuprof_run + cxx),
        Mode("cxx_cuprof_memory", "cxx", "cuprof run --memory --no-table mlp_loop_plain",
             cuprof_run[:2] + ["--memory"] + cuprof_run[2:] + cxx),
        Mode("cxx_cuprof_stacks", "cxx", "cuprof run --stacks --no-table mlp_loop_plain",
             cuprof_run[:2] + ["--stacks"] + cuprof_run[2:] + cxx),
        Mode("cxx_cuprof_metrics", "cxx", "cuprof run --gpu-metrics --no-table mlp_loop_plain",
             cuprof_run[:2] + ["--gpu-metrics"] + cuprof_run[2:] + cxx),
        Mode("cxx_cuprof_scopes", "cxx", "mlp_loop with a scope per layer, CUPROF_TRACE", cxx_scoped,
             {"CUPROF_TRACE": TRACE, "CUPROF_TABLE": "0"}),
    ]
    def anchor_env(kinds, extra):
        return {"CUDA_INJECTION64_PATH": inject, "MINIMAL_CUPTI_ACTIVITY": kinds, **extra}

    for program, argv in (("py", python), ("cxx", cxx)):
        for anchor, (kinds, extra, what) in ANCHOR_KINDS.items():
            modes.append(Mode(f"{program}_{anchor}", program, f"anchor: minimal CUPTI tracer, {what}", argv,
                              anchor_env(kinds, extra), anchor=True))
    for anchor, (kinds, extra, what) in ANCHOR_KINDS.items():  # no trace: not counted as traced modes
        modes.append(Mode(f"py_paired_{anchor}", "py", f"one process: untraced, the minimal CUPTI tracer's window "
                          f"({what}), untraced, torch.profiler CUDA only, untraced, torch.profiler CPU+CUDA",
                          python + paired_args,
                          {**anchor_env(kinds, extra),
                           "MINIMAL_CUPTI_WINDOW": f"{a.paired_delay_s},{a.paired_window_s},{TRACE}"}, anchor=True,
                          whole_process=False, steps_in_trace_key="paired_window_steps"))
    return modes


def parse_kv(text):
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        try:
            values[key] = float(value)
        except ValueError:
            values[key] = value.strip()
    return values


def run_once(mode, trace_dir, timeout_s, keep_dir=None, cpus=""):
    """One process of `mode`: its key=value lines, wall_s, and for traced modes the kernels in its
    trace; the trace is then deleted, or gzipped into keep_dir. `cpus`: a taskset CPU list that every
    process (and its threads) is pinned to, so processes differ less in where they ran."""
    trace = os.path.join(trace_dir, f"{mode.name}.pt.trace.json")
    argv = (["taskset", "-c", cpus] if cpus else []) + [x.replace(TRACE, trace) for x in mode.argv]
    env = {k: v for k, v in os.environ.items() if k not in TRACING_VARIABLES}
    env.update({k: v.replace(TRACE, trace) for k, v in mode.env.items()})
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, errors="replace", timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout_s} s"}
    result = {"wall_s": time.perf_counter() - t0, "ok": proc.returncode == 0, **parse_kv(proc.stdout),
              "stderr_tail": proc.stderr[-500:]}  # what cuprof or CUPTI said (dropped records...)
    if proc.returncode != 0:
        result["error"] = f"exit status {proc.returncode}: {proc.stderr[-2000:]}"
    elif "step_us_median" not in result:
        result.update(ok=False, error=f"no step_us_median in its output: {proc.stdout[-500:]}")
    elif mode.traced:
        try:
            with open(trace, "rb") as f:
                data = f.read()
            result["trace_bytes"] = len(data)
            result["kernels_in_trace"] = len(KERNEL_EVENT.findall(data))
            steps = result.get(mode.steps_in_trace_key or ("steps_total" if mode.whole_process else "steps_timed"), 0)
            result["kernels_per_step"] = result["kernels_in_trace"] / steps if steps else None
            if keep_dir:
                with gzip.open(os.path.join(keep_dir, os.path.basename(trace) + ".gz"), "wb", compresslevel=1) as f:
                    f.write(data)
        except OSError as e:
            result.update(ok=False, error=f"no trace: {e}; stderr: {proc.stderr[-2000:]}")
    if os.path.exists(trace):
        os.remove(trace)
    return result


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    deciles = statistics.quantiles(values, n=10, method="inclusive") if len(values) > 1 else [values[0]] * 9
    return {"median": statistics.median(values), "p10": deciles[0], "p90": deciles[8], "n": len(values)}


def summarize(modes, runs):
    """Per mode: step time, ratio and added time vs untraced, end-to-end cost per traced kernel."""
    ok = {m.name: {r["rep"]: r for r in runs[m.name] if r["ok"]} for m in modes}
    kernels_per_step = {}  # per program, from its traces: a mode that drops records is outvoted
    for program in {m.program for m in modes}:
        s = spread([r.get("kernels_per_step") for m in modes if m.program == program and m.traced and not m.anchor
                    for r in ok[m.name].values()])
        kernels_per_step[program] = s and s["median"]
    summary = {}
    for m in modes:
        mine, base = ok[m.name], ok.get(m.baseline, {})
        paired = [(r, base[rep]) for rep, r in mine.items() if rep in base]
        step = spread([r["step_us_median"] for r in mine.values()])
        base_step = spread([r["step_us_median"] for r in base.values()])
        s = {"what": m.what, "runs": len(runs[m.name]), "failed": len(runs[m.name]) - len(mine), "step_us": step,
             "ratio_to_untraced": step and base_step and step["median"] / base_step["median"],
             "added_us_per_step": spread([r["step_us_median"] - b["step_us_median"] for r, b in paired])}
        kps = kernels_per_step[m.program]
        s["added_us_per_kernel"] = s["added_us_per_step"] and kps and s["added_us_per_step"]["median"] / kps
        if m.traced:
            s["kernels_per_step"] = spread([r.get("kernels_per_step") for r in mine.values()])
            s["end_to_end_us_per_traced_kernel"] = spread(
                [(r["wall_s"] - b["wall_s"]) * 1e6 / r["kernels_in_trace"] for r, b in paired if r["kernels_in_trace"]])
            if not m.whole_process:  # the script's own measure: profiler start to trace on disk
                # (the torch.profiler modes print it; the paired modes give theirs as paired_* lines)
                s["profiler_start_to_trace_us_per_traced_kernel"] = spread(
                    [(r["profiler_start_to_trace_ms"] - b["timed_loop_ms"]) * 1e3 / r["kernels_in_trace"]
                     for r, b in paired if r["kernels_in_trace"] and "profiler_start_to_trace_ms" in r])
        summary[m.name] = s
    return summary, kernels_per_step


def paired_end_to_end_per_kernel(r, who):
    """A paired process's end-to-end us per traced kernel of `who` ("tracer", "torch_cpu_cuda"); None where
    it has none: the minimal tracer's file lists no kernels, runs from before the CPU+CUDA block lack both."""
    kernels = r.get(f"paired_{who}_kernels")
    return r[f"paired_{who}_end_to_end_us"] / kernels if kernels and f"paired_{who}_end_to_end_us" in r else None


def paired_summary(modes, runs):
    """The paired modes (train_step.py --mode paired): per process, the time the tracer's window and
    torch.profiler CUDA-only each add to a step over the untraced steps just before it; their medians
    over processes and the tracer / torch ratio (per process, and of the medians). Then the end-to-end
    cost per traced kernel of the tracer (its window's start to its file on disk; cuprof only, the
    minimal tracer's file lists no kernels) and of torch.profiler CPU+CUDA (profiler start to trace
    exported), and how many times cheaper the tracer is (torch / tracer, per process and of the medians)."""
    out = {}
    window_pct = {}  # per mode, each process's window cost as a share of its untraced steps
    for m in modes:
        ok = [r for r in runs.get(m.name, []) if m.name.startswith("py_paired") and r["ok"]
              and r.get("paired_window_steps", 0) > 0 and r.get("paired_torch_cuda_steps", 0) > 0]
        if not ok:
            continue
        window = [r["paired_window_us"] - r["paired_untraced_before_window_us"] for r in ok]
        torch = [r["paired_torch_cuda_us"] - r["paired_untraced_before_torch_us"] for r in ok]
        out[m.name] = {
            "what": m.what, "processes": len(ok),
            "untraced_before_window_us": spread([r["paired_untraced_before_window_us"] for r in ok]),
            "untraced_before_torch_us": spread([r["paired_untraced_before_torch_us"] for r in ok]),
            "window_added_us": spread(window), "torch_cuda_added_us": spread(torch),
            "ratio_per_process": spread([w / t for w, t in zip(window, torch) if t > 0]),
            "ratio_of_medians": statistics.median(window) / statistics.median(torch) if statistics.median(torch) > 0 else None,
            "steps_per_block": spread([min(r["paired_window_steps"], r["paired_untraced_before_window_steps"]) for r in ok]),
            # torch.profiler did record after the tracer let CUPTI go: kernels per step in its trace
            "torch_kernels_per_step": spread([r["paired_torch_kernels"] / r["paired_torch_cuda_steps"] for r in ok])}
        tracer_e2e = [paired_end_to_end_per_kernel(r, "tracer") for r in ok]
        torch_e2e = [paired_end_to_end_per_kernel(r, "torch_cpu_cuda") for r in ok]
        tracer_spread, torch_spread = spread(tracer_e2e), spread(torch_e2e)
        out[m.name].update({
            "torch_cpu_cuda_added_us": spread([r["paired_torch_cpu_cuda_us"] - r["paired_untraced_before_torch_cpu_cuda_us"]
                                               for r in ok if r.get("paired_torch_cpu_cuda_steps", 0) > 0]),
            "tracer_end_to_end_us_per_traced_kernel": tracer_spread,
            # of which the steps after the window closed, while the trace was still being made
            "tracer_after_window_us_per_traced_kernel": spread([
                r["paired_tracer_end_to_end_after_window_us"] / r["paired_tracer_kernels"] for r in ok
                if r.get("paired_tracer_kernels") and "paired_tracer_end_to_end_after_window_us" in r]),
            "torch_cpu_cuda_end_to_end_us_per_traced_kernel": torch_spread,
            # Only where the tracer's cost is above 0: at or below, it is lost in the step-time noise.
            "end_to_end_cheaper_by_per_process": spread([t / c for c, t in zip(tracer_e2e, torch_e2e)
                                                         if c is not None and t is not None and c > 0]),
            "end_to_end_cheaper_by_of_medians": torch_spread["median"] / tracer_spread["median"]
            if tracer_spread and torch_spread and tracer_spread["median"] > 0 else None})
        window_pct[m.name] = [100 * w / r["paired_untraced_before_window_us"] for w, r in zip(window, ok)]
    if "py_paired" in window_pct and "py_paired_metrics" in window_pct:
        out["py_paired_metrics"]["metrics_added_pct"] = median_difference(window_pct["py_paired_metrics"],
                                                                          window_pct["py_paired"])
    return out


def median_difference(a, b, draws=20000):
    """median(a) - median(b) of two groups of processes, with a 95 % bootstrap interval (a fixed seed:
    the same runs give the same figures). The processes differ more than a window's cost does, so the
    interval, not the median alone, says what the comparison resolves."""
    rng = random.Random(0)
    boots = sorted(statistics.median(rng.choices(a, k=len(a))) - statistics.median(rng.choices(b, k=len(b)))
                   for _ in range(draws))
    return {"median": statistics.median(a) - statistics.median(b), "low": boots[int(0.025 * draws)],
            "high": boots[int(0.975 * draws)], "n": [len(a), len(b)]}


# The targets are judged on one run of at least this many interleaved repetitions.
GOAL_REPETITIONS = 20


def paired_targets(paired):
    """The targets measured within processes: cuprof run's added time <= 0.8x torch.profiler CUDA-only's;
    its end-to-end cost per traced kernel >= 10x cheaper than torch.profiler CPU+CUDA's; from at least
    GOAL_REPETITIONS processes."""
    p = paired.get("py_paired", {})
    processes = p.get("processes", 0)
    enough = processes >= GOAL_REPETITIONS
    result = {}
    if p.get("ratio_of_medians") is not None:
        r = p["ratio_of_medians"]
        result["py_paired_in_loop_vs_torch_cuda"] = {"ratio": r, "goal": "<= 0.8", "processes": processes,
                                                     "met": r <= 0.8 and enough}
    if p.get("tracer_end_to_end_us_per_traced_kernel") and p.get("torch_cpu_cuda_end_to_end_us_per_traced_kernel"):
        # None: cuprof's median at or below 0, its cost lost in the noise; met, as targets() counts it.
        r = p["end_to_end_cheaper_by_of_medians"]
        result["py_paired_end_to_end_vs_torch_cpu_cuda"] = {"cheaper_by": r, "goal": ">= 10x", "processes": processes,
                                                            "met": (r is None or r >= 10) and enough}
    m = paired.get("py_paired_metrics", {}).get("metrics_added_pct")
    if m:  # what metrics add to a step, as a share of it: at most 3 % at the interval's upper end
        result["py_paired_metrics_added"] = {"percent": m, "goal": "<= 3 %", "processes": min(m["n"]),
                                             "met": m["high"] <= 3 and min(m["n"]) >= GOAL_REPETITIONS}
    return result


def targets(summary):
    """The targets: in-loop overhead <= 0.8x torch.profiler CUDA-only's, end-to-end >= 10x cheaper than CPU+CUDA."""
    def med(name, key):
        v = summary.get(name, {}).get(key)
        return v and v["median"]

    in_loop = {n: med(n, "added_us_per_step") for n in ("py_cuprof", "py_cuprof_nvtx", "py_torch_cuda")}
    e2e = {n: med(n, "end_to_end_us_per_traced_kernel") for n in ("py_cuprof", "py_cuprof_nvtx", "py_torch_cpu_cuda")}
    result = {}
    for n in ("py_cuprof", "py_cuprof_nvtx"):
        if in_loop[n] is not None and in_loop["py_torch_cuda"]:
            r = in_loop[n] / in_loop["py_torch_cuda"]
            result[f"{n}_in_loop_vs_torch_cuda"] = {"ratio": r, "goal": "<= 0.8", "met": r <= 0.8}
        if e2e[n] is not None and e2e["py_torch_cpu_cuda"] is not None:
            # A median at or below 0 is cuprof's cost lost in the process-time noise: no ratio then.
            r = e2e["py_torch_cpu_cuda"] / e2e[n] if e2e[n] > 0 else None
            result[f"{n}_end_to_end_vs_torch_cpu_cuda"] = {"cheaper_by": r, "goal": ">= 10x", "met": r is None or r >= 10}
    return result


def fmt(s, unit="", digits=1):
    if not s:
        return "-"
    return f"{s['median']:.{digits}f}{unit} ({s['p10']:.{digits}f}, {s['p90']:.{digits}f})"


def print_table(result):
    print(f"\n== real work, {result.get('device', platform.node())}, {result['date']}, "
          f"{result['reps_done']} repetitions ==")
    print("| mode | what | step us, median (p10, p90) | x untraced | added us per step (p10, p90) | added us per kernel "
          "| kernels per step | end to end, us per traced kernel (p10, p90) | runs (failed) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, s in result["summary"].items():
        ratio = f"{s['ratio_to_untraced']:.3f}" if s["ratio_to_untraced"] else "-"
        per_kernel = f"{s['added_us_per_kernel']:+.2f}" if s["added_us_per_kernel"] is not None else "-"
        kps = f"{s['kernels_per_step']['median']:.1f}" if s.get("kernels_per_step") else "-"
        e2e = fmt(s.get("end_to_end_us_per_traced_kernel"))
        if s.get("profiler_start_to_trace_us_per_traced_kernel"):
            e2e += f"; in-script {fmt(s['profiler_start_to_trace_us_per_traced_kernel'])}"
        print(f"| {name} | {s['what']} | {fmt(s['step_us'])} | {ratio} | {fmt(s['added_us_per_step'])} | {per_kernel} "
              f"| {kps} | {e2e} | {s['runs']} ({s['failed']}) |")
    print(f"kernels per step (median over traces): {result['kernels_per_step']}")
    for name, p in (result.get("paired") or {}).items():
        ratio = f"{p['ratio_of_medians']:.3f}" if p["ratio_of_medians"] is not None else "-"
        cheaper_by = (f"{p['end_to_end_cheaper_by_of_medians']:.1f}x" if p["end_to_end_cheaper_by_of_medians"] is not None
                      else "-")
        print(f"{name} ({p['processes']} processes, at least {p['steps_per_block']['median']:.0f} steps a block; "
              f"{p['what']}): untraced {fmt(p['untraced_before_window_us'])} / {fmt(p['untraced_before_torch_us'])} us "
              f"before the window / torch; added per step: window {fmt(p['window_added_us'])} us, torch.profiler "
              f"CUDA-only {fmt(p['torch_cuda_added_us'])} us; window / torch {ratio} of the medians, "
              f"{fmt(p['ratio_per_process'], digits=3)} per process; torch kernels per step "
              f"{fmt(p['torch_kernels_per_step'])}; torch.profiler CPU+CUDA added per step "
              f"{fmt(p['torch_cpu_cuda_added_us'])} us; end to end per traced kernel: tracer "
              f"{fmt(p['tracer_end_to_end_us_per_traced_kernel'], digits=2)} us (after the window "
              f"{fmt(p.get('tracer_after_window_us_per_traced_kernel'), digits=2)}), torch.profiler CPU+CUDA "
              f"{fmt(p['torch_cpu_cuda_end_to_end_us_per_traced_kernel'], digits=2)} us, torch / tracer "
              f"{cheaper_by} of the medians, {fmt(p['end_to_end_cheaper_by_per_process'], 'x')} per process")
    if not result["targets"]:
        print("targets: not computed (a mode it needs has no successful run)")
    for name, d in result["targets"].items():
        value = (f"{d['ratio']:.3f}" if "ratio" in d
                 else f"{d['percent']['median']:+.1f} % ({d['percent']['low']:+.1f} to {d['percent']['high']:+.1f})"
                 if "percent" in d else f"{d['cheaper_by']:.1f}x" if d["cheaper_by"] else "cuprof's cost is within the noise")
        few = ("" if d.get("processes", GOAL_REPETITIONS) >= GOAL_REPETITIONS
               else f"; {d['processes']} processes, the goal asks {GOAL_REPETITIONS} in one run")
        print(f"target {name}: {value} (goal {d['goal']}{few}): {'met' if d['met'] else 'NOT met'}")
    if result["stopped_early"]:
        print(f"NOTE: {result['stopped_early']}")


def schedule(modes, rep, anchor_every):
    """The modes of repetition `rep`, their order rotated by one each repetition."""
    now = [m for m in modes if not m.anchor or (anchor_every and rep % anchor_every == 0)]
    if not now:  # only anchors selected, and this repetition runs none
        return []
    shift = rep % len(now)
    return now[shift:] + now[:shift]


def estimate_s(modes, reps, anchor_every, process_s, traced_factor=1.5):
    """Seconds for all repetitions, from one untraced process per program; traced ones assumed traced_factor longer."""
    total = 0.0
    for rep in range(reps):
        for m in schedule(modes, rep, anchor_every):
            total += process_s[m.program] * (1 if m.name == m.baseline else traced_factor)
    return total


def merge(a, modes):
    """One summary from the --out files of a run split over commands: their repetitions pooled."""
    parts = []
    for path in a.merge:
        with open(path) as f:
            parts.append(json.load(f))
    names = {n for p in parts for n in p["runs"]}
    modes = [m for m in modes if m.name in names]
    runs = {m.name: [] for m in modes}
    for p in parts:
        for name, rs in p["runs"].items():
            if name in runs:
                runs[name].extend(rs)
    reps = [r["rep"] for rs in runs.values() for r in rs]
    if len({(n, r["rep"]) for n, rs in runs.items() for r in rs}) != len(reps):
        sys.exit("training-loop: the files share repetition numbers: run each part with its own --first-rep")
    result = {"date": " + ".join(p["date"] for p in parts), "device": parts[0]["device"],
              "parts": [{k: p[k] for k in ("date", "host", "device", "args", "anchor_every", "reps_done", "stopped_early")}
                        for p in parts],
              "runs": runs, "reps_done": sum(p["reps_done"] for p in parts),
              "stopped_early": "; ".join(p["stopped_early"] for p in parts if p["stopped_early"]) or None}
    result["summary"], result["kernels_per_step"] = summarize(modes, runs)
    result["targets"] = targets(result["summary"])
    result["paired"] = paired_summary(modes, runs)
    result["targets"].update(paired_targets(result["paired"]))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    print_table(result)


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build-gpu-carry", help="build tree with tools/cuprof and bench/mlp_loop*")
    parser.add_argument("--python", default=sys.executable, help="the Python with torch that runs train_step.py")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--anchor-every", type=int, default=5, help="anchors run every N repetitions (0: never)")
    parser.add_argument("--py-steps", type=int, default=150)
    parser.add_argument("--py-warmup", type=int, default=30)
    parser.add_argument("--cxx-steps", type=int, default=2000)
    parser.add_argument("--cxx-warmup", type=int, default=200)
    parser.add_argument("--budget-s", type=float, default=540, help="no repetition starts that would end past this")
    parser.add_argument("--timeout-s", type=float, default=120, help="per process")
    parser.add_argument("--out", default="", help="JSON file with every figure")
    parser.add_argument("--modes", default="", help="comma-separated name prefixes (py_cuprof,cxx_): only those "
                        "modes and their untraced baselines, to split a run over several commands")
    parser.add_argument("--skip", default="", help="comma-separated mode names left out")
    parser.add_argument("--first-rep", type=int, default=0, help="number of the first repetition: a run split over "
                        "several commands continues the rotation and keeps repetitions apart (see --merge)")
    parser.add_argument("--merge", nargs="+", default=[], metavar="JSON",
                        help="no run: combine the --out files of one run split over several commands "
                             "(--first-rep 0, 10, ...) into one summary, written to --out")
    parser.add_argument("--keep-traces", default="", help="folder for the first repetition's traces (gzipped)")
    parser.add_argument("--paired-delay-s", type=float, default=9,
                        help="paired modes: the tracer's window opens this long after CUDA starts (torch.cuda.is_available() "
                             "in train_step.py), after the model's set-up and warm-up: the untraced steps before it")
    parser.add_argument("--paired-window-s", type=float, default=1.5, help="py_paired: how long cuprof's window stays open")
    parser.add_argument("--cpus", default="", help="taskset CPU list every process is pinned to (e.g. 2-5): less "
                        "process-to-process spread on a host whose scheduler moves processes between cores")
    parser.add_argument("--dry-run", action="store_true", help="print the command lines and the schedule, run nothing")
    a = parser.parse_args(argv)
    use_carried_libraries(a.build)
    modes = make_modes(a)
    if a.modes:
        wanted = {m.name for m in modes if any(m.name.startswith(p) for p in a.modes.split(","))}
        modes = [m for m in modes if m.name in wanted or any(m.name == w.baseline for w in modes if w.name in wanted)]
    modes = [m for m in modes if m.name not in a.skip.split(",")]
    if a.merge:
        merge(a, modes)
        return

    if a.dry_run:
        for m in modes:
            env = " ".join(f"{k}={v}" for k, v in m.env.items())
            print(f"{m.name}{' (anchor)' if m.anchor else ''}: {env + ' ' if env else ''}{' '.join(m.argv)}")
        missing = sorted({p for m in modes for p in [m.argv[0], *m.env.values()]
                          if os.sep in p and TRACE not in p and not os.path.exists(p)})
        for p in missing:
            print(f"missing here: {p}")
        for rep in range(min(a.reps, 2)):
            print(f"rep {rep + 1} order: {' '.join(m.name for m in schedule(modes, rep, a.anchor_every))}")
        assumed = {"py": 3.0, "cxx": 1.0}
        print(f"estimate: ~{estimate_s(modes, a.reps, a.anchor_every, assumed):.0f} s for {a.reps} repetitions, "
              f"assuming {assumed} s per untraced process")
        return

    start = time.perf_counter()
    trace_dir = tempfile.mkdtemp(prefix="training_loop_")
    if a.keep_traces:
        os.makedirs(a.keep_traces, exist_ok=True)
    # One untraced process per program first: warms the page cache (torch's libraries) and sizes the run.
    print("probing: one untraced process of each program, to estimate the run's time", flush=True)
    probe = {}
    for m in modes:
        if m.name == m.baseline or (m.program not in probe and not any(b.name == m.baseline for b in modes)):
            r = run_once(m, trace_dir, a.timeout_s, cpus=a.cpus)
            if not r["ok"]:
                sys.exit(f"training-loop: {m.name} failed: {r['error']}\n{' '.join(m.argv)}")
            probe[m.program] = r["wall_s"]
    # The interleaved modes at --reps come first: anchors are run less often if the budget needs it.
    budget_left = a.budget_s - (time.perf_counter() - start)
    anchor_every = a.anchor_every
    while 0 < anchor_every < a.reps and estimate_s(modes, a.reps, anchor_every, probe) > budget_left:
        anchor_every += 1
    print(f"probe: one untraced process takes {', '.join(f'{k} {v:.1f} s' for k, v in probe.items())}; "
          f"estimate for {a.reps} repetitions, anchors every {anchor_every}: "
          f"~{estimate_s(modes, a.reps, anchor_every, probe):.0f} s (traced processes assumed 1.5x as long); "
          f"{budget_left:.0f} s of --budget-s left", flush=True)

    try:
        device = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        device = "unknown (no nvidia-smi)"
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "host": platform.node(), "device": device, "args": vars(a), "probe_s": probe, "anchor_every": anchor_every,
              "modes": {m.name: {"what": m.what, "argv": m.argv, "env": m.env, "anchor": m.anchor} for m in modes},
              "runs": {m.name: [] for m in modes}, "stopped_early": None, "reps_done": 0, "summary": {},
              "kernels_per_step": {}, "targets": {}}

    def save():
        if a.out:
            with open(a.out, "w") as f:
                json.dump(result, f, indent=1)

    failures = {m.name: 0 for m in modes}
    rep_s = []
    for rep in range(a.first_rep, a.first_rep + a.reps):
        elapsed = time.perf_counter() - start
        if rep_s and elapsed + max(rep_s) > a.budget_s:
            result["stopped_early"] = (f"stopped after {rep - a.first_rep} of {a.reps} repetitions: the next would end past "
                                       f"--budget-s {a.budget_s:.0f} (elapsed {elapsed:.0f} s, slowest repetition "
                                       f"{max(rep_s):.0f} s)")
            break
        t0 = time.perf_counter()
        for m in schedule(modes, rep, anchor_every):
            if failures[m.name] >= 2:  # a mode that keeps failing would eat the budget
                continue
            r = run_once(m, trace_dir, a.timeout_s, a.keep_traces if rep == 0 else None, a.cpus)
            r["rep"] = rep
            result["runs"][m.name].append(r)
            if not r["ok"]:
                failures[m.name] += 1
                print(f"rep {rep + 1}: {m.name} failed: {r['error']}", file=sys.stderr, flush=True)
        rep_s.append(time.perf_counter() - t0)
        result["reps_done"] = rep + 1 - a.first_rep
        result["summary"], result["kernels_per_step"] = summarize(modes, result["runs"])
        result["targets"] = targets(result["summary"])
        result["paired"] = paired_summary(modes, result["runs"])
        result["targets"].update(paired_targets(result["paired"]))
        save()
        print(f"rep {rep + 1}/{a.first_rep + a.reps} done in {rep_s[-1]:.0f} s, {time.perf_counter() - start:.0f} s in all",
              file=sys.stderr, flush=True)
    shutil.rmtree(trace_dir, ignore_errors=True)
    save()
    print_table(result)
