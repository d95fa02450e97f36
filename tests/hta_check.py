#!/usr/bin/env python3
"""HolisticTraceAnalysis (HTA) on cuprof traces: each analysis runs, and its numbers agree with the
trace and with cuprof's own table.

Usage (scripts/test-hta runs it inside a virtual environment with HTA installed, once with pandas 2
and once with pandas 3):
  python tests/hta_check.py --cuprof build/tools/cuprof [--gpu TRACE ...] [--cpu TRACE ...] [--made TRACE ...]
                            [--hta-int8-bug TRACE ...]

--gpu traces must contain GPU activity (the fixtures recorded on an H200); --cpu traces are ones
written on a machine without a GPU, where HTA's documented behaviour applies (temporal breakdown and
idle time need at least one GPU event and raise; the other analyses return empty results); --made
traces are sorted into one or the other by their content. --hta-int8-bug traces are GPU traces that set
off HTA 0.6.1's bug under pandas 3: every correlation id fits int8 and a CPU call or GPU record linked by
one sits beyond row 127, so HTA's index column (int8, the correlation column's dtype) cannot hold its row
number and pandas 3 raises TypeError("Invalid value ... for dtype 'int8'") in
transform_correlation_to_index (pandas 2 upcasts, with a FutureWarning). Under pandas 3 such a trace
must fail to load with exactly that error (one check; loading, or failing otherwise, fails it); under
pandas 2 it is checked as a --gpu trace, and its load must meet that FutureWarning.

Each trace is copied alone into a temporary directory (HTA loads every trace in a directory) and
loaded with HTA_DISABLE_NS_ROUNDING=1 and include_last_profiler_step=True (HTA otherwise drops the
last ProfilerStep's kernels, and cuprof's table counts them). Analyses run with visualize=False:

  load              HTA's per-name CPU time and call counts == the table's CPU total and # of Calls
  temporal          idle + compute + non-compute == the GPU span; compute + non-compute == the
                    union of GPU intervals (== Self CUDA time total when nothing overlaps)
  kernel breakdown  per kernel/memcpy/memset name: sum, count, min, max == the table's Self CUDA,
                    # of Calls, CUDA min, CUDA max
  idle time         per stream and category == the gaps between GPU events recomputed from the trace
  launch stats      per correlation: cpu_duration, gpu_duration, launch_delay == the trace's calls
                    and GPU events; per call name the sum == the table's CPU total
  queue length      per stream: count, max, mean and final value == a recount from the trace
  critical path     where Stream Wait Event records carry wait_on_* args: HTA's critical path over
                    one step finds a path, and its graph has a sync-dependency edge from a kernel on
                    the waited-on stream to one on the waiting stream (and, where Event Sync records
                    carry them, from a kernel to a cudaEventSynchronize); skipped otherwise

Prints one PASS/FAIL line per (trace, analysis), details indented below it, and a final
'hta_check: N passed, M failed' line; exits 1 if any failed.
"""
import argparse
import gzip
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
import warnings
from collections import defaultdict

from trace_schema import (API_CATS, ARG_CORRELATION, ARG_STREAM, ARG_WAIT_ON_RECORD_CORRELATION, ARG_WAIT_ON_STREAM, CAT_CPU_OP,
                          CAT_CUDA_SYNC, CAT_GPU_MEMCPY, CAT_GPU_MEMSET, CAT_KERNEL, CAT_TORCH_TRACE, CAT_USER_ANNOTATION,
                          GPU_WORK_CATS, KEY_TRACE_EVENTS, SCOPE_CATS)

os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"  # before hta is imported: it reads this at parse time

CPU_CATS = {CAT_CPU_OP, CAT_USER_ANNOTATION} | API_CATS
# The calls HTA's launch statistics look at (analyzers/cuda_kernel_analysis.py): runtime API only.
HTA_LAUNCH_STATS_NAMES = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync"}
# The calls HTA's queue length counts (common/trace_symbol_table.py, get_runtime_launch_events_mask).
HTA_QUEUE_NAMES = HTA_LAUNCH_STATS_NAMES | {"cuLaunchKernel", "cuLaunchKernelEx"}
DRIVER_LAUNCH_NAMES = {"cuLaunchKernel", "cuLaunchKernelEx"}
# HTA's kernel types (common/types.py, by name: Memcpy/Memset, *Sync, nccl...) in cuprof's categories.
TYPE_CATS = {"COMPUTATION": {CAT_KERNEL}, "MEMORY": {CAT_GPU_MEMCPY, CAT_GPU_MEMSET}, "OTHER": {CAT_CUDA_SYNC}}
KERNEL_WAIT_US = 30  # HTA's default consecutive_kernel_delay, compared against gaps in the trace's unit (us)
EPS = 1e-6  # us: float noise on sums of microsecond values with 3 decimals
NAME_CUT = 55  # the table's name column (table_options::max_name_column_width)
# HTA 0.6.1 under pandas 3 (hta/common/trace.py, transform_correlation_to_index): the index column takes the
# correlation column's dtype, int8 when every id fits, and pandas 3 refuses a row number above 127 in it.
HTA_TRACE_PY = os.path.join("hta", "common", "trace.py")
INT8_BUG_FRAME = "transform_correlation_to_index"
INT8_BUG_RE = re.compile(r"^Invalid value .* for dtype 'int8'$", re.S)
INT8_MAX = 127


