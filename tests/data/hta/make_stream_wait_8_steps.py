#!/usr/bin/env python3
"""Writes stream_wait_8_steps.json.gz: tests/data/gpu/stream_wait.json (tests/gpu/stream_wait.cu
recorded on an H200: five steps of a producer kernel on one stream, a consumer on a second stream
waiting for it through cudaStreamWaitEvent, the CPU waiting in cudaEventSynchronize) made eight
steps long. Steps 5 to 7 are the recorded steps 1 to 3 again, each event shifted by the same time
(so they start where step 4 ends), its correlation ids and record correlations by 24, its
External ids by 8; the closing cudaDeviceSynchronize follows them. The events keep the writer's
order (CPU slices, CUDA calls, GPU annotations, kernels, syncs, overhead).

What it is for: HTA 0.6.1 with pandas 3 cannot load it. Its correlation ids (1 to 49) all fit
int8, so HTA's correlation column is int8, and so is the index column HTA makes from it; 139
events put linked records at row numbers above 127, which pandas 3 refuses to store there
(TypeError in hta/common/trace.py, transform_correlation_to_index). Seven steps (125 events) load.
tests/hta_check.py --hta-int8-bug checks it fails so under pandas 3 and loads under pandas 2.

Run it from this directory to regenerate the file (byte for byte: gzip without a time stamp)."""
import gzip
import json
import os

SOURCE = os.path.join("..", "gpu", "stream_wait.json")
OUTPUT = "stream_wait_8_steps.json.gz"
STEPS = 8          # the recording has 5 (ProfilerStep#0-4, and #5 around the closing synchronize)
COPIED = (1, 2, 3)  # recorded steps appended as steps 5, 6, 7
CORR_PER_STEP = 6   # cudaLaunchKernel, cudaEventRecord, cudaStreamWaitEvent, cudaLaunchKernel, cudaEventRecord,
#                     cudaEventSynchronize
EXT_PER_STEP = 2    # ProfilerStep#N and the produce_consume scope


def ns(us):
    return round(us * 1000)


def us(n):
    return round(n / 1000, 3)  # at most three decimals, as the writer prints them


def main():
    with open(SOURCE, encoding="utf-8") as f:
        text = f.read()
    obj = json.loads(text)
    events = obj["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    rest = [e for e in events if e["ph"] != "M"]
    recorded = 5
    steps = {e["name"]: e for e in rest if e["name"].startswith("ProfilerStep#")}
    step_start = [ns(steps[f"ProfilerStep#{s}"]["ts"]) for s in range(recorded + 1)]

    def step_of(e):
        ext = e.get("args", {}).get("External id")
        if ext is not None:
            return (ext - 1) // EXT_PER_STEP
        corr = e.get("args", {}).get("correlation")
        if corr is not None:
            return min((corr - 1) // CORR_PER_STEP, recorded)
        return None  # CUPTI's overhead record: left where it is

    added = len(COPIED)
    shift = step_start[recorded] - step_start[COPIED[0]]  # copies start where the closing step started
    tail_shift = step_start[COPIED[-1] + 1] - step_start[COPIED[0]]  # the closing step, after the copies

    def moved(e, by_ns, by_steps):
        e = json.loads(json.dumps(e))
        e["ts"] = us(ns(e["ts"]) + by_ns)
        e["dur"] = us(ns(e["dur"]))
        a = e.get("args", {})
        if "External id" in a:
            a["External id"] += EXT_PER_STEP * by_steps
        for key in ("correlation", "wait_on_cuda_event_record_corr_id"):
            if key in a and a[key] > 0:
                a[key] += CORR_PER_STEP * by_steps
        if "bind_id" in e:
            e["bind_id"] += CORR_PER_STEP * by_steps
        m = e["name"].startswith("ProfilerStep#") and int(e["name"][len("ProfilerStep#"):])
        if m is not False:
            e["name"] = f"ProfilerStep#{m + by_steps}"
        return e

    out = []
    for e in rest:
        s = step_of(e)
        if s is None or s < recorded:
            out.append(e)
        else:  # the closing step
            out.append(moved(e, tail_shift, added))
        if s in COPIED:
            out.append(moved(e, shift, recorded - COPIED[0]))
    # The writer's order: by section (its order in the recording), then lane for GPU annotations, then time.
    section = {}
    for e in rest:
        section.setdefault(e["cat"], len(section))
    out.sort(key=lambda e: (section[e["cat"]], e["tid"] if e["cat"] == "gpu_user_annotation" else 0, e["ts"]))
    assert len([e for e in out if e["name"].startswith("ProfilerStep#")]) == STEPS + 1

    head, _, _ = text.partition('"traceEvents":[')
    end = obj["cuprof"]["window_end_ns"]
    head = head.replace(f'"window_end_ns":{end}', f'"window_end_ns":{end + tail_shift}')
    lines = [json.dumps(e, separators=(",", ":"), ensure_ascii=False) for e in meta + out]
    doc = head + '"traceEvents":[\n' + ",\n".join(lines) + '\n  ],\n  "traceName":"' + OUTPUT + '"\n}\n'
    json.loads(doc)
    with open(OUTPUT, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        f.write(doc.encode("utf-8"))
    print(f"{OUTPUT}: {len(meta) + len(out)} events, {len(doc)} bytes, {os.path.getsize(OUTPUT)} gzipped")


if __name__ == "__main__":
    main()
