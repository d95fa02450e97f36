"""gpu-check cases for zero-code tracing and interop (gpu_check.py calls
interop_checks): an unmodified program traced through injection, threads x
streams, a CUDA graph, an NVTX-only region, and several GPUs when present.
"""
import os
import subprocess

import validate_trace
from trace_schema import (API_CATS, ARG_CORRELATION, ARG_EXTERNAL_ID, ARG_GRAPH_ID, CAT_KERNEL, CAT_USER_ANNOTATION,
                          KEY_DEVICE_PROPERTIES, KEY_TRACE_EVENTS, META_LABELS, META_NAME, META_PROCESS_LABELS,
                          META_THREAD_NAME)


def by_id(events):
    return {e["args"][ARG_EXTERNAL_ID]: e for e in events
            if e.get("ph") == "X" and e.get("cat") == CAT_USER_ANNOTATION and ARG_EXTERNAL_ID in e.get("args", {})}


def interop_checks(build, out, summary, check, run):
    # --- an unmodified binary (cuprof compiled out) traced through injection ------------------
    injected = os.path.join(out, "injected_matmul_add_64.json")
    proc = run([os.path.join(build, "tools", "cuprof"), "run", "--output", injected, "--",
                os.path.join(build, "examples", "matmul_add_plain"), "--size", "64", "--warmup",
                "--trace", os.path.join(out, "plain_own.json")], out, "injected")
    if check("cuprof run: an unmodified binary writes a trace through libcuprof_inject.so",
             proc.returncode == 0 and os.path.exists(injected), proc.stderr.strip()[-300:]):
        raw, obj = validate_trace.load_trace(injected)
        problems = validate_trace.validate(raw, obj, require_gpu=True)
        check("injected trace follows the contract with its GPU work", not problems, "; ".join(problems[:3]))
        header = os.path.join(out, "matmul_add_64.json")
        if os.path.exists(header):
            _, hobj = validate_trace.load_trace(header)
            kernels = lambda o: sorted({e["name"] for e in o[KEY_TRACE_EVENTS] if e.get("cat") == CAT_KERNEL})
            # Injection traces from start-up, so it also has the set-up kernels before the program's window.
            check("injected trace shows every kernel of the header-mode trace",
                  set(kernels(hobj)) <= set(kernels(obj)), f"injected {kernels(obj)}, header {kernels(hobj)}")
        summary["injected_kernels"] = sorted({e["name"] for e in obj[KEY_TRACE_EVENTS] if e.get("cat") == CAT_KERNEL})

    # --- threads x streams, a graph, NVTX ------------------------------------------------------
    try:
        gpus = len(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip().splitlines())
    except FileNotFoundError:
        gpus = 0
    trace = os.path.join(out, "concurrency.json")
    proc = run([os.path.join(build, "examples", "concurrency"), "--threads", "4", "--devices", str(max(1, min(gpus, 2))),
                "--trace", trace], out, "concurrency")
    if not check("concurrency: runs", proc.returncode == 0 and os.path.exists(trace), proc.stderr.strip()[-300:]):
        return
    raw, obj = validate_trace.load_trace(trace)
    problems = validate_trace.validate(raw, obj, require_gpu=True)
    check("concurrency: trace follows the contract (flows, nesting per lane)", not problems, "; ".join(problems[:3]))
    events = obj[KEY_TRACE_EVENTS]
    spans = by_id(events)
    calls = {e["args"][ARG_CORRELATION]: e for e in events if e.get("cat") in API_CATS}
    kernels = [e for e in events if e.get("cat") == CAT_KERNEL]

    def scope_chain(span):
        names = []
        while span is not None:
            names.append(span["name"])
            parent = [s for s in spans.values() if s["tid"] == span["tid"] and s["ts"] <= span["ts"]
                      and s["ts"] + s["dur"] >= span["ts"] + span["dur"] and s is not span and s["dur"] > span["dur"]]
            span = min(parent, key=lambda s: s["dur"]) if parent else None
        return names

    worker_kernels = {}
    misattributed = []
    for k in kernels:
        span = spans.get(k["args"].get(ARG_EXTERNAL_ID))
        call = calls.get(k["args"][ARG_CORRELATION])
        if span is None or call is None:
            continue
        if span["tid"] != call["tid"]:
            misattributed.append(k["name"])
        workers = [n for n in scope_chain(span) if n.startswith("worker_")]
        if workers:
            worker_kernels.setdefault(workers[0], set()).add((k["pid"], k["tid"], span["tid"]))
    lanes = {w: v for w, v in worker_kernels.items()}
    distinct_streams = {lane[:2] for v in lanes.values() for lane in v}
    one_thread_each = all(len({lane[2] for lane in v}) == 1 for v in lanes.values())
    thread_names = {e["tid"]: e["args"][META_NAME] for e in events if e.get("name") == META_THREAD_NAME and e.get("pid") == obj[KEY_TRACE_EVENTS][0]["pid"]}
    named = all(next(iter(v))[2] in thread_names for v in lanes.values()) if lanes else False
    check("4 threads x 4 streams: each worker's kernels charged to its own thread's scope, on its own stream, "
          "each thread a named lane",
          len(lanes) == 4 and len(distinct_streams) == 4 and one_thread_each and named and not misattributed,
          f"workers {sorted(lanes)}, streams {sorted(distinct_streams)}, misattributed {len(misattributed)}")
    summary["concurrency_streams"] = sorted(distinct_streams)

    graph_kernels = [k for k in kernels if ARG_GRAPH_ID in k["args"]]
    graph_scoped = [k for k in graph_kernels if spans.get(k["args"].get(ARG_EXTERNAL_ID), {}).get("name") == "graph_step"]
    launches = {k["args"][ARG_CORRELATION] for k in graph_kernels}
    launch_names = {calls[c]["name"] for c in launches if c in calls}
    check("CUDA graph: 3 kernels per replay, each its own slice with graph id/node id, charged to the scope "
          "around cudaGraphLaunch",
          len(graph_kernels) == 15 and len(graph_scoped) == 15 and len(launches) == 5 and launch_names == {"cudaGraphLaunch"},
          f"{len(graph_kernels)} graph kernels, {len(graph_scoped)} under graph_step, launched by {sorted(launch_names)}")

    nvtx = [s for s in spans.values() if s["name"] == "nvtx_only_region"]
    nvtx_kernels = [k for k in kernels if nvtx and k["args"].get(ARG_EXTERNAL_ID) == nvtx[0]["args"][ARG_EXTERNAL_ID]]
    check("NVTX: a region annotated only with NVTX appears as a user_annotation and owns its kernel",
          len(nvtx) == 1 and len(nvtx_kernels) == 1, f"{len(nvtx)} ranges, {len(nvtx_kernels)} kernels under it")

    devices = sorted({k["pid"] for k in kernels})
    summary["concurrency_devices"] = devices
    if gpus >= 2:
        labels = {e["pid"]: e["args"][META_LABELS] for e in events if e.get("name") == META_PROCESS_LABELS}
        check("2 GPUs: kernels on both devices' lanes, both described in deviceProperties",
              devices == [0, 1] and len(obj.get(KEY_DEVICE_PROPERTIES, [])) >= 2 and labels.get(1) == "GPU 1",
              f"kernel pids {devices}, deviceProperties {len(obj.get(KEY_DEVICE_PROPERTIES, []))}")
    else:
        summary["two_gpu"] = "skipped: this machine has one GPU"