def pandas_major():
    import pandas
    return int(pandas.__version__.split(".")[0])


def is_hta_int8_bug(exc):
    """exc is HTA's int8 index failure: TypeError, pandas' message for int8, raised under
    transform_correlation_to_index in hta/common/trace.py."""
    return (type(exc) is TypeError and INT8_BUG_RE.match(str(exc)) is not None
            and any(f.name == INT8_BUG_FRAME and f.filename.endswith(HTA_TRACE_PY)
                    for f in traceback.extract_tb(exc.__traceback__)))


def int8_bug_rows(obj):
    """(the largest correlation id, the rows above 127 that a correlation id links), as HTA sees them: it
    numbers every event of traceEvents in order, and links a CPU event and a GPU one (stream 0 or more, or
    an Event Sync or Context Sync: hta/common/trace_filter.py) that share a correlation id other than -1."""
    cpu, gpu, ids = defaultdict(list), defaultdict(list), [-1]
    for row, e in enumerate(obj[KEY_TRACE_EVENTS]):
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        corr = args.get(ARG_CORRELATION)
        if not isinstance(corr, int) or corr == -1:
            continue
        ids.append(corr)
        on_gpu = args.get(ARG_STREAM, -1) >= 0 and corr >= 0 or e.get("name") in ("Event Sync", "Context Sync")
        (gpu if on_gpu else cpu)[corr].append(row)
    linked = sorted(row for corr in cpu.keys() & gpu.keys() for row in cpu[corr] + gpu[corr] if row > INT8_MAX)
    return max(ids), linked


