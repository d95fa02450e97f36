"""gpu_check part: a multi-GPU job (scripts/gpu-check --ranks N). tests/gpu/torch_ddp_step.py,
PyTorch DDP over NCCL under torchrun, rank 1 a known straggler, a side stream that waits on an
event, is run

  plain         the output the traced runs must print again,
  counter       under the independent CUPTI counter (libcupti_counter.so), one count per rank,
  traced        under `cuprof run`, the whole run: one trace per rank, nothing from torchrun,
  window        `cuprof run --start-step 4 --steps 3`: every rank's window is steps 4 to 6,
  torch         torch.profiler's own traces of steps 4 to 6 (what HTA is compared on),

and each traced rank is checked against the counter (kernels by name), for its backend, its
collectives' metadata, its clock base (one for the job) and its sync events' wait_on_* args; then
`cuprof insights` reads the directory of ranks. HTA does not run here (no network on the GPU
machine): scripts/test-hta runs it on these traces, kept as fixtures (tests/data/ranks)."""
import collections
import glob
import gzip
import json
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "torch_ddp_step.py")
STEPS = 12
WINDOW_START, WINDOW_STEPS = 4, 3


def load_events(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def counter_library(build, corpus):
    for d in ([corpus] if corpus else []) + [os.path.join(build, "lib")]:
        p = os.path.join(d, "libcupti_counter.so")
        if os.path.exists(p):
            return p
    return None


def kernels_by_name(events):
    return collections.Counter(e["name"] for e in events if e.get("cat") == "kernel")


def step_ranges(events):
    """The steps of a trace, as the ProfilerStep#N spans cuprof writes for the program's steps: {N: event}."""
    out = {}
    for e in events:
        m = re.fullmatch(r"ProfilerStep#(\d+)", e.get("name", ""))
        if m and e.get("ph") == "X":
            out[int(m.group(1))] = e
    return out


def ranks_checks(build, out, summary, check, run, corpus, nranks):
    work = os.path.join(out, "ranks")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cli = os.path.join(build, "tools", "cuprof")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nranks}"]
    job = [*torchrun, SCRIPT, "--steps", str(STEPS), "--slow-rank", "1", "--side-stream"]
    result = summary.setdefault("ranks", {"ranks": nranks})

    plain = run(job, work, "plain", timeout=300)
    losses = re.search(r"^losses .*$", plain.stdout, re.M)
    if not check(f"ranks: the DDP job runs plain on {nranks} GPUs", plain.returncode == 0 and losses,
                 f"exit {plain.returncode}; {plain.stderr[-300:]}"):
        return
    expected_out = losses.group(0)

    # The independent count, one file per process.
    counts = {}
    lib = counter_library(build, corpus)
    if lib:
        counted = run(job, work, "counter", timeout=300,
                      env={"CUDA_INJECTION64_PATH": lib, "CUPTI_COUNTER_OUT": os.path.join(work, "counter_%p.json")})
        for path in glob.glob(os.path.join(work, "counter_*.json")):
            c = json.load(open(path))
            if c.get("rank", -1) >= 0:  # the launcher (torchrun asks CUDA for the GPUs' count) has no rank
                counts[c["rank"]] = c
        check("ranks: the counter counted every rank", counted.returncode == 0 and sorted(counts) == list(range(nranks)),
              f"exit {counted.returncode}, ranks {sorted(counts)}")
    else:
        check("ranks: libcupti_counter.so found (gpu-check --build-only puts it in build/lib)", False, build)

    # The whole run traced: one trace per rank, the launcher writes nothing.
    traced_dir = os.path.join(work, "cuprof")
    os.makedirs(traced_dir)
    traced = run([cli, "run", "--no-table", "--output", os.path.join(traced_dir, "rank%r.json"), "--", *job], work, "traced",
                 timeout=300)
    files = sorted(os.listdir(traced_dir))
    check("ranks: traced, the job's exit status and output are unchanged",
          traced.returncode == 0 and expected_out in traced.stdout, f"exit {traced.returncode}")
    check(f"ranks: one trace per rank and none from the launcher ({nranks} files)",
          files == [f"rank{r}.json" for r in range(nranks)], f"{files}")
    check("ranks: the launcher says in one line why it wrote nothing",
          traced.stderr.count("put no work on a GPU and started") == 1, traced.stderr[-400:])
    bases, per_rank = set(), {}
    for r in range(nranks):
        path = os.path.join(traced_dir, f"rank{r}.json")
        if not os.path.exists(path):
            continue
        obj = load_events(path)
        events = obj["traceEvents"]
        info = obj.get("distributedInfo", {})
        bases.add(obj.get("baseTimeNanoseconds"))
        check(f"ranks: rank {r}: distributedInfo names backend nccl, its rank and the world size",
              info.get("backend") == "nccl" and info.get("rank") == r and info.get("world_size") == nranks, f"{info}")
        got = kernels_by_name(events)
        nccl = [e for e in events if e.get("cat") == "kernel" and "nccl" in e["name"].lower()]
        rank_result = {"kernels": sum(got.values()), "nccl_kernels": len(nccl)}
        if r in counts:
            want = collections.Counter(counts[r].get("kernels", {}))
            # The counter has mangled names, the trace demangled ones: compare the totals and the NCCL kernels' count.
            want_nccl = sum(n for k, n in want.items() if "nccl" in k.lower())
            rank_result.update(counter_kernels=sum(want.values()), counter_nccl=want_nccl)
            check(f"ranks: rank {r}: kernels equal the counter's (all, and NCCL's)",
                  sum(got.values()) == sum(want.values()) and len(nccl) == want_nccl,
                  f"trace {sum(got.values())} ({len(nccl)} NCCL), counter {sum(want.values())} ({want_nccl} NCCL)")
        with_meta = [k for k in nccl if "Collective name" in k.get("args", {})]
        sized = [k for k in with_meta if any(key in k["args"] for key in ("In msg nelems", "Message size [bytes]"))]
        example = {key: v for key, v in (with_meta[0]["args"].items() if with_meta else [])
                   if key in ("Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size",
                              "Message size [bytes]", "Process Group Name")}
        rank_result["collective_example"] = example
        # The loop's collectives are all-reduces; DDP's start-up broadcasts come from NCCL calls whose payload
        # NCCL 2.28 lays out otherwise (CUPROF_DEBUG says so in window.log): counted, not required.
        allreduce = [k for k in nccl if "AllReduce" in k["name"]]
        allreduce_sized = [k for k in allreduce if k in sized]
        others = collections.Counter(re.sub(r"^ncclDevKernel_|^ncclKernel_|\(.*$", "", k["name"]).split("_")[0]
                                     for k in nccl if k not in sized)
        rank_result.update(nccl_with_metadata=len(sized), nccl_without_by_kind=dict(others))
        check(f"ranks: rank {r}: every all-reduce kernel carries its collective and size",
              allreduce and len(allreduce_sized) == len(allreduce),
              f"{len(allreduce_sized)} of {len(allreduce)} all-reduces; all NCCL kernels {len(sized)} of {len(nccl)}, "
              f"without: {dict(others)}; e.g. {example}")
        waits = [e for e in events if e.get("cat") == "cuda_sync" and e["name"] in ("Stream Wait Event", "Event Sync")]
        records = {e["args"].get("correlation") for e in events
                   if e.get("name") in ("cudaEventRecord", "cudaEventRecordWithFlags", "cuEventRecord")}
        resolved = [w for w in waits if w["args"].get("wait_on_cuda_event_record_corr_id", -1) in records
                    and w["args"].get("wait_on_stream", -1) >= 0]
        rank_result.update(waits=len(waits), waits_resolved=len(resolved))
        # Waits on an event no call in the window recorded stay -1, as in Kineto (one event of NCCL's, waited on
        # every step, is recorded where cuprof does not see it).
        unresolved_events = collections.Counter(w["args"].get("wait_on_cuda_event_id") for w in waits if w not in resolved)
        rank_result["unresolved_waits_by_event"] = dict(unresolved_events)
        check(f"ranks: rank {r}: event waits name the cudaEventRecord call and stream they wait on",
              waits and len(resolved) >= 0.85 * len(waits), f"{len(resolved)} of {len(waits)}; unresolved by event id "
              f"{dict(unresolved_events.most_common(3))}")
        per_rank[r] = rank_result
    check("ranks: every rank's trace has the same baseTimeNanoseconds", len(bases) == 1, f"{bases}")
    result["traced"] = per_rank

    # The window opened at one global step on every rank.
    window_dir = os.path.join(work, "window")
    os.makedirs(window_dir)
    windowed = run([cli, "run", "--no-table", "--start-step", str(WINDOW_START), "--steps", str(WINDOW_STEPS),
                    "--output", os.path.join(window_dir, "rank%r.json"), "--", *job], work, "window", timeout=300,
                   env={"CUPROF_DEBUG": "1"})  # what NCCL's payloads looked like, in window.log
    check("ranks: --start-step: the job's exit status and output are unchanged",
          windowed.returncode == 0 and expected_out in windowed.stdout, f"exit {windowed.returncode}")
    window_steps, starts = {}, {}
    for r in range(nranks):
        path = os.path.join(window_dir, f"rank{r}.json")
        if os.path.exists(path):
            obj = load_events(path)
            steps = step_ranges(obj["traceEvents"])
            window_steps[r] = sorted(steps)
            starts[r] = obj.get("cuprof", {}).get("window_start_ns")
    want_steps = list(range(WINDOW_START, WINDOW_START + WINDOW_STEPS))
    check(f"ranks: --start-step {WINDOW_START} --steps {WINDOW_STEPS}: every rank's window holds steps {want_steps}",
          len(window_steps) == nranks and all(s == want_steps for s in window_steps.values()), f"{window_steps}")
    if len(starts) == nranks and all(starts.values()):
        spread_ms = (max(starts.values()) - min(starts.values())) / 1e6
        result["window_start_spread_ms"] = round(spread_ms, 3)
    result["window_steps"] = window_steps

    # torch.profiler's traces of the same steps, for HTA's comparison (scripts/test-hta).
    torch_dir = os.path.join(work, "torch")
    profiled = run([*job, "--torch-profile", torch_dir], work, "torch", timeout=300)
    check("ranks: torch.profiler wrote one trace per rank",
          profiled.returncode == 0 and sorted(os.listdir(torch_dir)) == [f"rank{r}.json" for r in range(nranks)]
          if os.path.isdir(torch_dir) else False, f"exit {profiled.returncode}")

    # A program of its own streams: a producer, cudaEventRecord, another stream's cudaStreamWaitEvent and
    # its consumer, the CPU's cudaEventSynchronize (tests/gpu/stream_wait.cu): what HTA's critical path
    # follows through the wait (scripts/test-hta checks it on this trace, kept in tests/data/gpu).
    exe = os.path.join(build, "tests", "gpu", "stream_wait")
    sw_trace = os.path.join(work, "stream_wait.json")
    if os.path.exists(exe):
        sw = run([exe, sw_trace], work, "stream_wait", timeout=120)
        waits = []
        if sw.returncode == 0 and os.path.exists(sw_trace):
            events = load_events(sw_trace)["traceEvents"]
            records = {e["args"].get("correlation") for e in events if e.get("name") == "cudaEventRecord"}
            waits = [e for e in events if e.get("cat") == "cuda_sync" and e["name"] in ("Stream Wait Event", "Event Sync")]
            resolved = [w for w in waits if w["args"].get("wait_on_cuda_event_record_corr_id", -1) in records]
            check("stream_wait: every wait names the cudaEventRecord it waits for and its stream",
                  waits and len(resolved) == len(waits), f"{len(resolved)} of {len(waits)}")
        else:
            check("stream_wait ran", False, f"exit {sw.returncode}")
    else:
        check("stream_wait built", False, exe)

    # cuprof's own reading of the directory of ranks.
    for label, d in (("whole run", traced_dir), ("window", window_dir)):
        ins = run([cli, "insights", d], work, f"insights_{label.replace(' ', '_')}", timeout=120)
        straggler = re.search(r"rank (\d+) is the straggler", ins.stdout)
        who = next((g for g in straggler.groups() if g), None) if straggler else None
        result[f"insights_{label}"] = ins.stdout[-1500:]
        check(f"ranks: cuprof insights on the {label}'s directory names rank 1 (the slowed one) the straggler",
              ins.returncode == 0 and who == "1", f"exit {ins.returncode}; {ins.stdout[-300:]}")

    collective_args_checks(cli, work, result, check, run, torchrun, nranks)


