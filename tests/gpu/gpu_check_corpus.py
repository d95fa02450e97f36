"""gpu-check on a corpus of programs nobody here wrote (scripts/build-corpus builds it from
NVIDIA's cuda-samples), plus two PyTorch programs. gpu_check.py calls corpus_checks()
and torch_nvtx_checks() for `scripts/gpu-check --corpus PATH`:

  scripts/gpu-check --corpus build-corpus --dry-run       # what would run (no GPU needed)
  scripts/gpu-check --corpus build-corpus --corpus-only   # run it, with the exit modes (GPU machine)
  python3 tests/gpu/gpu_check.py --self-test              # the count comparison's unit tests

Each program of DEST/manifest.json runs
  plain     unmodified, static cudart: the reference exit status and stdout
  counter   plain under DEST/libcupti_counter.so (CUDA_INJECTION64_PATH), an independent CUPTI
            activity count of kernels by name, memcpys by kind and memsets
  run       plain under `cuprof run --output T --no-table --`
  header    the binary built with -include cuprof/cuprof.hpp, CUPROF_TRACE=T CUPROF_TABLE=0
  shared    plain-shared (dynamic cudart) under `cuprof run`, where it was built
and each traced mode must: exit as plain did; print plain's stdout (numbers masked for programs
that print timings; cuprof writes only to stderr); write a trace that passes
tests/validate_trace.py --require-gpu; hold the counter's GPU records: kernels per name
(CUPTI's mangled names demangled with libstdc++'s abi::__cxa_demangle through ctypes,
the function cuprof calls), memcpys per copy kind and the memset count.
"""
import collections
import json
import os
import re
import shutil
import subprocess
import sys

# tests/validate_trace.py and tests/trace_schema.py: gpu_check.py, the entry point, puts tests/ on the path.
import validate_trace
from trace_schema import (ARG_EXTERNAL_ID, CAT_GPU_MEMCPY, CAT_GPU_MEMSET, CAT_KERNEL, CAT_USER_ANNOTATION,
                          CUPROF_DROPPED_GPU_RECORDS, KEY_CUPROF, KEY_TRACE_EVENTS)

HERE = os.path.dirname(os.path.abspath(__file__))

RUN_TIMEOUT_S = 120
NUMBER_RE = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


# ------------------------------------------------------------------ pure helpers (unit-tested)
def normalize_stdout(text, mode, exe_paths=()):
    """stdout as compared: the program's own path (some samples print argv[0]) replaced by
    <exe>; 'masked' and 'sorted' mask every number; 'sorted' also sorts the lines."""
    for p in sorted(exe_paths, key=len, reverse=True):
        if p:
            text = text.replace(p, "<exe>")
    if mode in ("masked", "sorted"):
        text = NUMBER_RE.sub("#", text)
    lines = text.splitlines()
    if mode == "sorted":
        lines = sorted(lines)
    return "\n".join(lines)


def first_difference(a, b):
    la, lb = a.splitlines(), b.splitlines()
    for i in range(max(len(la), len(lb))):
        x = la[i] if i < len(la) else "<end>"
        y = lb[i] if i < len(lb) else "<end>"
        if x != y:
            return f"line {i + 1}: {x[:100]!r} != {y[:100]!r}"
    return ""


def memcpy_kind_of(name):
    """'Memcpy HtoD (Pageable -> Device)' -> 'HtoD'."""
    parts = name.split()
    return parts[1] if len(parts) > 1 and parts[0] == "Memcpy" else "Unknown"


# CUPTI's static memory (a module's __device__ variables) is no allocation the program made:
# cuprof leaves it out, the counter counts it.
STATIC_MEMORY_KINDS = ("Device Static", "Managed Static")


def memory_counts(events):
    """{memory kind: {"alloc": n, "free": n, "alloc_bytes": n}} of a trace's [memory] events
    (a pool's change of size, 0 bytes, is neither)."""
    counts = collections.defaultdict(lambda: {"alloc": 0, "free": 0, "alloc_bytes": 0})
    for e in events:
        if e.get("name") != "[memory]" or e.get("ph") != "i":
            continue
        a = e.get("args", {})
        c = counts[a.get("Memory Kind", "Unknown")]
        if a.get("Bytes", 0) > 0:
            c["alloc"] += 1
            c["alloc_bytes"] += a["Bytes"]
        elif a.get("Bytes", 0) < 0:
            c["free"] += 1
    return dict(counts)


MIB = 1 << 20


