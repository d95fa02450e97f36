"""gpu_check part: every window holds the truth while threads launch nonstop (scripts/gpu-check --windows-only).

tests/gpu/threaded_windows.cu runs worker threads that each launch their own kernel (spin<I>) on
their own stream without pause, and opens and closes windows from the main thread in every way
cuprof offers: a schedule, cudaProfilerStart/Stop, NVTX ranges (the default domain, a named one,
both), --start-step, --slow-steps, and `cuprof trigger` twice in a row. Around each boundary it
prints each worker's launch count before and after the call (MARK lines): an account of the
window's launches that does not come from the profiler. Each mode runs several times, each run in
a fresh folder; for each window trace of a run:

  1. every worker thread has cudaLaunchKernel calls in it;
  2. launches and kernels pair one to one by args.correlation; any left unpaired must be counted
     by the trace's cuprof.window_edges (calls without GPU work, GPU work without a call);
  3. no kernel is in two windows of the run (name, ts and stream);
  4. with marks: each worker's spin<I> kernels lie within the bracket its counts at the window's
     marks give: [close.before - open.after, close.after - open.before].

Where the windows lie comes from the program's own calls (and, for the schedule, from
torch.profiler's schedule semantics computed here), never from cuprof's output. One check per
mode and property; figures per mode in summary["windows"].

  GPU_CHECK_WINDOW_RUNS=N      runs per mode (default 10)
  GPU_CHECK_WINDOW_MODES=a,b   only these modes
  GPU_CHECK_WINDOW_KEEP=1      keep every run's traces (by default only the first failed run's, per mode)

  python3 tests/gpu/gpu_check_windows.py --self-test   # the trace reading, on synthetic traces
"""
import collections
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

THREADS = 4
# threaded_windows.cu's windows, as its header gives them.
SCHEDULE = {"wait": 1, "warmup": 1, "active": 2, "repeat": 3}
SCHEDULE_STEPS = 13
RANGES = 3
START_STEP, START_STEPS = 3, 3
SLOWED = (10, 20)
SLOW_BEFORE, SLOW_AFTER = 1, 1  # slow_steps' defaults (include/cuprof/schedule.hpp)
TRIGGERS = ("trigger_1.json", "trigger_2.json")
TRIGGER_RUN_S = 4
TRIGGER_DURATION_S = "0.3"
MODES = ("schedule", "cuda", "nvtx", "nvtx-domain", "nvtx-mixed", "start-step", "slow", "trigger")
KERNEL = re.compile(r"\bspin<(\d+)>")
EDGE_KINDS = ("kernel", "memcpy", "memset")


# --- the windows each mode makes, from the program's calls ---------------------------------------

def torch_schedule(step, wait, warmup, active, repeat=0, skip_first=0):
    """torch.profiler.schedule's action for `step` (its own code, transcribed)."""
    if step < skip_first:
        return "NONE"
    step -= skip_first
    cycle = wait + warmup + active
    if repeat > 0 and step // cycle >= repeat:
        return "NONE"
    mod = step % cycle
    if mod < wait:
        return "NONE"
    if mod < wait + warmup:
        return "WARMUP"
    return "RECORD" if mod < cycle - 1 else "RECORD_AND_SAVE"


def schedule_windows(steps, **sched):
    """The recorded windows of a schedule driven by `steps` step() calls, as (a, b): steps a to b-1
    recorded, opened by the step() that enters step a and closed by the one that enters b."""
    windows, opened = [], None
    for n in range(steps + 1):
        action = torch_schedule(n, **sched) if n <= steps else "NONE"
        previous = torch_schedule(n - 1, **sched) if n > 0 else "NONE"
        recording = action in ("RECORD", "RECORD_AND_SAVE")
        if opened is not None and (not recording or previous == "RECORD_AND_SAVE"):
            windows.append((opened, n))
            opened = None
        if recording and opened is None:
            opened = n
    return windows