# --------------------------------------------------------------------------- the trace itself
def load_json(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


class Reference:
    """What the analyses should find, computed from the trace's JSON without HTA."""

    def __init__(self, obj):
        events = [e for e in obj[KEY_TRACE_EVENTS] if e.get("ph") == "X" and e.get("cat") != CAT_TORCH_TRACE]
        self.x_events = events
        self.gpu = []   # HTA's notion of GPU: any event with args.stream != -1
        self.cpu = []
        for e in events:
            stream = e.get("args", {}).get(ARG_STREAM, -1)
            (self.gpu if stream != -1 else self.cpu).append(e)
        self.work = [e for e in self.gpu if e["cat"] in GPU_WORK_CATS]
        self.cpu_by_corr = {}
        for e in self.cpu:
            corr = e.get("args", {}).get(ARG_CORRELATION)
            if corr is not None and e["cat"] in API_CATS:
                self.cpu_by_corr[corr] = e
        self.annotation_names = {e["name"] for e in events if e["cat"] in SCOPE_CATS}

    @staticmethod
    def end(e):
        return e["ts"] + e["dur"]

    @staticmethod
    def union(events):
        """Length of the union of [ts, ts+dur) intervals, and their count after merging."""
        total, merged, cur_s, cur_e = 0.0, 0, None, None
        for e in sorted(events, key=lambda e: e["ts"]):
            s, t = e["ts"], e["ts"] + e["dur"]
            if cur_e is None or s > cur_e:
                if cur_e is not None:
                    total += cur_e - cur_s
                    merged += 1
                cur_s, cur_e = s, t
            else:
                cur_e = max(cur_e, t)
        if cur_e is not None:
            total += cur_e - cur_s
            merged += 1
        return total, merged

    def overlapping(self):
        busy, _ = self.union(self.gpu)
        return abs(busy - sum(e["dur"] for e in self.gpu)) > EPS * max(1, len(self.gpu))


# --------------------------------------------------------------------------- cuprof's table
UNIT = {"us": 1.0, "ms": 1e3, "s": 1e6}


def parse_time(cell):
    """'499.360us' -> (499.36, tolerance in us): the table prints 3 decimals of its unit."""
    m = re.fullmatch(r"(-?[\d.]+)(us|ms|s)", cell)
    if not m:
        raise ValueError(f"not a time: {cell!r}")
    scale = UNIT[m.group(2)]
    return float(m.group(1)) * scale, 0.0005 * scale + EPS


class Table:
    """`cuprof table TRACE --rows -1 --sort none --stats`, parsed by its column widths."""

    def __init__(self, cli, trace):
        out = subprocess.run([cli, "table", trace, "--rows", "-1", "--sort", "none", "--stats"],
                             check=True, capture_output=True, text=True).stdout
        self.text = out
        lines = out.splitlines()
        sep = next(i for i, l in enumerate(lines) if l.startswith("---"))
        widths = [len(d) for d in lines[sep].split("  ") if d]
        bounds, pos = [], 0
        for w in widths:
            bounds.append((pos, pos + w))
            pos += w + 2
        cut = lambda line: [line[a:b].strip() for a, b in bounds]
        # Header cells may overflow their column ("CUDA time avg" is 13 wide): split on the gaps.
        self.headers = re.split(r"\s{2,}", lines[sep + 1].strip())
        self.rows = []
        for line in lines[sep + 3:]:
            if line.startswith("---"):
                break
            self.rows.append(dict(zip(self.headers, cut(line))))
        self.totals = {}
        for line in lines:
            m = re.match(r"Self (CPU|CUDA) time total: (\S+)", line)
            if m:
                self.totals[m.group(1)] = parse_time(m.group(2))
        self.has_cuda = "Self CUDA" in self.headers

    @staticmethod
    def shown(name):
        """A name as the table prints it (cut to 52 characters and '...')."""
        return name[:NAME_CUT - 3] + "..." if len(name) >= NAME_CUT - 3 else name

    def find(self, name, pred=lambda r: True):
        rows = [r for r in self.rows if r["Name"] == self.shown(name) and pred(r)]
        return rows

    def time(self, row, col):
        return parse_time(row[col])


# --------------------------------------------------------------------------- checking
class Check:
    def __init__(self):
        self.problems, self.details = [], []

    def equal(self, what, got, want, tol=EPS):
        ok = got is not None and want is not None and abs(got - want) <= tol
        if not ok:
            self.problems.append(f"{what}: HTA {fmt(got)} != expected {fmt(want)} (tolerance {tol:g})")
        return ok

    def true(self, what, cond):
        if not cond:
            self.problems.append(what)
        return cond

    def note(self, text):
        self.details.append(text)


def fmt(v):
    if v is None:
        return "None"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


class Runner:
    def __init__(self):
        self.passed = self.failed = 0

    def run(self, label, analysis, fn):
        check = Check()
        try:
            summary = fn(check)
        except Exception as exc:  # an analysis that throws is a failure, with its traceback
            check.problems.append(f"raised {type(exc).__name__}: {exc}")
            check.details.extend(traceback.format_exc().rstrip().splitlines()[-6:])
            if is_hta_int8_bug(exc):
                check.details.append("HTA 0.6.1's int8 index bug under pandas 3 (docs/interop.md: pandas below 3 "
                                     "for HTA); a trace that is meant to set it off goes to --hta-int8-bug")
            summary = ""
        ok = not check.problems
        self.passed += ok
        self.failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} {label}: {analysis}" + (f": {summary}" if summary else ""))
        for p in check.problems:
            print(f"    problem: {p}")
        for d in check.details:
            print(f"    {d}")
        sys.stdout.flush()


def sym(ta):
    return ta.t.symbol_table.get_sym_table()


def hta_df(ta):
    """HTA's rank-0 dataframe with the name and cat ids replaced by strings."""
    df = ta.t.get_trace(0).copy()
    table = sym(ta)
    df["name_s"] = df["name"].map(lambda i: table[i])
    df["cat_s"] = df["cat"].map(lambda i: table[i])
    return df