COLLECTIVES_SCRIPT = os.path.join(HERE, "torch_collectives.py")
# The args both tools write on a collective (torch's record_param_comms names).
COLLECTIVE_ARGS = ("Collective name", "dtype", "In msg nelems", "Out msg nelems", "Group size")
# NCCL kernel name word -> the script's collective (tests/gpu/torch_collectives.py SIZES).
KERNEL_KINDS = {"AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
                "Broadcast": "broadcast"}
# What nothing shows cuprof: NCCL's payload gives bytes, and AllGather and Broadcast kernels name no element
# type, so their dtype and element counts; cuprof's args must name exactly these as "Not known", never guess.
CANNOT_KNOW = {"all_reduce": set(), "reduce_scatter": set(), "all_gather": {"dtype", "In msg nelems", "Out msg nelems"},
               "broadcast": {"dtype", "In msg nelems", "Out msg nelems"}}


def first_args_by_kind(events):
    """{collective: args} of the first NCCL kernel of each kind that carries a Collective name (both
    tools write torch's record_param_comms args on the kernels)."""
    found = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower():
            kind = next((k for word, k in KERNEL_KINDS.items() if word in e["name"]), None)
            if kind and kind not in found and "Collective name" in e.get("args", {}):
                found[kind] = e["args"]
    return found