def expected_windows(mode):
    """(file name, opening mark, closing mark) of each window the mode makes; marks None for a trigger's."""
    if mode == "schedule":
        return [(f"schedule_{k}.json", f"step {a}", f"step {b}")
                for k, (a, b) in enumerate(schedule_windows(SCHEDULE_STEPS, **SCHEDULE), 1)]
    if mode in ("cuda", "nvtx", "nvtx-domain", "nvtx-mixed"):
        prefix = mode.replace("-", "_")
        return [(f"{prefix}_{i}.json", f"start {i}", f"stop {i}") for i in range(1, RANGES + 1)]
    if mode == "start-step":
        return [("start.json", f"step {START_STEP}", f"step {START_STEP + START_STEPS}")]
    if mode == "slow":
        return [(f"slow_{k}.json", f"step {s - SLOW_BEFORE}", f"step {s + SLOW_AFTER + 1}")
                for k, s in enumerate(SLOWED, 1)]
    return [(name, None, None) for name in TRIGGERS]


def command(mode, cli, exe, work, threads):
    prog = [exe, "--mode", mode, "--threads", str(threads), "--out", work]
    if mode == "schedule":
        return prog
    prefix = mode.replace("-", "_")
    repeat = ["--capture-range-end", "repeat"]
    flags = {"cuda": ["--capture-range", "cuda"] + repeat,
             "nvtx": ["--capture-range", "nvtx:capture"] + repeat,
             "nvtx-domain": ["--capture-range", "nvtx:capture@app"] + repeat,
             "nvtx-mixed": ["--capture-range", "nvtx:capture"] + repeat,
             "start-step": ["--start-step", str(START_STEP), "--steps", str(START_STEPS)],
             "slow": ["--slow-steps", "2x"],
             "trigger": ["--capture-range", "trigger"]}[mode]
    output = {"start-step": "start.json", "trigger": "trig_%n.json"}.get(mode, f"{prefix}_%n.json")
    if mode == "trigger":
        prog += ["--run-s", str(TRIGGER_RUN_S), "--ready-file", os.path.join(work, "ready")]
    return [cli, "run", "--no-table", *flags, "--output", os.path.join(work, output), "--", *prog]


# --- reading what the program and the traces say ------------------------------------------------

def parse_marks(stdout, threads):
    """{label: (counts before, counts after)} from the program's MARK lines."""
    marks = {}
    for line in (stdout or "").splitlines():
        if not line.startswith("MARK "):
            continue
        left, sep, right = line[len("MARK "):].partition(" | ")
        head, after = left.split(), right.split()
        if not sep or len(after) != threads or len(head) <= threads:
            continue
        try:
            marks[" ".join(head[:-threads])] = ([int(x) for x in head[-threads:]], [int(x) for x in after])
        except ValueError:
            continue
    return marks


def edge_counts(cuprof_block):
    """cuprof.window_edges as flat non-negative integers (0 where absent or malformed)."""
    edges = cuprof_block.get("window_edges") if isinstance(cuprof_block, dict) else None
    edges = edges if isinstance(edges, dict) else {}

    def number(v):
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0
    flat = {}
    for group in ("calls_without_gpu_work", "gpu_work_without_call", "launched_before"):
        g = edges.get(group) if isinstance(edges.get(group), dict) else {}
        for kind in EDGE_KINDS:
            flat[f"{group}.{kind}"] = number(g.get(kind))
    flat["calls_running_at_end"] = number(edges.get("calls_running_at_end"))
    flat["present"] = int(bool(edges))
    return flat