def memory_findings_problems(events, findings):
    """Where `cuprof insights` memory findings disagree with the trace: "memory not freed" only
    where allocations of 1 MiB or more were not freed, "pageable memcpy" where and only where
    1 MiB or more was copied from or to pageable memory in one direction, "allocation in the
    loop" only with ProfilerStep#N steps. Computed here from the events, not by cuprof's code."""
    live = {}
    for e in sorted((e for e in events if e.get("name") == "[memory]" and e.get("ph") == "i"), key=lambda e: e["ts"]):
        a = e.get("args", {})
        key = (a.get("Device Id"), a.get("Addr"))
        if a.get("Bytes", 0) > 0:
            live[key] = a["Bytes"]
        elif a.get("Bytes", 0) < 0:
            live.pop(key, None)
    unfreed = sum(live.values())
    pageable = collections.Counter()
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == CAT_GPU_MEMCPY and "Pageable" in e.get("name", ""):
            pageable[memcpy_kind_of(e["name"])] += e.get("args", {}).get("bytes", 0)
    steps = any(e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#") for e in events)
    kinds = collections.Counter(f.get("kind") for f in findings)
    problems = []
    if kinds["memory not freed"] and unfreed < MIB:
        problems.append(f"'memory not freed' with {unfreed} bytes unfreed in the trace")
    if kinds["pageable memcpy"] != sum(1 for b in pageable.values() if b >= MIB):
        problems.append(f"{kinds['pageable memcpy']} 'pageable memcpy' findings, pageable bytes by direction {dict(pageable)}")
    if kinds["allocation in the loop"] and not steps:
        problems.append("'allocation in the loop' without steps")
    return problems, {"unfreed_bytes": unfreed, "pageable_bytes": dict(pageable), "memory_findings":
                      {k: n for k, n in kinds.items() if k in ("memory not freed", "pageable memcpy",
                                                               "allocation in the loop", "memory peak")}}


def trace_counts(events):
    """GPU record and allocation counts of a Chrome trace written by cuprof."""
    kernels, memcpy, memset = collections.Counter(), collections.Counter(), 0
    memory = memory_counts(events)
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if cat == CAT_KERNEL:
            kernels[e.get("name", "")] += 1
        elif cat == CAT_GPU_MEMCPY:
            memcpy[memcpy_kind_of(e.get("name", ""))] += 1
        elif cat == CAT_GPU_MEMSET:
            memset += 1
    return {"kernels": dict(kernels), "memcpy": dict(memcpy), "memset": memset, "memory": memory}


def compare_counts(trace, counter, demangle=lambda names: {n: n for n in names}):
    """trace: trace_counts() of a trace (plus 'dropped', cuprof's dropped GPU records);
    counter: the JSON libcupti_counter.so wrote; demangle: mangled names -> {mangled: as cuprof
    names it}. Returns (problems, stats): problems is empty when every count matches."""
    problems = []
    mapping = demangle(list(counter.get("kernels", {})))
    expected = collections.Counter()
    for mangled, n in counter.get("kernels", {}).items():
        expected[mapping.get(mangled, mangled)] += n
    got = collections.Counter(trace.get("kernels", {}))
    for name in sorted(set(expected) | set(got)):
        if expected[name] != got[name]:
            problems.append(f"kernel {name[:80]!r}: counter {expected[name]}, trace {got[name]}")
    exp_copy = collections.Counter(counter.get("memcpy", {}))
    got_copy = collections.Counter(trace.get("memcpy", {}))
    for kind in sorted(set(exp_copy) | set(got_copy)):
        if exp_copy[kind] != got_copy[kind]:
            problems.append(f"memcpy {kind}: counter {exp_copy[kind]}, trace {got_copy[kind]}")
    if counter.get("memset", 0) != trace.get("memset", 0):
        problems.append(f"memset: counter {counter.get('memset', 0)}, trace {trace.get('memset', 0)}")
    memory_compared = trace.get("memory_recorded") and "memory" in counter
    if memory_compared:
        # What a library frees in its own exit teardown (cuFFT its work area) comes after cuprof
        # wrote the trace, which it does before CUDA's teardown: the counter says which frees those are.
        want = {k: dict(v, free=v.get("free", 0) - v.get("free_at_exit", 0)) for k, v in counter["memory"].items()
                if k not in STATIC_MEMORY_KINDS}
        have = trace.get("memory", {})
        for kind in sorted(set(want) | set(have)):
            w, h = want.get(kind, {}), have.get(kind, {})
            for field in ("alloc", "free", "alloc_bytes"):
                if w.get(field, 0) != h.get(field, 0):
                    problems.append(f"memory {kind} {field}: counter {w.get(field, 0)}, trace {h.get(field, 0)}")
    if counter.get("dropped", 0):
        problems.append(f"the counter lost {counter['dropped']} records")
    if trace.get("dropped", 0):
        problems.append(f"cuprof lost {trace['dropped']} records")
    stats = {"kernels": sum(got.values()), "kernel_names": len(got), "counter_kernels": sum(expected.values()),
             "memcpy": sum(got_copy.values()), "counter_memcpy": sum(exp_copy.values()),
             "memset": trace.get("memset", 0), "counter_memset": counter.get("memset", 0)}
    if memory_compared:
        stats["allocations"] = sum(c["alloc"] for c in trace.get("memory", {}).values())
        stats["frees"] = sum(c["free"] for c in trace.get("memory", {}).values())
        stats["allocations_by_kind"] = {k: c["alloc"] for k, c in trace.get("memory", {}).items() if c["alloc"]}
        stats["counter_frees_at_exit"] = sum(c.get("free_at_exit", 0) for k, c in counter["memory"].items()
                                             if k not in STATIC_MEMORY_KINDS)
    return problems, stats


def cxa_demangle(names):
    """{mangled: demangled} through libstdc++'s abi::__cxa_demangle (ctypes), the function cuprof
    calls, so names come out as cuprof writes them (c++filt differs: it spells std::string as
    std::basic_string<...> and leaves type names like 'i' alone). A name it cannot demangle stays
    as it is, as in cuprof. Falls back to c++filt when libstdc++ cannot be loaded."""
    import ctypes
    import ctypes.util
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = lib.__cxa_demangle
    except (OSError, AttributeError):
        return cxxfilt_demangle(names)
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    libc.free.argtypes = [ctypes.c_void_p]
    out = {}
    for n in names:
        status = ctypes.c_int(1)
        ptr = fn(n.encode(errors="surrogateescape"), None, None, ctypes.byref(status))
        if status.value == 0 and ptr:
            out[n] = ctypes.string_at(ptr).decode(errors="replace")
        else:
            out[n] = n
        if ptr:
            libc.free(ptr)
    return out


def cxxfilt_demangle(names):
    """{mangled: demangled} through c++filt (binutils): only where libstdc++ cannot be loaded."""
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    proc = subprocess.run([tool], input="\n".join(names) + "\n", capture_output=True, text=True)
    out = proc.stdout.splitlines()
    if proc.returncode != 0 or len(out) != len(names):
        return {n: n for n in names}
    return dict(zip(names, out))


# ------------------------------------------------------------------ running
CLEAN_ENV = ("CUPROF_TRACE", "CUPROF_TABLE", "CUPROF_ACTIVITIES", "CUPROF_DELAY", "CUPROF_DURATION", "CUPROF_MEMORY",
             "CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "CUPTI_COUNTER_OUT", "CUPTI_COUNTER_MEMORY",
             "CUPTI_COUNTER_MEMORY_LOG")


def run_logged(cmd, out, log_name, env=None, cwd=None, timeout=RUN_TIMEOUT_S, unset=CLEAN_ENV):
    """Runs cmd without any tracing variable inherited (each mode sets its own in env); writes
    OUT/log_name.log; returns (exit status or 'timeout', stdout, stderr)."""
    full_env = {k: v for k, v in os.environ.items() if k not in unset}
    full_env.update(env or {})
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=full_env, cwd=cwd, timeout=timeout,
                              errors="replace")
        rc, so, se = proc.returncode, proc.stdout, proc.stderr
    except OSError as e:  # a binary that was not built: that mode fails, the others still run
        rc, so, se = "not run", "", f"{type(e).__name__}: {e}"
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        so = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        se = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    with open(os.path.join(out, log_name + ".log"), "w") as f:
        envs = " ".join(f"{k}={v}" for k, v in (env or {}).items())
        f.write(f"$ {envs} {' '.join(cmd)}\n(cwd {cwd or os.getcwd()})\nexit {rc}\n--- stdout\n{so}\n--- stderr\n{se}")
    return rc, so, se


