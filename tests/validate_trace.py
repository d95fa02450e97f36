#!/usr/bin/env python3
"""Check cuprof Chrome trace files against the trace-format rules.

The rules are listed, numbered, in docs/trace-format.md ("Rules the validator
checks"); "rule N" in every message is the rule of that number there.
Standard library only.

Usage:
  python3 tests/validate_trace.py TRACE.json[.gz] [...] [--require-gpu] [--json-report]
  python3 tests/validate_trace.py --self-test

Prints `FILE: rule N: message[, event index K]` per violation, then
`validate_trace: N passed, M failed`; exits 0 iff every trace passes. With
--json-report, stdout carries one JSON document and the text lines go to stderr.
Importable: load_trace(path) -> (raw_text, obj); validate(raw_text, obj, require_gpu) -> [str].
"""
import argparse
import gzip
import json
import re
import sys
import zlib
from collections import defaultdict, namedtuple

from trace_schema import (API_CATS, ARG_CORRELATION, ARG_DEVICE, ARG_STREAM, CAT_CPU_OP, CAT_CUDA_SYNC, CAT_FLOW,
                          CAT_KERNEL, CAT_USER_ANNOTATION, CUPROF_TRACE_DETAIL, FLOW_BIND_ID, FLOW_IN, FLOW_OUT,
                          FLOW_V2_KEYS, GPU_WORK_CATS, KEY_BASE_TIME, KEY_CUPROF, KEY_DISTRIBUTED_INFO, KEY_RANK,
                          KEY_STACK_FRAMES, KEY_TRACE_EVENTS, LABEL_CPU, META_LABELS, META_NAME, META_PROCESS_LABELS,
                          META_PROCESS_NAME, META_PROCESS_SORT_INDEX, META_SORT_INDEX, META_THREAD_NAME,
                          META_THREAD_SORT_INDEX, TRACE_DETAIL_LEAN, EVENT_STACK_FRAME, FRAME_NAME, FRAME_PARENT)

GPU_CATS = GPU_WORK_CATS
FLOW_END_CATS = GPU_CATS | {CAT_CUDA_SYNC}
CPU_CATS = {CAT_CPU_OP, CAT_USER_ANNOTATION} | API_CATS
LAUNCH_NAMES = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                "cudaMemcpyAsync", "cudaMemsetAsync"}
META_ARGS = {META_PROCESS_NAME: (META_NAME, str), META_THREAD_NAME: (META_NAME, str),
             META_PROCESS_LABELS: (META_LABELS, str),
             META_PROCESS_SORT_INDEX: (META_SORT_INDEX, int), META_THREAD_SORT_INDEX: (META_SORT_INDEX, int)}
RESERVED_NAMES = {"CpuProfile", "Profile", "ProfileChunk"}
MAX_PER_RULE = 20  # messages kept per rule; the rest are counted

RAW_TIME_RE = re.compile(r'(?<!\\)"(ts|dur)"\s*:\s*([^\s,}\]]*)')
TIME_VALUE_RE = re.compile(r"-?\d+(\.\d{1,3})?")
RANK_RE = re.compile(r'"%s":\s+(\d+)' % KEY_RANK)  # HTA's regex
SURROGATE_ESCAPE_RE = re.compile(r"(?<!\\)(?:\\\\)*\\u[dD][89abAB][0-9a-fA-F]{2}")
LONE_SURROGATE_RE = re.compile("[\ud800-\udfff]")  # what surrogateescape makes of bad UTF-8
VERSION_SUFFIX_RE = re.compile(r"_v\d+$")
PROFILER_STEP_RE = re.compile(r"ProfilerStep#\d+$")

Slice = namedtuple("Slice", "index name cat lane start end args")
V2_KEYS = FLOW_V2_KEYS  # flow v2 members of a slice


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def to_ns(us):
    """Microseconds (JSON number) to integer nanoseconds, as Perfetto does."""
    return round(us * 1000)


class Report:
    """Collects 'rule N: ...' messages, keeping at most MAX_PER_RULE per rule."""

    def __init__(self):
        self.messages, self.counts = [], defaultdict(int)

    def add(self, rule, message, index=None):
        self.counts[rule] += 1
        if self.counts[rule] <= MAX_PER_RULE:
            where = "" if index is None else f", event index {index}"
            self.messages.append(f"rule {rule}: {message}{where}")

    def result(self):
        more = [f"rule {r}: {n - MAX_PER_RULE} more violations not shown"
                for r, n in sorted(self.counts.items()) if n > MAX_PER_RULE]
        return self.messages + more


# ------------------------------------------------------------------ loading
def _reject_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")


def parse_strict(text):
    """json.loads that refuses NaN/Infinity."""
    return json.loads(text, parse_constant=_reject_constant)


def load_trace(path):
    """Read a trace (gzip by magic bytes) -> (raw_text, obj); obj is None if not strict JSON.

    Invalid UTF-8 bytes survive as lone surrogates (surrogateescape), which validate() reports.
    """
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    raw = data.decode("utf-8", errors="surrogateescape")
    try:
        return raw, parse_strict(raw)
    except (ValueError, RecursionError):
        return raw, None


# ------------------------------------------------------------ file & text
def check_text(raw, rep):
    """Rules 2 and 5 on the raw text: UTF-8, surrogate escapes, us.fff numbers."""
    if LONE_SURROGATE_RE.search(raw):
        rep.add(2, "file is not valid UTF-8")
    for m in SURROGATE_ESCAPE_RE.finditer(raw):
        rep.add(2, f"surrogate escape {m.group(0)[-6:]} at offset {m.end() - 6} (write raw UTF-8)")
    for m in RAW_TIME_RE.finditer(raw):
        if not TIME_VALUE_RE.fullmatch(m.group(2)):
            rep.add(5, f'"{m.group(1)}" value {m.group(2)!r} at offset {m.start(2)} is not us with <= 3 decimals')