def analyse_trace(path):
    """What one window's trace holds, for the checks; a dict with "error" when it cannot be read.
    A plain function of its path: run in a pool of processes, several traces at once."""
    try:
        with open(path) as f:
            obj = json.load(f)
    except (OSError, ValueError) as e:
        return {"path": path, "error": f"{type(e).__name__}: {str(e)[:200]}"}
    events = obj.get("traceEvents") if isinstance(obj, dict) else None
    if not isinstance(events, list):
        return {"path": path, "error": "no traceEvents list"}
    launches = {}   # correlation -> tid
    kernels = {}    # correlation -> worker index (-1: not a spin<I>)
    keys = []
    duplicate_correlations = 0
    other_kernels = 0
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat, args = e.get("cat"), e.get("args") if isinstance(e.get("args"), dict) else {}
        corr = args.get("correlation")
        if cat == "cuda_runtime" and e.get("name") == "cudaLaunchKernel":
            duplicate_correlations += corr in launches
            launches[corr] = e.get("tid")
        elif cat == "kernel":
            m = KERNEL.search(str(e.get("name", "")))
            worker = int(m.group(1)) if m else -1
            other_kernels += worker < 0
            duplicate_correlations += corr in kernels
            kernels[corr] = worker
            keys.append(f"{e.get('name')}|{e.get('ts')}|{args.get('stream', e.get('tid'))}")
    by_worker = collections.Counter(w for w in kernels.values() if w >= 0)
    launch_tids = collections.Counter(launches.values())
    # A thread's worker: the kernels its launches made.
    tid_workers = collections.defaultdict(set)
    for corr, tid in launches.items():
        if kernels.get(corr, -1) >= 0:
            tid_workers[tid].add(kernels[corr])
    block = obj.get("cuprof") if isinstance(obj.get("cuprof"), dict) else {}
    return {"path": path, "events": len(events), "launches": len(launches), "kernels": len(kernels),
            "launch_threads": len(launch_tids),
            "workers_with_launches": sorted({w for ws in tid_workers.values() for w in ws}),
            "kernels_by_worker": {str(w): n for w, n in sorted(by_worker.items())},
            "other_kernels": other_kernels,
            "unmatched_launches": sum(1 for c in launches if c not in kernels),
            "unmatched_kernels": sum(1 for c in kernels if c not in launches),
            "duplicate_correlations": duplicate_correlations,
            "dropped_gpu_records": block.get("dropped_gpu_records", 0),
            "edges": edge_counts(block), "keys": keys}


def analyse_all(paths):
    """analyse_trace over `paths`, in parallel where processes can be started."""
    if len(paths) > 1:
        try:
            with concurrent.futures.ProcessPoolExecutor(max_workers=min(len(paths), 4)) as pool:
                return list(pool.map(analyse_trace, paths))
        except (OSError, RuntimeError):  # BrokenProcessPool is a RuntimeError
            pass
    return [analyse_trace(p) for p in paths]


