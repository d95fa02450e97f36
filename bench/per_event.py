"""The per-event costs against their targets, as the table of docs/performance.md ("Launch loop and
per-event costs"): target, measured value, the anchor measured in the same run, ratio.

  bench/run per-event --build build-gpu            # CPU parts (export, collection, scopes)
  bench/run per-event --build build-gpu --gpu      # and the GPU parts, on the GPU machine

GPU modes run one process each, interleaved over --reps repetitions, because
CUPTI's added cost is small next to a launch and swings from run to run: only
interleaved medians with their spread mean anything.
"""
if __name__ == "__main__":  # a module of bench/run, which sets up the imports of all of them
    raise SystemExit("run it as: bench/run per-event (bench/README.md)")

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run")  # bench/run: the programs it starts


def run_kv(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}")
    values = {}
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key] = value.split()[0]
    return values


def pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


rows = []


def row(target, measured, anchor, ratio, goal, ok):
    rows.append({"target": target, "measured": measured, "anchor": anchor, "ratio": ratio, "goal": goal, "ok": ok})


def cpu_parts(build):
    e = run_kv([os.path.join(build, "bench", "export_bench"), "--shape", "matmul"])  # target 4 is on this trace
    rate = float(e["export_events_per_s_to_file"])
    row("4. export to JSON file (events/s)", f"{rate / 1e6:.2f} M/s ({float(e['export_events_per_s_in_memory']) / 1e6:.2f} M/s formatting alone)",
        "torch: 0.57 M/s (anchors.md)", f"{rate / 0.57e6:.1f}x torch", ">= 5 M/s", rate >= 5e6)
    ratio = float(e["export_gzip_ratio"])
    row("4. gzip output", f"{ratio:.1f}x smaller, {float(e['export_gzip_events_per_s']) / 1e6:.2f} M events/s", "", "", ">= 8x smaller", ratio >= 8)
    c = run_kv([os.path.join(build, "bench", "collect_bench"), "1000000"])
    own = float(c["collect_total_ns_per_launch"])
    row("2. (CPU) own processing per launch off the app threads: records, window, attribution",
        f"{own:.0f} ns wall, {float(c['collect_total_cpu_ns_per_launch']):.0f} ns CPU",
        "synthetic CUPTI records, 1 M launches", "", "<= 300 ns", own <= 300)
    s = run_kv([os.path.join(build, "bench", "scope_bench")])
    floor = float(s["scope_floor_ns"])
    for threads in (1, 2, 8):
        cost = float(s[f"scope_recording_{threads}threads_ns"])
        row(f"3. scope enter+exit while recording, {threads} thread(s)", f"{cost:.1f} ns",
            f"floor {floor:.1f} ns (2 TSC reads)", f"{cost / floor:.2f}", "<= 1.5x floor", cost <= 1.5 * floor)
    idle = float(s["scope_idle_ns"])
    row("3. scope, no profiler running", f"{idle:.2f} ns", "", "", "<= 2 ns", idle <= 2)
    out = float(s["scope_compiled_out_ns"])
    row("3. scope compiled out (CUPROF_DISABLE)", f"{out:.2f} ns", "", "", "nothing", out <= 0.05)
    return {"export": e, "scope": s}


