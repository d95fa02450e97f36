"""gpu_check part: windows the program or the user chooses (scripts/gpu-check --capture-only).

  asyncAPI      NVIDIA's cuda-samples program, unmodified, calls cudaProfilerStart/Stop around its
                one kernel and two copies: under `cuprof run --capture-range cuda` the trace holds
                those and none of the calls outside (its allocations, its cudaEventQuery loop);
                exit status and output as the plain run's.
  PyTorch       tests/gpu/torch_capture_loop.py: torch.cuda.profiler.start()/stop() around steps
                10-12, an NVTX range "capture" around steps 20-22; each traced alone: exactly
                those steps, each with the kernels one step launches (the independent CUPTI
                counter's count of two plain runs, 20 and 40 steps, gives a step's kernels).
  trigger       the same loop running under `cuprof run --capture-range trigger`: `cuprof trigger
                PID --steps 5` gives a trace of 5 steps holding 5 steps' kernels by the counter;
                `--duration 1` a trace one second long.
  slow steps    tests/gpu/slow_steps.cu, a C++ loop with a 30 ms sleep in steps 50, 100, 150:
                `cuprof run --slow-steps 10ms` keeps exactly those steps, each with its neighbours.
  schedule      tests/gpu/schedule_windows.cu: windows back to back (schedule 0, 0, 2, 3) whose
                kernels still run when the next window starts each hand over their 16 kernels.
"""
import collections
import json
import os
import re
import subprocess
import sys
import time

from gpu_check_ranks import counter_library  # the same counter the multi-GPU checks find

HERE = os.path.dirname(os.path.abspath(__file__))
LOOP = os.path.join(HERE, "torch_capture_loop.py")


def events_of(path):
    with open(path) as f:
        return json.load(f)["traceEvents"]


def kernels(events):
    return [e for e in events if e.get("cat") == "kernel"]


def steps_of(events, pattern=r"step (\d+)"):
    return sorted(int(m.group(1)) for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"
                  for m in [re.fullmatch(pattern, e.get("name", ""))] if m)


