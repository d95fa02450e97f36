"""What each kind of CUPTI record costs a launch, and what cuprof adds over CUPTI's own cost for the
same records: the C++ launch loop (bench/launch_bench, --mode untraced: back-to-back empty kernels
through cudaLaunchKernel, a stream sync every 256) run plain, under the minimal CUPTI tracer with
one activity set after another, and under `cuprof run`; one process each, interleaved over --reps
repetitions, medians of the loop's time per launch.

    bench/run api-cost --build build-gpu-carry [--reps 10] [--launches 200000] [--cpus 2-5]
                       [--getters 2] [--modes untraced,kernel,...]

The minimal tracer's sets grow one record kind at a time: the kernel record; the runtime's
cudaLaunchKernel record too (every other runtime call's record off); the driver's cuLaunchKernel
made inside it too; every runtime record. One more records the two launch calls through the
callback API instead of activity records, as cuprof does; `cuprof_set_callbacks` adds the other
activity kinds cuprof once enabled, and `callbacks_<kind>` each of them alone. The steps between
them price each kind of record; `cuprof run` against `cuprof_set_callbacks` is what cuprof adds.

--getters N makes each launch come with N cudaGetDevice + cudaGetLastError pairs, as PyTorch's do:
calls no tracer shows, which some activity kinds still make dearer (SYNCHRONIZATION: every runtime
call intercepted).
"""
if __name__ == "__main__":  # a module of bench/run, which sets up the imports of all of them
    raise SystemExit("run it as: bench/run api-cost (bench/README.md)")

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from training_loop import use_carried_libraries

LAUNCH_ONLY = "runtime:211"          # cudaLaunchKernel_v7000
NESTED_DRIVER = "driver:307"         # cuLaunchKernel, made inside cudaLaunchKernel
VARIANTS = [  # name, MINIMAL_CUPTI_ACTIVITY, more of the minimal tracer's variables, what
    ("kernel", "kernel", {}, "kernel records"),
    ("kernel_launch", "kernel,runtime", {"MINIMAL_CUPTI_ONLY_CALLS": LAUNCH_ONLY}, "+ cudaLaunchKernel's runtime record"),
    ("kernel_launch_nested", "kernel,runtime,driver", {"MINIMAL_CUPTI_ONLY_CALLS": f"{LAUNCH_ONLY},{NESTED_DRIVER}"},
     "+ the nested cuLaunchKernel's driver record"),
    ("kernel_launch_callbacks", "kernel", {"MINIMAL_CUPTI_CALLBACKS": f"{LAUNCH_ONLY},{NESTED_DRIVER}"},
     "kernel records, the two launch calls through callbacks instead"),
    ("kernel_runtime", "kernel,runtime", {}, "kernel + every runtime record"),
    ("cuprof_set_callbacks", "kernel,memcpy,memset,synchronization,overhead,marker",
     {"MINIMAL_CUPTI_CALLBACKS": f"{LAUNCH_ONLY},{NESTED_DRIVER}"},
     "cuprof's activity kinds, the two launch calls through callbacks (what cuprof asks of CUPTI here)"),
] + [  # each of cuprof's other activity kinds alone over kernel_launch_callbacks: which one costs
    (f"callbacks_{kinds.replace(',', '_')}", f"kernel,{kinds}", {"MINIMAL_CUPTI_CALLBACKS": f"{LAUNCH_ONLY},{NESTED_DRIVER}"},
     f"kernel records, the launch callbacks, and {kinds} records")
    for kinds in ("memcpy,memset", "synchronization", "overhead", "marker")
]


def run(cmd, env):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0:
        sys.exit(f"api_cost: failed: {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}")
    values = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    return int(values["loop_ns"]) / int(values["launches"])


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build-gpu-carry")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--launches", type=int, default=200000)
    parser.add_argument("--cpus", default="", help="taskset CPU list for every process")
    parser.add_argument("--getters", type=int, default=0,
                        help="cudaGetDevice + cudaGetLastError pairs before each launch, as PyTorch makes (not shown)")
    parser.add_argument("--modes", default="", help="comma-separated subset of the modes (default: all)")
    a = parser.parse_args(argv)
    use_carried_libraries(a.build)
    bench = [os.path.join(a.build, "bench", "launch_bench"), "--mode", "untraced", "--launches", str(a.launches),
             "--getters", str(a.getters)]
    pin = ["taskset", "-c", a.cpus] if a.cpus else []
    inject = os.path.abspath(os.path.join(a.build, "bench", "libminimal_cupti_inject.so"))
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("CUPROF_", "MINIMAL_CUPTI_", "CUDA_INJECTION"))}
    trace = os.path.join(tempfile.mkdtemp(prefix="api_cost_"), "t.json")
    modes = {"untraced": (bench, base_env)}
    for name, kinds, extra, _ in VARIANTS:
        modes[name] = (bench, dict(base_env, CUDA_INJECTION64_PATH=inject, MINIMAL_CUPTI_ACTIVITY=kinds, **extra))
    modes["cuprof"] = ([os.path.join(a.build, "tools", "cuprof"), "run", "--output", trace, "--no-table", "--"] + bench,
                       base_env)
    if a.modes:
        unknown = set(a.modes.split(",")) - set(modes)
        if unknown:
            sys.exit(f"api_cost: unknown modes {sorted(unknown)}; known: {', '.join(modes)}")
        modes = {n: m for n, m in modes.items() if n in a.modes.split(",")}
    names = list(modes)
    ns = {n: [] for n in names}
    for rep in range(a.reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for n in order:
            cmd, env = modes[n]
            ns[n].append(run(pin + cmd, env))
    med = {n: statistics.median(v) for n, v in ns.items()}
    print(f"reps={a.reps}\nlaunches={a.launches}\ngetters={a.getters}")
    for n in names:
        v = sorted(ns[n])
        print(f"{n}_ns_per_launch={med[n]:.1f} (min {v[0]:.1f}, max {v[-1]:.1f})")
    whats = {name: what for name, _, _, what in VARIANTS}
    steps = [("kernel", "untraced"), ("kernel_launch", "kernel"), ("kernel_launch_nested", "kernel_launch"),
             ("kernel_launch_callbacks", "kernel"), ("kernel_runtime", "kernel"),
             ("cuprof_set_callbacks", "kernel_launch_callbacks"), ("cuprof", "cuprof_set_callbacks")] + [
                 (name, "kernel_launch_callbacks") for name, _, _, _ in VARIANTS if name.startswith("callbacks_")]
    for n, base in steps:
        if n not in med or base not in med:
            continue
        what = whats.get(n, "cuprof run (everything it records and its processing)")
        print(f"cost_{n}_over_{base}_ns={med[n] - med[base]:.1f}  # {what}")
