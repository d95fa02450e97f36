"""gpu_check part: GPU hardware metrics (scripts/gpu-check --metrics-only).

  kernels     tests/gpu/metrics_kernels.cu, unmodified CUDA + cuBLAS: eight kernel families of known
              character (a bf16 GEMM of 4096, a GELU, a copy, a sum reduction, a transpose, register FMAs,
              a pointer chase, contended atomics), each several times. Under `cuprof run --gpu-metrics`:
              exit status and output unchanged; a counter track per metric on GPU 0; each family's SM and
              DRAM throughput (its kernels' args) within 5 percentage points of Nsight Compute's
              sm__throughput / dram__throughput .avg.pct_of_peak_sustained_elapsed, measured in the same
              gpu-check run on the same binary. ncu runs with --clock-control none (the clocks the program
              runs at, as under cuprof); its default, base clocks, is shown too.
  placement   the families back to back (--back-to-back), each custom kernel timing itself on the GPU's
              %globaltimer (--timer-out), every 100 us, GPU_CHECK_METRICS_RUNS runs (10 by default):
              whether the samples lie where their kernels ran, within one sampling interval. (1) The trace's kernel starts minus their globaltimer starts: one
              offset for every launch (its spread at most 10 us), so the trace's kernels are where the
              GPU's own clock puts them. (2) Where the SM throughput counter steps up and down around each
              FMA kernel (its neighbours far lower), read from the partial samples at the edges, against
              the kernel's start and end in the trace. Against the GPU's clock the samples are then off
              by at most the median edge error plus the offset's spread. (PM samples are not stamped on
              %globaltimer: the offset is some hundred us, the shift cuprof applies to them tens.)
  coverage    the kernels at least two sampling intervals long that have no averages (at most 1 %): in the
              runs above, and at the default interval in GPU_CHECK_METRICS_RUNS runs of metrics_kernels
              and of a PyTorch loop of FP32 GEMMs (bench/run train-step, 4096 wide).
  size        bench/run train-step's trace with --gpu-metrics at most 1.5 times its trace without.
  verdicts    the examples matmul_add --size 4096 and mlp with --gpu-metrics: `cuprof insights`
              calls the GEMM compute-bound and the MLP's GeLU and mul memory-bound, from the counters.
  degrading   a metric CUPTI does not know: one line, the trace without metrics, exit status as plain.
  fixture     a trimmed trace of the kernels run, for the CPU tests (tests/data/gpu_metrics_h200.json.gz).
"""
import bisect
import collections
import csv
import gzip
import io
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys

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


FAMILIES = ("gemm", "gelu", "copy", "reduce", "transpose", "fma", "chase", "atomic")
TIMED = FAMILIES[1:]  # metrics_kernels' own kernels, each timing itself on %globaltimer
NCU_KERNELS = "regex:metrics_(" + "|".join(TIMED) + ")|gemm|sm90|cutlass|nvjet"
NCU_POINTS = 5  # how far cuprof's SM and DRAM throughput may lie from Nsight Compute's
FAR = 40  # points: a neighbour this far below the FMA's SM throughput makes an edge to read


def family(name):
    """Which of metrics_kernels' families a kernel name is; None for its setup kernel."""
    m = re.search(r"metrics_([a-z]+)", name)
    if m:
        return m.group(1) if m.group(1) in TIMED else None  # metrics_fill: the input, not measured
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


def kernel_events(ev, device=None):
    """The trace's kernels (on one GPU, or all), in time order."""
    ks = [e for e in ev if e.get("cat") == "kernel" and (device is None or e.get("pid") == device)]
    return sorted(ks, key=lambda e: e["ts"])


