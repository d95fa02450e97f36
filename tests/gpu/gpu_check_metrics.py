"""gpu_check part: GPU hardware metrics (scripts/gpu-check --metrics-only).

  kernels     tests/gpu/metrics_kernels.cu, unmodified CUDA + cuBLAS: a bf16 GEMM of 4096 (the
              examples' matmul_add at --size 4096), a GELU over 256 Mi floats and a copy of 1 GiB,
              each several times. Under `cuprof run --gpu-metrics`: exit status and output
              unchanged; a counter track per metric on GPU 0; each kernel's SM and DRAM throughput
              (its args) within 10 percentage points of Nsight Compute's
              sm__throughput / dram__throughput .avg.pct_of_peak_sustained_elapsed, measured in
              the same gpu-check run on the same binary. ncu runs with --clock-control none (the
              clocks the program runs at, as under cuprof); its default, base clocks, is shown too.
  verdicts    the examples matmul_add --size 4096 and mlp with --gpu-metrics: `cuprof insights`
              calls the GEMM compute-bound and the MLP's GeLU and mul memory-bound, from the counters.
  degrading   a metric CUPTI does not know: one line, the trace without metrics, exit status as plain.
  fixture     a trimmed trace of the kernels run, for the CPU tests (tests/data/gpu_metrics_h200.json.gz).
"""
import collections
import csv
import gzip
import io
import json
import os
import re
import shutil
import statistics
import subprocess

SM = "SM throughput %"
DRAM = "DRAM throughput %"
TENSOR = "Tensor pipe active %"
OCC = "Achieved occupancy %"
NCU_METRICS = {
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": SM,
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": DRAM,
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed": TENSOR,
    "sm__warps_active.avg.pct_of_peak_sustained_active": OCC,
}


def family(name):
    """Which of metrics_kernels' three kernels a kernel name is."""
    if "metrics_gelu" in name:
        return "gelu"
    if "metrics_copy" in name:
        return "copy"
    if "metrics_fill" in name:
        return None
    return "gemm"  # cuBLAS's kernel, whatever its name on this GPU


def cuprof_per_kernel(events):
    """{family: {label: mean over its runs of the kernel's averages, 'samples': [...], 'us': [...]}}."""
    runs = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "kernel" and e.get("dur", 0) >= 100:
            f = family(e["name"])
            if f:
                runs[f].append(e)
    out = {}
    for f, ks in runs.items():
        row = {"samples": [k["args"].get("metric samples") for k in ks], "us": [round(k["dur"], 1) for k in ks]}
        for label in (SM, DRAM, TENSOR, OCC):
            vals = [k["args"][label] for k in ks if isinstance(k["args"].get(label), (int, float))]
            row[label] = round(statistics.mean(vals), 2) if vals else None
        out[f] = row
    return out


def ncu_per_kernel(text):
    """ncu --csv's rows averaged per kernel family: {family: {label: value}}."""
    start = text.find('"ID"')
    if start < 0:
        return {}
    values = collections.defaultdict(lambda: collections.defaultdict(list))
    for row in csv.DictReader(io.StringIO(text[start:])):
        f = family(row.get("Kernel Name", ""))
        label = NCU_METRICS.get(row.get("Metric Name"))
        if not f or not label:
            continue
        try:
            values[f][label].append(float(row["Metric Value"].replace(",", "")))
        except ValueError:
            pass
    return {f: {label: round(statistics.mean(v), 2) for label, v in per.items()} for f, per in values.items()}


def trim_trace(src, dst, margin_us=2000.0):
    """The trace with only the counter samples near its long kernels: a fixture of a few hundred KB."""
    with open(src) as f:
        doc = json.load(f)
    ev = doc["traceEvents"]
    long_kernels = [e for e in ev if e.get("cat") == "kernel" and e.get("dur", 0) >= 200]
    if not long_kernels:
        return False
    lo = min(e["ts"] for e in long_kernels) - margin_us
    hi = max(e["ts"] + e["dur"] for e in long_kernels) + margin_us
    doc["traceEvents"] = [e for e in ev if e.get("cat") != "gpu_metric" or lo <= e["ts"] <= hi]
    with gzip.open(dst, "wt") as f:
        json.dump(doc, f, separators=(",", ":"))
    return True