def unresolved_libraries(path):
    """Libraries ldd cannot find for path ('libcublas.so.13 => not found'); [] when ldd is missing."""
    if not shutil.which("ldd") or not os.path.exists(path):
        return []
    proc = subprocess.run(["ldd", path], capture_output=True, text=True)
    return [l.split()[0] for l in proc.stdout.splitlines() if "not found" in l]


def plan(manifest, corpus, build, out):
    """Every run of every program: [(program, mode, cmd, env, cwd, trace or counter path)]."""
    cli = os.path.join(build, "tools", "cuprof")
    counter_lib = os.path.join(corpus, manifest.get("counter") or "libcupti_counter.so")
    runs = []
    for p in manifest["programs"]:
        name, args = p["name"], p.get("args", [])
        cwd = os.path.join(corpus, p["cwd"]) if p.get("cwd") else None
        b = {v: os.path.join(corpus, path) for v, path in p["binaries"].items()}
        pdir = os.path.join(out, "corpus", name)
        r = []
        if "plain" in b:
            r.append((name, "plain", [b["plain"], *args], {}, cwd, None))
            cnt = os.path.join(pdir, "counter.json")
            # Each allocation and free the counter saw, kept beside the counts: where a count differs
            # from cuprof's, the record (address, size, correlation, time) says which one.
            r.append((name, "counter", [b["plain"], *args],
                      {"CUDA_INJECTION64_PATH": counter_lib, "CUPTI_COUNTER_OUT": cnt, "CUPTI_COUNTER_MEMORY": "1",
                       "CUPTI_COUNTER_MEMORY_LOG": os.path.join(pdir, "counter_memory.jsonl")}, cwd, cnt))
            t = os.path.join(pdir, "run.json")
            r.append((name, "run", [cli, "run", "--output", t, "--no-table", "--", b["plain"], *args], {}, cwd, t))
        if "header" in b:
            t = os.path.join(pdir, "header.json")
            # Allocations recorded too (as in "shared"), compared with the counter's.
            r.append((name, "header", [b["header"], *args], {"CUPROF_TRACE": t, "CUPROF_TABLE": "0", "CUPROF_MEMORY": "1"},
                      cwd, t))
        if "plain-shared" in b:
            r.append((name, "shared-plain", [b["plain-shared"], *args], {}, cwd, None))
            t = os.path.join(pdir, "shared_run.json")
            # This one records allocations too: they are compared with the counter's.
            r.append((name, "shared", [cli, "run", "--memory", "--output", t, "--no-table", "--", b["plain-shared"],
                                       *args], {}, cwd, t))
        runs.append((p, r))
    return runs


def trace_verdict(path, counter, demangle):
    """(valid problems, count problems, stats) of one trace against the counter's JSON."""
    if not path or not os.path.exists(path):
        return ["no trace written"], ["no trace"], {}
    raw, obj = validate_trace.load_trace(path)
    problems = validate_trace.validate(raw, obj, require_gpu=True)
    if obj is None:
        return problems or ["not JSON"], ["unreadable"], {}
    counts = trace_counts(obj.get(KEY_TRACE_EVENTS, []))
    counts["dropped"] = obj.get(KEY_CUPROF, {}).get(CUPROF_DROPPED_GPU_RECORDS, 0)
    counts["memory_recorded"] = obj.get("profile_memory") == 1
    if counter is None:
        return problems, ["no counter JSON to compare with"], {"kernels": sum(counts["kernels"].values())}
    count_problems, stats = compare_counts(counts, counter, demangle)
    return problems, count_problems, stats


