"""What including cuprof costs a build: compile time (CPU seconds of the
compiler, median of --reps, interleaved) and object size, for g++ and nvcc,
of translation units that differ only in what they take from cuprof:

  bare           the TU without cuprof
  annotating     + <cuprof/record_function.hpp> and two scopes (a file that only annotates)
  umbrella       + <cuprof/cuprof.hpp> and the same scopes (declarations only)
  profiling      + <cuprof/cuprof.hpp>, a profile started, stopped and exported: the TU
                 that starts the profiler (declarations; the runtime is compiled apart)
  implementation the one TU per program that compiles the runtime: a file defining
                 CUPROF_IMPLEMENTATION (header-only use), which is what the
                 cuprof::runtime target compiles (src/runtime.cpp)
  disabled       the profiling TU with -DCUPROF_DISABLE

  bench/run compile-cost [--reps 5] [--compilers g++,nvcc] [--opt -O0]

Prints a table (seconds and bytes over `bare`) and the issue's goals. A
benchmark, not a test: figures depend on the machine and its load.
"""
if __name__ == "__main__":  # a module of bench/run, which sets up the imports of all of them
    raise SystemExit("run it as: bench/run compile-cost (bench/README.md)")

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(HERE, "..", "include")
CUDA_INCLUDE = "/usr/local/cuda/include"

BODY = """
int work(int n) {
  int sum = 0;
  for (int i = 0; i < n; ++i) {
    SCOPE("outer");
    { SCOPE("inner"); sum += i; }
  }
  return sum;
}
"""

PROFILE = """
int run_profiled() {
  cuprof::profile prof;
  prof.start();
  const int sum = work(10);
  prof.stop();
  prof.export_chrome_trace("trace.json");
  return sum;
}
"""

UNITS = {
    "bare": ("", "#define SCOPE(name)\n" + BODY),
    "annotating": ("", "#include <cuprof/record_function.hpp>\n#define SCOPE(name) CUPROF_SCOPE(name)\n" + BODY),
    "umbrella": ("", "#include <cuprof/cuprof.hpp>\n#define SCOPE(name) CUPROF_SCOPE(name)\n" + BODY),
    "profiling": ("", "#include <cuprof/cuprof.hpp>\n#define SCOPE(name) CUPROF_SCOPE(name)\n" + BODY + PROFILE),
    "implementation": ("", open(os.path.join(HERE, "..", "src", "runtime.cpp")).read()),
    "disabled": ("-DCUPROF_DISABLE",
                 "#include <cuprof/cuprof.hpp>\n#define SCOPE(name) CUPROF_SCOPE(name)\n" + BODY + PROFILE),
}

# cuprof's targets: seconds and bytes over `bare` (g++ -O0).
GOALS = {"annotating": (0.3, 20 * 1024), "profiling": (2.5, None), "disabled": (0.1, None)}


def compile_once(compiler, source, obj, extra, opt):
    if compiler == "nvcc":
        cmd = ["nvcc", "-std=c++17", opt, "-arch=sm_90", "-c", source, "-o", obj, "-I", INCLUDE]
    else:
        cmd = [compiler, "-std=c++17", opt, "-c", source, "-o", obj, "-I", INCLUDE, "-I", CUDA_INCLUDE]
    if extra:
        cmd.append(extra)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def text_bytes(obj):
    out = subprocess.run(["size", obj], capture_output=True, text=True).stdout.splitlines()
    return int(out[1].split()[0]) if len(out) > 1 else 0


def main(argv=None, prog=None):
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--compilers", default="g++,nvcc")
    ap.add_argument("--opt", default="-O0")
    args = ap.parse_args(argv)
    compilers = [c for c in args.compilers.split(",") if shutil.which(c)]
    if not compilers:
        sys.exit("no compiler found among " + args.compilers)

    with tempfile.TemporaryDirectory(prefix="cuprof-compile-cost-") as work:
        results = {}
        for compiler in compilers:
            ext = ".cu" if compiler == "nvcc" else ".cpp"
            cpu = {u: [] for u in UNITS}
            wall = {u: [] for u in UNITS}
            for _ in range(args.reps):  # interleaved: load changes hit every unit alike
                for unit, (extra, text) in UNITS.items():
                    source = os.path.join(work, unit + ext)
                    with open(source, "w") as f:
                        f.write(text)
                    obj = os.path.join(work, f"{unit}-{compiler}.o")
                    c, w = compile_once(compiler, source, obj, extra, args.opt)
                    cpu[unit].append(c)
                    wall[unit].append(w)
            for unit in UNITS:
                obj = os.path.join(work, f"{unit}-{compiler}.o")
                results[(compiler, unit)] = (statistics.median(cpu[unit]), statistics.median(wall[unit]), text_bytes(obj))

    print(f"compile cost, {args.opt}, median of {args.reps} interleaved runs; "
          f"over = minus the bare TU of the same compiler")
    print(f"{'compiler':8} {'unit':14} {'cpu s':>7} {'wall s':>7} {'over cpu':>9} {'text B':>8} {'over B':>8}  goal (g++)")
    for compiler in compilers:
        base_cpu, _, base_text = results[(compiler, "bare")]
        for unit in UNITS:
            c, w, t = results[(compiler, unit)]
            goal = ""
            if compiler != "nvcc" and unit in GOALS:
                seconds, size = GOALS[unit]
                met = c - base_cpu <= seconds and (size is None or t - base_text <= size)
                goal = f"+{seconds} s" + (f", +{size // 1024} KB" if size else "") + (": met" if met else ": NOT met")
            print(f"{compiler:8} {unit:14} {c:7.2f} {w:7.2f} {c - base_cpu:+9.2f} {t:8d} {t - base_text:+8d}  {goal}")