def globaltimer_placement(doc, timers, device=0):
    """The trace's kernels against the GPU's own clock, and the shift cuprof applied to the samples.

    Each timed launch (metrics_kernels --timer-out: its first block's start and last block's end on
    %globaltimer) is paired with its family's kernel in the trace of the same order; offset = the
    trace's start in epoch ns (ts * 1000 + baseTimeNanoseconds) - the globaltimer start. One offset for
    all (a small spread) means the trace's kernels lie where the GPU's clock puts them. The shift is
    the gpu_metrics block's "alignment" for the GPU (0 where not aligned)."""
    base = doc["baseTimeNanoseconds"]
    in_trace = collections.defaultdict(list)
    for e in kernel_events(doc["traceEvents"], device):
        f = family(e["name"])
        if f in TIMED:
            in_trace[f].append(e)
    timed = collections.defaultdict(list)
    for t in timers:
        timed[t["kernel"]].append(t)
    starts, ends, unpaired = [], [], {}
    for f, launches in sorted(timed.items()):
        launches.sort(key=lambda t: t["launch"])
        kernels = in_trace.get(f, [])
        if len(kernels) != len(launches):
            unpaired[f] = f"{len(launches)} launches timed, {len(kernels)} in the trace"
            continue
        for t, k in zip(launches, kernels):
            starts.append(base + round(k["ts"] * 1000) - t["gt_start"])
            ends.append(base + round((k["ts"] + k["dur"]) * 1000) - t["gt_end"])
    out = {"launches": len(starts), "unpaired": unpaired}
    if starts:
        out.update(offset_median_ns=statistics.median(starts), offset_spread_ns=max(starts) - min(starts),
                   end_offset_median_ns=statistics.median(ends))
    found = [a for a in doc.get("cuprof", {}).get("gpu_metrics", {}).get("alignment") or [] if a.get("device") == device]
    if not found:
        out["alignment"] = "missing"
        return out
    out["alignment"] = found[0]
    out["applied_shift_ns"] = found[0].get("shift_ns", 0) if found[0].get("aligned") else 0
    return out


def counter_track(ev, label, device=0):
    """One metric's counter events on one GPU as (ts list, value list) in time order; each value holds
    until the next event's ts (an unchanged value need not be written again)."""
    points = sorted((e["ts"], e["args"]["value"]) for e in ev
                    if e.get("ph") == "C" and e.get("cat") == "gpu_metric" and e.get("name") == label and e.get("pid") == device)
    return [p[0] for p in points], [p[1] for p in points]


def value_at(track, t):
    i = bisect.bisect_right(track[0], t) - 1
    return track[1][i] if i >= 0 else None