def check_program(p, runs, corpus, out, check, timeout, demangle):
    """Runs one manifest program every way and checks it; returns its summary row."""
    name = p["name"]
    pdir = os.path.join(out, "corpus", name)
    os.makedirs(pdir, exist_ok=True)
    exe_paths = [os.path.join(corpus, v) for v in p["binaries"].values()]
    unresolved = {os.path.relpath(e, corpus): unresolved_libraries(e) for e in exe_paths}
    unresolved = {k: v for k, v in unresolved.items() if v}
    if unresolved:
        check(f"corpus {name}: every library of its binaries is found (ldd)", False, f"{unresolved}")
    mode_stdout = p.get("stdout", "masked" if p.get("timing") else "exact")
    res = {}
    for (_, mode, cmd, env, cwd, path) in runs:
        rc, so, se = run_logged(cmd, pdir, mode, env=env, cwd=cwd, timeout=timeout)
        res[mode] = {"exit": rc, "stdout": normalize_stdout(so, mode_stdout, exe_paths), "stderr": se, "path": path}
    row = {"program": name, "stdout_mode": mode_stdout}
    plain = res.get("plain", {})
    row["plain_exit"] = plain.get("exit")
    counter = None
    c = res.get("counter")
    if c:
        if c["path"] and os.path.exists(c["path"]):
            try:
                with open(c["path"]) as f:
                    counter = json.load(f)
            except ValueError as e:  # cut short: the process died while the counter wrote it
                c["stderr"] += f"\ncounter JSON unreadable: {e}"
        row["counter"] = {"exit": c["exit"],
                          "kernels": sum(counter["kernels"].values()) if counter else None,
                          "memcpy": sum(counter["memcpy"].values()) if counter else None,
                          "memset": counter["memset"] if counter else None,
                          "init_error": counter.get("init_error") if counter else None}
        check(f"corpus {name}: counter: exit as plain, stdout as plain, counter JSON written with kernels",
              c["exit"] == plain.get("exit") and c["stdout"] == plain.get("stdout") and counter is not None
              and not counter.get("init_error") and sum(counter["kernels"].values()) > 0,
              f"exit {c['exit']} (plain {plain.get('exit')}); "
              + (f"counter {row['counter']}" if counter else f"no JSON; {c['stderr'].strip()[-200:]}")
              + ("" if c["stdout"] == plain.get("stdout") else
                 f"; stdout differs: {first_difference(plain.get('stdout', ''), c['stdout'])}"))
    for mode, ref in (("run", "plain"), ("header", "plain"), ("shared", "shared-plain")):
        r = res.get(mode)
        if r is None:
            continue
        refr = res.get(ref, {})
        exit_ok = r["exit"] == refr.get("exit")
        stdout_ok = r["stdout"] == refr.get("stdout")
        valid, count_problems, stats = trace_verdict(r["path"], counter, demangle)
        row[mode] = {"exit": r["exit"], "exit_ok": exit_ok, "stdout_ok": stdout_ok, "valid": not valid,
                     "counts_ok": not count_problems, "stats": stats,
                     "problems": (valid + count_problems)[:10]}
        tail = [l for l in r["stderr"].splitlines() if l.strip()][-3:]
        what = {"run": "cuprof run (static cudart)", "header": "header mode (CUPROF_TRACE)",
                "shared": "cuprof run (-cudart shared)"}[mode]
        check(f"corpus {name}: {what}: exit status and stdout as {ref}",
              exit_ok and stdout_ok,
              f"exit {r['exit']} ({ref} {refr.get('exit')})"
              + ("" if stdout_ok else f"; stdout differs: {first_difference(refr.get('stdout', ''), r['stdout'])}")
              + ("" if exit_ok else f"; stderr: {' | '.join(tail)[:300]}"))
        check(f"corpus {name}: {what}: trace written and valid (validate_trace --require-gpu)",
              not valid, "; ".join(valid[:3]))
        hint = ""
        if count_problems and "counter_kernels" in stats and stats["kernels"] > stats["counter_kernels"]:
            hint = ("; the trace has more kernels than the counter: work after the counter's exit flush "
                    "(launched from exit handlers or static destructors?)")
        elif count_problems and "counter_kernels" in stats and stats["kernels"] < stats["counter_kernels"]:
            hint = "; the trace has fewer kernels than the counter: records lost (at exit?)"
        check(f"corpus {name}: {what}: GPU records equal the CUPTI counter's (kernels by name, memcpy by kind, "
              "memsets" + (", allocations and frees by memory kind)" if mode in ("header", "shared") else ")"), not count_problems,
              f"{stats.get('kernels')} kernels, {stats.get('memcpy')} memcpy, {stats.get('memset')} memset"
              + (f", {stats['allocations']} allocations, {stats['frees']} frees" if "allocations" in stats else "")
              + (f" (and {stats['counter_frees_at_exit']} the counter saw in exit teardown, after the trace)"
                 if stats.get("counter_frees_at_exit") else "")
              + (f"; {'; '.join(count_problems[:4])}" if count_problems else "") + hint)
    cli = next((cmd[0] for (_, mode, cmd, _, _, _) in runs if mode == "run"), None)
    for mode in ("header", "shared"):  # the runs that recorded memory
        r = res.get(mode)
        if not cli or not r or not r["path"] or not os.path.exists(r["path"]):
            continue
        rc, so, se = run_logged([cli, "insights", r["path"], "--format", "json"], pdir, f"{mode}_insights")
        findings = json.loads(so).get("findings", []) if rc == 0 else []
        _, obj = validate_trace.load_trace(r["path"])
        problems, seen = memory_findings_problems(obj.get(KEY_TRACE_EVENTS, []) if obj else [], findings)
        row.setdefault("memory_insights", {})[mode] = seen
        check(f"corpus {name}: {mode}: memory insights agree with its trace (silent where it frees all, copies no "
              "pageable memory, has no steps)", rc == 0 and not problems,
              f"{seen}" + (f"; {problems}" if problems else "") + ("" if rc == 0 else f"; insights exit {rc}: {se[-200:]}"))
    return row


