"""Reading speed of the `cuprof` command on a large torch.profiler-shaped trace (the target:
`cuprof table` in 1 s or less, peak memory at most twice the file).

    bench/run read-speed --cli build/tools/cuprof [--trace /tmp/large.json] [--runs 5]

Writes the trace with make_large_trace.py (bench/run make-large-trace) when --trace does not exist yet (1.39 M events,
313 MB), then runs `cuprof table TRACE` --runs times. Each run's wall time, CPU time (user + sys)
and peak RSS come from the child's own accounting (os.wait4). Prints key=value lines, the
medians last; the exit status is non-zero only when cuprof failed.
"""
if __name__ == "__main__":  # a module of bench/run, which sets up the imports of all of them
    raise SystemExit("run it as: bench/run read-speed (bench/README.md)")

import argparse
import os
import statistics
import subprocess
import sys
import time


def timed_run(cmd):
    """(exit status, wall s, user + sys s, peak RSS kB) of one child, its output discarded."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        sys.stderr.write(err)
    return proc.returncode, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--cli", required=True, help="the cuprof command")
    parser.add_argument("--trace", default="/tmp/cuprof_large_trace.json")
    parser.add_argument("--runs", type=int, default=5)
    a = parser.parse_args(argv)
    if not os.path.exists(a.trace):
        run = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run")  # bench/run
        subprocess.run([sys.executable, run, "make-large-trace", a.trace], check=True)
    size = os.path.getsize(a.trace)
    walls, cpus, peaks = [], [], []
    for i in range(a.runs):
        rc, wall, cpu, peak_kb = timed_run([a.cli, "table", a.trace])
        if rc != 0:
            print(f"read_failed_exit={rc}")
            return 1
        walls.append(wall)
        cpus.append(cpu)
        peaks.append(peak_kb)
        print(f"run{i}_wall_s={wall:.3f}\nrun{i}_cpu_s={cpu:.3f}\nrun{i}_peak_rss_kb={peak_kb}")
    print(f"trace_bytes={size}")
    print(f"cores={os.cpu_count()}")
    print(f"table_wall_s_median={statistics.median(walls):.3f}")
    print(f"table_wall_s_max={max(walls):.3f}")
    print(f"table_cpu_s_median={statistics.median(cpus):.3f}")
    print(f"table_peak_rss_kb_max={max(peaks)}")
    print(f"table_peak_over_file={max(peaks) * 1024 / size:.2f}")
    return 0