def check_top_level(raw, obj, rep):
    """Rules 1, 5, 10, 17; returns False when traceEvents cannot be walked."""
    if not isinstance(obj, dict):
        rep.add(1, f"top level is a JSON {type(obj).__name__}, not an object")
        return False
    if "schemaVersion" not in obj:
        rep.add(1, "top level has no schemaVersion")
    if not is_int(obj.get(KEY_BASE_TIME)):
        rep.add(5, f"top level {KEY_BASE_TIME} is missing or not an integer")
    if obj.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        rep.add(10, f"displayTimeUnit is {obj['displayTimeUnit']!r}, not 'ms' or 'ns'")
    info = obj.get(KEY_DISTRIBUTED_INFO)
    if not isinstance(info, dict) or not is_int(info.get(KEY_RANK)):
        rep.add(17, f"top level {KEY_DISTRIBUTED_INFO} with an integer {KEY_RANK} is missing")
    di, te = raw.find(f'"{KEY_DISTRIBUTED_INFO}"'), raw.find(f'"{KEY_TRACE_EVENTS}"')
    if di < 0 or te < 0 or di > te:
        rep.add(17, f'"{KEY_DISTRIBUTED_INFO}" is not written before "{KEY_TRACE_EVENTS}"')
    m = RANK_RE.search(raw)
    if not m:
        rep.add(17, 'raw text does not match HTA\'s rank regex "rank":\\s+(\\d+) (space after the colon?)')
    elif isinstance(info, dict) and info.get(KEY_RANK) != int(m.group(1)):
        rep.add(17, f"first regex rank {m.group(1)} differs from {KEY_DISTRIBUTED_INFO}.{KEY_RANK} {info.get(KEY_RANK)!r}")
    if not isinstance(obj.get(KEY_TRACE_EVENTS), list):
        rep.add(1, f"top level {KEY_TRACE_EVENTS} is missing or not a list")
        return False
    return True


# --------------------------------------------------------- single events
def check_fields(i, ev, rep):
    """Rules 3, 5, 6: ph, name, pid, tid, ts on every event."""
    if not isinstance(ev.get("ph"), str):
        rep.add(3, "event has no string ph", i)
    name = ev.get("name")
    if not isinstance(name, str):
        rep.add(3, "event has no string name", i)
    elif not name:
        rep.add(3, "event name is empty", i)
    for key in ("pid", "tid"):
        if key not in ev:
            rep.add(3, f"event has no {key}", i)
        elif not is_int(ev[key]) or not 0 <= ev[key] < 2**32:
            rep.add(6, f"{key} {ev[key]!r} is not an integer in [0, 2**32)", i)
    if ev.get("ph") != "M":
        ts = ev.get("ts")
        if not is_num(ts):
            rep.add(3, f"non-M event has no numeric ts (got {ts!r})", i)
        elif ts < 0:
            rep.add(5, f"ts {ts} is negative", i)


def check_complete(i, ev, rep):
    """Rule 4: X events have a string cat and dur >= 0."""
    if not isinstance(ev.get("cat"), str):
        rep.add(4, "X event has no string cat", i)
    dur = ev.get("dur")
    if not is_num(dur):
        rep.add(4, f"X event has no numeric dur (got {dur!r})", i)
    elif dur < 0:
        rep.add(4, f"X event dur {dur} is negative", i)


def check_metadata(i, ev, rep):
    """Rule 12: only the five known M names, each with its typed arg."""
    name = ev.get("name")
    if name not in META_ARGS:
        rep.add(12, f"unknown metadata event {name!r}", i)
        return
    key, typ = META_ARGS[name]
    args = ev.get("args")
    value = args.get(key) if isinstance(args, dict) else None
    if not (is_int(value) if typ is int else isinstance(value, typ)):
        rep.add(12, f"{name} needs args.{key} of type {typ.__name__} (got {value!r})", i)


def check_args(i, ev, rep, lean=False):
    """Rules 19, 20, 26: stream/correlation/device args by category, API names.

    lean: a trace cuprof wrote with trace_detail lean, whose GPU records may leave device out
    (their pid is the device); one they carry must still equal the pid."""
    cat, name = ev.get("cat"), ev.get("name")
    args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
    if cat in GPU_CATS:
        stream = args.get(ARG_STREAM)
        if not is_int(stream) or stream <= 0:
            rep.add(19, f"{cat} args.stream {stream!r} is not an integer > 0", i)
        if not is_int(args.get(ARG_CORRELATION)):
            rep.add(19, f"{cat} has no integer args.correlation", i)
        if (not lean or ARG_DEVICE in args) and (not is_int(args.get(ARG_DEVICE)) or args.get(ARG_DEVICE) != ev.get("pid")):
            rep.add(26, f"{cat} args.device {args.get(ARG_DEVICE)!r} is not an integer equal to pid {ev.get('pid')!r}", i)
    elif cat in CPU_CATS and ARG_STREAM in args:
        rep.add(19, f"CPU event ({cat}) has args.stream", i)
    if cat in API_CATS:
        if not is_int(args.get(ARG_CORRELATION)):
            rep.add(19, f"{cat} has no integer args.correlation", i)
        if isinstance(name, str) and VERSION_SUFFIX_RE.search(name):
            rep.add(20, f"runtime/driver name {name!r} keeps CUPTI's _vNNNN suffix", i)


def check_misc(i, ev, rep):
    """Rules 13, 15, 21: i/C events, reserved names, ProfilerStep#N."""
    ph, name = ev.get("ph"), ev.get("name")
    if ph == "i" and ev.get("s", "t") not in ("g", "p", "t"):
        rep.add(13, f"instant event scope s={ev.get('s')!r} is not g, p or t", i)
    if ph == "C":
        args = ev.get("args")
        if not isinstance(args, dict) or not args or not all(is_num(v) for v in args.values()):
            rep.add(13, "counter event needs non-empty numeric args", i)
    if name in RESERVED_NAMES:
        rep.add(15, f"event name {name!r} sends the file to speedscope's DevTools importer", i)
    if isinstance(name, str) and PROFILER_STEP_RE.match(name):
        if ph != "X" or ev.get("cat") not in (CAT_USER_ANNOTATION, CAT_CPU_OP):
            rep.add(21, f"{name} must be an X event with cat user_annotation or cpu_op", i)