# --------------------------------------------------------------------------- the analyses
def check_load(ta, ref, table, c):
    df = hta_df(ta)
    c.equal("X events loaded", len(df), len(ref.x_events), 0)
    steps = sorted(int(m.group(1)) for e in ref.cpu if (m := re.fullmatch(r"ProfilerStep#(\d+)", e["name"])))
    c.true(f"profiler steps {list(ta.get_profiler_steps())} != the trace's {steps}",
           [int(s) for s in ta.get_profiler_steps()] == steps)
    cpu = df[df["stream"].eq(-1) & df["cat_s"].isin(CPU_CATS)]
    compared = 0
    per_name = defaultdict(lambda: [0.0, 0])  # keyed by the name as the table prints it
    for name, dur in zip(cpu["name_s"], cpu["dur"]):
        key = "ProfilerStep*" if re.fullmatch(r"ProfilerStep#\d+", name) else table.shown(name)
        per_name[key][0] += dur
        per_name[key][1] += 1
    compared = 0
    for name, (total, count) in sorted(per_name.items()):
        rows = [r for r in table.rows if r["Name"] == name and parse_time(r["CPU total"])[0] > 0]
        if not c.true(f"no single CPU row for {name!r} in the table", len(rows) == 1):
            continue
        want, tol = table.time(rows[0], "CPU total")
        c.equal(f"{name}: CPU total", total, want, tol + EPS * count)
        c.equal(f"{name}: calls", count, int(rows[0]["# of Calls"]), 0)
        compared += 1
    return f"{len(df)} events, steps {steps}, CPU time of {compared} names == the table's CPU total and calls"


def check_temporal(ta, ref, table, c):
    if not ref.gpu:
        try:
            ta.get_temporal_breakdown(visualize=False)
        except IndexError:
            return "no GPU events: raises IndexError, as documented (HTA needs at least one GPU event)"
        c.problems.append("a trace without GPU events should raise IndexError (HTA's documented behaviour)")
        return ""
    df = ta.get_temporal_breakdown(visualize=False)
    r = df.iloc[0]
    idle, comp, non, span = (float(r[k]) for k in ("idle_time(us)", "compute_time(us)", "non_compute_time(us)",
                                                    "kernel_time(us)"))
    ref_span = max(ref.end(e) for e in ref.gpu) - min(e["ts"] for e in ref.gpu)
    busy, _ = ref.union(ref.gpu)
    compute, _ = ref.union([e for e in ref.gpu if e["cat"] == CAT_KERNEL])  # HTA: not memory, sync or comm
    c.equal("kernel_time == GPU span (first GPU start to last GPU end)", span, ref_span)
    c.equal("idle + compute + non-compute == GPU span", idle + comp + non, ref_span)
    c.equal("compute + non-compute == union of GPU intervals", comp + non, busy)
    c.equal("compute == union of kernel intervals", comp, compute)
    extra = ""
    if table.has_cuda and not ref.overlapping() and all(e["cat"] in GPU_WORK_CATS for e in ref.gpu):
        want, tol = table.totals["CUDA"]
        c.equal("compute + non-compute == table's Self CUDA time total", comp + non, want, tol)
        extra = f" == table Self CUDA time total {want:.3f}us"
    return (f"span {span:.3f}us = idle {idle:.3f} + compute {comp:.3f} + non-compute {non:.3f}; "
            f"busy {comp + non:.3f}us{extra}")


def check_kernels(ta, ref, table, c):
    types, kernels = ta.get_gpu_kernel_breakdown(visualize=False, num_kernels=100000, duration_ratio=1.0,
                                                 include_memory_kernels=True)
    if not ref.gpu:
        c.true("kernel breakdown of a trace without GPU events should be empty", len(types) == 0 and len(kernels) == 0)
        c.true("the table of a CPU-only trace has no CUDA columns", not table.has_cuda)
        return "no GPU events: both frames empty, and the table has no CUDA columns"
    by_name = defaultdict(list)
    for e in ref.work:  # HTA breaks down compute, communication and memory kernels, not syncs
        by_name[e["name"]].append(e["dur"])
    c.equal("kernel names", len(kernels), len(by_name), 0)
    for _, k in kernels.iterrows():
        name = k["name"]
        durs = by_name.get(name)
        if not c.true(f"HTA kernel {name!r} not in the trace", durs is not None):
            continue
        total, count = float(k["sum (us)"]), round(float(k["sum (us)"]) / float(k["mean (us)"])) if k["mean (us)"] else 0
        c.equal(f"{name}: sum == trace", total, sum(durs), EPS * len(durs))
        c.equal(f"{name}: max == trace", float(k["max (us)"]), max(durs))
        c.equal(f"{name}: min == trace", float(k["min (us)"]), min(durs))
        if name in ref.annotation_names or not all(e["cat"] in GPU_WORK_CATS for e in ref.gpu if e["name"] == name):
            continue  # a cuda_sync event, or a name the table also uses for a scope
        rows = table.find(name, lambda r: parse_time(r["CPU total"])[0] == 0 and parse_time(r["Self CUDA"])[0] > 0)
        if not c.true(f"no table row for kernel {name!r}", len(rows) == 1):
            continue
        row = rows[0]
        want, tol = table.time(row, "Self CUDA")
        c.equal(f"{name}: sum == table Self CUDA", total, want, tol)
        c.equal(f"{name}: calls == table # of Calls", count, int(row["# of Calls"]), 0)
        for hta_col, table_col in (("max (us)", "CUDA max"), ("min (us)", "CUDA min")):
            want, tol = table.time(row, table_col)
            c.equal(f"{name}: {hta_col} == table {table_col}", float(k[hta_col]), want, tol)
        c.note(f"{table.shown(name):<55} {total:10.3f}us x{count:<4} table {row['Self CUDA']:>12} x{row['# of Calls']}")
    # Per kernel type HTA truncates each merged interval to whole microseconds (astype(int)).
    for _, t in types.iterrows():
        kind = t["kernel_type"]
        cats = TYPE_CATS.get(kind, set())
        members = [e for e in ref.gpu if e["cat"] in cats]
        exact, intervals = ref.union(members)
        c.true(f"kernel type {kind}: HTA {t['sum']} vs exact {exact:.3f}us is more than the whole-us truncation of "
               f"{intervals} intervals", exact - intervals - EPS <= float(t["sum"]) <= exact + EPS)
        c.note(f"type {kind}: {t['sum']}us (HTA truncates each of {intervals} merged intervals to whole us; "
               f"exact {exact:.3f}us)")
    return f"{len(kernels)} name(s): sum, calls, min, max == trace and table"