def collective_args_checks(cli, work, result, check, run, torchrun, nranks):
    """The args of all_reduce, all_gather, reduce_scatter and broadcast kernels of known sizes, in cuprof's
    trace and in torch.profiler's of the same job: each is listed with what differs (docs/interop.md)."""
    sys.path.insert(0, HERE)
    from torch_collectives import SIZES
    job = [*torchrun, COLLECTIVES_SCRIPT, "--steps", "6"]
    plain = run(job, work, "collectives_plain", timeout=300)
    sums = re.search(r"^sums .*$", plain.stdout, re.M)
    if not check("collectives: the job of explicit collectives runs plain", plain.returncode == 0 and sums,
                 f"exit {plain.returncode}; {plain.stderr[-300:]}"):
        return
    ours_dir, torch_dir = os.path.join(work, "collectives_cuprof"), os.path.join(work, "collectives_torch")
    os.makedirs(ours_dir, exist_ok=True)  # cuprof writes into a folder that is there
    traced = run([cli, "run", "--no-table", "--output", os.path.join(ours_dir, "rank%r.json"), "--", *job], work,
                 "collectives_cuprof", timeout=300)
    check("collectives: under cuprof run, exit status and output unchanged",
          traced.returncode == 0 and sums.group(0) in traced.stdout, f"exit {traced.returncode}")
    profiled = run([*job, "--torch-profile", torch_dir], work, "collectives_torch", timeout=300)
    check("collectives: under torch.profiler, exit status and output unchanged",
          profiled.returncode == 0 and sums.group(0) in profiled.stdout, f"exit {profiled.returncode}")
    table = {}
    for r in range(nranks):
        ours_path, theirs_path = os.path.join(ours_dir, f"rank{r}.json"), os.path.join(torch_dir, f"rank{r}.json")
        if not (os.path.exists(ours_path) and os.path.exists(theirs_path)):
            check(f"collectives: rank {r}: both traces written", False, f"{ours_path}, {theirs_path}")
            continue
        ours = first_args_by_kind(load_events(ours_path)["traceEvents"])
        theirs = first_args_by_kind(load_events(theirs_path)["traceEvents"])
        for kind in KERNEL_KINDS.values():
            n_in, n_out, dtype = SIZES[kind]
            want = {"In msg nelems": n_in, "Out msg nelems": n_out if n_out is not None else
                    (n_in * nranks if kind == "all_gather" else n_in // nranks), "dtype": dtype, "Group size": nranks}
            a, b = ours.get(kind, {}), theirs.get(kind, {})
            row = {key: (a.get(key), b.get(key)) for key in (*COLLECTIVE_ARGS, "Not known")}
            table.setdefault(kind, {})[r] = row
            # cuprof's against the job's known sizes (what neither tool decides), then against torch's:
            # each arg is the job's, or absent and named in "Not known" where nothing shows it.
            not_known = {k for k in a.get("Not known", "").split(", ") if k}
            wrong = {k: a.get(k) for k, v in want.items()
                     if (a.get(k) != v if k not in CANNOT_KNOW[kind] else k in a or k not in not_known)}
            differs = {k: v for k, v in row.items() if v[0] != v[1]}
            check(f"collectives: rank {r}: {kind}: cuprof's args give the job's sizes, dtype and group size, "
                  f"and name what cannot be known ({', '.join(sorted(CANNOT_KNOW[kind])) or 'nothing'})",
                  kind in ours and not wrong and not_known == CANNOT_KNOW[kind],
                  f"wrong or missing {wrong}; Not known {sorted(not_known)}; vs torch {differs}")
    result["collective_args"] = {k: {str(r): {key: list(v) for key, v in row.items()} for r, row in by_rank.items()}
                                 for k, by_rank in table.items()}