def check_event(i, ev, rep, lean=False):
    """All per-event rules."""
    if not isinstance(ev, dict):
        rep.add(3, f"event is a JSON {type(ev).__name__}, not an object", i)
        return
    check_fields(i, ev, rep)
    if ev.get("ph") == "X":
        check_complete(i, ev, rep)
    if ev.get("ph") == "M":
        check_metadata(i, ev, rep)
    check_args(i, ev, rep, lean)
    check_misc(i, ev, rep)


# ------------------------------------------------------- cross-event rules
def lane_of(ev):
    """(pid, tid) if both are valid integers, else None (rule 6 reports those)."""
    pid, tid = ev.get("pid"), ev.get("tid")
    return (pid, tid) if is_int(pid) and is_int(tid) else None


def collect_slices(events):
    """Well-formed X events as Slices with integer-ns bounds."""
    out = []
    for i, ev in enumerate(events):
        if isinstance(ev, dict) and ev.get("ph") == "X" and lane_of(ev) and is_num(ev.get("ts")) \
                and is_num(ev.get("dur")) and ev["dur"] >= 0:
            start = to_ns(ev["ts"])
            args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
            out.append(Slice(i, ev.get("name"), ev.get("cat"), lane_of(ev), start, start + to_ns(ev["dur"]), args))
    return out


def check_nesting(slices, rep):
    """Rule 7: on each (pid, tid) slices nest or are disjoint."""
    by_lane = defaultdict(list)
    for s in slices:
        by_lane[s.lane].append(s)
    for lane, group in by_lane.items():
        group.sort(key=lambda s: (s.start, -s.end, s.index))
        stack = []
        for s in group:
            while stack and stack[-1].end <= s.start:
                stack.pop()
            if stack and s.end > stack[-1].end:
                top = stack[-1]
                rep.add(7, f"slice {s.name!r} [{s.start}, {s.end}) ns partially overlaps {top.name!r} "
                           f"[{top.start}, {top.end}) (event index {top.index}) on pid {lane[0]} tid {lane[1]}", s.index)
            else:
                stack.append(s)


def flow_events(events):
    """(index, event) for every s/f event (flow v1)."""
    return [(i, ev) for i, ev in enumerate(events) if isinstance(ev, dict) and ev.get("ph") in ("s", "f")]


def v2_flow_events(events):
    """(index, event) for every event with a flow v2 member (bind_id, flow_in, flow_out)."""
    return [(i, ev) for i, ev in enumerate(events) if isinstance(ev, dict) and any(k in ev for k in V2_KEYS)]


def v2_flow_outs(events, slices):
    """bind_id -> [Slice] of the well-formed X slices with "flow_out": true (and not flow_in)."""
    by_index = {s.index: s for s in slices}
    outs = defaultdict(list)
    for i, ev in v2_flow_events(events):
        if ev.get(FLOW_OUT) is True and ev.get(FLOW_IN) is not True and is_int(ev.get(FLOW_BIND_ID)) \
                and i in by_index:
            outs[ev[FLOW_BIND_ID]].append(by_index[i])
    return outs


def check_flows(events, slices, rep):
    """Rule 11 (and 19): ac2g flows, v1 and v2."""
    check_flows_v1(events, slices, rep)
    check_flows_v2(events, slices, rep)


def check_flows_v2(events, slices, rep):
    """Rule 11 (and 19): flow v2 members -- "bind_id" (an integer) with "flow_out": true on the call's
    X slice and "flow_in": true on its GPU record's; one flow_out per bind_id, each flow_in with one.

    Perfetto (json_trace_parser MaybeAddFlow) binds them to the slice itself; flow_in and flow_out on
    one slice make a flow step there. It numbers v1 flows 0, 1, 2, ... (FlowTracker::GetFlowIdForV1Event)
    in the id space it uses for bind_ids as they are, so a bind_id below the number of v1 flows would
    cross two arrows. Catapult takes bind_id 0 as none.
    """
    by_index = {s.index: s for s in slices}
    v1_flows = {(ev.get("cat"), ev.get("name"), ev.get("id")) for _, ev in flow_events(events)}
    outs, ins = defaultdict(list), []
    for i, ev in v2_flow_events(events):
        bid, ph = ev.get(FLOW_BIND_ID), ev.get("ph")
        if ph != "X":
            rep.add(11, f"flow v2 members {sorted(k for k in V2_KEYS if k in ev)} on a {ph!r} event, not an X slice", i)
        if not is_int(bid) or bid < 0:
            rep.add(11, f"flow v2 bind_id {bid!r} is not an integer >= 0", i)
            continue
        if bid == 0:
            rep.add(11, "flow v2 bind_id 0: catapult (chrome://tracing) takes it as no bind_id", i)
        for key in (FLOW_IN, FLOW_OUT):
            if key in ev and ev[key] is not True:
                rep.add(11, f"flow v2 {key} is {ev[key]!r}, not true (Perfetto reads a boolean only)", i)
        fin, fout = ev.get(FLOW_IN) is True, ev.get(FLOW_OUT) is True
        if fin and fout:
            rep.add(11, f"bind_id {bid}: flow_in and flow_out on one slice (a flow step, not a call's arrow)", i)
            continue
        if not fin and not fout:
            rep.add(11, f"bind_id {bid} without flow_in or flow_out: true", i)
            continue
        if v1_flows and bid < len(v1_flows):
            rep.add(11, f"bind_id {bid} is below the number of v1 flows ({len(v1_flows)}): Perfetto gives v1 "
                        "flows the ids 0, 1, 2, ... of the bind_ids, crossing arrows", i)
        wanted = API_CATS if fout else FLOW_END_CATS
        s = by_index.get(i)
        if s is None or s.cat not in wanted:
            rep.add(11, f"{'flow_out' if fout else 'flow_in'} bind_id {bid} is not on a "
                        f"{'/'.join(sorted(wanted))} slice (cat {ev.get('cat')!r})", i)
            continue
        if fout:
            if outs[bid]:
                rep.add(11, f"bind_id {bid} has a second flow_out (first at event index {outs[bid][0].index})", i)
            outs[bid].append(s)
        else:
            ins.append(s)
    for dst in ins:
        bid = events[dst.index][FLOW_BIND_ID]
        if not outs.get(bid):
            rep.add(11, f"flow_in bind_id {bid} has no flow_out slice with that bind_id", dst.index)
        elif len(outs[bid]) == 1:
            src = outs[bid][0]
            if src.args.get(ARG_CORRELATION) != dst.args.get(ARG_CORRELATION):
                rep.add(19, f"bind_id {bid} links correlation {src.args.get('correlation')!r} "
                            f"to {dst.cat} correlation {dst.args.get('correlation')!r}", dst.index)