def idle_reference(ref):
    """HTA's idle time breakdown (breakdown_analysis._analyze_idle_time_for_stream), from the trace."""
    out = defaultdict(float)
    streams = defaultdict(list)
    for e in ref.work:
        streams[e["args"][ARG_STREAM]].append(e)
    for stream, evs in streams.items():
        evs.sort(key=lambda e: e["ts"])
        for prev, cur in zip(evs, evs[1:]):
            prev_end = ref.end(prev)
            gap = cur["ts"] - prev_end
            call = ref.cpu_by_corr.get(cur["args"].get(ARG_CORRELATION))
            if call is not None and call["ts"] > prev_end:
                cat = "host_wait"
            elif gap < KERNEL_WAIT_US:
                cat = "kernel_wait"
            else:
                cat = "other"
            out[(stream, cat)] += gap
    return out, streams


def check_idle(ta, ref, table, c):
    if not ref.work:
        try:
            ta.get_idle_time_breakdown(visualize=False)
        except ValueError:
            return "no GPU events: raises ValueError (no streams to break down), as for any trace without kernels"
        c.problems.append("a trace without GPU events should raise ValueError")
        return ""
    df, _ = ta.get_idle_time_breakdown(visualize=False, show_idle_interval_stats=True)
    want, streams = idle_reference(ref)
    got = defaultdict(float)
    for _, r in df.iterrows():
        got[(int(r["stream"]), r["idle_category"])] += float(r["idle_time"])
    for key in sorted(set(want) | set(got)):
        c.equal(f"stream {key[0]} {key[1]}", got.get(key, 0.0), want.get(key, 0.0), 0.005 + EPS)  # HTA rounds to 0.01
    parts = []
    for stream, evs in sorted(streams.items()):
        idle = sum(v for (s, _), v in want.items() if s == stream)
        busy = sum(e["dur"] for e in evs)
        span = max(ref.end(e) for e in evs) - evs[0]["ts"]
        hta_idle = sum(v for (s, _), v in got.items() if s == stream)
        c.equal(f"stream {stream}: idle + busy == stream span", hta_idle + busy, span, 0.005 * 3 + EPS)
        cats = ", ".join(f"{cat} {got.get((stream, cat), 0.0):.2f}" for cat in ("host_wait", "kernel_wait", "other"))
        parts.append(f"stream {stream}: idle {hta_idle:.2f}us ({cats}) + busy {busy:.3f}us == span {span:.3f}us")
    if len(streams) == 1 and len(ref.gpu) == len(ref.work):
        temporal = ta.get_temporal_breakdown(visualize=False).iloc[0]["idle_time(us)"]
        c.equal("one stream: idle == temporal breakdown's idle", sum(got.values()), float(temporal), 0.015 + EPS)
    return "; ".join(parts)


