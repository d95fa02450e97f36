"""gpu_check's memory part: allocations and frees recorded with profile_memory, against an
independent CUPTI counter (cupti_counter.cpp) and against what the programs say they allocate.

  memory_kinds (tests/gpu/memory_kinds.cu): every way of allocating, in scopes whose bytes it
    prints; its trace's allocations and frees must equal the counter's MEMORY2 records by kind
    and the counter's count of allocating calls; each scope's Self CUDA Mem / Self CPU Mem the
    bytes it printed; the memory insights must fire on what it was built to show.
  torch_memory_step.py (PyTorch, its caching allocator): the trace's allocations equal the
    counter's; the device's bytes in use grow between the marked points by what
    torch.cuda.memory_reserved() grows.
The public corpus programs are compared in gpu_check_corpus.py (its `cuprof run --memory` mode).
"""
import collections
import json
import os
import re
import sys

import validate_trace
from gpu_check_corpus import STATIC_MEMORY_KINDS, memory_counts
from trace_schema import ARG_EXTERNAL_ID, CAT_USER_ANNOTATION, KEY_TRACE_EVENTS

HERE = os.path.dirname(os.path.abspath(__file__))
ALLOCATING_CALLS = ("cudaMalloc", "cudaMallocAsync", "cudaMallocFromPoolAsync", "cudaMallocManaged", "cudaMallocHost",
                    "cudaHostAlloc", "cudaMallocPitch", "cudaMalloc3D", "cuMemAlloc", "cuMemAllocAsync",
                    "cuMemAllocFromPoolAsync", "cuMemAllocManaged", "cuMemAllocHost", "cuMemHostAlloc",
                    "cuMemAllocPitch", "cuMemMap")  # the virtual-memory API's memory is reported at cuMemMap


def memory_events(events):
    return [e for e in events if e.get("ph") == "i" and e.get("name") == "[memory]"]


def compare_with_counter(counts, counter):
    """Problems between a trace's memory_counts() and the counter's MEMORY2 counts."""
    want = {k: v for k, v in counter.get("memory", {}).items() if k not in STATIC_MEMORY_KINDS}
    problems = []
    for kind in sorted(set(want) | set(counts)):
        for field in ("alloc", "free", "alloc_bytes"):
            w, h = want.get(kind, {}).get(field, 0), counts.get(kind, {}).get(field, 0)
            if w != h:
                problems.append(f"{kind} {field}: counter {w}, trace {h}")
    return problems


def bytes_by_scope(events):
    """{scope name: [device bytes, host bytes]}: the [memory] events' bytes by the scope that
    made them (External id), as Self CUDA Mem and Self CPU Mem count them."""
    names = {e["args"][ARG_EXTERNAL_ID]: e["name"] for e in events
             if e.get("ph") == "X" and e.get("cat") == CAT_USER_ANNOTATION and ARG_EXTERNAL_ID in e.get("args", {})}
    out = collections.defaultdict(lambda: [0, 0])
    for m in memory_events(events):
        a = m["args"]
        scope = names.get(a.get(ARG_EXTERNAL_ID), "(no scope)")
        out[scope][0 if a.get("Device Type") == 1 else 1] += a.get("Bytes", 0)
    return out


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def table_cells(text, row_name, columns):
    """The cells of `columns` in the row named row_name of a torch-layout table, or None. Cells are
    split at two or more spaces: a header wider than its column ("Self CUDA Mem" in 12) shifts the
    header line, not the cells' order."""
    lines = text.splitlines()
    header = next((l for l in lines if "Self CPU %" in l), None)
    if header is None:
        return None
    names = re.split(r"\s{2,}", header.strip())
    for l in lines:
        cells = re.split(r"\s{2,}", l.strip())
        if cells[0] == row_name and len(cells) == len(names):
            return {c: cells[names.index(c)] for c in columns if c in names}
    return None