def corpus_checks(corpus, build, out, summary, check, timeout=RUN_TIMEOUT_S, only=None, demangle=cxa_demangle,
                  show_table=True):
    corpus, build, out = os.path.abspath(corpus), os.path.abspath(build), os.path.abspath(out)
    with open(os.path.join(corpus, "manifest.json")) as f:
        manifest = json.load(f)
    cli = os.path.join(build, "tools", "cuprof")
    check("corpus: manifest lists programs, the counter and the cuprof CLI are there",
          manifest["programs"] and os.path.exists(os.path.join(corpus, manifest.get("counter") or "-"))
          and os.access(cli, os.X_OK),
          f"{len(manifest['programs'])} programs ({len(manifest.get('failed', []))} failed to build), "
          f"counter {manifest.get('counter')}, cli {cli}")
    probe = demangle(["_Z6vecAddPKfS0_Pfi"])
    check("corpus: the counter's kernel names can be demangled as cuprof does (abi::__cxa_demangle)",
          probe.get("_Z6vecAddPKfS0_Pfi") == "vecAdd(float const*, float const*, float*, int)", f"{probe}")
    rows = []
    for p, runs in plan(manifest, corpus, build, out):
        name = p["name"]
        if only and name not in only:
            continue
        try:
            rows.append(check_program(p, runs, corpus, out, check, timeout, demangle))
        except Exception as e:  # one program's surprise is a failed check, not the end of the corpus
            check(f"corpus {name}: checked to the end", False, f"{type(e).__name__}: {e}")
            rows.append({"program": name, "plain_exit": f"checker error: {type(e).__name__}"})
    summary["corpus"] = {"manifest": os.path.join(corpus, "manifest.json"), "commit": manifest.get("commit"),
                         "failed_to_build": manifest.get("failed", []), "rows": rows}
    if show_table:
        print_table(rows)
    return rows


def cell(r):
    if r is None:
        return "-"
    st = r["stats"]
    counts = "counts ok" if r["counts_ok"] else (
        f"counts DIFF k{st.get('kernels', '?')}/{st.get('counter_kernels', '?')} "
        f"c{st.get('memcpy', '?')}/{st.get('counter_memcpy', '?')} s{st.get('memset', '?')}/{st.get('counter_memset', '?')}")
    out = "out ok" if r["stdout_ok"] else "out DIFF"
    return f"{r['exit']}{'' if r['exit_ok'] else '!'} {'valid' if r['valid'] else 'INVALID'} {counts} {out}"


def print_table(rows):
    """One row per program; a cell: exit status ('!': not the reference run's), trace valid,
    counts (DIFF kT/C cT/C sT/C: kernels, memcpys, memsets in the trace / in the counter), stdout."""
    if not rows:
        return
    head = ("program", "plain exit", "counter k/cpy/set", "run: exit/valid/counts", "header: exit/valid/counts",
            "shared: exit/valid/counts")
    lines = []
    for r in rows:
        c = r.get("counter") or {}
        lines.append((r["program"], str(r.get("plain_exit")),
                      f"{c.get('kernels')}/{c.get('memcpy')}/{c.get('memset')}" if c else "-",
                      cell(r.get("run")), cell(r.get("header")), cell(r.get("shared"))))
    widths = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
    fmt = " | ".join(f"{{:<{w}}}" for w in widths)
    print("\n== corpus ==")
    print(fmt.format(*head))
    print("-+-".join("-" * w for w in widths))
    for line in lines:
        print(fmt.format(*line))
    print(flush=True)


# ------------------------------------------------------------------ PyTorch under cuprof run
def spans_by_id(events):
    return {e["args"][ARG_EXTERNAL_ID]: e for e in events
            if e.get("ph") == "X" and e.get("cat") == CAT_USER_ANNOTATION and ARG_EXTERNAL_ID in e.get("args", {})}


def kernels_under(events, predicate):
    """Kernels whose launching range (args 'External id') is a user_annotation whose name
    satisfies predicate, or is nested in one (same thread, enclosing)."""
    spans = spans_by_id(events)
    by_tid = collections.defaultdict(list)
    for s in spans.values():
        by_tid[(s["pid"], s["tid"])].append(s)
    hits = collections.Counter()
    for k in (e for e in events if e.get("ph") == "X" and e.get("cat") == CAT_KERNEL):
        s = spans.get(k.get("args", {}).get(ARG_EXTERNAL_ID))
        if s is None:
            continue
        chain = [x for x in by_tid[(s["pid"], s["tid"])]
                 if x["ts"] <= s["ts"] and x["ts"] + x["dur"] >= s["ts"] + s["dur"]]
        for x in chain:
            if predicate(x["name"]):
                hits[x["name"]] += 1
                break
    return hits


