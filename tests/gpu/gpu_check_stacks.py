"""gpu_check part: native call stacks (with_stack). tests/gpu/call_stacks.cu launches a kernel
from a known line and calls cublasSgemm from another; the trace must carry each call's stack
(its "sf" in the document's stackFrames), innermost frame first, the profiler's own frames
(cuprof, CUPTI, libcuda, libcudart) dropped from its top, cuBLAS's kept above the program's own
call site, a short "Call stack" arg for Perfetto, and export_stacks' folded text must hold both
call sites. Then a PyTorch training loop (`bench/run train-step`, 150 steps) under `cuprof run`
with and without --stacks: the stacks trace at most 1.5 times the size of the other, valid, every
call's stack once in stackFrames."""
import json
import os
import re
import sys

import validate_trace
from gpu_check_corpus import torch_with_cuda


def stack_frames_ok(stack, function, line, library=None):
    """The frames of one "Call stack" arg: the program's frame `function (call_stacks.cu:line)`
    is there; above it (innermost first) only `library`'s frames, or none but the launch stub and
    the runtime's public entry; nothing of the profiler's own. Returns (ok, why)."""
    if not isinstance(stack, list) or not stack or not all(isinstance(f, str) for f in stack):
        return False, f"not a list of frames: {stack!r}"
    where = [i for i, f in enumerate(stack) if f.startswith(function) and f"call_stacks.cu:{line})" in f]
    if not where:
        return False, f"no frame '{function} (call_stacks.cu:{line})' in {stack[:8]}"
    above = stack[:where[0]]
    own = [f for f in above if f.startswith("cuprof::") or re.search(r"libcupti|libcuda\.so|libcudart\.so", f)]
    if own:
        return False, f"the profiler's frames above the call site: {own}"
    if library and not any(library in f.lower() for f in above):
        return False, f"no {library} frame above the call site: {above}"
    return True, f"{len(above)} frames above {stack[where[0]]}"


def whole_stack(doc, call):
    """A call's stack, innermost first, from its "sf" through the document's stackFrames; None
    without one."""
    frames, node, nodes = [], call.get("sf"), doc.get("stackFrames", {})
    while node is not None and str(node) in nodes and len(frames) <= len(nodes):
        frames.append(nodes[str(node)]["name"])
        node = nodes[str(node)].get("parent")
    return frames or None


def stack_checks(build, out, summary, check, run):
    exe = os.path.join(build, "tests", "gpu", "call_stacks")
    if not os.path.exists(exe):
        check("call stacks: tests/gpu/call_stacks built", False, exe)
        return
    trace = os.path.join(out, "call_stacks.json")
    proc = run([exe, trace], out, "call_stacks")
    lines = dict(re.findall(r"(\w+_line)=(\d+)", proc.stdout))
    if proc.returncode != 0 or "launch_line" not in lines:
        check("call stacks: call_stacks ran", False, f"exit {proc.returncode}")
        return
    with open(trace) as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    by_correlation = {e["args"].get("correlation"): e for e in events
                      if e.get("cat") in ("cuda_runtime", "cuda_driver") and "args" in e}
    kernels = [e for e in events if e.get("cat") == "kernel"]
    scale = [by_correlation.get(k["args"].get("correlation")) for k in kernels if "scale_kernel" in k["name"]]
    gemm = [by_correlation.get(k["args"].get("correlation")) for k in kernels if "scale_kernel" not in k["name"]]
    result = {}
    for label, calls, function, line, library in (("kernel launch", scale, "launch_scale", lines["launch_line"], None),
                                                  ("cublasSgemm", gemm, "gemm", lines["gemm_line"], "cublas")):
        stacks = [whole_stack(doc, c) for c in calls if c]
        shown = [c["args"].get("Call stack") for c in calls if c]
        verdicts = [stack_frames_ok(s, function, line, library) for s in stacks]
        # Perfetto's view: the short form, a non-empty list of strings beginning at the innermost frame.
        verdicts += [(isinstance(a, list) and a and all(isinstance(f, str) for f in a), f"Call stack arg {a!r:.200}")
                     for a in shown]
        ok = len(stacks) >= 3 and all(v[0] for v in verdicts)
        check(f"call stacks: each {label} has its stack, down to call_stacks.cu:{line}", ok,
              verdicts[0][1] if verdicts else "no launch found")
        result[label] = {"calls": len(stacks), "first": stacks[0] if stacks else None, "shown": shown[0] if shown else None}
    folded_path = trace + ".cuda.folded"
    folded = open(folded_path).read() if os.path.exists(folded_path) else ""
    check("call stacks: export_stacks' folded lines hold both call sites",
          f"call_stacks.cu:{lines['launch_line']})" in folded and f"call_stacks.cu:{lines['gemm_line']})" in folded
          and all(re.fullmatch(r".+ \d+", l) for l in folded.splitlines()), f"{len(folded.splitlines())} lines")
    summary["call_stacks"] = result


def stacks_size_checks(build, out, summary, check, run):
    """The stacks trace of a PyTorch loop against its trace without stacks (each stack once, a
    short arg per call): at most 1.5 times the size."""
    if not check("call stacks: torch importable with CUDA (for the training loop's stacks trace)", torch_with_cuda()):
        return
    cli = os.path.join(build, "tools", "cuprof")
    bench = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "run")
    sizes, docs = {}, {}
    for label, flags in (("loop_plain", []), ("loop_stacks", ["--stacks"])):
        trace = os.path.join(out, label + ".json")
        proc = run([cli, "run", "--output", trace, "--no-table", *flags, "--", sys.executable, bench, "train-step",
                    "--steps", "150"], out, label, timeout=300)
        if proc.returncode != 0 or not os.path.exists(trace):
            check(f"call stacks: the training loop runs under cuprof run {' '.join(flags)}", False,
                  f"exit {proc.returncode}")
            return
        sizes[label] = os.path.getsize(trace)
        raw, docs[label] = validate_trace.load_trace(trace)
        problems = validate_trace.validate(raw, docs[label], require_gpu=True)
        check(f"call stacks: the training loop's trace {' '.join(flags) or 'without stacks'} is valid", not problems,
              "; ".join(problems[:3]))
    ratio = sizes["loop_stacks"] / sizes["loop_plain"]
    events = docs["loop_stacks"]["traceEvents"]
    calls = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    with_sf = [e for e in calls if "sf" in e]
    shown = [e for e in with_sf if isinstance(e.get("args", {}).get("Call stack"), list)]
    check("call stacks: the training loop's stacks trace at most 1.5 times its size without stacks, every stacked call "
          "with its sf and a short Call stack arg", ratio <= 1.5 and with_sf and len(shown) == len(with_sf),
          f"{sizes['loop_stacks'] / 1e6:.1f} MB against {sizes['loop_plain'] / 1e6:.1f} MB, {ratio:.2f}x; "
          f"{len(with_sf)} of {len(calls)} calls with a stack, {len(docs['loop_stacks'].get('stackFrames', {}))} frame nodes")
    summary["stacks_trace_size"] = {"plain_bytes": sizes["loop_plain"], "stacks_bytes": sizes["loop_stacks"],
                                    "ratio": round(ratio, 3), "calls_with_stack": len(with_sf)}