def gpu_parts(build, reps, launches, cycle_launches):
    bench = os.path.join(build, "bench", "launch_bench")
    modes = ["untraced", "cupti", "cupti_driver", "cuprof", "cuprof_idle", "cuprof_after_window", "cupti_idle"]
    runs = {m: [] for m in modes}
    for rep in range(reps):
        # The bare-subscriber anchor needs fewer repetitions than the modes under test.
        now = [m for m in modes if m != "cupti_idle" or rep % 4 == 0]
        for m in now if rep % 2 == 0 else reversed(now):
            runs[m].append(run_kv([bench, "--mode", m, "--launches", str(launches)]))
        print(f"rep {rep + 1}/{reps} done", file=sys.stderr, flush=True)
    med = {m: statistics.median(int(r["loop_ns"]) for r in runs[m]) for m in modes}
    added = {m: [(int(runs[m][i]["loop_ns"]) - int(runs["untraced"][i]["loop_ns"])) / launches for i in range(reps)]
             for m in ("cupti", "cupti_driver", "cuprof")}
    ratio = med["cuprof"] / med["cupti"]
    row("1. launch loop time, cuprof / minimal CUPTI tracer (medians)",
        f"{med['cuprof'] / launches:.0f} ns per launch; added over untraced median {statistics.median(added['cuprof']):+.0f} ns (p10 {pct(added['cuprof'], .1):+.0f}, p90 {pct(added['cuprof'], .9):+.0f})",
        f"minimal tracer {med['cupti'] / launches:.0f} ns per launch; added {statistics.median(added['cupti']):+.0f} ns (p10 {pct(added['cupti'], .1):+.0f}, p90 {pct(added['cupti'], .9):+.0f}); untraced {med['untraced'] / launches:.0f} ns",
        f"{ratio:.3f}", "<= 1.05", ratio <= 1.05)
    ratio_driver = med["cuprof"] / med["cupti_driver"]
    row("1. launch loop time, cuprof / minimal tracer with the DRIVER domain too (same activity set)",
        f"{med['cuprof'] / launches:.0f} ns per launch",
        f"minimal+driver {med['cupti_driver'] / launches:.0f} ns per launch; added {statistics.median(added['cupti_driver']):+.0f} ns "
        f"(p10 {pct(added['cupti_driver'], .1):+.0f}, p90 {pct(added['cupti_driver'], .9):+.0f})",
        f"{ratio_driver:.3f}", "(reported)", True)
    host = {m: statistics.median(int(r["launch_ns"]) for r in runs[m]) for m in modes}
    row("1. host time in launch calls only, cuprof / minimal tracer", f"{host['cuprof'] / launches:.0f} ns per launch",
        f"minimal {host['cupti'] / launches:.0f} ns, untraced {host['untraced'] / launches:.0f} ns",
        f"{host['cuprof'] / host['cupti']:.3f}", "(reported)", True)
    collect = [(int(runs["cuprof"][i]["collect_ns"]) - int(runs["untraced"][i]["loop_ns"])) / launches for i in range(reps)]
    torch_runs = []
    for rep in range(5):
        torch_runs.append(run_kv([sys.executable, RUN, "torch-tiny-ops"]))
    torch_per_op = statistics.median((int(r["profiled_ns"]) - int(r["untraced_ns"])) / int(r["ops"]) for r in torch_runs)
    c = statistics.median(collect)
    row("2. collection per traced launch, start to a stopped profiler with its trace ready",
        f"{c:.0f} ns (p10 {pct(collect, .1):.0f}, p90 {pct(collect, .9):.0f})",
        f"torch.profiler {torch_per_op:.0f} ns per tiny op (CPU+CUDA, same measure)",
        f"{torch_per_op / c:.1f}x cheaper", "<= 1000 ns and >= 10x below torch", c <= 1000 and torch_per_op / c >= 10)
    idle_ratio = med["cuprof_idle"] / med["untraced"]
    row("6. steps outside active windows, cuprof_idle / untraced (medians)", f"{med['cuprof_idle'] / launches:.0f} ns per launch",
        f"untraced {med['untraced'] / launches:.0f} ns; a bare CUPTI subscriber {med['cupti_idle'] / launches:.0f} ns "
        f"({med['cupti_idle'] / med['untraced']:.3f}x)", f"{idle_ratio:.3f}", "<= 1.05", idle_ratio <= 1.05)
    after_ratio = med["cuprof_after_window"] / med["untraced"]
    row("6. steps after a window (the shown calls' callbacks on, ignored), cuprof_after_window / untraced (medians)",
        f"{med['cuprof_after_window'] / launches:.0f} ns per launch", f"untraced {med['untraced'] / launches:.0f} ns",
        f"{after_ratio:.3f}", "<= 1.05", after_ratio <= 1.05)

    big = run_kv([bench, "--mode", "cuprof", "--launches", "1000000"])
    per_event = (int(big["rss_after_kb"]) - int(big["rss_before_kb"])) * 1024 / int(big["events"])
    row("5. resident memory per recorded event (1 M launches, trace kept)", f"{per_event:.0f} bytes",
        f"{int(big['events'])} events, RSS +{(int(big['rss_after_kb']) - int(big['rss_before_kb'])) / 1024:.0f} MiB", "",
        "<= 64 bytes", per_event <= 64)
    cycles = run_kv([bench, "--mode", "cuprof_cycles", "--launches", str(cycle_launches)])
    row(f"5. {cycle_launches / 1e6:g} M launches, repeating schedule, cycles written to disk: peak RSS",
        f"{int(cycles['rss_peak_kb']) / 1024:.0f} MiB", f"{int(cycles['events'])} events recorded in all", "",
        "bounded", int(cycles["rss_peak_kb"]) < 2 * 1024 * 1024)
    s = run_kv([os.path.join(build, "bench", "scope_bench")])
    floor = float(s["scope_floor_ns"])
    for threads in (1, 2, 8):
        cost = float(s[f"scope_recording_{threads}threads_ns"])
        row(f"3. (GPU machine) scope enter+exit while recording, {threads} thread(s)", f"{cost:.1f} ns",
            f"floor {floor:.1f} ns (2 TSC reads)", f"{cost / floor:.2f}", "<= 1.5x floor", cost <= 1.5 * floor)
    return {"launch": runs, "torch": torch_runs, "memory": big, "cycles": cycles, "scope_gpu_machine": s}


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build-gpu")
    parser.add_argument("--gpu", action="store_true")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--launches", type=int, default=200000)
    parser.add_argument("--cycle-launches", type=int, default=10000000)
    parser.add_argument("--out", default="")
    a = parser.parse_args(argv)
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "host": platform.node(), "cpu": cpu_parts(a.build)}
    if a.gpu:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True)
        result["device"] = smi.stdout.strip()
        result["gpu"] = gpu_parts(a.build, a.reps, a.launches, a.cycle_launches)
    result["rows"] = rows
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    print(f"\n== cuprof benchmarks, {result.get('device', platform.node())}, {result['date']} ==")
    print("| target | measured | anchor (same run) | ratio | goal | met |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['target']} | {r['measured']} | {r['anchor']} | {r['ratio']} | {r['goal']} | {'yes' if r['ok'] else 'NO'} |")
    met = sum(r["ok"] for r in rows)
    print(f"benchmarks: {met} passed, {len(rows) - met} failed")