def level(track, a, b, step):
    """The median value over the middle half of [a, b], read every `step`: a kernel's or a gap's level
    away from its edges (and from a placement error up to a quarter of its length)."""
    q = (b - a) / 4
    values = [value_at(track, a + q + k * step) for k in range(int((b - a - 2 * q) // step) + 1)]
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def edge_time(track, a, b, lo, hi, rising, length):
    """Where in [a, b] the counter steps from one level to the other (us), or None.

    A sample of length L with value v, the fraction f = (v - lo) / (hi - lo) of the way from lo to hi,
    holds the edge f * L from its far side (the side in the high level). The first sample past half
    way, starting at c, is the partial one or the full one after it; integrating f over [c - L, c + L]
    counts the time spent high there whichever it is: a rising edge at c + L - that, a falling one at
    c - L + that."""
    ts, vs = track
    frac = lambda v: (v - lo) / (hi - lo)
    at_a = value_at(track, a)
    if at_a is None or (frac(at_a) >= 0.5) == rising:
        return None
    for i in range(bisect.bisect_right(ts, a), len(ts)):
        if ts[i] > b:
            return None
        if (frac(vs[i]) >= 0.5) == rising:
            c, high, t = ts[i], 0.0, ts[i] - length
            j = bisect.bisect_right(ts, t) - 1
            if j < 0:
                return None
            while t < c + length:  # value j holds over [t, the next event or the window's end)
                stop = min(ts[j + 1] if j + 1 < len(ts) else math.inf, c + length)
                high += (stop - t) * frac(vs[j])
                t, j = stop, j + 1
            return c + length - high if rising else c - length + high
    return None


def beside(kernels, i, side, length):
    """The stretch before or after kernel i: the kernel touching it (a gap under half a sample) or the
    idle gap (four samples or more); None when neither, or when shorter than four samples."""
    k = kernels[i]
    j = i - 1 if side == "start" else i + 1
    if not 0 <= j < len(kernels):
        return None
    o = kernels[j]
    gap = (o["ts"] + o["dur"], k["ts"]) if side == "start" else (k["ts"] + k["dur"], o["ts"])
    if gap[1] - gap[0] < length / 2:
        stretch = (o["ts"], o["ts"] + o["dur"])
    elif gap[1] - gap[0] >= 4 * length:
        stretch = gap
    else:
        return None
    return stretch if stretch[1] - stretch[0] >= 4 * length else None


def edge_placement(ev, interval_ns, gaps=(), device=0):
    """Per FMA kernel edge whose neighbour (kernel or idle gap) has SM throughput FAR points lower:
    the edge as the SM throughput samples show it minus the kernel's start or end in the trace (us).
    `gaps`: (start, end) in us of the GPU's stretches without samples (the gpu_metrics block's "gaps"),
    where a held value says nothing: an edge with one between its neighbour and its kernel is left out."""
    length = interval_ns / 1000
    track = counter_track(ev, SM, device)
    if not track[0]:
        return []
    kernels = [e for e in kernel_events(ev, device) if e.get("dur", 0) > 0]
    fma_runs = 0
    rows = []
    for i, k in enumerate(kernels):
        if family(k["name"]) != "fma":
            continue
        start, end = k["ts"], k["ts"] + k["dur"]
        hi = level(track, start, end, length)
        for side in ("start", "end"):
            stretch = beside(kernels, i, side, length)
            lo = level(track, *stretch, length) if stretch else None
            if hi is None or lo is None or hi - lo < FAR:
                continue
            span = (min(stretch[0], start), max(stretch[1], end))
            if any(a < span[1] and b > span[0] for a, b in gaps):
                continue
            middle, other = (start + end) / 2, sum(stretch) / 2
            if side == "start":
                edge = edge_time(track, other, middle, lo, hi, True, length)
            else:
                edge = edge_time(track, middle, other, lo, hi, False, length)
            if edge is not None:
                rows.append({"launch": fma_runs, "side": side, "lo": lo, "hi": hi,
                             "error_us": round(edge - (start if side == "start" else end), 2)})
        fma_runs += 1
    return rows


def coverage(ev, interval_ns):
    """The kernels at least two intervals long, those of them without averages, and how many ran before
    their GPU's first sample (left out: sampling starts some time after the context, and the program
    sets up before then by design)."""
    first = {}
    for e in ev:
        if e.get("ph") == "C" and e.get("cat") == "gpu_metric":
            first[e.get("pid")] = min(first.get(e.get("pid"), math.inf), e["ts"])
    long_kernels = [e for e in ev if e.get("cat") == "kernel" and e.get("dur", 0) * 1000 >= 2 * interval_ns]
    sampled = [e for e in long_kernels if e["ts"] >= first.get(e.get("pid"), math.inf)]
    without = [e for e in sampled if (e.get("args", {}).get("metric samples") or 0) < 1]
    return sampled, without, len(long_kernels) - len(sampled)


def placement_run(cli, prog, prog_args, work, run, i):
    """One back-to-back run every 100 us: its trace (or None) and where its samples lie, by the kernels'
    %globaltimer spans and the FMA kernels' edges (see the module's docstring)."""
    b2b_trace = os.path.join(work, f"back_to_back_{i}.json")
    timers = os.path.join(work, f"back_to_back_timers_{i}.jsonl")
    r = run([cli, "run", "--no-table", "--gpu-metrics", "--gpu-metrics-interval", "100us", "--output", b2b_trace, "--", prog,
             "--back-to-back", "--timer-out", timers] + prog_args, work, f"back_to_back_{i}")
    if r.returncode != 0 or not os.path.exists(b2b_trace) or not os.path.exists(timers):
        return None, {"ok": False, "said": f"exit {r.returncode}; {r.stderr.strip()[-300:]}"}
    with open(b2b_trace) as f:
        b2b = json.load(f)
    with open(timers) as f:
        spans = [json.loads(line) for line in f if line.strip()]
    block = b2b.get("cuprof", {}).get("gpu_metrics", {})
    interval_ns = block.get("interval_ns") or 100000
    by_clock = globaltimer_placement(b2b, spans)
    gaps = [(g["ts"], g["ts"] + g["dur"]) for g in block.get("gaps", []) if g.get("device") == 0]
    edges = edge_placement(b2b["traceEvents"], interval_ns, gaps)
    abs_errors = [abs(e["error_us"]) for e in edges]
    edge_error = statistics.median(abs_errors) if abs_errors else None
    out = {"interval_ns": interval_ns, "globaltimer": by_clock, "edges": edges, "gaps": len(gaps),
           "edges_median_abs_error_us": edge_error,
           "edges_median_error_us": statistics.median(e["error_us"] for e in edges) if edges else None}
    if "offset_median_ns" not in by_clock:
        said = f"globaltimer: no launch paired ({by_clock['unpaired']})"
    else:
        said = (f"globaltimer: clock offset median {by_clock['offset_median_ns'] / 1000:.1f} us, spread "
                f"{by_clock['offset_spread_ns'] / 1000:.1f} us over {by_clock['launches']} launches"
                + (f" (unpaired: {by_clock['unpaired']})" if by_clock["unpaired"] else ""))
        if by_clock["alignment"] == "missing":
            said += "; cuprof's shift: no \"alignment\" for GPU 0 in the gpu_metrics block"
        else:
            said += f"; cuprof's shift {by_clock['alignment']} (applied {by_clock['applied_shift_ns'] / 1000:.1f} us)"
    said += (f"; edges: median |error| {edge_error:.1f} us over {len(edges)} FMA edges, signed median "
             f"{out['edges_median_error_us']:.1f} us" if edges else "; edges: none to read")
    spread_us = by_clock["offset_spread_ns"] / 1000 if "offset_spread_ns" in by_clock else None
    bound_us = edge_error + spread_us if edge_error is not None and spread_us is not None else None
    out["error_vs_globaltimer_at_most_us"] = bound_us
    out["ok"] = spread_us is not None and spread_us <= 10 and bound_us is not None and bound_us <= interval_ns / 1000
    out["said"] = said + (f"; so at most {bound_us:.1f} us off the GPU's clock" if bound_us is not None else "")
    if i:
        os.remove(b2b_trace)
    return b2b, out


def metrics_checks(build, out, summary, check, run):
    work = os.path.join(out, "metrics")
    os.makedirs(work, exist_ok=True)
    cli = os.path.join(build, "tools", "cuprof")
    prog = os.path.join(build, "tests", "gpu", "metrics_kernels")
    result = summary.setdefault("metrics", {})

    # --- the eight families, traced with metrics, against ncu on the same binary ---------------
    # Sampling starts once the context is up and PM sampling is set up on it
    # (about half a second): the program idles that long before its kernels.
    prog_args = ["--reps", "5", "--idle-ms", "1000"]
    plain = run([prog] + prog_args, work, "kernels_plain")
    trace = os.path.join(work, "kernels.json")
    # Every 100 us rather than the default 200: the GEMMs (about 155 us each) get a sample or two.
    traced = run([cli, "run", "--no-table", "--gpu-metrics", "--gpu-metrics-interval", "100us", "--output", trace, "--", prog]
                 + prog_args, work,
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
          all(counters.get((0, label), 0) > 0 for label in (SM, DRAM, TENSOR)) and (0, OCC) not in counters,
          str(dict(counters)))
    ours = cuprof_per_kernel(ev)
    result["cuprof"] = ours
    # At 100 us: the GELU (740 us), the copy (540 us) and the others (about 2 ms) have 4
    # samples or more each (the median run: a run that falls in a stretch left unsampled has none,
    # and the trace counts those samples as dropped); the GEMMs (about 155 us each, 8 back to back)
    # one or two.
    result["dropped"] = block.get("dropped")
    check("metrics kernels: each of the eight families has its averages (all but the GEMM from 4 samples or more)",
          set(ours) == set(FAMILIES) and statistics.median(s or 0 for s in ours["gemm"]["samples"]) >= 1 and all(
              statistics.median(s or 0 for s in ours[f]["samples"]) >= 4 for f in TIMED),
          json.dumps({f: r["samples"] for f, r in ours.items()}) + f"; dropped {block.get('dropped')}")

    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    theirs = {}
    for clocks in ("none", "base"):
        r = run([ncu, "--clock-control", clocks, "--csv", "--metrics", ",".join(NCU_METRICS), "-k", NCU_KERNELS, prog,
                 "--reps", "2"], work, f"ncu_{clocks}", timeout=600)
        theirs[clocks] = ncu_per_kernel(r.stdout)
    result["ncu"] = theirs
    for f in FAMILIES:
        for label in (SM, DRAM):
            a = ours.get(f, {}).get(label)
            b = theirs["none"].get(f, {}).get(label)
            base = theirs["base"].get(f, {}).get(label)
            check(f"metrics {f}: cuprof's {label} within {NCU_POINTS} points of Nsight Compute's",
                  a is not None and b is not None and abs(a - b) <= NCU_POINTS,
                  f"cuprof {a}, ncu {b} (clock-control none), {base} (base clocks)")

    # --- where the samples lie: the families back to back, timed on the GPU's clock ------------
    # GPU_CHECK_METRICS_RUNS runs (10 by default): the first run's trace is kept for the coverage below.
    runs = int(os.environ.get("GPU_CHECK_METRICS_RUNS", "10"))
    b2b, placements = None, []
    for i in range(runs):
        doc_i, placement = placement_run(cli, prog, prog_args, work, run, i)
        if b2b is None:
            b2b = doc_i
        placements.append(placement)
    result["placement"] = placements
    bounds = [p.get("error_vs_globaltimer_at_most_us") for p in placements]
    interval_ns = next((p["interval_ns"] for p in placements if p.get("interval_ns")), 100000)
    check(f"metrics placement, {runs} runs: the samples within one interval ({interval_ns / 1000:g} us) of their kernels on "
          "the GPU's clock (kernels on %globaltimer within 10 us; the FMA kernels' edges in the counters)",
          placements and all(p.get("ok") for p in placements),
          f"at most {[None if x is None else round(x, 1) for x in bounds]} us off; first run: {placements[0].get('said') if placements else ''}")

    # --- coverage: the long kernels of both runs have their averages -----------------------------
    long_kernels, without, before = [], [], 0
    for d in (doc, b2b):
        if d:
            got = coverage(d["traceEvents"], d.get("cuprof", {}).get("gpu_metrics", {}).get("interval_ns") or 100000)
            long_kernels += got[0]
            without += got[1]
            before += got[2]
    share = 1 - len(without) / len(long_kernels) if long_kernels else 0
    notes = collections.Counter(e.get("args", {}).get("metric note") for e in without)
    result["coverage"] = {"long_kernels": len(long_kernels), "without": len(without), "share": round(share, 4),
                          "before_first_sample": before, "notes": dict(notes),
                          "first_without": [{"name": e["name"], "ts": e["ts"], "dur": e["dur"], "args": e.get("args")}
                                            for e in without[:5]]}
    check("metrics coverage: 99 % of the kernels two intervals long or longer have averages",
          share >= 0.99, f"{len(long_kernels) - len(without)} of {len(long_kernels)} ({before} before the first sample "
          f"left out); without: {len(without)}, " + json.dumps(result["coverage"]["first_without"])[:1500])

    # --- the fixture for the CPU tests ---------------------------------------------------------
    fixture = os.path.join(work, "gpu_metrics_h200.json.gz")
    result["fixture"] = trim_trace(trace, fixture) and os.path.getsize(fixture)

    # --- verdicts from the counters on the examples -------------------------------------------
    for label, example, args, wants in (
            # Its GEMM runs about 170 us: sampled every 20 us (a short run's samples fit the
            # hardware buffer while the decoding catches up), at the default 200 us it would get none of its own.
            ("matmul_add_4096", "matmul_add", ["--size", "4096", "--warmup", "--gpu-metrics-interval", "20"],
             [r"compute-bound|tensor-bound"]),
            ("mlp", "mlp", ["--batch", "64", "--seq", "2048", "--gpu-metrics-interval", "100"], [r"memory-bound"])):
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

    repeated_coverage(cli, work, result, check, run)


def coverage_of_trace(path):
    """(kernels two intervals long after the first sample, those without averages, kernels before it, gaps, size)."""
    with open(path) as f:
        doc = json.load(f)
    block = doc.get("cuprof", {}).get("gpu_metrics", {})
    sampled, without, before = coverage(doc["traceEvents"], block.get("interval_ns", 100000))
    return sampled, without, before, block.get("gaps", []), os.path.getsize(path)


def repeated_coverage(cli, work, result, check, run):
    """Every kernel two intervals long sampled, run after run, at the default interval: the metrics program
    and a PyTorch training loop of long GEMMs (GPU_CHECK_METRICS_RUNS runs each, 10 by default); and what
    the metrics add to a PyTorch loop's trace (bench/run train-step as the training-loop benchmark runs it)."""
    runs = int(os.environ.get("GPU_CHECK_METRICS_RUNS", "10"))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    bench = os.path.join(root, "bench", "run")
    prog = os.path.join(os.path.dirname(cli), "..", "tests", "gpu", "metrics_kernels")
    programs = {
        "metrics_kernels": [prog, "--reps", "5", "--idle-ms", "1000"],
        # 4096 x 4096 fp32 layers at batch 4096: GEMMs of about 1.5 ms, ReLUs and AdamW's kernels beside them.
        "torch_train_step": [sys.executable, bench, "train-step", "--layers", "4", "--width", "4096", "--batch", "4096",
                             "--warmup", "3", "--steps", "20"],
    }
    for name, argv in programs.items():
        per_run = []
        for i in range(runs):
            path = os.path.join(work, f"coverage_{name}_{i}.json")
            r = run([cli, "run", "--no-table", "--gpu-metrics", "--output", path, "--"] + argv, work, f"coverage_{name}_{i}",
                    timeout=600)
            if r.returncode != 0 or not os.path.exists(path):
                per_run.append({"exit": r.returncode, "error": r.stderr[-300:]})
                continue
            sampled, without, before, gaps, size = coverage_of_trace(path)
            per_run.append({"kernels": len(sampled), "without": len(without), "before_first_sample": before,
                            "gaps": [(round(g["ts"]), round(g["dur"]), g["cause"]) for g in gaps],
                            "notes": sorted({e["args"].get("metric note", "") for e in without})})
            if i:
                os.remove(path)  # the first run's trace is kept to look at
        result[f"coverage_{name}"] = per_run
        worst = min((1 - r["without"] / r["kernels"]) if r.get("kernels") else 0 for r in per_run) if per_run else 0
        check(f"metrics coverage, {runs} runs of {name}: 99 % of the kernels two intervals long or longer have averages in each",
              per_run and worst >= 0.99,
              f"worst run {100 * worst:.2f} %; " + json.dumps([{k: v for k, v in r.items() if k != 'notes'} for r in per_run])[:900])

    # The trace a short PyTorch loop writes with metrics, against the same loop's without.
    sizes = {}
    for mode, extra in (("plain", []), ("metrics", ["--gpu-metrics"])):
        path = os.path.join(work, f"train_step_{mode}.json")
        r = run([cli, "run", "--no-table"] + extra + ["--output", path, "--", sys.executable, bench, "train-step"], work,
                f"train_step_{mode}", timeout=600)
        sizes[mode] = os.path.getsize(path) if r.returncode == 0 and os.path.exists(path) else None
    result["train_step_trace_bytes"] = sizes
    ratio = sizes["metrics"] / sizes["plain"] if sizes.get("metrics") and sizes.get("plain") else None
    check("metrics: a PyTorch loop's trace with metrics at most 1.5x the trace without",
          ratio is not None and ratio <= 1.5,
          f"{sizes.get('metrics')} bytes with metrics, {sizes.get('plain')} without: x{ratio and round(ratio, 2)}")


def self_test():
    """The placement arithmetic on synthetic traces (python3 gpu_check_metrics.py): no GPU needed."""
    failures = []

    def expect(name, got, want, within=0.0):
        close = isinstance(want, (int, float)) and isinstance(got, (int, float)) and abs(got - want) <= within
        if not close and got != want:
            failures.append(f"{name}: got {got!r}, want {want!r}")

    expect("family of the chase", family("metrics_chase(unsigned int const*, unsigned int, int, unsigned int*, gt_span*, int)"),
           "chase")
    expect("family of the setup kernel", family("metrics_fill(float*, unsigned long)"), None)
    expect("family of cuBLAS's", family("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNN"), "gemm")

    # SM throughput of a GPU running an idle stretch, a chase (3 %), an FMA (95 %), a copy (6 %),
    # idle, a second FMA: sampled every 100 us from 13.7 us, each sample the time-weighted mean of
    # its span, the samples `late` us behind the kernels.
    length, late = 100.0, 30.0
    kernels = [("metrics_chase", 1000.0, 3000.0, 3.0), ("metrics_fma", 3000.0, 5123.4, 95.0),
               ("metrics_copy", 5123.4, 5700.0, 6.0), ("metrics_fma", 7000.0, 9000.0, 95.0)]

    def level_at(t):
        return next((v for _, a, b, v in kernels if a <= t < b), 0.0)

    def sample(t):
        marks = sorted({t, t + length} | {x for _, a, b, _ in kernels for x in (a, b) if t < x < t + length})
        return sum(level_at(p) * (q - p) for p, q in zip(marks, marks[1:])) / length

    events = [{"cat": "kernel", "name": n + "(...)", "pid": 0, "ts": a, "dur": b - a, "args": {}} for n, a, b, _ in kernels]
    for dedup in (False, True):
        counters, last = [], None
        for k in range(100):
            t = 13.7 + k * length
            v = round(sample(t - late), 2)
            if not (dedup and v == last):
                counters.append({"ph": "C", "cat": "gpu_metric", "name": SM, "pid": 0, "ts": t, "args": {"value": v}})
            last = v
        rows = edge_placement(events + counters, int(length * 1000))
        expect(f"edges read (dedup {dedup})", [(r["launch"], r["side"]) for r in rows],
               [(0, "start"), (0, "end"), (1, "start")])
        for r in rows:
            expect(f"edge {r['launch']} {r['side']} (dedup {dedup})", r["error_us"], late, 0.02)
    # A stretch without samples between the first FMA's end and the copy's: that edge is not read.
    expect("an edge beside a gap", [(r["launch"], r["side"]) for r in edge_placement(events + counters, 100000, [(5600.0, 5650.0)])],
           [(0, "start"), (1, "start")])
    # An edge on a sample's boundary: the first full sample is the crossing, no partial one.
    track = ([0.0, 100.0, 200.0, 300.0], [5.0, 5.0, 95.0, 95.0])
    expect("edge on a boundary", edge_time(track, 50.0, 350.0, 5.0, 95.0, True, 100.0), 200.0, 1e-9)
    expect("falling edge in a sample", edge_time(([0.0, 100.0, 200.0], [95.0, 72.5, 5.0]), 50.0, 250.0, 5.0, 95.0,
                                                 False, 100.0), 175.0, 1e-9)
    # A neighbour too close in level, or a gap neither touching nor idle long enough: no edge.
    expect("a gap of two samples", beside([{"ts": 0.0, "dur": 1000.0}, {"ts": 1200.0, "dur": 1000.0}], 1, "start", 100.0),
           None)

    # Offsets: the trace's starts are the globaltimer's plus 123.456 us, give or take 1 us.
    base = 1_700_000_000_000_000_000
    trace = {"baseTimeNanoseconds": base, "cuprof": {"gpu_metrics": {"interval_ns": 100000}}, "traceEvents": []}
    timers = []
    for i, (name, ts, jitter) in enumerate([("gelu", 1000.0, 0), ("reduce", 2000.5, 1000), ("gelu", 3000.25, -400),
                                            ("reduce", 4000.0, 200)]):
        trace["traceEvents"].append({"cat": "kernel", "name": f"metrics_{name}(...)", "pid": 0, "ts": ts, "dur": 500.0})
        gt = base + round(ts * 1000) - 123456 - jitter
        timers.append({"kernel": name, "launch": sum(t["kernel"] == name for t in timers), "gt_start": gt,
                       "gt_end": gt + 499000})
    timers.reverse()  # paired by launch order, whatever the file's
    got = globaltimer_placement(trace, timers)
    expect("offset median", got.get("offset_median_ns"), 123456 + 100)
    expect("offset spread", got.get("offset_spread_ns"), 1400)
    expect("end offset median", got.get("end_offset_median_ns"), 123456 + 100 + 1000)
    expect("alignment missing", got.get("alignment"), "missing")
    trace["cuprof"]["gpu_metrics"]["alignment"] = [{"device": 0, "shift_ns": 120000, "aligned": True}]
    expect("shift applied", globaltimer_placement(trace, timers).get("applied_shift_ns"), 120000)
    trace["cuprof"]["gpu_metrics"]["alignment"] = [{"device": 0, "shift_ns": 120000, "aligned": False}]
    expect("shift not applied", globaltimer_placement(trace, timers).get("applied_shift_ns"), 0)
    timers.append({"kernel": "fma", "launch": 0, "gt_start": 1, "gt_end": 2})
    expect("a launch the trace lacks", globaltimer_placement(trace, timers)["unpaired"],
           {"fma": "1 launches timed, 0 in the trace"})

    sampled, without, before = coverage([{"ph": "C", "cat": "gpu_metric", "pid": 0, "ts": 100.0},
                                         {"cat": "kernel", "pid": 0, "ts": 0.0, "dur": 300.0, "args": {"metric samples": 0}},
                                         {"cat": "kernel", "pid": 0, "ts": 400.0, "dur": 250.0, "args": {"metric samples": 2}},
                                         {"cat": "kernel", "pid": 0, "ts": 700.0, "dur": 200.0, "args": {"metric samples": 0}},
                                         {"cat": "kernel", "pid": 0, "ts": 950.0, "dur": 150.0, "args": {"metric samples": 0}}],
                                        100000)
    expect("coverage", (len(sampled), len(without), before), (2, 1, 1))
    for f in failures:
        print("FAIL", f)
    print(f"gpu_check_metrics self-test: {'ok' if not failures else f'{len(failures)} failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(self_test())