def run_figures(work, windows, marks, threads, exit_status, stderr):
    """One run's figures: each expected window's trace read from `work` and judged."""
    fig = {"exit": exit_status, "expected": len(windows), "windows": 0, "missing": [], "extra": [],
           "unreadable": [], "threads_short": [], "unmatched_launches": 0, "unmatched_kernels": 0,
           "unexplained": 0, "edges": collections.Counter(), "duplicates": 0, "out_of_bracket": [],
           "kernels": [], "dropped_gpu_records": 0, "stderr": ""}
    names = [w[0] for w in windows]
    present = [n for n in names if os.path.exists(os.path.join(work, n))]
    fig["missing"] = [n for n in names if n not in present]
    # Windows nobody asked for: traces beyond the expected numbering.
    prefixes = {re.sub(r"_\d+\.json$", "_", n) for n in names if re.search(r"_\d+\.json$", n)}
    fig["extra"] = sorted(f for f in os.listdir(work) if f.endswith(".json") and f not in names
                          and any(f.startswith(p) and re.fullmatch(r"\d+\.json", f[len(p):]) for p in prefixes))
    results = dict(zip(present, analyse_all([os.path.join(work, n) for n in present])))
    seen = collections.Counter()
    for name, open_mark, close_mark in windows:
        r = results.get(name)
        if r is None:
            continue
        if "error" in r:
            fig["unreadable"].append(f"{name}: {r['error']}")
            continue
        fig["windows"] += 1
        fig["kernels"].append(r["kernels"])
        fig["dropped_gpu_records"] += r["dropped_gpu_records"] if isinstance(r["dropped_gpu_records"], int) else 0
        if r["launch_threads"] != threads or r["workers_with_launches"] != list(range(threads)):
            fig["threads_short"].append(f"{name}: {r['launch_threads']} launching threads, workers "
                                        f"{r['workers_with_launches']}")
        e = r["edges"]
        fig["edges"].update({k: v for k, v in e.items() if k != "present" and v})
        # What the trace admits it lacks explains what is unpaired, and nothing more.
        launches_explained = e["calls_without_gpu_work.kernel"] + e["calls_running_at_end"]
        kernels_explained = e["gpu_work_without_call.kernel"]
        fig["unmatched_launches"] += r["unmatched_launches"]
        fig["unmatched_kernels"] += r["unmatched_kernels"]
        fig["unexplained"] += (max(0, r["unmatched_launches"] - launches_explained)
                               + max(0, r["unmatched_kernels"] - kernels_explained) + r["duplicate_correlations"])
        seen.update(r["keys"])
        if open_mark is None:
            continue
        if open_mark not in marks or close_mark not in marks:
            fig["out_of_bracket"].append(f"{name}: no MARK '{open_mark if open_mark not in marks else close_mark}'")
            continue
        (open_before, open_after), (close_before, close_after) = marks[open_mark], marks[close_mark]
        for w in range(threads):
            n = r["kernels_by_worker"].get(str(w), 0)
            lo, hi = close_before[w] - open_after[w], close_after[w] - open_before[w]
            if not lo <= n <= hi:
                fig["out_of_bracket"].append(f"{name} spin<{w}>: {n} kernels, launches in [{lo}, {hi}]"
                                             f" ({n - lo if n < lo else n - hi:+d})")
    fig["duplicates"] = sum(c - 1 for c in seen.values() if c > 1)
    fig["edges"] = dict(fig["edges"])
    if exit_status != 0 or fig["missing"] or fig["unreadable"]:
        fig["stderr"] = (stderr or "").strip()[-600:]
    return fig


def run_failed(fig):
    return bool(fig["exit"] != 0 or fig["missing"] or fig["extra"] or fig["unreadable"] or fig["threads_short"]
                or fig["unexplained"] or fig["duplicates"] or fig["out_of_bracket"])


# --- running the modes ---------------------------------------------------------------------------

def run_mode_once(mode, build, work, run, threads):
    """Runs the mode once in `work`; returns (exit status, stdout, stderr)."""
    cli = os.path.join(build, "tools", "cuprof")
    exe = os.path.join(build, "tests", "gpu", "threaded_windows")
    label = os.path.basename(work)
    cmd = command(mode, cli, exe, os.path.abspath(work), threads)
    if mode != "trigger":
        try:
            p = run(cmd, work, label, timeout=180)
            return p.returncode, p.stdout, p.stderr
        except (OSError, subprocess.SubprocessError) as e:
            return -1, "", f"{type(e).__name__}: {e}"
    ready = os.path.join(work, "ready")
    log_path = os.path.join(work, label + ".log")
    notes = []
    try:
        with open(log_path, "w") as log:
            job = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            try:
                for _ in range(600):
                    if os.path.exists(ready) or job.poll() is not None:
                        break
                    time.sleep(0.1)
                status = 0
                for k, name in enumerate(TRIGGERS, 1):
                    try:
                        t = run([cli, "trigger", str(job.pid), "--duration", TRIGGER_DURATION_S, "--output",
                                 os.path.abspath(os.path.join(work, name))], work, f"{label}_trigger_{k}", timeout=90)
                        if t.returncode != 0:
                            status = status or t.returncode
                            notes.append(f"trigger {k}: exit {t.returncode}: {(t.stdout + t.stderr).strip()[-300:]}")
                    except (OSError, subprocess.SubprocessError) as e:
                        status = status or -1
                        notes.append(f"trigger {k}: {type(e).__name__}: {e}")
                job.wait(timeout=TRIGGER_RUN_S + 120)
            finally:
                if job.poll() is None:
                    job.kill()
                    job.wait()
        with open(log_path) as f:
            text = f.read()
        return (job.returncode or status), text, "\n".join(notes + [text[-600:]])
    except (OSError, subprocess.SubprocessError) as e:
        return -1, "", f"{type(e).__name__}: {e}"