def memory_kinds_checks(build, out, summary, check, run, counter_lib):
    exe = os.path.join(build, "tests", "gpu", "memory_kinds")
    cli = os.path.join(build, "tools", "cuprof")
    if not check("memory_kinds: built", os.access(exe, os.X_OK), exe):
        return
    plain = run([exe], out, "memory_kinds_plain")
    counter_json = os.path.join(out, "memory_kinds_counter.json")
    counted = run([exe], out, "memory_kinds_counter",
                  env={"CUDA_INJECTION64_PATH": counter_lib, "CUPTI_COUNTER_OUT": counter_json, "CUPTI_COUNTER_MEMORY": "1",
                       "CUPROF_NO_AUTOSTART": "1"})
    trace = os.path.join(out, "memory_kinds.json")
    traced = run([exe, trace], out, "memory_kinds_traced")
    check("memory_kinds: plain, under the counter and profiled: exit 0 and the same stdout",
          plain.returncode == counted.returncode == traced.returncode == 0 and plain.stdout == counted.stdout == traced.stdout,
          f"exit {plain.returncode}/{counted.returncode}/{traced.returncode}")
    counter = load_json(counter_json)
    if not check("memory_kinds: trace written and valid, counter JSON written",
                 os.path.exists(trace) and counter is not None, ""):
        return
    raw, obj = validate_trace.load_trace(trace)
    problems = validate_trace.validate(raw, obj, require_gpu=True)
    check("memory_kinds: the trace with memory events passes the validator", not problems, "; ".join(problems[:3]))
    events = obj[KEY_TRACE_EVENTS]
    counts = memory_counts(events)
    diff = compare_with_counter(counts, counter)
    allocations = sum(c["alloc"] for c in counts.values())
    frees = sum(c["free"] for c in counts.values())
    check("memory_kinds: allocations and frees by memory kind (count and bytes) equal the counter's MEMORY2 records",
          not diff and allocations > 0, f"{allocations} allocations, {frees} frees; {counts}" + (f"; {diff}" if diff else ""))
    calls = counter.get("allocation_calls", {})
    allocating = sum(n for name, n in calls.items() if name in ALLOCATING_CALLS)
    check("memory_kinds: one allocation per allocating call the counter saw (runtime and driver, cuMemMap included)",
          allocating == allocations, f"{allocating} calls {calls}, {allocations} allocations")
    kinds = {k for k, c in counts.items() if c["alloc"]}
    check("memory_kinds: device, managed and pinned host allocations, pools and the virtual-memory API all seen",
          {"Device", "Managed", "Pinned"} <= kinds
          and any(e["args"].get("Pool") for e in memory_events(events))
          and any(e["args"].get("Virtual") for e in memory_events(events)), f"kinds {sorted(kinds)}")

    expected = {m.group(1): (int(m.group(2)), int(m.group(3)))
                for m in re.finditer(r"memory_kinds: expect (\S+) (-?\d+) (-?\d+)", plain.stdout)}
    got = bytes_by_scope(events)
    wrong = {s: (got.get(s, [0, 0]), e) for s, e in expected.items() if tuple(got.get(s, [0, 0])) != e}
    check("memory_kinds: each scope's allocated-minus-freed bytes (device, host) are those the program printed",
          expected and not wrong, f"{len(expected)} scopes" + (f"; wrong (trace, expected): {wrong}" if wrong else ""))
    summary["memory_kinds"] = {"counts": counts, "allocation_calls": calls, "scopes": {s: got.get(s) for s in expected}}

    proc = run([cli, "table", trace, "--sort", "self_cuda_memory_usage", "--rows", "-1"], out, "memory_kinds_table")
    cells = table_cells(proc.stdout, "leaky", ["Self CUDA Mem", "CUDA Mem"]) if proc.returncode == 0 else None
    host = table_cells(proc.stdout, "pinned_host", ["Self CPU Mem"]) if proc.returncode == 0 else None
    check("memory_kinds: `cuprof table --sort self_cuda_memory_usage` shows torch's memory columns with the scopes' bytes",
          cells == {"Self CUDA Mem": "8.00 MB", "CUDA Mem": "8.00 MB"} and host == {"Self CPU Mem": "256.00 KB"},
          f"leaky {cells}, pinned_host {host}" + ("" if proc.returncode == 0 else f"; exit {proc.returncode}: {proc.stderr[-200:]}"))

    proc = run([cli, "insights", trace], out, "memory_kinds_insights")
    text = proc.stdout
    summary["memory_kinds"]["insights"] = text[-3000:]
    found = {kind: re.search(r"\[" + re.escape(kind) + r"\] ([^\n]*)", text) for kind in
             ("memory not freed", "allocation in the loop", "pageable memcpy", "memory peak")}
    said = {k: m.group(1)[:160] for k, m in found.items() if m}
    check("memory_kinds: insights names the scope that kept 8 MiB to the end of the window",
          proc.returncode == 0 and re.match(r"leaky: 8 MiB", said.get("memory not freed", "")) is not None,
          said.get("memory not freed", text[:300]))
    # cudaMalloc once a step in the loop (steps 1-5); cudaFree there and in the last step's cleanup.
    loop = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in re.finditer(
        r"\[allocation in the loop\] (\w+): (\d+) calls? in (\d+) of the \d+ steps", text)}
    check("memory_kinds: insights finds cudaMalloc and cudaFree in the loop's steps",
          loop.get("cudaMalloc", (0, 0)) >= (5, 5) and loop.get("cudaFree", (0, 0)) >= (5, 5),
          f"(calls, steps) by call: {loop}")
    check("memory_kinds: insights finds the copies from pageable host memory, against the trace's pinned copy",
          re.match(r"Memcpy HtoD with pageable host memory: 5 copies, 80 MiB", said.get("pageable memcpy", "")) is not None,
          said.get("pageable memcpy", "no finding"))