def torch_with_cuda():
    """Whether this Python imports torch with a CUDA device (the PyTorch programs' checks need it)."""
    return subprocess.run([sys.executable, "-c", "import torch; assert torch.cuda.is_available()"],
                          capture_output=True).returncode == 0


def torch_nvtx_checks(build, out, summary, check, timeout=300):
    if not check("torch: importable with CUDA (for the NVTX checks)", torch_with_cuda()):
        return
    cli = os.path.abspath(os.path.join(build, "tools", "cuprof"))
    tdir = os.path.join(out, "torch_nvtx")
    os.makedirs(tdir, exist_ok=True)
    step_py = os.path.join(HERE, "torch_train_step.py")
    emit_py = os.path.join(HERE, "torch_emit_nvtx.py")
    res = summary.setdefault("torch_nvtx", {})

    rc0, so0, _ = run_logged([sys.executable, step_py], tdir, "train_plain", timeout=timeout)
    trace = os.path.join(tdir, "train_run.json")
    rc1, so1, se1 = run_logged([cli, "run", "--output", trace, "--no-table", "--", sys.executable, step_py],
                               tdir, "train_run", timeout=timeout)
    check("torch_train_step.py under cuprof run: exit status and stdout as plain",
          rc0 == 0 and rc1 == rc0 and so1 == so0,
          f"exit {rc1} (plain {rc0}); {first_difference(so0, so1) or 'same output'}; {se1.strip()[-200:] if rc1 else ''}")
    if os.path.exists(trace):
        raw, obj = validate_trace.load_trace(trace)
        problems = validate_trace.validate(raw, obj, require_gpu=True)
        check("torch_train_step.py: trace valid", not problems, "; ".join(problems[:3]))
        events = obj[KEY_TRACE_EVENTS] if obj else []
        names = collections.Counter(s["name"] for s in spans_by_id(events).values())
        steps = sum(1 for n in names if re.fullmatch(r"step \d+", n))
        phases = {p: names.get(p, 0) for p in ("forward", "backward", "optimizer")}
        hits = kernels_under(events, lambda n: n in ("forward", "backward", "optimizer"))
        res["train_step"] = {"steps": steps, "phases": phases, "kernels_under": dict(hits),
                             "kernels": sum(1 for e in events if e.get("cat") == CAT_KERNEL)}
        expected_steps = int(re.search(r"steps=(\d+)", so0).group(1)) if re.search(r"steps=(\d+)", so0) else 0
        check("torch_train_step.py: every NVTX range (step N, forward, backward, optimizer) is a user_annotation",
              expected_steps > 0 and steps == expected_steps and all(v == expected_steps for v in phases.values()),
              f"{steps} step ranges (expected {expected_steps}), phases {phases}")
        # backward kernels are launched by autograd's device thread: no range of the main thread owns them.
        check("torch_train_step.py: kernels attributed to the forward and optimizer NVTX ranges",
              hits.get("forward", 0) > 0 and hits.get("optimizer", 0) > 0, f"kernels under ranges {dict(hits)}")
    else:
        check("torch_train_step.py: trace written", False, se1.strip()[-300:])

    trace = os.path.join(tdir, "emit_nvtx_run.json")
    rc0, so0, _ = run_logged([sys.executable, emit_py], tdir, "emit_nvtx_plain", timeout=timeout)
    rc2, so2, se2 = run_logged([cli, "run", "--output", trace, "--no-table", "--", sys.executable, emit_py],
                               tdir, "emit_nvtx_run", timeout=timeout)
    check("torch_emit_nvtx.py under cuprof run: exit status and stdout as plain",
          rc0 == 0 and rc2 == rc0 and so2 == so0,
          f"exit {rc2} (plain {rc0}); {first_difference(so0, so2) or 'same output'}; {se2.strip()[-200:] if rc2 else ''}")
    if os.path.exists(trace):
        raw, obj = validate_trace.load_trace(trace)
        problems = validate_trace.validate(raw, obj, require_gpu=True)
        check("torch_emit_nvtx.py: trace valid", not problems, "; ".join(problems[:3]))
        events = obj[KEY_TRACE_EVENTS] if obj else []
        aten = [s for s in spans_by_id(events).values() if s["name"].startswith("aten::")]
        hits = kernels_under(events, lambda n: n.startswith("aten::"))
        res["emit_nvtx"] = {"aten_ranges": len(aten), "kernels_under_aten": sum(hits.values()),
                            "kernels": sum(1 for e in events if e.get("cat") == CAT_KERNEL),
                            "top": dict(hits.most_common(5))}
        check("torch_emit_nvtx.py: emit_nvtx's aten:: ranges appear as user_annotation events and own kernels",
              len(aten) > 0 and sum(hits.values()) > 0,
              f"{len(aten)} aten ranges, {sum(hits.values())} kernels under them, e.g. {dict(hits.most_common(3))}")
    else:
        check("torch_emit_nvtx.py: trace written", False, se2.strip()[-300:])