def windows_checks(build, out, summary, check, run, runs=10):
    try:
        runs = int(os.environ.get("GPU_CHECK_WINDOW_RUNS", runs))
    except ValueError:
        check("windows: GPU_CHECK_WINDOW_RUNS is a number", False, os.environ["GPU_CHECK_WINDOW_RUNS"])
        return summary.setdefault("windows", {})
    wanted = os.environ.get("GPU_CHECK_WINDOW_MODES")
    modes = [m for m in MODES if not wanted or m in wanted.split(",")]
    keep_all = os.environ.get("GPU_CHECK_WINDOW_KEEP") == "1"
    root = os.path.join(out, "windows")
    os.makedirs(root, exist_ok=True)
    result = summary.setdefault("windows", {})
    for mode in modes:
        started = time.time()
        windows = expected_windows(mode)
        figs, kept_failed = [], 0
        for i in range(1, runs + 1):
            work = os.path.join(root, f"{mode}_{i}")
            shutil.rmtree(work, ignore_errors=True)
            os.makedirs(work)
            status, stdout, stderr = run_mode_once(mode, build, work, run, THREADS)
            try:
                fig = run_figures(work, windows, parse_marks(stdout, THREADS), THREADS, status, stderr)
            except Exception as e:  # a checker's fault is the run's failure, not the end of gpu-check
                fig = {"exit": status, "expected": len(windows), "windows": 0, "missing": [], "extra": [],
                       "unreadable": [f"checker: {type(e).__name__}: {e}"], "threads_short": [],
                       "unmatched_launches": 0, "unmatched_kernels": 0, "unexplained": 0, "edges": {},
                       "duplicates": 0, "out_of_bracket": [], "kernels": [], "dropped_gpu_records": 0,
                       "stderr": (stderr or "")[-600:]}
            fig["run"] = i
            figs.append(fig)
            # The traces are large (hundreds of thousands of events): those of runs that passed go.
            if run_failed(fig) and kept_failed < 1:
                kept_failed += 1
            elif not keep_all:
                for f in os.listdir(work):
                    if f.endswith(".json"):
                        os.remove(os.path.join(work, f))
        result[mode] = mode_summary(figs, time.time() - started)
        mode_checks(mode, figs, windows, check)
    return result


def mode_summary(figs, wall_s):
    kernels = [k for f in figs for k in f["kernels"]]
    edges = collections.Counter()
    for f in figs:
        edges.update(f["edges"])
    return {"runs": len(figs), "wall_s": round(wall_s, 1),
            "exit_nonzero": sum(f["exit"] != 0 for f in figs),
            "windows_seen": sum(f["windows"] for f in figs), "windows_expected": sum(f["expected"] for f in figs),
            "extra_windows": sum(len(f["extra"]) for f in figs),
            "threads_short_windows": sum(len(f["threads_short"]) for f in figs),
            "unmatched_launches": sum(f["unmatched_launches"] for f in figs),
            "unmatched_kernels": sum(f["unmatched_kernels"] for f in figs),
            "unexplained": sum(f["unexplained"] for f in figs),
            "edges": dict(edges), "duplicates": sum(f["duplicates"] for f in figs),
            "out_of_bracket": sum(len(f["out_of_bracket"]) for f in figs),
            "dropped_gpu_records": sum(f["dropped_gpu_records"] for f in figs),
            "kernels_per_window": [min(kernels), max(kernels)] if kernels else [],
            "per_run": [{k: v for k, v in f.items() if k != "stderr" or v} for f in figs]}