def check_flows_v1(events, slices, rep):
    """Rule 11 (and 19): ac2g s/f shape, pairing, and binding to slice starts."""
    starts = defaultdict(list)
    for s in slices:
        starts[(s.lane, s.start)].append(s)
    start_of, bound = {}, {}
    for i, ev in flow_events(events):
        ph, fid = ev["ph"], ev.get("id")
        if ev.get("cat") != CAT_FLOW or ev.get("name") != CAT_FLOW:
            rep.add(11, f"flow '{ph}' has cat {ev.get('cat')!r} / name {ev.get('name')!r}, not '{CAT_FLOW}'", i)
        if not is_int(fid):
            rep.add(11, f"flow '{ph}' id {fid!r} is not an integer", i)
            continue
        if ph == "f" and ev.get("bp") != "e":
            rep.add(11, f"flow 'f' id {fid} lacks \"bp\": \"e\"", i)
        key = (ev.get("cat"), ev.get("name"), fid)
        if ph == "s":
            if key in start_of:
                rep.add(11, f"flow id {fid} has a second 's' (first at event index {start_of[key]})", i)
            start_of.setdefault(key, i)
        wanted = API_CATS if ph == "s" else FLOW_END_CATS
        lane = lane_of(ev)
        at = starts.get((lane, to_ns(ev["ts"])), []) if lane and is_num(ev.get("ts")) else []
        hits = [s for s in at if s.cat in wanted]
        if not hits:
            rep.add(11, f"flow '{ph}' id {fid} at ts {ev.get('ts')} is not at the start of a "
                        f"{'/'.join(sorted(wanted))} slice on its pid/tid", i)
        else:
            bound[i] = hits[0]
    for i, ev in flow_events(events):
        key = (ev.get("cat"), ev.get("name"), ev.get("id"))
        if ev["ph"] != "f" or not is_int(ev.get("id")):
            continue
        if key not in start_of:
            rep.add(11, f"flow 'f' id {ev['id']} has no 's' with the same id, cat and name", i)
        elif i in bound and start_of[key] in bound:
            src, dst = bound[start_of[key]], bound[i]
            if src.args.get(ARG_CORRELATION) != dst.args.get(ARG_CORRELATION):
                rep.add(19, f"flow {ev['id']} links correlation {src.args.get('correlation')!r} "
                            f"to {dst.cat} correlation {dst.args.get('correlation')!r}", i)


def check_launch_correlation(slices, rep):
    """Rule 19: correlation is unique per launch/memcpy/memset API call."""
    seen = {}
    for s in slices:
        corr = s.args.get(ARG_CORRELATION)
        if s.cat in API_CATS and s.name in LAUNCH_NAMES and is_int(corr):
            if corr in seen:
                rep.add(19, f"correlation {corr} of {s.name} already used by event index {seen[corr]}", s.index)
            seen.setdefault(corr, s.index)


def check_gpu_links(events, slices, rep):
    """--require-gpu: kernels exist; each GPU record has a flow from a CPU lane, launched before it ran.

    Linked: a v1 'f' at the record's start whose 's' is on a CPU lane no later than the record, or
    flow v2: "flow_in" with a bind_id of exactly one "flow_out" slice on a CPU lane that started no
    later than the record. A broken link (an 'f' without 's', a flow_in without flow_out) is reported
    by check_flows.
    """
    if not any(s.cat == CAT_KERNEL for s in slices):
        rep.add(23, "--require-gpu: trace has no kernel event")
    cpu_pids = {ev.get("pid") for ev in events if isinstance(ev, dict) and ev.get("ph") == "M"
                and ev.get("name") == META_PROCESS_LABELS and isinstance(ev.get("args"), dict)
                and ev["args"].get(META_LABELS) == LABEL_CPU}
    s_by_id, f_at = {}, defaultdict(list)
    for i, ev in flow_events(events):
        if not is_int(ev.get("id")) or not lane_of(ev) or not is_num(ev.get("ts")):
            continue
        if ev["ph"] == "s":
            s_by_id.setdefault(ev["id"], ev)
        else:
            f_at[(lane_of(ev), to_ns(ev["ts"]))].append(ev["id"])
    outs = v2_flow_outs(events, slices)
    for s in slices:
        if s.cat not in GPU_CATS:
            continue
        sources = []  # (what, pid, start ns) of each arrow's start
        ids = f_at.get((s.lane, s.start), [])
        for fid in ids:
            src = s_by_id.get(fid)
            if src is not None:  # else reported by check_flows
                sources.append((f"flow {fid}", src.get("pid"), to_ns(src["ts"])))
        ev = events[s.index]
        v2 = ev.get(FLOW_IN) is True and ev.get(FLOW_OUT) is not True and is_int(ev.get(FLOW_BIND_ID))
        if v2 and len(outs.get(ev[FLOW_BIND_ID], [])) == 1:  # else reported by check_flows
            src = outs[ev[FLOW_BIND_ID]][0]
            sources.append((f"bind_id {ev[FLOW_BIND_ID]}", src.lane[0], src.start))
        # Work launched on the device (conditional graph nodes, device graph launch) has no CPU
        # call: CUPTI gives it correlation 0, and it has no arrow.
        if not ids and not v2 and s.args.get(ARG_CORRELATION) != 0:
            rep.add(11, f"--require-gpu: {s.cat} {s.name!r} has no incoming ac2g flow ('f' event or flow_in)",
                    s.index)
        for what, pid, start in sources:
            if pid not in cpu_pids:
                rep.add(11, f"--require-gpu: {what} into {s.cat} starts on pid {pid}, "
                            "which has no process_labels 'CPU'", s.index)
            if s.start < start:
                rep.add(5, f"--require-gpu: {s.cat} {s.name!r} starts {start - s.start} ns "
                           f"before its launching call ({what})", s.index)