def check_launch(ta, ref, table, c):
    res = ta.get_cuda_kernel_launch_stats(visualize=False)
    df = res[0]
    pairs = []
    for g in ref.gpu:
        call = ref.cpu_by_corr.get(g["args"].get(ARG_CORRELATION))
        if call is not None and call["name"] in HTA_LAUNCH_STATS_NAMES:
            pairs.append((call, g))
    driver = sum(1 for e in ref.cpu if e["name"] in DRIVER_LAUNCH_NAMES)
    if not ref.gpu:
        c.true("launch stats of a trace without GPU events should be empty", len(df) == 0)
        return f"no GPU events: empty ({len(ref.cpu_by_corr)} CUDA calls in the trace)"
    c.equal("rows", len(df), len(pairs), 0)
    want = {g["args"][ARG_CORRELATION]: (call, g) for call, g in pairs}
    per_name = defaultdict(lambda: [0.0, 0])
    for _, r in df.iterrows():
        corr = int(r["correlation"])
        if not c.true(f"correlation {corr} not a runtime launch in the trace", corr in want):
            continue
        call, g = want[corr]
        c.equal(f"{corr} cpu_duration == {call['name']} dur", float(r["cpu_duration"]), call["dur"])
        c.equal(f"{corr} gpu_duration == GPU event dur", float(r["gpu_duration"]), g["dur"])
        c.equal(f"{corr} launch_delay", float(r["launch_delay"]), max(0.0, g["ts"] - ref.end(call)), 10 * EPS)
        per_name[call["name"]][0] += float(r["cpu_duration"])
        per_name[call["name"]][1] += 1
    for name, (total, count) in sorted(per_name.items()):
        rows = table.find(name)
        if not c.true(f"no table row for {name}", len(rows) == 1):
            continue
        if int(rows[0]["# of Calls"]) == count:  # every call of this name launched GPU work
            # CPU total, not Self CPU: CUPTI's own work inside a call (an activity buffer
            # requested) is a child of it in the table, as in torch's.
            want_total, tol = table.time(rows[0], "CPU total")
            c.equal(f"{name}: sum of cpu_duration == table CPU total", total, want_total, tol + EPS * count)
            c.note(f"{name}: {count} calls, cpu_duration sum {total:.3f}us == table CPU total {rows[0]['CPU total']}")
        else:
            c.note(f"{name}: {count} of {rows[0]['# of Calls']} calls launched GPU work; not compared with the table")
    if driver:
        c.note(f"{driver} driver-API launches (cuLaunchKernel/cuLaunchKernelEx, as cuBLAS on Hopper) are not in "
               "HTA's launch statistics: HTA looks at runtime-API calls only, for torch traces as well")
    return f"{len(df)} launches: cpu_duration, gpu_duration, launch_delay == trace"


def check_queue(ta, ref, table, c):
    summary = ta.get_queue_length_summary()
    series = ta.get_queue_length_time_series()
    calls = [e for e in ref.cpu if e["name"] in HTA_QUEUE_NAMES]
    if not ref.gpu:
        c.true("queue length of a trace without GPU events should be None/empty", summary is None and not series)
        return f"no GPU events: no queue ({len(calls)} launch calls)"
    gpu_by_corr = defaultdict(list)
    for g in ref.gpu:
        gpu_by_corr[g["args"].get(ARG_CORRELATION)].append(g)
    points = defaultdict(list)  # stream -> [(ts, +1/-1)]
    for call in calls:
        gs = gpu_by_corr.get(call["args"].get(ARG_CORRELATION), [])
        c.true(f"{call['name']} correlation {call['args'].get(ARG_CORRELATION)} has {len(gs)} GPU events, "
               "HTA asserts exactly one", len(gs) == 1)
        for g in gs:
            points[g["args"][ARG_STREAM]].append((call["ts"], 1))
            points[g["args"][ARG_STREAM]].append((g["ts"], -1))
    ts_df = series[0]
    parts = []
    for stream, pts in sorted(points.items()):
        pts.sort()
        values, q = [], 0
        for _, d in pts:
            q += d
            values.append(q)
        got = ts_df[ts_df["stream"] == stream]["queue_length"].tolist()
        c.equal(f"stream {stream}: points", len(got), len(values), 0)
        c.true(f"stream {stream}: series {got} != recount {values}", got == values)
        row = summary.loc[(0, stream)]
        c.equal(f"stream {stream}: summary max", float(row[("queue_length", "max")]), float(max(values)))
        c.equal(f"stream {stream}: summary mean", float(row[("queue_length", "mean")]), sum(values) / len(values), 1e-9)
        c.equal(f"stream {stream}: final queue length", got[-1] if got else None, 0, 0)
        parts.append(f"stream {stream}: {len(values) // 2} launches, max {max(values)}, mean "
                     f"{sum(values) / len(values):.2f}, ends at 0")
    return "; ".join(parts)