def torch_step_checks(build, out, summary, check, run, counter_lib):
    """PyTorch's caching allocator, seen from CUDA: cuprof's device bytes in use against
    torch.cuda.memory_reserved() at the points the script marks, and the counter's counts."""
    cli = os.path.join(build, "tools", "cuprof")
    script = os.path.join(HERE, "torch_memory_step.py")
    counter_json = os.path.join(out, "torch_memory_counter.json")
    plain = run([sys.executable, script], out, "torch_memory_plain", timeout=600)
    counted = run([sys.executable, script], out, "torch_memory_counter", timeout=600,
                  env={"CUDA_INJECTION64_PATH": counter_lib, "CUPTI_COUNTER_OUT": counter_json, "CUPTI_COUNTER_MEMORY": "1"})
    trace = os.path.join(out, "torch_memory.json")
    traced = run([cli, "run", "--memory", "--no-table", "--output", trace, "--", sys.executable, script], out,
                 "torch_memory_traced", timeout=600)
    if not check("torch memory step: plain, under the counter and under `cuprof run --memory`: exit 0, same final loss",
                 plain.returncode == counted.returncode == traced.returncode == 0 and os.path.exists(trace)
                 and plain.stdout.splitlines()[-1:] == traced.stdout.splitlines()[-1:] == counted.stdout.splitlines()[-1:],
                 f"exit {plain.returncode}/{counted.returncode}/{traced.returncode}"):
        return
    counter = load_json(counter_json)
    raw, obj = validate_trace.load_trace(trace)
    events = obj[KEY_TRACE_EVENTS]
    counts = memory_counts(events)
    diff = compare_with_counter(counts, counter or {})
    check("torch memory step: allocations and frees by memory kind equal the counter's MEMORY2 records",
          counter is not None and not diff and counts, f"{counts}" + (f"; {diff}" if diff else ""))
    # The marks: NVTX ranges "reserved <bytes>" after each step; cuprof's device total just before each.
    device = sorted((e["ts"], e["args"]["Total Allocated"]) for e in memory_events(events) if e["args"].get("Device Type") == 1)
    marks = sorted((e["ts"], int(e["name"].split()[1])) for e in events
                   if e.get("ph") == "X" and re.fullmatch(r"reserved \d+", e.get("name", "")))
    points = []
    for ts, reserved in marks:
        before = [total for t, total in device if t <= ts]
        points.append((reserved, before[-1] if before else None))
    # What the caching allocator holds is a part of what the process allocated (cuBLAS and torch
    # allocate some memory themselves): the two grow alike, so their difference stays the same.
    gaps = {total - reserved for reserved, total in points if total is not None}
    grew = len({reserved for reserved, _ in points}) > 1
    summary["torch_memory_step"] = {"counts": counts, "points": points}
    check("torch memory step: cuprof's device bytes in use grow as torch.cuda.memory_reserved() at each marked point",
          len(points) >= 3 and grew and len(gaps) == 1 and min(gaps) >= 0,
          f"(reserved, cuprof) {points}; constant difference {sorted(gaps)}")


def memory_checks(build, out, summary, check, run, corpus):
    counter_lib = os.path.join(os.path.abspath(corpus), "libcupti_counter.so") if corpus else ""
    if not check("memory: the CUPTI counter is there (scripts/build-corpus builds it)", os.path.exists(counter_lib),
                 counter_lib or "no --corpus"):
        return
    for name, fn in (("memory_kinds", memory_kinds_checks), ("torch memory step", torch_step_checks)):
        try:
            fn(build, out, summary, check, run, counter_lib)
        except Exception as e:  # a crash in the checker is a failed check, not the end of the suite
            check(f"{name} checks ran to the end", False, f"{type(e).__name__}: {e}")