def check_stack_frames(obj, events, rep):
    """Rule 27: stackFrames, where present, is an object of nodes {"name": a non-empty string,
    "parent": another node's id}, with no loop up the parents; each event's "sf" names a node."""
    nodes = obj.get(KEY_STACK_FRAMES)
    if nodes is None:
        nodes = {}
    elif not isinstance(nodes, dict):
        rep.add(27, f"{KEY_STACK_FRAMES} is {type(nodes).__name__}, expected an object")
        return
    for key, node in nodes.items():
        if not isinstance(node, dict) or not isinstance(node.get(FRAME_NAME), str) or not node[FRAME_NAME]:
            rep.add(27, f"{KEY_STACK_FRAMES} node {key!r} has no non-empty string {FRAME_NAME}")
        elif FRAME_PARENT in node and str(node[FRAME_PARENT]) not in nodes:
            rep.add(27, f"{KEY_STACK_FRAMES} node {key!r}: parent {node[FRAME_PARENT]!r} is no node")
    depth = {}  # a node's frames to the root; None while being walked: a loop
    for key in nodes:
        path, at = [], key
        while at in nodes and at not in depth and isinstance(nodes[at], dict):
            depth[at] = None
            path.append(at)
            parent = nodes[at].get(FRAME_PARENT)
            at = str(parent) if parent is not None else None
        if at in depth and depth[at] is None:
            rep.add(27, f"{KEY_STACK_FRAMES}: the parents of node {key!r} loop")
            for p in path:
                depth[p] = 0
            continue
        below = depth.get(at) or 0
        for p in reversed(path):
            below += 1
            depth[p] = below
    for i, ev in enumerate(events):
        if isinstance(ev, dict) and EVENT_STACK_FRAME in ev and str(ev[EVENT_STACK_FRAME]) not in nodes:
            rep.add(27, f"{EVENT_STACK_FRAME} {ev[EVENT_STACK_FRAME]!r} names no {KEY_STACK_FRAMES} node", i)


def validate(raw_text, obj, require_gpu=False):
    """All contract checks on one trace -> list of 'rule N: ...' messages (empty: passes)."""
    rep = Report()
    check_text(raw_text, rep)
    if obj is None:
        try:
            obj = parse_strict(raw_text)
        except (ValueError, RecursionError) as exc:
            rep.add(2, f"not strict JSON: {exc}")
            return rep.result()
    if not check_top_level(raw_text, obj, rep):
        return rep.result()
    events = obj[KEY_TRACE_EVENTS]
    cuprof_block = obj.get(KEY_CUPROF)
    lean = isinstance(cuprof_block, dict) and cuprof_block.get(CUPROF_TRACE_DETAIL) == TRACE_DETAIL_LEAN
    for i, ev in enumerate(events):
        check_event(i, ev, rep, lean)
    slices = collect_slices(events)
    check_nesting(slices, rep)
    check_flows(events, slices, rep)
    check_launch_correlation(slices, rep)
    check_stack_frames(obj, events, rep)
    if require_gpu:
        check_gpu_links(events, slices, rep)
    return rep.result()


def check_file(path, require_gpu=False):
    """validate() plus the file-name rules 14 and 15."""
    problems = []
    with open(path, "rb") as fh:
        if fh.read(2) == b"\x1f\x8b" and not str(path).endswith(".gz"):
            problems.append("rule 14: gzip file without a .gz suffix (HTA and tb_plugin need it)")
    if str(path).endswith((".chrome.json", ".chrome.json.gz")):
        problems.append("rule 15: *.chrome.json names send the file to speedscope's DevTools importer")
    raw, obj = load_trace(path)
    return problems + validate(raw, obj, require_gpu)