def metrics_checks(build, out, summary, check, run):
    work = os.path.join(out, "metrics")
    os.makedirs(work, exist_ok=True)
    cli = os.path.join(build, "tools", "cuprof")
    prog = os.path.join(build, "tests", "gpu", "metrics_kernels")
    result = summary.setdefault("metrics", {})

    # --- the three kernels, traced with metrics, against ncu on the same binary -----------------
    # Sampling starts once the context is up and PM sampling is set up on it
    # (about half a second): the program idles that long before its kernels.
    prog_args = ["--reps", "5", "--idle-ms", "1000"]
    plain = run([prog] + prog_args, work, "kernels_plain")
    trace = os.path.join(work, "kernels.json")
    traced = run([cli, "run", "--no-table", "--gpu-metrics", "--output", trace, "--", prog] + prog_args, work,
                 "kernels_traced")
    check("metrics kernels: exit status and output unchanged under cuprof run --gpu-metrics",
          plain.returncode == traced.returncode == 0 and plain.stdout == traced.stdout,
          f"exit {plain.returncode}/{traced.returncode}; {traced.stderr.strip()[-300:]}")
    if not os.path.exists(trace):
        check("metrics kernels: a trace was written", False, traced.stderr[-800:])
        return
    with open(trace) as f:
        doc = json.load(f)
    ev = doc["traceEvents"]
    counters = collections.Counter((e.get("pid"), e.get("name")) for e in ev if e.get("ph") == "C" and e.get("cat") == "gpu_metric")
    block = doc.get("cuprof", {}).get("gpu_metrics", {})
    result["counter_events"] = {f"{pid}:{name}": n for (pid, name), n in counters.items()}
    result["block"] = block
    check("metrics kernels: a counter track per default metric on GPU 0",
          all(counters.get((0, label), 0) > 0 for label in (SM, DRAM, TENSOR, OCC)), str(dict(counters)))
    ours = cuprof_per_kernel(ev)
    result["cuprof"] = ours
    # At the default 100 us: a 740 us GELU and a 540 us copy have 4 samples or more each (the
    # median run: a run that falls in a stretch left unsampled has none, and the trace counts
    # those samples as dropped); the GEMMs (about 155 us each, 8 back to back) one or two.
    result["dropped"] = block.get("dropped")
    check("metrics kernels: each of the three kernels has its averages (GELU and copy from 4 samples or more)",
          set(ours) == {"gemm", "gelu", "copy"} and statistics.median(s or 0 for s in ours["gemm"]["samples"]) >= 1 and all(
              statistics.median(s or 0 for s in ours[f]["samples"]) >= 4 for f in ("gelu", "copy")),
          json.dumps({f: r["samples"] for f, r in ours.items()}) + f"; dropped {block.get('dropped')}")

    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    theirs = {}
    for clocks in ("none", "base"):
        r = run([ncu, "--clock-control", clocks, "--csv", "--metrics", ",".join(NCU_METRICS), "-k",
                 "regex:metrics_(gelu|copy)|gemm|sm90|cutlass|nvjet", prog, "--reps", "2"], work, f"ncu_{clocks}",
                timeout=600)
        theirs[clocks] = ncu_per_kernel(r.stdout)
    result["ncu"] = theirs
    for f in ("gemm", "gelu", "copy"):
        for label in (SM, DRAM):
            a = ours.get(f, {}).get(label)
            b = theirs["none"].get(f, {}).get(label)
            base = theirs["base"].get(f, {}).get(label)
            check(f"metrics {f}: cuprof's {label} within 10 points of Nsight Compute's",
                  a is not None and b is not None and abs(a - b) <= 10,
                  f"cuprof {a}, ncu {b} (clock-control none), {base} (base clocks)")

    # --- the fixture for the CPU tests ---------------------------------------------------------
    fixture = os.path.join(work, "gpu_metrics_h200.json.gz")
    result["fixture"] = trim_trace(trace, fixture) and os.path.getsize(fixture)

    # --- verdicts from the counters on the examples -------------------------------------------
    for label, example, args, wants in (
            # Its GEMM runs about 170 us: sampled every 20 us (a short run's samples fit the
            # hardware buffer while the decoding catches up), every 100 us it would get one or two.
            ("matmul_add_4096", "matmul_add", ["--size", "4096", "--warmup", "--gpu-metrics-interval", "20"],
             [r"compute-bound|tensor-bound"]),
            ("mlp", "mlp", ["--batch", "64", "--seq", "2048"], [r"memory-bound"])):
        path = os.path.join(work, f"{label}.json")
        r = run([os.path.join(build, "examples", example), "--gpu-metrics", "--trace", path] + args, work, f"example_{label}")
        result[label + "_trace"] = path
        if r.returncode != 0 or not os.path.exists(path):
            check(f"metrics {label}: the example ran with --gpu-metrics", False, r.stderr[-500:])
            continue
        ins = run([cli, "insights", path], work, f"insights_{label}")
        table = run([cli, "table", "--metrics", path], work, f"table_{label}")
        result[label] = {"insights": ins.stdout[-3000:], "table": table.stdout[-3000:]}
        for want in wants:
            lines = [l for l in ins.stdout.splitlines() if re.search(want, l) and ("DRAM" in l or "SM" in l)]
            check(f"metrics {label}: insights say {want}, citing the counters", lines, " | ".join(lines)[:400])
        check(f"metrics {label}: cuprof table --metrics has the metric columns", SM in table.stdout and DRAM in table.stdout,
              table.stdout.splitlines()[0][:200] if table.stdout else table.stderr[-300:])

    # --- a metric CUPTI does not know -------------------------------------------------------------
    bad = os.path.join(work, "bad_metric.json")
    r = run([cli, "run", "--no-table", "--gpu-metrics=no_such__metric.avg", "--output", bad, "--", prog, "--reps", "1", "--idle-ms", "1000"], work,
            "bad_metric")
    said = [l for l in r.stderr.splitlines() if "GPU metrics are off" in l and "does not know" in l]
    kernels = 0
    has_counters = True
    if os.path.exists(bad):
        with open(bad) as f:
            bev = json.load(f)["traceEvents"]
        kernels = sum(e.get("cat") == "kernel" for e in bev)
        has_counters = any(e.get("cat") == "gpu_metric" for e in bev)
    check("metrics: an unknown metric gives one line, the trace without metrics, exit 0",
          r.returncode == 0 and len(said) == 1 and kernels > 0 and not has_counters,
          f"exit {r.returncode}, lines {said}, kernels {kernels}")

    # --- two processes sampling one GPU at once ------------------------------------------------
    paths = [os.path.join(work, f"twice_{i}.json") for i in range(2)]
    procs = [subprocess.Popen([cli, "run", "--no-table", "--gpu-metrics", "--output", p, "--", prog, "--reps", "2",
                               "--idle-ms", "1000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for p in paths]
    outcomes = []
    for p, path in zip(procs, paths):
        out_text, err_text = p.communicate(timeout=300)
        said = [l for l in err_text.splitlines() if "GPU metrics are off" in l]
        sampled = False
        if os.path.exists(path):
            with open(path) as f:
                sampled = any(e.get("cat") == "gpu_metric" for e in json.load(f)["traceEvents"])
        outcomes.append({"exit": p.returncode, "sampled": sampled, "said": said})
    result["two_processes"] = outcomes
    check("metrics: two processes sampling one GPU at once: both exit 0, each samples or says why in one line",
          all(o["exit"] == 0 and (o["sampled"] or len(o["said"]) == 1) for o in outcomes), json.dumps(outcomes)[:600])