def mode_checks(mode, figs, windows, check):
    """One check per property over all runs of the mode; the detail gives the totals and, where
    something failed, the worst run's figures."""
    n, runs = len(windows), len(figs)
    seen = sum(f["windows"] for f in figs)

    def worst(score):
        """The detail's tail: the run with the highest score, when it is above 0."""
        f = max(figs, key=score, default=None)
        return f if f is not None and score(f) else None

    bad = [f for f in figs if f["exit"] != 0]
    w = worst(lambda f: f["exit"] != 0)
    check(f"windows {mode}: every run exits 0", runs and not bad,
          f"{runs - len(bad)} of {runs} runs exit 0" + (f"; run {w['run']}: exit {w['exit']}: {w['stderr'][-300:]}" if w else ""))

    w = worst(lambda f: len(f["missing"]) + len(f["unreadable"]) + len(f["extra"]))
    check(f"windows {mode}: each run writes its {n} window traces, readable, and no others",
          runs and not w and seen == n * runs,
          f"{seen}/{n * runs} windows" + (f"; run {w['run']}: missing {w['missing']}, unreadable {w['unreadable'][:2]}, "
                                         f"extra {w['extra']}; {w['stderr'][-300:]}" if w else ""))

    w = worst(lambda f: len(f["threads_short"]))
    check(f"windows {mode}: every window has launches from all {THREADS} worker threads", seen and not w,
          f"{sum(len(f['threads_short']) for f in figs)} of {seen} windows short"
          + (f"; run {w['run']}: {'; '.join(w['threads_short'][:2])}" if w else ""))

    edges = collections.Counter()
    for f in figs:
        edges.update(f["edges"])
    w = worst(lambda f: f["unexplained"])
    check(f"windows {mode}: launches and kernels pair one to one by correlation (unpaired only as "
          "cuprof.window_edges counts them)", seen and not w,
          f"{sum(f['unmatched_launches'] for f in figs)} launches without their kernel, "
          f"{sum(f['unmatched_kernels'] for f in figs)} kernels without their launch, "
          f"{sum(f['unexplained'] for f in figs)} unexplained; window_edges {dict(edges) or 'all 0'}"
          + (f"; run {w['run']}: {w['unmatched_launches']} + {w['unmatched_kernels']} unpaired, {w['unexplained']} "
             f"unexplained, window_edges {w['edges'] or 'all 0'}" if w else ""))

    w = worst(lambda f: f["duplicates"])
    check(f"windows {mode}: no kernel in two windows of one run", seen and not w,
          f"{sum(f['duplicates'] for f in figs)} kernels seen twice" + (f"; run {w['run']}: {w['duplicates']}" if w else ""))

    if windows and windows[0][1] is not None:
        kernels = [k for f in figs for k in f["kernels"]]
        w = worst(lambda f: len(f["out_of_bracket"]))
        check(f"windows {mode}: each worker's kernels in each window within its launch counts at the marks",
              seen and not w,
              f"{sum(len(f['out_of_bracket']) for f in figs)} of {seen * THREADS} worker windows outside; kernels per "
              f"window {min(kernels, default=0)}-{max(kernels, default=0)}"
              + (f"; run {w['run']}: {'; '.join(w['out_of_bracket'][:3])}" if w else ""))


def print_windows(summary):
    """One line per mode: the figures behind the checks."""
    for mode, s in (summary.get("windows") or {}).items():
        print(f"windows {mode}: {s['windows_seen']}/{s['windows_expected']} windows in {s['runs']} runs "
              f"({s['wall_s']} s), kernels per window {s['kernels_per_window']}, unpaired "
              f"{s['unmatched_launches']}+{s['unmatched_kernels']} ({s['unexplained']} unexplained), "
              f"duplicates {s['duplicates']}, out of bracket {s['out_of_bracket']}, edges {s['edges'] or 0}")


# --- self-test: the reading and judging above on synthetic traces --------------------------------