def resolved_waits(ref, name):
    """The trace's cuda_sync records of `name` whose wait_on_* args name a stream and a record call."""
    return [e for e in ref.x_events
            if e.get("cat") == CAT_CUDA_SYNC and e["name"] == name and e.get("args", {}).get(ARG_WAIT_ON_STREAM, -1) >= 0
            and e["args"].get(ARG_WAIT_ON_RECORD_CORRELATION, -1) >= 0]


def check_critical_path(ta, ref, table, c):
    waits = resolved_waits(ref, "Stream Wait Event")
    if not waits:
        return "skipped: no Stream Wait Event with wait_on_* args"
    from hta.analyzers.critical_path_analysis import CPEdgeType
    steps = [e for e in ref.cpu if re.fullmatch(r"ProfilerStep#\d+", e["name"])]
    # One step, not the first (HTA's advice: it often misses events); the whole trace without steps.
    annotation, instance = ("ProfilerStep", 1 if len(steps) > 1 else 0) if steps else ("", None)
    result = ta.critical_path_analysis(rank=0, annotation=annotation, instance_id=instance)
    if not c.true("critical_path_analysis returned nothing", result is not None):
        return ""
    graph, ok = result
    c.true("no critical path found", ok and len(graph.critical_path_nodes) >= 2)
    df = hta_df(ta)
    if "index" in df.columns:
        df = df.set_index("index", drop=False)
    waited = {(e["args"][ARG_WAIT_ON_STREAM], e["args"][ARG_STREAM]) for e in waits}
    gpu_gpu = gpu_cpu = 0
    for _, _, data in graph.edges(data=True):
        e = data["object"]
        if e.type != CPEdgeType.SYNC_DEPENDENCY:
            continue
        src, dst = df.loc[graph.node_list[e.begin].ev_idx], df.loc[graph.node_list[e.end].ev_idx]
        if src["stream"] != -1 and dst["stream"] != -1 and (src["stream"], dst["stream"]) in waited:
            gpu_gpu += 1
        elif src["stream"] != -1 and dst["stream"] == -1 and dst["name_s"] == "cudaEventSynchronize":
            gpu_cpu += 1
    c.true(f"no sync-dependency edge from a kernel on a waited-on stream to one on its waiting stream {sorted(waited)}",
           gpu_gpu > 0)
    event_syncs = resolved_waits(ref, "Event Sync")
    if event_syncs:
        c.true("no sync-dependency edge from a kernel to a cudaEventSynchronize", gpu_cpu > 0)
    on_path = sum(1 for e in graph.critical_path_edges_set if e.type == CPEdgeType.SYNC_DEPENDENCY)
    return (f"{annotation or 'whole trace'}[{instance}]: {len(graph.critical_path_nodes)} nodes on the path, "
            f"{gpu_gpu} GPU->GPU sync edges through {len(waits)} waits, {gpu_cpu} GPU->CPU event-sync edges "
            f"({len(event_syncs)} Event Syncs), {on_path} sync edges on the path")


ANALYSES = [("load", check_load), ("temporal breakdown", check_temporal), ("kernel breakdown", check_kernels),
            ("idle time", check_idle), ("CUDA kernel launch statistics", check_launch), ("queue length", check_queue),
            ("critical path", check_critical_path)]


def int8_bug_premise(obj, c):
    """That the trace sets HTA's int8 index bug off: every correlation id fits int8, and rows above 127 are
    linked. Returns a few words on it."""
    top, linked = int8_bug_rows(obj)
    c.true(f"correlation ids up to {top}: HTA's correlation column is not int8, so the trace cannot set off "
           "HTA's int8 index bug", top <= INT8_MAX)
    c.true(f"no linked row above {INT8_MAX} (of {len(obj[KEY_TRACE_EVENTS])} events): the trace cannot set off "
           "HTA's int8 index bug", len(linked) > 0)
    return (f"correlation ids up to {top} (int8), {len(linked)} linked rows above {INT8_MAX} "
            f"(of {len(obj[KEY_TRACE_EVENTS])} events)")