# ---------------------------------------------------------------- self-test
def sample_trace():
    """A small trace that follows every rule, --require-gpu included."""
    cpu, tid = 4242, 4243

    def meta(kind, pid, t, key, value):
        return {"name": kind, "ph": "M", "ts": 0.0, "pid": pid, "tid": t, "args": {key: value}}

    def x(cat, name, pid, t, ts, dur, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": t, "ts": ts, "dur": dur, "args": args}

    def flow(ph, fid, pid, t, ts):
        ev = {"ph": ph, "id": fid, "pid": pid, "tid": t, "ts": ts, "cat": "ac2g", "name": "ac2g"}
        return dict(ev, bp="e") if ph == "f" else ev

    events = [
        meta("process_name", cpu, 0, "name", "app"), meta("process_labels", cpu, 0, "labels", "CPU"),
        meta("process_sort_index", cpu, 0, "sort_index", cpu), meta("thread_name", cpu, tid, "name", "main"),
        meta("process_name", 0, 0, "name", "app"), meta("process_labels", 0, 0, "labels", "GPU 0"),
        meta("thread_name", 0, 7, "name", "stream 7 "), meta("thread_sort_index", 0, 7, "sort_index", 7),
        {"ph": "C", "cat": "gpu_metric", "name": "SM throughput %", "pid": 0, "tid": 0, "ts": 40.0,
         "args": {"value": 87.25}},
        x("user_annotation", "ProfilerStep#1", cpu, tid, 10.0, 100.0),
        x("cpu_op", "aten::mm", cpu, tid, 20.5, 30.25),
        x("cuda_runtime", "cudaLaunchKernel", cpu, tid, 25.125, 5.0, correlation=1), flow("s", 1, cpu, tid, 25.125),
        x("cuda_runtime", "cudaMemcpyAsync", cpu, tid, 31.0, 4.0, correlation=2), flow("s", 2, cpu, tid, 31.0),
        x("kernel", "gemm", 0, 7, 40.0, 10.0, device=0, stream=7, correlation=1), flow("f", 1, 0, 7, 40.0),
        x("gpu_memcpy", "Memcpy HtoD", 0, 7, 50.0, 2.5, device=0, stream=7, correlation=2), flow("f", 2, 0, 7, 50.0),
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": cpu, "tid": 0, "ts": 120.0},
    ]
    return {"schemaVersion": 1, "distributedInfo": {"backend": "none", "rank": 0}, "displayTimeUnit": "ms",
            "baseTimeNanoseconds": 1700000000000000000, "traceEvents": events}


def sample_trace_v2():
    """The sample as cuprof writes flows now: a call's first GPU record linked by flow v2 members on
    the two slices, its further ones (a graph launch's) by v1 s/f events; with v1 flows in the file,
    each bind_id is 2**32 + correlation (above the ids Perfetto gives the v1 flows). Node_b's v1 id
    equals node_a's bind_id: the two id spaces are apart."""
    trace = sample_trace()
    cpu, tid = 4242, 4243
    base = 2**32
    events = [e for e in trace["traceEvents"] if e.get("ph") not in ("s", "f")]
    by_name = {e["name"]: e for e in events if e.get("ph") == "X"}
    for call, record in (("cudaLaunchKernel", "gemm"), ("cudaMemcpyAsync", "Memcpy HtoD")):
        bid = base + by_name[call]["args"]["correlation"]
        by_name[call].update(bind_id=bid, flow_out=True)
        by_name[record].update(bind_id=bid, flow_in=True)

    def x(cat, name, pid, t, ts, dur, **extra):
        args = extra.pop("args")
        return dict({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": t, "ts": ts, "dur": dur}, **extra,
                    args=args)

    def flow(ph, fid, pid, t, ts):
        ev = {"ph": ph, "id": fid, "pid": pid, "tid": t, "ts": ts, "cat": "ac2g", "name": "ac2g"}
        return dict(ev, bp="e") if ph == "f" else ev

    gpu = dict(device=0, stream=7, correlation=3)
    at = events.index(by_name["Memcpy HtoD"]) + 1
    events[at:at] = [
        x("kernel", "node_a", 0, 7, 53.0, 1.0, bind_id=base + 3, flow_in=True, args=gpu),
        x("kernel", "node_b", 0, 7, 54.5, 0.5, args=gpu), flow("f", 1 << 32 | 3, 0, 7, 54.5),
        x("kernel", "node_c", 0, 7, 56.0, 1.0, args=gpu), flow("f", 2 << 32 | 3, 0, 7, 56.0),
    ]
    at = events.index(by_name["cudaMemcpyAsync"]) + 1
    events[at:at] = [
        x("cuda_runtime", "cudaGraphLaunch", cpu, tid, 36.0, 3.0, bind_id=base + 3, flow_out=True,
          args={"correlation": 3}),
        flow("s", 1 << 32 | 3, cpu, tid, 36.0), flow("s", 2 << 32 | 3, cpu, tid, 36.0),
    ]
    trace["traceEvents"] = events
    return trace


def _set(name, key, value, ph="X", nth=0):
    """Mutator: set key ("args.k" for an arg) of the nth `ph` event `name`; value None deletes it."""
    def mutate(trace):
        ev = [e for e in trace["traceEvents"] if e.get("name") == name and e.get("ph") == ph][nth]
        target, k = (ev["args"], key[5:]) if key.startswith("args.") else (ev, key)
        if value is None:
            del target[k]
        else:
            target[k] = value
    return mutate


def _top(key, value):
    """Mutator: set (value None: delete) a top-level key."""
    def mutate(trace):
        if value is None:
            del trace[key]
        else:
            trace[key] = value
    return mutate


def _raw(old, new):
    """Mutator on the serialized text: replace the first `old`."""
    return lambda t: json.dumps(t).replace(old, new, 1)


def _both(*mutators):
    """Mutator applying several mutators in turn."""
    def mutate(trace):
        for m in mutators:
            m(trace)
    return mutate


# (test name, rule expected to fire, mutator[, require_gpu])
CASES = [
    ("bare_array", 1, lambda t: json.dumps(t["traceEvents"])),
    ("no_schema_version", 1, _top("schemaVersion", None)),
    ("events_not_list", 1, _top("traceEvents", {})),
    ("nan_constant", 2, _raw('"dur": 100.0', '"dur": NaN')),
    ("trailing_comma", 2, lambda t: json.dumps(t)[:-2] + ",]}"),
    ("invalid_utf8", 2, lambda t: json.dumps(t).replace("aten::mm", "aten::mm\udcff")),
    ("surrogate_escape", 2, _set("aten::mm", "name", "mm \U0001F600")),
    ("no_ph", 3, _set("aten::mm", "ph", None)),
    ("name_not_string", 3, _set("aten::mm", "name", 5)),
    ("empty_name", 3, _set("aten::mm", "name", "")),
    ("no_tid", 3, _set("aten::mm", "tid", None)),
    ("no_ts", 3, _set("aten::mm", "ts", None)),
    ("string_ts", 3, _set("aten::mm", "ts", "20.5")),
    ("no_cat", 4, _set("aten::mm", "cat", None)),
    ("no_dur", 4, _set("aten::mm", "dur", None)),
    ("negative_dur", 4, _set("aten::mm", "dur", -1.0)),
    ("negative_ts", 5, _set("aten::mm", "ts", -1.0)),
    ("ts_four_decimals", 5, _raw('"ts": 20.5', '"ts": 20.5001')),
    ("ts_exponent", 5, _raw('"ts": 20.5', '"ts": 2.05e1')),
    ("base_time_float", 5, _top("baseTimeNanoseconds", 1.5)),
    ("string_pid", 6, _set("aten::mm", "pid", "Spans")),
    ("negative_metadata_pid", 6, _set("process_name", "pid", -1, "M")),
    ("tid_too_large", 6, _set("aten::mm", "tid", 2**32)),
    ("partial_overlap", 7, _set("aten::mm", "dur", 95.0)),
    ("display_unit_us", 10, _top("displayTimeUnit", "us")),
    ("flow_cat", 11, _set("ac2g", "cat", "fwdbwd", "s")),
    ("flow_string_id", 11, _set("ac2g", "id", "1", "f")),
    ("flow_no_bp", 11, _set("ac2g", "bp", None, "f")),
    ("f_without_s", 11, _set("ac2g", "id", 99, "s")),
    ("s_off_slice_start", 11, _set("ac2g", "ts", 26.0, "s")),
    ("f_on_cpu_op", 11, _set("ac2g", "ts", 20.5, "f")),
    ("duplicate_s", 11, _set("ac2g", "id", 1, "s", 1)),
    ("unknown_metadata", 12, _set("process_name", "name", "process_uptime", "M")),
    ("sort_index_string", 12, _set("thread_sort_index", "args.sort_index", "7", "M")),
    ("bad_instant_scope", 13, _set("Record Window End", "s", "x", "i")),
    ("gpu_metric_without_value", 13, _set("SM throughput %", "args", {}, "C")),
    ("reserved_name", 15, _set("aten::mm", "name", "Profile")),
    ("distributed_info_missing", 17, _top("distributedInfo", None)),
    ("distributed_info_after_events", 17, lambda t: t.__setitem__("distributedInfo", t.pop("distributedInfo"))),
    ("rank_without_space", 17, _raw('"rank": 0', '"rank":0')),
    ("kernel_stream_zero", 19, _set("gemm", "args.stream", 0)),
    ("kernel_no_correlation", 19, _set("gemm", "args.correlation", "1")),
    ("cpu_with_stream", 19, _set("aten::mm", "args.stream", 7)),
    ("runtime_no_correlation", 19, _set("cudaLaunchKernel", "args.correlation", None)),
    ("duplicate_launch_correlation", 19, _set("cudaMemcpyAsync", "args.correlation", 1)),
    ("flow_correlation_mismatch", 19, _set("Memcpy HtoD", "args.correlation", 3)),
    ("version_suffix", 20, _set("cudaLaunchKernel", "name", "cudaLaunchKernel_v7000")),
    ("profiler_step_cat", 21, _set("ProfilerStep#1", "cat", "python_function")),
    ("kernel_device_not_pid", 26, _set("gemm", "args.device", 1)),
    ("kernel_no_device", 26, _set("gemm", "args.device", None)),
    ("lean_kernel_device_not_pid", 26, _both(_top("cuprof", {"trace_detail": "lean"}), _set("gemm", "args.device", 1))),
    ("stack_frames_loop", 27, _top("stackFrames", {"1": {"name": "a", "parent": "2"}, "2": {"name": "b", "parent": "1"}})),
    ("stack_frames_no_parent", 27, _top("stackFrames", {"1": {"name": "a", "parent": "9"}})),
    ("stack_frames_no_name", 27, _top("stackFrames", {"1": {"parent": "2"}, "2": {"name": "main"}})),
    ("stack_frames_list", 27, _top("stackFrames", [{"name": "a"}])),
    ("sf_names_no_node", 27, _both(_top("stackFrames", {"1": {"name": "main"}}), _set("cudaLaunchKernel", "sf", 7))),
    ("gpu_no_kernel", 23, _set("gemm", "cat", "cuda_sync"), True),
    ("gpu_no_incoming_flow", 11, lambda t: t["traceEvents"].remove(t["traceEvents"][-2]), True),
    ("gpu_flow_from_non_cpu", 11, _set("process_labels", "args.labels", "Other", "M"), True),
    ("gpu_kernel_before_launch", 5, _both(_set("gemm", "ts", 24.0), _set("ac2g", "ts", 24.0, "f")), True),
]


# The same on sample_trace_v2(): flow v2 members and v1 events mixed.
CASES_V2 = [
    ("bind_id_string", 11, _set("gemm", "bind_id", "100000001")),
    ("bind_id_float", 11, _set("gemm", "bind_id", 4294967297.5)),
    ("bind_id_negative", 11, _set("cudaLaunchKernel", "bind_id", -1)),
    ("bind_id_zero", 11, _both(_set("cudaLaunchKernel", "bind_id", 0), _set("gemm", "bind_id", 0))),
    ("bind_id_among_v1_ids", 11, _both(_set("cudaLaunchKernel", "bind_id", 1), _set("gemm", "bind_id", 1))),
    ("flow_in_without_flow_out", 11, _set("gemm", "bind_id", 4294967300)),
    ("two_flow_out", 11, _set("cudaMemcpyAsync", "bind_id", 4294967297)),
    ("flow_in_and_flow_out", 11, _set("gemm", "flow_out", True)),
    ("flow_in_string", 11, _set("gemm", "flow_in", "true")),
    ("no_direction", 11, _set("gemm", "flow_in", None)),
    ("flow_out_on_kernel", 11, _both(_set("gemm", "flow_in", None), _set("gemm", "flow_out", True))),
    ("flow_in_on_cpu_op", 11, _both(_set("aten::mm", "bind_id", 4294967298), _set("aten::mm", "flow_in", True))),
    ("on_instant_event", 11, _both(_set("Record Window End", "bind_id", 4294967301, "i"),
                                   _set("Record Window End", "flow_out", True, "i"))),
    ("v1_pair_dropped", 11, lambda t: t.__setitem__("traceEvents", [e for e in t["traceEvents"]
                                                                     if not (e.get("ph") == "s" and e["id"] >> 32 == 1)])),
    ("correlation_mismatch", 19, _set("Memcpy HtoD", "args.correlation", 4)),
    ("gpu_no_incoming_flow", 11, _both(_set("gemm", "bind_id", None), _set("gemm", "flow_in", None)), True),
    ("gpu_flow_from_non_cpu", 11, _set("process_labels", "args.labels", "Other", "M"), True),
    ("gpu_kernel_before_launch", 5, _set("gemm", "ts", 24.0), True),
]


def _kineto_samples():
    """The torch.profiler traces kept in the repository (tests/data/kineto)."""
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    return sorted((root / "tests" / "data" / "kineto").glob("*.json"))


def run_self_test():
    """Run the unittest suite; last line is 'validate_trace --self-test: N passed, M failed'."""
    import contextlib
    import io
    import os
    import tempfile
    import unittest

    class RuleTests(unittest.TestCase):
        def check(self, trace, require_gpu=False):
            raw = trace if isinstance(trace, str) else json.dumps(trace)
            try:
                obj = parse_strict(raw)
            except ValueError:
                obj = None
            return validate(raw, obj, require_gpu)

        def test_valid_trace_passes(self):
            self.assertEqual(self.check(sample_trace()), [])
            self.assertEqual(self.check(sample_trace(), require_gpu=True), [])

        def test_valid_v2_trace_passes(self):
            self.assertEqual(self.check(sample_trace_v2()), [])
            self.assertEqual(self.check(sample_trace_v2(), require_gpu=True), [])

        def test_v2_flow_linked_only_from_a_launch_before_the_record(self):
            trace = sample_trace_v2()  # the launch moved after its kernel: the link no longer counts
            launch = next(e for e in trace["traceEvents"] if e.get("name") == "cudaLaunchKernel")
            launch["ts"] = 45.0
            problems = self.check(trace, require_gpu=True)
            self.assertTrue(any(p.startswith("rule 5: --require-gpu: kernel 'gemm'") for p in problems), problems)

        def test_lean_trace_leaves_device_out(self):
            trace = sample_trace_v2()  # cuprof's trace_detail lean: GPU records without args.device
            trace["cuprof"] = {"trace_detail": "lean"}
            dropped = [e["args"].pop("device", None) for e in trace["traceEvents"] if e.get("cat") in GPU_CATS]
            self.assertTrue(any(d is not None for d in dropped))
            self.assertEqual(self.check(trace, require_gpu=True), [])

        def test_device_launched_kernel_needs_no_flow(self):
            trace = sample_trace()  # a conditional graph node's kernel: launched on the GPU, correlation 0
            trace["traceEvents"].insert(-1, {"ph": "X", "cat": "kernel", "name": "node", "pid": 0, "tid": 7,
                                             "ts": 60.0, "dur": 1.0, "args": {"device": 0, "stream": 7, "correlation": 0}})
            self.assertEqual(self.check(trace, require_gpu=True), [])

        def test_gzip_file_and_cli(self):
            with tempfile.TemporaryDirectory() as tmp:
                good, bad = os.path.join(tmp, "good.json.gz"), os.path.join(tmp, "bad.json")
                with gzip.open(good, "wt") as fh:
                    json.dump(sample_trace(), fh)
                with open(bad, "wb") as fh:
                    fh.write(json.dumps(sample_trace()).encode().replace(b"gemm", b"ge\xffmm"))
                self.assertEqual(check_file(good, require_gpu=True), [])
                self.assertTrue(any(p.startswith("rule 2:") for p in check_file(bad)))
                out = io.StringIO()
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                    self.assertEqual(main([good, "--require-gpu"]), 0)
                    self.assertEqual(main([good, bad, "--json-report"]), 1)
                self.assertIn("validate_trace: 1 passed, 0 failed", out.getvalue())
                self.assertIn("validate_trace: 1 passed, 1 failed", out.getvalue())
                self.assertIn(f"{bad}: rule 2: file is not valid UTF-8", out.getvalue())

        def test_schema_names_as_the_cpp_header(self):
            import trace_schema  # the names checked here, against include/cuprof/output/trace_schema.hpp
            if not os.path.exists(trace_schema.HEADER):
                self.skipTest("include/cuprof/output/trace_schema.hpp not found")
            self.assertEqual(trace_schema.compare_with_header(), [])

        def test_kineto_samples_break_pid_rule(self):
            samples = _kineto_samples()
            if not samples:
                self.skipTest("kineto-samples not found")
            for path in samples:
                problems = check_file(path)
                # torch writes processes whose pid is no integer ("Spans", "Traces") or is -1
                self.assertTrue(any(p.startswith("rule 6: pid ") and "is not an integer" in p for p in problems), problems)
                self.assertTrue(any(p.startswith("rule 17:") for p in problems), problems)

    def make_test(rule, mutate, require_gpu, sample=sample_trace):
        def test(self):
            trace = sample()
            out = mutate(trace)
            problems = self.check(out if isinstance(out, str) else trace, require_gpu)
            self.assertTrue(any(p.startswith(f"rule {rule}:") for p in problems), problems)
        return test

    for name, rule, mutate, *gpu in CASES:
        setattr(RuleTests, f"test_rule{rule:02d}_{name}", make_test(rule, mutate, bool(gpu)))
    for name, rule, mutate, *gpu in CASES_V2:
        setattr(RuleTests, f"test_rule{rule:02d}_v2_{name}", make_test(rule, mutate, bool(gpu), sample_trace_v2))
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(RuleTests))
    failed, skipped = len(result.failures) + len(result.errors), len(result.skipped)
    if skipped:
        print(f"validate_trace --self-test: {skipped} skipped")
    print(f"validate_trace --self-test: {result.testsRun - failed - skipped} passed, {failed} failed")
    return 0 if result.wasSuccessful() else 1


# --------------------------------------------------------------------- main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", help="trace files (.json or .json.gz)")
    ap.add_argument("--require-gpu", action="store_true", help="demand kernels linked by flows to CPU calls")
    ap.add_argument("--json-report", action="store_true", help="print a JSON report on stdout (text to stderr)")
    ap.add_argument("--self-test", action="store_true", help="run the built-in unit tests")
    args = ap.parse_args(argv)
    if args.self_test:
        return run_self_test()
    if not args.traces:
        ap.error("no trace files given")
    text_out = sys.stderr if args.json_report else sys.stdout
    report, passed = [], 0
    for path in args.traces:
        try:
            problems = check_file(path, args.require_gpu)
        except (OSError, EOFError, zlib.error) as exc:
            problems = [f"cannot read trace: {exc}"]
        passed += not problems
        report.append({"file": path, "passed": not problems, "violations": problems})
        for p in problems:
            print(f"{path}: {p}", file=text_out)
    failed = len(args.traces) - passed
    print(f"validate_trace: {passed} passed, {failed} failed", file=text_out)
    if args.json_report:
        print(json.dumps({"passed": passed, "failed": failed, "traces": report}, indent=2))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