def self_test():
    failures = []

    def expect(name, got, want):
        if got != want:
            failures.append(f"{name}: got {got!r}, want {want!r}")

    expect("schedule(1, 1, 2, 3) over 13 steps", schedule_windows(13, **SCHEDULE), [(2, 4), (6, 8), (10, 12)])
    expect("schedule(0, 0, 2, 3) over 6 steps", schedule_windows(6, wait=0, warmup=0, active=2, repeat=3),
           [(0, 2), (2, 4), (4, 6)])
    expect("slow windows", expected_windows("slow"), [("slow_1.json", "step 9", "step 12"),
                                                       ("slow_2.json", "step 19", "step 22")])
    threads = 2

    def launch(corr, tid, ts):
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid, "ts": ts,
                "dur": 2.0, "args": {"correlation": corr}}

    def kernel(corr, worker, ts):
        return {"ph": "X", "cat": "kernel", "name": f"void spin<{worker}>(float*, int)", "pid": 0,
                "tid": 7 + worker, "ts": ts, "dur": 3.0, "args": {"correlation": corr, "stream": 13 + worker}}

    def trace(events, edges=None):
        block = {"version": "0.1.0", "dropped_gpu_records": 0}
        if edges is not None:
            block["window_edges"] = edges
        return {"cuprof": block, "traceEvents": events}

    no_edges = {"calls_without_gpu_work": {"kernel": 0, "memcpy": 0, "memset": 0},
                "gpu_work_without_call": {"kernel": 0, "memcpy": 0, "memset": 0},
                "launched_before": {"kernel": 0, "memcpy": 0, "memset": 0}, "calls_running_at_end": 0}
    # Window 1: worker 0 (tid 100) 3 launches, worker 1 (tid 101) 2, plus a launch whose kernel never came.
    w1 = [launch(1, 100, 10), kernel(1, 0, 12), launch(2, 101, 11), kernel(2, 1, 13), launch(3, 100, 20),
          kernel(3, 0, 22), launch(4, 101, 21), kernel(4, 1, 23), launch(5, 100, 30), kernel(5, 0, 32),
          launch(6, 100, 40)]
    # Window 2: the same kernel as window 1's correlation 5 (name, ts, stream) again.
    w2 = [launch(7, 100, 50), kernel(7, 0, 52), launch(8, 101, 51), kernel(8, 1, 53), kernel(5, 0, 32),
          launch(5, 100, 30)]
    marks = ("MARK start 1 0 0 | 1 0\nMARK stop 1 4 2 | 4 3\n"   # window 1: worker 0 in [3, 4], 1 in [2, 3]
             "MARK start 2 4 3 | 4 3\nMARK stop 2 5 4 | 5 4\n"   # window 2: worker 0 in [1, 1]: it has 2
             "other output\nMARK broken | 1\n")
    expect("parse_marks", parse_marks(marks, threads)["stop 1"], ([4, 2], [4, 3]))
    expect("parse_marks skips malformed lines", "broken" in parse_marks(marks, threads), False)
    windows = [("w_1.json", "start 1", "stop 1"), ("w_2.json", "start 2", "stop 2")]
    with tempfile.TemporaryDirectory() as work:
        def write(name, obj):
            with open(os.path.join(work, name), "w") as f:
                json.dump(obj, f)
        write("w_1.json", trace(w1, no_edges))
        write("w_2.json", trace(w2, no_edges))
        r = analyse_trace(os.path.join(work, "w_1.json"))
        expect("window 1 launches", r["launches"], 6)
        expect("window 1 unmatched launches", r["unmatched_launches"], 1)
        expect("window 1 unmatched kernels", r["unmatched_kernels"], 0)
        expect("window 1 kernels by worker", r["kernels_by_worker"], {"0": 3, "1": 2})
        expect("window 1 launching threads", (r["launch_threads"], r["workers_with_launches"]), (2, [0, 1]))
        fig = run_figures(work, windows, parse_marks(marks, threads), threads, 0, "")
        expect("run: windows", (fig["windows"], fig["missing"], fig["extra"]), (2, [], []))
        expect("run: unmatched", (fig["unmatched_launches"], fig["unmatched_kernels"], fig["unexplained"]), (1, 0, 1))
        expect("run: duplicates", fig["duplicates"], 1)
        expect("run: out of bracket", fig["out_of_bracket"], ["w_2.json spin<0>: 2 kernels, launches in [1, 1] (+1)"])
        expect("run: threads", fig["threads_short"], [])
        expect("run failed", run_failed(fig), True)
        # The lost kernel counted by window_edges explains the unpaired launch.
        write("w_1.json", trace(w1, dict(no_edges, calls_without_gpu_work={"kernel": 1, "memcpy": 0, "memset": 0})))
        fig = run_figures(work, windows, parse_marks(marks, threads), threads, 0, "")
        expect("run: explained by window_edges", (fig["unmatched_launches"], fig["unexplained"],
                                                  fig["edges"]), (1, 0, {"calls_without_gpu_work.kernel": 1}))
        # A window nobody asked for, one missing, one unreadable: figures, never an exception.
        write("w_3.json", trace([], no_edges))
        os.remove(os.path.join(work, "w_2.json"))
        fig = run_figures(work, [("w_1.json", "start 1", "stop 1"), ("w_2.json", "start 2", "stop 2")],
                          {}, threads, 1, "cuprof: something went wrong")
        expect("run: missing and extra", (fig["missing"], fig["extra"]), (["w_2.json"], ["w_3.json"]))
        expect("run: no marks", fig["out_of_bracket"], ["w_1.json: no MARK 'start 1'"])
        expect("run: stderr kept", fig["stderr"], "cuprof: something went wrong")
        with open(os.path.join(work, "w_2.json"), "w") as f:
            f.write('{"traceEvents": [')
        fig = run_figures(work, windows, {}, threads, 0, "")
        expect("run: unreadable", len(fig["unreadable"]), 1)
        write("w_2.json", {"cuprof": "odd", "traceEvents": [1, {"ph": "X", "cat": "kernel", "args": []}]})
        r = analyse_trace(os.path.join(work, "w_2.json"))
        expect("odd shapes read", (r.get("error"), r["kernels"], r["edges"]["present"]), (None, 1, 0))
        # The checks themselves, on the figures of a failed run.
        got = []
        mode_checks("cuda", [dict(fig, run=1)], windows, lambda name, ok, detail="": got.append((name, bool(ok))))
        expect("mode checks: one per property", len(got), 6)
        expect("mode checks: the unreadable run fails them", any(not ok for _, ok in got), True)
        # A run where everything holds passes every check.
        good = [("g_1.json", "start 1", "stop 1"), ("g_2.json", "start 2", "stop 2")]
        write("g_1.json", trace(w1[:-1], no_edges))
        write("g_2.json", trace([launch(7, 100, 50), kernel(7, 0, 52), launch(8, 101, 51), kernel(8, 1, 53)], no_edges))
        good_marks = "MARK start 1 0 0 | 0 0\nMARK stop 1 3 2 | 3 2\nMARK start 2 3 2 | 3 2\nMARK stop 2 4 3 | 4 3\n"
        fig = run_figures(work, good, parse_marks(good_marks, threads), threads, 0, "")
        expect("good run passes", (run_failed(fig), fig["out_of_bracket"], fig["kernels"]), (False, [], [5, 2]))
        got = []
        mode_checks("cuda", [dict(fig, run=1)], good, lambda name, ok, detail="": got.append((name, bool(ok))))
        expect("mode checks: a good run passes them all", [ok for _, ok in got], [True] * 6)
    for f in failures:
        print(f"FAIL {f}")
    print(f"gpu_check_windows self-test: {'ok' if not failures else f'{len(failures)} failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    sys.exit("usage: gpu_check_windows.py --self-test  (the checks run through gpu_check.py --windows-only)")