def check_int8_bug(runner, label, obj, d):
    """Under pandas 3: HTA 0.6.1 must fail to load the trace with its int8 index bug, and only so."""
    from hta.trace_analysis import TraceAnalysis
    import pandas

    def expect_failure(c):
        premise = int8_bug_premise(obj, c)
        try:
            TraceAnalysis(trace_dir=d, include_last_profiler_step=True)
        except Exception as exc:  # noqa: BLE001 - the failure is what is checked
            if is_hta_int8_bug(exc):
                message = str(exc).replace("\n", " ")
                return (f"{premise}: TypeError in {INT8_BUG_FRAME} ({HTA_TRACE_PY}): "
                        f"{message[:40]}...{message[-25:]}")
            c.problems.append(f"raised {type(exc).__name__}: {str(exc)[:300]}: not HTA's int8 index bug "
                              f"(TypeError \"Invalid value ... for dtype 'int8'\" in {INT8_BUG_FRAME})")
            c.details.extend(traceback.format_exc().rstrip().splitlines()[-12:])
            return ""
        c.problems.append(f"HTA loaded it under pandas {pandas.__version__}: its int8 index bug did not show (a "
                          "fixed HTA?). Check the trace with --gpu, and say so in docs/interop.md")
        return ""

    runner.run(label, f"load fails with HTA's int8 index bug under pandas {pandas.__version__}", expect_failure)


def check_trace(runner, path, cli, want_gpu, int8_bug=False):
    from hta.trace_analysis import TraceAnalysis

    label = os.path.basename(path)
    obj = load_json(path)
    ref = Reference(obj)
    with tempfile.TemporaryDirectory(prefix="cuprof-hta-") as d:
        shutil.copy(path, os.path.join(d, os.path.basename(path)))
        if int8_bug and pandas_major() >= 3:
            check_int8_bug(runner, label, obj, d)
            return
        table = Table(cli, path)
        holder = {}

        def load(c):
            if want_gpu:
                c.true("a --gpu trace must contain GPU events", len(ref.work) > 0)
            else:
                c.true("a --cpu trace must not contain GPU events", len(ref.gpu) == 0)
            if not int8_bug:
                holder["ta"] = TraceAnalysis(trace_dir=d, include_last_profiler_step=True)
                return check_load(holder["ta"], ref, table, c)
            # pandas 2 upcasts HTA's int8 index column where pandas 3 raises, and warns as it does.
            premise = int8_bug_premise(obj, c)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", FutureWarning)
                holder["ta"] = TraceAnalysis(trace_dir=d, include_last_profiler_step=True)
            warned = [w for w in caught if issubclass(w.category, FutureWarning) and w.filename.endswith(HTA_TRACE_PY)
                      and "int8" in str(w.message)]
            if c.true(f"no FutureWarning on int8 from {HTA_TRACE_PY}: the load no longer meets HTA's int8 index bug",
                      len(warned) > 0):
                premise += ": pandas 2 upcasts (FutureWarning)"
            return f"{check_load(holder['ta'], ref, table, c)}; {premise}"

        runner.run(label, "load", load)
        if "ta" not in holder:
            for name, _ in ANALYSES[1:]:
                runner.run(label, name, lambda c: c.problems.append("trace did not load"))
            return
        for name, fn in ANALYSES[1:]:
            runner.run(label, name, lambda c, fn=fn: fn(holder["ta"], ref, table, c))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cuprof", required=True, help="the cuprof command (build/tools/cuprof)")
    ap.add_argument("--gpu", nargs="*", default=[], help="traces with GPU activity")
    ap.add_argument("--cpu", nargs="*", default=[], help="traces written without a GPU")
    ap.add_argument("--made", nargs="*", default=[],
                    help="traces made on this machine: checked as --gpu if they hold GPU activity, else as --cpu")
    ap.add_argument("--hta-int8-bug", nargs="*", default=[],
                    help="GPU traces that set off HTA's int8 index bug: under pandas 3 they must fail to load with "
                         "it, under pandas 2 they are checked as --gpu")
    args = ap.parse_args(argv)
    for path in args.made:
        (args.gpu if Reference(load_json(path)).work else args.cpu).append(path)
    if not args.gpu and not args.cpu and not args.hta_int8_bug:
        ap.error("no traces given")
    import hta.configs.config  # noqa: F401  HTA sets its logger up on import: quiet it afterwards
    logging.getLogger("hta").setLevel(logging.ERROR)
    # HTA's own deprecation notices under pandas 2 (replace/fillna downcasting): not about the traces.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"hta\.")
    import pandas
    from hta.version import __version__ as hta_version
    print(f"hta_check: HolisticTraceAnalysis {hta_version}, pandas {pandas.__version__}")
    runner = Runner()
    for path in args.gpu:
        check_trace(runner, path, args.cuprof, True)
    for path in args.hta_int8_bug:
        check_trace(runner, path, args.cuprof, True, int8_bug=True)
    for path in args.cpu:
        check_trace(runner, path, args.cuprof, False)
    print(f"hta_check: {runner.passed} passed, {runner.failed} failed")
    return 0 if runner.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