def capture_checks(build, out, summary, check, run, corpus):
    work = os.path.join(out, "capture")
    os.makedirs(work, exist_ok=True)
    cli = os.path.join(build, "tools", "cuprof")
    result = summary.setdefault("capture", {})

    # --- a public program's own cudaProfilerStart/Stop ---------------------------------------
    async_api = os.path.join(corpus or "build-corpus", "plain", "asyncAPI")
    if os.path.exists(async_api):
        plain = run([async_api], work, "asyncAPI_plain")
        trace = os.path.join(work, "asyncAPI.json")
        traced = run([cli, "run", "--no-table", "--capture-range", "cuda", "--output", trace, "--", async_api],
                     work, "asyncAPI_traced")
        def shape(text):  # its timings and the CPU's iteration count differ from run to run
            return [re.sub(r"\d+(\.\d+)?", "N", l) for l in text.splitlines() if not l.startswith("[")]
        same_output = shape(plain.stdout) == shape(traced.stdout)
        check("capture asyncAPI: exit status and output (but its numbers) unchanged under --capture-range cuda",
              plain.returncode == traced.returncode == 0 and same_output,
              f"exit {plain.returncode}/{traced.returncode}")
        if os.path.exists(trace):
            ev = events_of(trace)
            calls = collections.Counter(e["name"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver"))
            names = collections.Counter(e["name"] for e in kernels(ev))
            copies = [e for e in ev if e.get("cat") == "gpu_memcpy"]
            result["asyncAPI"] = {"calls": dict(calls), "kernels": dict(names), "copies": len(copies)}
            check("capture asyncAPI: the trace holds the range's kernel and two copies, none of the calls outside it",
                  sum(names.values()) == 1 and len(copies) == 2 and not any(
                      n in calls for n in ("cudaMalloc", "cudaMallocHost", "cudaEventQuery", "cudaFree", "cudaMemset")),
                  f"kernels {dict(names)}, copies {len(copies)}, calls {dict(calls)}")
        else:
            check("capture asyncAPI: a trace was written", False, traced.stderr[-800:])
    else:
        check("capture asyncAPI: the corpus's plain asyncAPI is there", False, async_api)

    # --- PyTorch: kernels per step by the independent counter ----------------------------------
    counter = counter_library(build, corpus)
    per_step = None
    if counter:
        counts = {}
        for steps in (20, 40):
            path = os.path.join(work, f"counter_{steps}.json")
            run([sys.executable, LOOP, "--steps", str(steps)], work, f"loop_counter_{steps}",
                env={"CUDA_INJECTION64_PATH": counter, "CUPTI_COUNTER_OUT": path})
            try:
                with open(path) as f:
                    counts[steps] = sum(json.load(f)["kernels"].values())
            except (OSError, ValueError, KeyError):
                counts[steps] = None
        if None not in counts.values() and (counts[40] - counts[20]) % 20 == 0:
            per_step = (counts[40] - counts[20]) // 20
        result["counter_kernels"] = counts
    check("capture: the independent counter gives a step's kernels (40 steps less 20, by 20)", per_step,
          f"{per_step} kernels per step")

    for label, flags, loop_args, want in (
            ("cuda", ["--capture-range", "cuda"], ["--profile", "10:13"], [10, 11, 12]),
            ("nvtx", ["--capture-range", "nvtx:capture"], ["--nvtx", "20:23"], [20, 21, 22])):
        trace = os.path.join(work, f"torch_{label}.json")
        plain = run([sys.executable, LOOP, "--steps", "30"] + loop_args, work, f"torch_{label}_plain")
        traced = run([cli, "run", "--no-table", "--output", trace] + flags + ["--", sys.executable, LOOP, "--steps", "30"] +
                     loop_args, work, f"torch_{label}")
        check(f"capture torch {label}: exit status and output unchanged",
              plain.returncode == traced.returncode == 0 and plain.stdout == traced.stdout, f"exit {traced.returncode}")
        if not os.path.exists(trace):
            check(f"capture torch {label}: a trace was written", False, traced.stderr[-800:])
            continue
        ev = events_of(trace)
        steps, n = steps_of(ev), len(kernels(ev))
        result[f"torch_{label}"] = {"steps": steps, "kernels": n}
        check(f"capture torch {label}: the trace holds steps {want} and nothing else",
              steps == want, f"steps {steps}")
        check(f"capture torch {label}: its kernels are {len(want)} steps' by the counter", per_step and n == per_step * len(want),
              f"{n} kernels, counter {per_step} per step")

    # --- cuprof trigger on a running loop -------------------------------------------------------
    ready = os.path.join(work, "ready")
    if os.path.exists(ready):
        os.remove(ready)
    log = open(os.path.join(work, "trigger_job.log"), "w")
    job = subprocess.Popen([cli, "run", "--no-table", "--capture-range", "trigger", "--output",
                            os.path.join(work, "trigger_%n.json"), "--", sys.executable, LOOP, "--run-s", "25",
                            "--step-sleep-ms", "20", "--ready-file", ready], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if os.path.exists(ready) or job.poll() is not None:
            break
        time.sleep(0.1)
    listed = run([cli, "trigger", "--list"], work, "trigger_list")
    check("trigger: cuprof trigger --list shows the running job", str(job.pid) in listed.stdout,
          listed.stdout.strip()[-300:])
    stepped = os.path.join(work, "trigger_steps.json")
    r = run([cli, "trigger", str(job.pid), "--steps", "5", "--output", stepped], work, "trigger_steps", timeout=60)
    check("trigger --steps 5: written, exit 0", r.returncode == 0 and os.path.exists(stepped),
          (r.stdout + r.stderr).strip()[-400:])
    if os.path.exists(stepped):
        ev = events_of(stepped)
        steps, n = steps_of(ev, r"ProfilerStep#(\d+)"), len(kernels(ev))
        result["trigger_steps"] = {"steps": steps, "kernels": n}
        check("trigger --steps 5: five whole steps (ProfilerStep#N), their kernels equal five steps' by the counter",
              len(steps) == 5 and steps == list(range(steps[0], steps[0] + 5)) and per_step and n == 5 * per_step,
              f"steps {steps}, {n} kernels, counter {per_step} per step")
    timed = os.path.join(work, "trigger_timed.json")
    r = run([cli, "trigger", str(job.pid), "--duration", "1", "--output", timed], work, "trigger_timed", timeout=60)
    check("trigger --duration 1: written, exit 0", r.returncode == 0 and os.path.exists(timed),
          (r.stdout + r.stderr).strip()[-400:])
    if os.path.exists(timed):
        ev = events_of(timed)
        xs = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
        span_s = (max(e["ts"] + e["dur"] for e in xs) - min(e["ts"] for e in xs)) / 1e6 if xs else 0
        steps, n = steps_of(ev), len(kernels(ev))
        result["trigger_timed"] = {"span_s": span_s, "steps": len(steps), "kernels": n}
        check("trigger --duration 1: the window's ranges span about 1 s (0.85 to 1.15)", 0.85 <= span_s <= 1.15,
              f"{span_s:.3f} s, {len(steps)} steps, {n} kernels")
    job.wait(timeout=120)
    log.close()
    check("trigger: the job ran to its end, exit 0", job.returncode == 0, f"exit {job.returncode}")

    # --- slow steps ----------------------------------------------------------------------------
    exe = os.path.join(build, "tests", "gpu", "slow_steps")
    slow_dir = os.path.join(work, "slow")
    os.makedirs(slow_dir, exist_ok=True)
    for f in os.listdir(slow_dir):
        os.remove(os.path.join(slow_dir, f))
    r = run([cli, "run", "--no-table", "--slow-steps", "10ms", "--output", os.path.join(slow_dir, "slow_%n.json"), "--",
             exe], work, "slow_steps")
    slowed = [int(x) for x in re.search(r"slowed=([\d,]*)", r.stdout).group(1).split(",") if x] if "slowed=" in r.stdout else []
    files = sorted(os.listdir(slow_dir))
    kept = []
    for f in files:
        ev = events_of(os.path.join(slow_dir, f))
        kept.append({"file": f, "steps": steps_of(ev, r"ProfilerStep#(\d+)"), "kernels": len(kernels(ev))})
    result["slow_steps"] = {"slowed": slowed, "kept": kept, "summary": [l for l in r.stderr.splitlines() if "slow steps" in l]}
    check("slow steps: exit 0, one trace per slowed step", r.returncode == 0 and slowed and len(files) == len(slowed),
          f"slowed {slowed}, files {files}")
    check("slow steps: each trace holds its slow step with the one before and after, with their kernels",
          [k["steps"] for k in kept] == [[s - 1, s, s + 1] for s in slowed] and all(k["kernels"] >= 12 for k in kept),
          f"{[(k['steps'], k['kernels']) for k in kept]}")
    check("slow steps: the summary line counts them", any(f"{len(slowed)} of" in l for l in result["slow_steps"]["summary"]),
          "; ".join(result["slow_steps"]["summary"])[:300])

    # --- windows back to back ------------------------------------------------------------------
    r = run([os.path.join(build, "tests", "gpu", "schedule_windows")], work, "schedule_windows")
    counts = [int(k) for k in re.findall(r"window \d+ kernels=(\d+)", r.stdout)]
    result["schedule_windows"] = counts
    check("schedule: windows back to back each hand over their own 16 kernels", r.returncode == 0 and counts == [16] * 3,
          f"kernels per window {counts}")
