"""Where a trace's bytes go: per event kind and per field, bytes per kernel launch.

Usage: bench/run trace-bytes TRACE.json[.gz]

Reads the traceEvents text as written (one event a line, as cuprof and Kineto write), so number
formatting and separators count as they are on disk. A field's bytes are its `"key":value` text
plus its separating comma; an event's framing (braces, line break) is counted as `{}`. Kinds:
kernel, cuda_runtime, cuda_driver, flow s, flow f (flow v1 events), metadata, and the other
categories by name. Flow v2 members (`bind_id`, `flow_out`, `flow_in`) are fields of the slice kinds
that carry them; the last line adds up the flows of both encodings.
Per launch = over the number of kernel, memcpy and memset events.
"""
if __name__ == "__main__":  # a module of bench/run, which sets up the imports of all of them
    raise SystemExit("run it as: bench/run trace-bytes (bench/README.md)")

import argparse
import gzip
from collections import defaultdict

from trace_schema import FLOW_V2_KEYS, GPU_WORK_CATS, KEY_TRACE_EVENTS


def members(text, start):
    """(key, raw member text) of the JSON object at text[start] == '{', and the index past it."""
    i, depth, key, member_start, out = start + 1, 0, None, start + 1, []
    in_string = False
    while i < len(text):
        c = text[i]
        if in_string:
            if c == "\\":
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            if depth == 0 and key is None:
                end = text.index('"', i + 1)
                key = text[i + 1:end]
                i = end
                in_string = False
        elif c in "{[":
            depth += 1
        elif c in "}]":
            if depth == 0:
                if key is not None:
                    out.append((key, text[member_start:i]))
                return out, i + 1
            depth -= 1
        elif c == "," and depth == 0:
            out.append((key, text[member_start:i + 1]))
            key, member_start = None, i + 1
        i += 1
    raise ValueError("unterminated object")


V2_FIELDS = FLOW_V2_KEYS  # flow v2: members of the slices it links


def kind_of(fields):
    raw = dict(fields)
    ph = raw.get("ph", "").split(":", 1)[-1].strip(' ",')
    if ph == "M":
        return "metadata"
    if ph in ("s", "f"):
        return "flow " + ph
    return raw.get("cat", ":?").split(":", 1)[-1].strip(' ",')


def report(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    begin = text.index(f'"{KEY_TRACE_EVENTS}"')
    begin = text.index("[", begin) + 1
    per_kind = defaultdict(lambda: defaultdict(int))
    counts = defaultdict(int)
    launches, events_bytes, i = 0, 0, begin
    while True:
        j = text.find("{", i)
        close = text.find("]", i)
        if j < 0 or (0 <= close < j):
            break
        fields, end = members(text, j)
        kind = kind_of(fields)
        counts[kind] += 1
        launches += kind in GPU_WORK_CATS
        framing = end - i  # from after the previous event: separators, line break, braces
        for key, raw in fields:
            if key == "args" and raw.lstrip('"args:').startswith("{"):
                inner, _ = members(raw, raw.index("{"))
                for k, r in inner:
                    per_kind[kind]["args." + k] += len(r)
                    framing -= len(r)
                continue
            per_kind[kind][key] += len(raw)
            framing -= len(raw)
        per_kind[kind]["{}"] += framing
        events_bytes += end - i
        i = end
    total = len(text.encode("utf-8"))
    print(f"{path}: {total} bytes, {sum(counts.values())} events, {launches} launches")
    print(f"per launch: {total / max(1, launches):.1f} bytes ({events_bytes / max(1, launches):.1f} in traceEvents)")
    print(f"{'kind / field':<40} {'bytes/launch':>12} {'share':>7}")
    for kind, fields in sorted(per_kind.items(), key=lambda kv: -sum(kv[1].values())):
        kind_total = sum(fields.values())
        print(f"{kind + f' ({counts[kind]} events)':<40} {kind_total / max(1, launches):12.1f} {100 * kind_total / total:6.1f}%")
        for key, n in sorted(fields.items(), key=lambda kv: -kv[1]):
            print(f"  {key:<38} {n / max(1, launches):12.1f} {100 * n / total:6.1f}%")
    v1 = sum(sum(per_kind[k].values()) for k in ("flow s", "flow f") if k in per_kind)
    v2 = sum(fields.get(k, 0) for kind, fields in per_kind.items() for k in V2_FIELDS)
    per = lambda n: n / max(1, launches)
    print(f"flows: {per(v1 + v2):.1f} bytes/launch ({per(v1):.1f} in v1 s/f events, "
          f"{per(v2):.1f} in v2 bind_id/flow_out/flow_in members)")


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", metavar="TRACE.json[.gz]")
    report(parser.parse_args(argv).trace)