# ------------------------------------------------------------------ self-test
def run_self_test():
    import unittest

    def ev(cat, name, **args):
        return {"ph": "X", "cat": cat, "name": name, "ts": 0, "dur": 1, "pid": 0, "tid": 7, "args": args}

    class Tests(unittest.TestCase):
        counter = {"kernels": {"_Z6vecAddPKfS0_Pfi": 2, "nvjet_sm90_tst": 1}, "memcpy": {"HtoD": 2, "DtoH": 1},
                   "memcpy_by_enum": {"1": 2, "2": 1}, "memset": 1, "dropped": 0}
        names = {"_Z6vecAddPKfS0_Pfi": "vecAdd(float const*, float const*, float*, int)"}

        def demangle(self, names):
            return {n: self.names.get(n, n) for n in names}

        def events(self):
            return [ev("kernel", "vecAdd(float const*, float const*, float*, int)"),
                    ev("kernel", "vecAdd(float const*, float const*, float*, int)"),
                    ev("kernel", "nvjet_sm90_tst"),
                    ev("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)"),
                    ev("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)"),
                    ev("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)"),
                    ev("gpu_memset", "Memset (Device)"),
                    ev("cuda_runtime", "cudaLaunchKernel"),
                    {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}]

        def test_equal_counts_pass(self):
            problems, stats = compare_counts(trace_counts(self.events()), self.counter, self.demangle)
            self.assertEqual(problems, [])
            self.assertEqual(stats["kernels"], 3)
            self.assertEqual(stats["counter_memcpy"], 3)

        def test_missing_kernel_fails_by_name(self):
            events = self.events()
            del events[1]
            problems, _ = compare_counts(trace_counts(events), self.counter, self.demangle)
            self.assertEqual(len(problems), 1)
            self.assertIn("vecAdd", problems[0])
            self.assertIn("counter 2, trace 1", problems[0])

        def test_undemangled_name_is_a_mismatch(self):
            problems, _ = compare_counts(trace_counts(self.events()), self.counter)  # identity demangle
            self.assertEqual(len(problems), 2)

        def test_extra_kernel_in_trace_fails(self):
            events = self.events() + [ev("kernel", "cuprof_own_kernel")]
            problems, _ = compare_counts(trace_counts(events), self.counter, self.demangle)
            self.assertEqual(problems, ["kernel 'cuprof_own_kernel': counter 0, trace 1"])

        def test_memcpy_kind_and_memset(self):
            events = [e for e in self.events() if e["name"] != "Memcpy DtoH (Device -> Pageable)" and e.get("cat") != "gpu_memset"]
            problems, _ = compare_counts(trace_counts(events), self.counter, self.demangle)
            self.assertEqual(problems, ["memcpy DtoH: counter 1, trace 0", "memset: counter 1, trace 0"])

        def test_memory_counted_by_kind_against_the_counter(self):
            def mem(kind, nbytes, addr):
                return {"ph": "i", "name": "[memory]", "ts": addr, "args": {"Bytes": nbytes, "Memory Kind": kind,
                                                                           "Device Id": 0, "Addr": addr}}
            events = self.events() + [mem("Device", 4096, 1), mem("Device", -4096, 1), mem("Pinned", 64, 2),
                                      mem("Device", 0, 3)]  # a pool's change of size: neither
            counts = trace_counts(events)
            counts["memory_recorded"] = True
            counter = dict(self.counter, memory={"Device": {"alloc": 1, "free": 1, "alloc_bytes": 4096},
                                                 "Pinned": {"alloc": 1, "free": 0, "alloc_bytes": 64},
                                                 "Device Static": {"alloc": 9, "free": 0, "alloc_bytes": 900}})
            problems, stats = compare_counts(counts, counter, self.demangle)
            self.assertEqual(problems, [])
            self.assertEqual((stats["allocations"], stats["frees"]), (2, 1))
            counter["memory"]["Pinned"]["free"] = 1
            problems, _ = compare_counts(counts, counter, self.demangle)
            self.assertEqual(problems, ["memory Pinned free: counter 1, trace 0"])
            # A free the counter saw in a library's exit teardown, after cuprof's trace: not a difference.
            counter["memory"]["Pinned"]["free_at_exit"] = 1
            problems, stats = compare_counts(counts, counter, self.demangle)
            self.assertEqual((problems, stats["counter_frees_at_exit"]), ([], 1))

        def test_memory_findings_checked_against_the_trace(self):
            def mem(nbytes, addr):
                return {"ph": "i", "name": "[memory]", "ts": 1, "args": {"Bytes": nbytes, "Device Id": 0, "Addr": addr}}
            copy = ev("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", bytes=2 * MIB)
            freed = [mem(2 * MIB, 1), mem(-2 * MIB, 1), copy]
            self.assertEqual(memory_findings_problems(freed, [{"kind": "pageable memcpy"}])[0], [])
            problems, seen = memory_findings_problems(freed, [{"kind": "memory not freed"}])
            self.assertEqual(len(problems), 2)  # nothing unfreed, and the pageable copy not reported
            self.assertEqual(seen["unfreed_bytes"], 0)
            self.assertEqual(memory_findings_problems([mem(2 * MIB, 1)], [{"kind": "memory not freed"}])[0], [])
            self.assertEqual(len(memory_findings_problems([], [{"kind": "allocation in the loop"}])[0]), 1)

        def test_dropped_records_reported(self):
            counts = trace_counts(self.events())
            counts["dropped"] = 5
            problems, _ = compare_counts(counts, dict(self.counter, dropped=2), self.demangle)
            self.assertEqual(problems, ["the counter lost 2 records", "cuprof lost 5 records"])

        def test_cxa_demangle_as_cuprof(self):
            d = cxa_demangle(["_Z6vecAddPKfS0_Pfi", "_Z1fSs", "nvjet_sm90_tst", "_Z10matrixMulCILi32EEvPfS0_S0_ii"])
            self.assertEqual(d["_Z6vecAddPKfS0_Pfi"], "vecAdd(float const*, float const*, float*, int)")
            self.assertEqual(d["_Z1fSs"], "f(std::string)")  # c++filt would say std::basic_string<...>
            self.assertEqual(d["nvjet_sm90_tst"], "nvjet_sm90_tst")
            self.assertEqual(d["_Z10matrixMulCILi32EEvPfS0_S0_ii"], "void matrixMulC<32>(float*, float*, float*, int, int)")

        def test_memcpy_kind_of(self):
            self.assertEqual(memcpy_kind_of("Memcpy PtoP (Device -> Device)"), "PtoP")
            self.assertEqual(memcpy_kind_of("Memset (Device)"), "Unknown")

        def test_normalize_stdout(self):
            a = "[/c/plain/asyncAPI] - Starting...\ntime spent by GPU: 12.50\nsum 3e-05\n"
            b = "[/c/header/asyncAPI] - Starting...\ntime spent by GPU: 9.1\nsum 4.1e-05\n"
            paths = ["/c/plain/asyncAPI", "/c/header/asyncAPI"]
            self.assertEqual(normalize_stdout(a, "masked", paths), normalize_stdout(b, "masked", paths))
            self.assertNotEqual(normalize_stdout(a, "exact", paths), normalize_stdout(b, "exact", paths))
            self.assertEqual(normalize_stdout("b 1\na 2\n", "sorted"), normalize_stdout("a 3\nb 4\n", "sorted"))
            self.assertEqual(first_difference("x\ny", "x\nz"), "line 2: 'y' != 'z'")

        def test_kernels_under_nested_ranges(self):
            s1 = {"ph": "X", "cat": "user_annotation", "name": "step 0", "ts": 0, "dur": 100, "pid": 1, "tid": 1,
                  "args": {"External id": 1}}
            s2 = {"ph": "X", "cat": "user_annotation", "name": "forward", "ts": 10, "dur": 20, "pid": 1, "tid": 1,
                  "args": {"External id": 2}}
            s3 = {"ph": "X", "cat": "user_annotation", "name": "aten::addmm", "ts": 12, "dur": 5, "pid": 1, "tid": 1,
                  "args": {"External id": 3}}
            k = [ev("kernel", "gemm", **{"External id": 3}), ev("kernel", "relu", **{"External id": 2}),
                 ev("kernel", "init", **{"External id": 1}), ev("kernel", "free")]
            self.assertEqual(kernels_under([s1, s2, s3, *k], lambda n: n == "forward"), {"forward": 2})
            self.assertEqual(kernels_under([s1, s2, s3, *k], lambda n: n.startswith("aten::")), {"aten::addmm": 1})

        def test_plan_lists_every_mode(self):
            manifest = {"counter": "libcupti_counter.so",
                        "programs": [{"name": "vectorAdd", "args": ["-n", "8"], "cwd": None, "stdout": "exact",
                                      "binaries": {"plain": "plain/vectorAdd", "header": "header/vectorAdd",
                                                   "plain-shared": "plain-shared/vectorAdd"}}]}
            (_, runs), = plan(manifest, "/c", "/b", "/o")
            self.assertEqual([r[1] for r in runs], ["plain", "counter", "run", "header", "shared-plain", "shared"])
            self.assertEqual(runs[2][2][:5], ["/b/tools/cuprof", "run", "--output", "/o/corpus/vectorAdd/run.json", "--no-table"])
            self.assertEqual(runs[1][3]["CUDA_INJECTION64_PATH"], "/c/libcupti_counter.so")
            self.assertEqual(runs[3][3], {"CUPROF_TRACE": "/o/corpus/vectorAdd/header.json", "CUPROF_TABLE": "0",
                                          "CUPROF_MEMORY": "1"})

    import io
    stream = io.StringIO()
    result = unittest.TextTestRunner(stream=stream, verbosity=2).run(unittest.defaultTestLoader.loadTestsFromTestCase(Tests))
    sys.stdout.write(stream.getvalue())
    failed = len(result.failures) + len(result.errors)
    print(f"gpu_check --self-test: {result.testsRun - failed} passed, {failed} failed")
    return 0 if failed == 0 else 1


