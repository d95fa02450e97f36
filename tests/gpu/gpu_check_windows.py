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
     marks give: [close.before - open.after, close.after - open.before];
  5. slices nest on every thread (the validator's rule 7): a slice that partly overlaps another,
     such as a ProfilerStep#N cutting across its step's NVTX range, is one Perfetto drops.

Where the windows lie comes from the program's own calls (and, for the schedule, from
torch.profiler's schedule semantics computed here), never from cuprof's output. One check per
mode and property; figures per mode in summary["windows"].

Two more modes run a PyTorch loop (tests/gpu/torch_windows_loop.py: an MLP trained from a
DataLoader with 2 workers and pinned memory, its steps NVTX ranges "step N", while a thread named
"side-stream" launches nonstop on its own stream): torch-nvtx (three NVTX ranges "capture" under
--capture-range nvtx:capture --capture-range-end repeat) and torch-slow (steps 10 and 20 slowed
under --slow-steps 2x). There, launches are cudaLaunchKernel, cuLaunchKernel and cuLaunchKernelEx
calls (PyTorch's own kernels, cuBLAS's), property 1 is launches from both the main thread and the
side-stream thread, property 4 is instead: each window holds its steps (NVTX ranges "step N" for
torch-nvtx, ProfilerStep#N, the slow step with one before and one after, for torch-slow); and the
traced run's exit status and stdout equal those of a plain run of the loop (one per mode).

  GPU_CHECK_WINDOW_RUNS=N      runs per mode (default 10)
  GPU_CHECK_WINDOW_TORCH_RUNS=N  runs per torch mode (default: GPU_CHECK_WINDOW_RUNS, at most 3)
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import validate_trace  # noqa: E402  (tests/validate_trace.py: rule 7, the nesting)

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
TORCH_MODES = ("torch-nvtx", "torch-slow")
MODES = ("schedule", "cuda", "nvtx", "nvtx-domain", "nvtx-mixed", "start-step", "slow", "trigger") + TORCH_MODES
KERNEL = re.compile(r"\bspin<(\d+)>")
EDGE_KINDS = ("kernel", "memcpy", "memset")
# The calls that launch a kernel, by category: PyTorch's kernels come through cudaLaunchKernel,
# cuBLAS's through cuLaunchKernelEx (a driver call made directly, shown as such).
LAUNCH_CALLS = {"cuda_runtime": {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel"},
                "cuda_driver": {"cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel"}}
# torch_windows_loop.py's windows, as the check asks for them.
TORCH_LOOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_windows_loop.py")
TORCH_CAPTURE = ((5, 8), (15, 18), (25, 28))
TORCH_SLOWED = (10, 20)
TORCH_RUNS_MAX = 3
SIDE_THREAD = "side-stream"  # the OS name of the loop's launching thread
STEP_NAME = re.compile(r"step (\d+)")
PROFILER_STEP = re.compile(r"ProfilerStep#(\d+)")


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
    if mode == "torch-nvtx":
        return [(f"torch_{k}.json", None, None) for k in range(1, len(TORCH_CAPTURE) + 1)]
    if mode == "torch-slow":
        return [(f"tslow_{k}.json", None, None) for k in range(1, len(TORCH_SLOWED) + 1)]
    return [(name, None, None) for name in TRIGGERS]


def expected_steps(mode):
    """{window trace: (what a step is called in it, the steps it holds)} for the torch modes, else {}."""
    if mode == "torch-nvtx":
        return {f"torch_{k}.json": ("step", list(range(a, b))) for k, (a, b) in enumerate(TORCH_CAPTURE, 1)}
    if mode == "torch-slow":
        return {f"tslow_{k}.json": ("ProfilerStep", list(range(s - SLOW_BEFORE, s + SLOW_AFTER + 1)))
                for k, s in enumerate(TORCH_SLOWED, 1)}
    return {}


def torch_loop_args(mode):
    """The loop's own arguments in a torch mode: the same for the plain run and the traced ones."""
    if mode == "torch-nvtx":
        return ["--capture", ",".join(f"{a}:{b}" for a, b in TORCH_CAPTURE)]
    return ["--slow", ",".join(str(s) for s in TORCH_SLOWED)]


def mode_runs(mode, runs, env=None):
    """Runs of `mode`: `runs`, or for a torch mode (its start-up is slow) GPU_CHECK_WINDOW_TORCH_RUNS,
    else at most TORCH_RUNS_MAX. Raises ValueError on a malformed variable."""
    env = os.environ if env is None else env
    if mode not in TORCH_MODES:
        return runs
    if env.get("GPU_CHECK_WINDOW_TORCH_RUNS"):
        return int(env["GPU_CHECK_WINDOW_TORCH_RUNS"])
    return min(runs, TORCH_RUNS_MAX)


def command(mode, cli, exe, work, threads):
    if mode in TORCH_MODES:
        flags = {"torch-nvtx": ["--capture-range", "nvtx:capture", "--capture-range-end", "repeat"],
                 "torch-slow": ["--slow-steps", "2x"]}[mode]
        output = {"torch-nvtx": "torch_%n.json", "torch-slow": "tslow_%n.json"}[mode]
        return [cli, "run", "--no-table", *flags, "--output", os.path.join(work, output), "--",
                sys.executable, TORCH_LOOP, *torch_loop_args(mode)]
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
    main_launches = 0       # launches on a process's main thread (tid == pid)
    thread_names = {}       # tid -> the OS name its lane shows
    steps = {"step": [], "ProfilerStep": []}
    for e in events:
        if not isinstance(e, dict):
            continue
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            m = re.fullmatch(r"thread \d+ \((.*)\)", str(args.get("name", "")), re.S)
            if m:
                thread_names[e.get("tid")] = m.group(1)
            continue
        if e.get("ph") != "X":
            continue
        cat, name = e.get("cat"), e.get("name")
        corr = args.get("correlation")
        if (isinstance(cat, str) and isinstance(name, str) and name in LAUNCH_CALLS.get(cat, ())
                and isinstance(corr, int) and not isinstance(corr, bool)):
            duplicate_correlations += corr in launches
            launches[corr] = e.get("tid")
            main_launches += e.get("tid") == e.get("pid")
        elif cat == "user_annotation" and isinstance(name, str):
            for kind, pattern in (("step", STEP_NAME), ("ProfilerStep", PROFILER_STEP)):
                m = pattern.fullmatch(name)
                if m:
                    steps[kind].append(int(m.group(1)))
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
    nesting = validate_trace.Report()
    validate_trace.check_nesting(validate_trace.collect_slices(events), nesting)
    side = sorted(t for t, n in thread_names.items() if n == SIDE_THREAD and isinstance(t, int))
    return {"path": path, "events": len(events), "launches": len(launches), "kernels": len(kernels),
            "launch_threads": len(launch_tids),
            "main_thread_launches": main_launches, "side_threads": side,
            "side_thread_launches": sum(n for t, n in launch_tids.items() if t in side),
            "steps": {k: sorted(v) for k, v in steps.items()},
            "workers_with_launches": sorted({w for ws in tid_workers.values() for w in ws}),
            "kernels_by_worker": {str(w): n for w, n in sorted(by_worker.items())},
            "other_kernels": other_kernels,
            "unmatched_launches": sum(1 for c in launches if c not in kernels),
            "unmatched_kernels": sum(1 for c in kernels if c not in launches),
            "duplicate_correlations": duplicate_correlations,
            "dropped_gpu_records": block.get("dropped_gpu_records", 0),
            "edges": edge_counts(block), "keys": keys,
            "misnested": nesting.counts[7], "misnested_first": nesting.messages[0] if nesting.messages else ""}


def analyse_all(paths):
    """analyse_trace over `paths`, in parallel where processes can be started."""
    if len(paths) > 1:
        try:
            with concurrent.futures.ProcessPoolExecutor(max_workers=min(len(paths), 4)) as pool:
                return list(pool.map(analyse_trace, paths))
        except (OSError, RuntimeError):  # BrokenProcessPool is a RuntimeError
            pass
    return [analyse_trace(p) for p in paths]


def empty_figures(exit_status, expected):
    return {"exit": exit_status, "expected": expected, "windows": 0, "missing": [], "extra": [],
            "unreadable": [], "threads_short": [], "unmatched_launches": 0, "unmatched_kernels": 0,
            "unexplained": 0, "edges": collections.Counter(), "duplicates": 0, "out_of_bracket": [],
            "steps_wrong": [], "output_differs": "", "kernels": [], "dropped_gpu_records": 0, "stderr": "",
            "misnested": []}


def run_figures(work, windows, marks, threads, exit_status, stderr, steps=None):
    """One run's figures: each expected window's trace read from `work` and judged. `steps`
    (expected_steps' answer) makes it a torch mode's: the main thread and the side-stream thread
    must both launch in every window, and each window must hold its steps."""
    fig = empty_figures(exit_status, len(windows))
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
        if steps is not None:
            if not (r["launch_threads"] >= 2 and r["main_thread_launches"] and r["side_thread_launches"]):
                fig["threads_short"].append(
                    f"{name}: {r['launch_threads']} launching threads, {r['main_thread_launches']} launches on the "
                    f"main thread, {r['side_thread_launches']} on {SIDE_THREAD} "
                    f"{r['side_threads'] or '(no thread of that name)'}")
            kind, want = steps.get(name, (None, None))
            if kind is not None and r["steps"][kind] != want:
                fig["steps_wrong"].append(f"{name}: {kind} {r['steps'][kind]}, want {want}")
        elif r["launch_threads"] != threads or r["workers_with_launches"] != list(range(threads)):
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
        if r["misnested"]:
            fig["misnested"].append(f"{name}: {r['misnested']} ({r['misnested_first']})")
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
                or fig["unexplained"] or fig["duplicates"] or fig["out_of_bracket"] or fig.get("steps_wrong")
                or fig.get("output_differs") or fig.get("misnested"))


# --- running the modes ---------------------------------------------------------------------------

def run_mode_once(mode, build, work, run, threads):
    """Runs the mode once in `work`; returns (exit status, stdout, stderr)."""
    cli = os.path.join(build, "tools", "cuprof")
    exe = os.path.join(build, "tests", "gpu", "threaded_windows")
    label = os.path.basename(work)
    cmd = command(mode, cli, exe, os.path.abspath(work), threads)
    if mode != "trigger":
        try:
            p = run(cmd, work, label, timeout=300 if mode in TORCH_MODES else 180)
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
        try:
            mode_n = mode_runs(mode, runs)
        except ValueError:
            check(f"windows {mode}: GPU_CHECK_WINDOW_TORCH_RUNS is a number", False,
                  os.environ.get("GPU_CHECK_WINDOW_TORCH_RUNS", ""))
            continue
        steps = expected_steps(mode) if mode in TORCH_MODES else None
        # A torch mode's traced runs must exit and print as the loop does untraced.
        plain = None
        if mode in TORCH_MODES:
            try:
                p = run([sys.executable, TORCH_LOOP, *torch_loop_args(mode)], root, f"{mode}_plain", timeout=300)
                plain = (p.returncode, p.stdout, (p.stderr or "").strip()[-300:])
            except (OSError, subprocess.SubprocessError) as e:
                plain = (-1, "", f"{type(e).__name__}: {e}")
        figs, kept_failed = [], 0
        for i in range(1, mode_n + 1):
            work = os.path.join(root, f"{mode}_{i}")
            shutil.rmtree(work, ignore_errors=True)
            os.makedirs(work)
            status, stdout, stderr = run_mode_once(mode, build, work, run, THREADS)
            try:
                fig = run_figures(work, windows, parse_marks(stdout, THREADS), THREADS, status, stderr, steps)
            except Exception as e:  # a checker's fault is the run's failure, not the end of gpu-check
                fig = empty_figures(status, len(windows))
                fig["unreadable"] = [f"checker: {type(e).__name__}: {e}"]
                fig["stderr"] = (stderr or "")[-600:]
            fig["edges"] = dict(fig["edges"])
            if plain is not None:
                fig["output_differs"] = output_difference(plain, status, stdout)
                if fig["output_differs"]:
                    fig["stderr"] = fig["stderr"] or (stderr or "").strip()[-600:]
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
        if plain is not None:
            result[mode]["plain"] = {"exit": plain[0], "stdout": plain[1][-200:], "stderr": plain[2]}
        mode_checks(mode, figs, windows, check, plain)
    return result


def output_difference(plain, status, stdout):
    """'' when a traced run exited and printed as the plain run did, else what differs."""
    plain_status, plain_stdout = plain[0], plain[1]
    notes = []
    if status != plain_status:
        notes.append(f"exit {status}, plain {plain_status}")
    if (stdout or "") != (plain_stdout or ""):
        notes.append(f"stdout {(stdout or '')[-120:]!r}, plain {(plain_stdout or '')[-120:]!r}")
    return "; ".join(notes)


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
            "steps_wrong": sum(len(f.get("steps_wrong", [])) for f in figs),
            "output_differs": sum(bool(f.get("output_differs")) for f in figs),
            "dropped_gpu_records": sum(f["dropped_gpu_records"] for f in figs),
            "kernels_per_window": [min(kernels), max(kernels)] if kernels else [],
            "per_run": [{k: v for k, v in f.items() if k != "stderr" or v} for f in figs]}


def mode_checks(mode, figs, windows, check, plain=None):
    """One check per property over all runs of the mode; the detail gives the totals and, where
    something failed, the worst run's figures. `plain`: a torch mode's plain run (exit, stdout, stderr)."""
    n, runs = len(windows), len(figs)
    seen = sum(f["windows"] for f in figs)

    def worst(score):
        """The detail's tail: the run with the highest score, when it is above 0."""
        f = max(figs, key=score, default=None)
        return f if f is not None and score(f) else None

    if mode in TORCH_MODES:
        plain = plain or (None, "", "no plain run")
        bad = [f for f in figs if f["exit"] != 0 or f.get("output_differs")]
        w = worst(lambda f: f["exit"] != 0 or bool(f.get("output_differs")))
        check(f"windows {mode}: every run exits and prints as the loop does untraced (exit 0, 'done')",
              runs and not bad and plain[0] == 0,
              f"plain run: exit {plain[0]}, stdout {plain[1][-60:]!r}" + (f", {plain[2][-300:]}" if plain[0] != 0 else "")
              + f"; {runs - len(bad)} of {runs} traced runs the same"
              + (f"; run {w['run']}: exit {w['exit']}, {w.get('output_differs') or 'same output'}: {w['stderr'][-300:]}"
                 if w else ""))
    else:
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
    who = (f"the main thread and the {SIDE_THREAD} thread" if mode in TORCH_MODES
           else f"all {THREADS} worker threads")
    check(f"windows {mode}: every window has launches from {who}", seen and not w,
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

    w = worst(lambda f: len(f.get("misnested", [])))
    check(f"windows {mode}: slices nest on every thread (none partly overlaps another: Perfetto would drop it)",
          seen and not w,
          f"{sum(len(f.get('misnested', [])) for f in figs)} of {seen} windows with a misnested slice"
          + (f"; run {w['run']}: {w['misnested'][0][:300]}" if w else ""))

    if mode in TORCH_MODES:
        steps = expected_steps(mode)
        w = worst(lambda f: len(f.get("steps_wrong", [])))
        check(f"windows {mode}: each window holds its steps ("
              + ", ".join(f"{kind} {want[0]}-{want[-1]}" for kind, want in steps.values()) + ")",
              seen and not w,
              f"{sum(len(f.get('steps_wrong', [])) for f in figs)} of {seen} windows wrong"
              + (f"; run {w['run']}: {'; '.join(w['steps_wrong'][:2])}" if w else ""))
    elif windows and windows[0][1] is not None:
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
              f"duplicates {s['duplicates']}, out of bracket {s['out_of_bracket']}, "
              + (f"steps wrong {s.get('steps_wrong', 0)}, output differs {s.get('output_differs', 0)}, "
                 if mode in TORCH_MODES else "")
              + f"edges {s['edges'] or 0}")


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
        expect("mode checks: one per property", len(got), 7)
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
        expect("mode checks: a good run passes them all", [ok for _, ok in got], [True] * 7)
        # A ProfilerStep that cuts across its step's range on the main thread: the run fails.
        step_range = {"ph": "X", "cat": "user_annotation", "name": "step 4", "pid": 1, "tid": 1, "ts": 100.0, "dur": 50.0}
        profiler_step = dict(step_range, name="ProfilerStep#4", ts=101.2, dur=60.0)
        write("g_2.json", trace([launch(7, 100, 50), kernel(7, 0, 52), launch(8, 101, 51), kernel(8, 1, 53),
                                 step_range, profiler_step], no_edges))
        fig = run_figures(work, good, parse_marks(good_marks, threads), threads, 0, "")
        expect("misnested step: the run fails", (run_failed(fig), len(fig["misnested"])), (True, 1))
        write("g_2.json", trace([launch(7, 100, 50), kernel(7, 0, 52), launch(8, 101, 51), kernel(8, 1, 53),
                                 step_range, dict(profiler_step, ts=99.999)], no_edges))
        fig = run_figures(work, good, parse_marks(good_marks, threads), threads, 0, "")
        expect("nested step: the run passes", (run_failed(fig), fig["misnested"]), (False, []))

    # --- the torch modes ---
    expect("torch-nvtx windows", [w[0] for w in expected_windows("torch-nvtx")],
           ["torch_1.json", "torch_2.json", "torch_3.json"])
    expect("torch-slow windows", expected_windows("torch-slow"), [("tslow_1.json", None, None), ("tslow_2.json", None, None)])
    expect("torch-nvtx steps", expected_steps("torch-nvtx")["torch_2.json"], ("step", [15, 16, 17]))
    expect("torch-slow steps", expected_steps("torch-slow"), {"tslow_1.json": ("ProfilerStep", [9, 10, 11]),
                                                              "tslow_2.json": ("ProfilerStep", [19, 20, 21])})
    expect("torch-nvtx command", command("torch-nvtx", "cuprof", "unused", "/w", THREADS),
           ["cuprof", "run", "--no-table", "--capture-range", "nvtx:capture", "--capture-range-end", "repeat",
            "--output", "/w/torch_%n.json", "--", sys.executable, TORCH_LOOP, "--capture", "5:8,15:18,25:28"])
    expect("torch-slow command", command("torch-slow", "cuprof", "unused", "/w", THREADS)[3:],
           ["--slow-steps", "2x", "--output", "/w/tslow_%n.json", "--", sys.executable, TORCH_LOOP, "--slow", "10,20"])
    expect("mode runs", [mode_runs("nvtx", 10, {}), mode_runs("torch-nvtx", 10, {}), mode_runs("torch-slow", 2, {}),
                         mode_runs("torch-slow", 10, {"GPU_CHECK_WINDOW_TORCH_RUNS": "5"})], [10, 3, 2, 5])
    try:
        mode_runs("torch-slow", 10, {"GPU_CHECK_WINDOW_TORCH_RUNS": "x"})
        failures.append("mode runs: a malformed GPU_CHECK_WINDOW_TORCH_RUNS raises")
    except ValueError:
        pass
    expect("output the same", output_difference((0, "done\n", ""), 0, "done\n"), "")
    expect("output differs", output_difference((0, "done\n", ""), 1, "done\nmore\n"),
           "exit 1, plain 0; stdout 'done\\nmore\\n', plain 'done\\n'")

    pid, side_tid, grad_tid = 500, 501, 502

    def call(cat, name, corr, tid, ts):
        args = {} if corr is None else {"correlation": corr}
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": 1.0, "args": args}

    def torch_kernel(corr, name, stream, ts):
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": 2.0,
                "args": {"correlation": corr, "stream": stream}}

    def thread_name(tid, name):
        return {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": f"thread {tid} ({name})"}}

    def annotation(name, ts):
        return {"ph": "X", "cat": "user_annotation", "name": name, "pid": pid, "tid": pid, "ts": ts, "dur": 0.5,
                "args": {"External id": 1}}

    def torch_window(base, steps, side_name=SIDE_THREAD, step_kind="step"):
        """The main thread's elementwise kernel, the autograd thread's, the side thread's GEMM
        (cuLaunchKernelEx) and elementwise kernel, a launch without a correlation, a copy."""
        c = base
        ev = [thread_name(pid, "python3"), thread_name(side_tid, side_name), thread_name(grad_tid, "pt_autograd_0"),
              call("cuda_runtime", "cudaLaunchKernel", c, pid, c), torch_kernel(c, "elementwise_kernel", 7, c + 1),
              call("cuda_runtime", "cudaLaunchKernel", c + 1, grad_tid, c + 2),
              torch_kernel(c + 1, "elementwise_kernel", 7, c + 3),
              call("cuda_driver", "cuLaunchKernelEx", c + 2, side_tid, c + 4), torch_kernel(c + 2, "sm90_gemm", 20, c + 5),
              call("cuda_runtime", "cudaLaunchKernel", c + 3, side_tid, c + 6),
              torch_kernel(c + 3, "elementwise_kernel", 20, c + 7),
              call("cuda_runtime", "cudaLaunchKernel", None, pid, c + 8),
              call("cuda_runtime", "cudaMemcpyAsync", c + 4, pid, c + 9)]
        return ev + [annotation(f"step {s}" if step_kind == "step" else f"ProfilerStep#{s}", c + s) for s in steps]

    torch_windows = expected_windows("torch-nvtx")
    with tempfile.TemporaryDirectory() as work:
        def write_t(name, events):
            with open(os.path.join(work, name), "w") as f:
                json.dump(trace(events, no_edges), f)
        for k, (a, b) in enumerate(TORCH_CAPTURE, 1):
            write_t(f"torch_{k}.json", torch_window(100 * k, range(a, b)))
        r = analyse_trace(os.path.join(work, "torch_1.json"))
        expect("torch: launches of every kind, with a correlation", (r["launches"], r["kernels"], r["unmatched_launches"],
                                                                     r["unmatched_kernels"]), (4, 4, 0, 0))
        expect("torch: threads", (r["launch_threads"], r["main_thread_launches"], r["side_threads"],
                                  r["side_thread_launches"]), (3, 1, [side_tid], 2))
        expect("torch: steps", r["steps"], {"step": [5, 6, 7], "ProfilerStep": []})
        steps = expected_steps("torch-nvtx")
        fig = run_figures(work, torch_windows, {}, THREADS, 0, "", steps)
        expect("torch: a good run passes", (run_failed(fig), fig["windows"], fig["threads_short"], fig["steps_wrong"],
                                            fig["unexplained"], fig["duplicates"]), (False, 3, [], [], 0, 0))
        plain = (0, "done\n", "")
        got = []
        mode_checks("torch-nvtx", [dict(fig, run=1)], torch_windows, lambda name, ok, detail="": got.append((name, bool(ok))),
                    plain)
        expect("torch mode checks: a good run passes them all", [ok for _, ok in got], [True] * 7)
        got = []
        mode_checks("torch-nvtx", [dict(fig, run=1)], torch_windows, lambda name, ok, detail="": got.append((name, bool(ok))),
                    (1, "done\n", "Traceback"))
        expect("torch mode checks: a failing plain run fails the first", [ok for _, ok in got], [False] + [True] * 6)
        got = []
        mode_checks("torch-nvtx", [dict(fig, run=1, output_differs="exit 1, plain 0")], torch_windows,
                    lambda name, ok, detail="": got.append((name, bool(ok))), plain)
        expect("torch mode checks: a traced run that differs fails the first", [ok for _, ok in got], [False] + [True] * 6)
        # The side thread unnamed in window 2, only the main thread in window 3, steps off by one in 1,
        # a kernel of window 1 again in window 2.
        write_t("torch_1.json", torch_window(100, range(5, 9)))
        write_t("torch_2.json", torch_window(100, range(15, 18), side_name="python3"))
        write_t("torch_3.json", [e for e in torch_window(300, range(25, 28))
                                 if e.get("tid") not in (side_tid, grad_tid) and e["args"].get("correlation") in (None, 300, 304)])
        fig = run_figures(work, torch_windows, {}, THREADS, 0, "", steps)
        expect("torch: threads short", [t.split(":")[0] for t in fig["threads_short"]], ["torch_2.json", "torch_3.json"])
        expect("torch: steps wrong", fig["steps_wrong"], ["torch_1.json: step [5, 6, 7, 8], want [5, 6, 7]"])
        expect("torch: duplicates", fig["duplicates"], 4)
        expect("torch: a bad run fails", run_failed(fig), True)
        got = []
        mode_checks("torch-nvtx", [dict(fig, run=1)], torch_windows, lambda name, ok, detail="": got.append((name, bool(ok))),
                    plain)
        expect("torch mode checks: the bad run's", [ok for _, ok in got], [True, True, False, True, False, True, False])
        # torch-slow: ProfilerStep#N.
        for f in os.listdir(work):
            os.remove(os.path.join(work, f))
        write_t("tslow_1.json", torch_window(100, [9, 10, 11], step_kind="ProfilerStep"))
        write_t("tslow_2.json", torch_window(200, [19, 20], step_kind="ProfilerStep"))
        write_t("tslow_3.json", torch_window(300, [29, 30, 31], step_kind="ProfilerStep"))
        fig = run_figures(work, expected_windows("torch-slow"), {}, THREADS, 0, "", expected_steps("torch-slow"))
        expect("torch-slow: steps and extra", (fig["steps_wrong"], fig["extra"]),
               (["tslow_2.json: ProfilerStep [19, 20], want [19, 20, 21]"], ["tslow_3.json"]))
    for f in failures:
        print(f"FAIL {f}")
    print(f"gpu_check_windows self-test: {'ok' if not failures else f'{len(failures)} failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    sys.exit("usage: gpu_check_windows.py --self-test  (the checks run through gpu_check.py --windows-only)")