def dry_run(corpus, build, out, only=None):
    corpus, build, out = os.path.abspath(corpus), os.path.abspath(build), os.path.abspath(out)
    with open(os.path.join(corpus, "manifest.json")) as f:
        manifest = json.load(f)
    missing = []
    for p, runs in plan(manifest, corpus, build, out):
        if only and p["name"] not in only:
            continue
        print(f"# {p['name']} (stdout {p.get('stdout')}{', cwd ' + p['cwd'] if p.get('cwd') else ''})")
        for (_, mode, cmd, env, cwd, path) in runs:
            envs = " ".join(f"{k}={v}" for k, v in env.items())
            print(f"  {mode:13s} {envs + ' ' if envs else ''}{' '.join(cmd)}")
        missing += [b for b in p["binaries"].values() if not os.path.exists(os.path.join(corpus, b))]
        missing += [f"{b}: {lib}" for b in p["binaries"].values() for lib in unresolved_libraries(os.path.join(corpus, b))]
    counter = os.path.join(corpus, manifest.get("counter") or "libcupti_counter.so")
    for path in (counter, os.path.join(build, "tools", "cuprof"), os.path.join(build, "tools", "libcuprof_inject.so")):
        if not os.path.exists(path):
            missing.append(path)
    print(f"# {len(manifest['programs'])} programs; failed to build: "
          f"{', '.join(f['name'] for f in manifest.get('failed', [])) or 'none'}")
    print(f"# missing: {', '.join(missing) if missing else 'nothing'}")
    return 1 if missing else 0

