"""One process, one mode of the training-loop benchmark (training_loop.py runs them all, each as
`bench/run train-step [OPTIONS]`; scripts/gpu-check runs --mode paired).

A training step as PyTorch users write it: a 9-layer MLP (Linear + ReLU, width 1024, fp32) with
AdamW, batch 64, fixed seed; warm-up steps, then timed steps, each synchronized and timed with
perf_counter_ns.

  --mode untraced         the script attaches nothing (training_loop.py also runs it under `cuprof run`
                          and under the minimal CUPTI tracer)
  --mode torch_cuda       torch.profiler, activities=[CUDA], around the timed steps; the Chrome
                          trace exported to --trace at the end
  --mode torch_cpu_cuda   the same with activities=[CPU, CUDA]
  --emit-nvtx             torch.autograd.profiler.emit_nvtx() around warm-up and timed steps:
                          an NVTX range per op, for `cuprof run` to record
  --mode paired           a tracer attached from outside and torch.profiler in one process, each
                          against the untraced steps just before it, so that what differs between
                          processes (core, clocks, memory layout) cancels out. Run under
                          `cuprof run --output PATH --delay D --duration W` (or the minimal CUPTI
                          tracer with MINIMAL_CUPTI_WINDOW=D,W,PATH) with --window-file PATH: steps
                          run untraced until the tracer's window opens, traced while it is open, and
                          on until the tracer's file is on disk (the steps are classed afterwards by
                          the window_start_ns / window_end_ns that file gives, a step's width of
                          margin on each side); then --steps untraced steps and --steps steps under
                          torch.profiler CUDA-only (the tracer has released CUPTI by then), whose
                          trace goes to --trace; then --steps untraced steps and --steps steps under
                          torch.profiler CPU+CUDA, whose trace goes to --trace + ".cpu_cuda.json".
                          Prints paired_* lines: each block's median step and step count
                          (paired_<block>_us, paired_<block>_steps; blocks untraced_before_window,
                          window, after_window, untraced_before_torch, torch_cuda, untraced_before_torch_cpu_cuda,
                          torch_cpu_cuda), the kernels in each trace (paired_tracer_kernels,
                          paired_torch_kernels, paired_torch_cpu_cuda_kernels) and the end-to-end
                          costs in us (the time beyond the untraced steps just before it):
                          paired_tracer_end_to_end_us, the steps from the window's start until its
                          file is on disk (only for a tracer whose file holds kernels: cuprof's, not
                          the minimal tracer's; paired_tracer_end_to_end_after_window_us is the part
                          of it spent once the window had closed, the steps of block after_window),
                          and paired_torch_cpu_cuda_end_to_end_us, profiler start to trace exported.

Prints key=value lines: mode, emit_nvtx, torch, steps_timed, steps_total, step_us_median,
step_us_p10, step_us_p90, timed_loop_ms (the timed steps' sum) and, for the torch.profiler modes,
profiler_start_to_trace_ms (profiler start to the trace on disk, timed steps included).
Kernels are counted by training_loop.py in the trace, not here: counting would add to the process's time
(--mode paired counts its traces' kernels itself, once its blocks are done).
"""
if __name__ == "__main__":  # a module of bench/run, which sets up the imports of all of them
    raise SystemExit("run it as: bench/run train-step (bench/README.md)")

import argparse
import contextlib
import re
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from trace_schema import CUPROF_WINDOW_END_NS, CUPROF_WINDOW_START_NS
from training_loop import KERNEL_EVENT

PROFILER_ACTIVITIES = {"torch_cuda": [ProfilerActivity.CUDA],
                       "torch_cpu_cuda": [ProfilerActivity.CPU, ProfilerActivity.CUDA]}


def build(layers, width, batch):
    torch.manual_seed(0)
    blocks = []
    for i in range(layers):
        blocks.append(torch.nn.Linear(width, width))
        if i + 1 < layers:
            blocks.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*blocks).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device="cuda")
    target = torch.randn(batch, width, device="cuda")

    def train_step():
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()

    return train_step


STEP_RANGES = False  # --step-ranges: each step inside an NVTX range "step N", as training loops mark them
_step_number = 0


def timed_steps(train_step, count):
    """Each step's time in microseconds, the step synchronized."""
    global _step_number
    times_us = []
    for _ in range(count):
        t0 = time.perf_counter_ns()
        if STEP_RANGES:
            torch.cuda.nvtx.range_push(f"step {_step_number}")
        train_step()
        torch.cuda.synchronize()
        if STEP_RANGES:
            torch.cuda.nvtx.range_pop()
        _step_number += 1
        times_us.append((time.perf_counter_ns() - t0) / 1000)
    return times_us


def kernels_in(path):
    """The kernel events in the Chrome trace at `path`."""
    with open(path, "rb") as f:
        return len(KERNEL_EVENT.findall(f.read()))


def recorded_window(path):
    """(start, end) of the tracer's window in Unix-epoch ns, from its file (a cuprof trace's header), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16).decode(errors="replace")
    except OSError:
        return None
    start = re.search(r'"%s":(\d+)' % CUPROF_WINDOW_START_NS, head)
    end = re.search(r'"%s":(\d+)' % CUPROF_WINDOW_END_NS, head)
    return (int(start.group(1)), int(end.group(1))) if start and end else None


def paired(train_step, window_file, torch_trace, cpu_cuda_trace, steps, timeout_s):
    """The blocks of --mode paired, {block: [step us]}, and the end-to-end costs, {"tracer": us or None,
    "torch_cpu_cuda": us}: what the steps beside each took beyond the untraced steps just before it."""
    stamped = []  # (start, end) in epoch ns: the tracers' clock is the same Unix-epoch one
    deadline = time.monotonic() + timeout_s
    while recorded_window(window_file) is None:
        if time.monotonic() > deadline:
            raise SystemExit(f"train_step.py: no window file at {window_file} after {timeout_s} s")
        t0 = time.time_ns()
        train_step()
        torch.cuda.synchronize()
        stamped.append((t0, time.time_ns()))
    window_start, window_end = recorded_window(window_file)
    if not stamped or stamped[0][0] > window_start:
        raise SystemExit("train_step.py: the tracer's window opened before the paired steps began "
                         "(a longer delay, e.g. training-loop --paired-delay-s, gives the untraced steps before it)")
    margin = statistics.median(e - s for s, e in stamped)
    blocks = {"untraced_before_window": [(e - s) / 1000 for s, e in stamped if e < window_start - margin],
              "window": [(e - s) / 1000 for s, e in stamped
                         if s > window_start + margin and e < window_end - margin]}
    before = blocks["untraced_before_window"]
    untraced_us = statistics.median(before) if before else None
    # From the window's start to its file on disk: the trace's writing after the window closed included.
    # A step that straddles the window's start counts whole: its part before the start ran at the
    # untraced pace and adds next to nothing, while the tracer's start-up, at the start, lands in it whole.
    end_to_end_us = {"tracer": sum((e - s) / 1000 - untraced_us for s, e in stamped if e > window_start)
                     if untraced_us is not None else None,
                     # of which the steps begun once the window had closed, until its file was on disk
                     "tracer_after_window": sum((e - s) / 1000 - untraced_us for s, e in stamped if s >= window_end)
                     if untraced_us is not None else None}
    blocks["after_window"] = [(e - s) / 1000 for s, e in stamped if s >= window_end]
    blocks["untraced_before_torch"] = timed_steps(train_step, steps)
    with profile(activities=PROFILER_ACTIVITIES["torch_cuda"]) as prof:
        blocks["torch_cuda"] = timed_steps(train_step, steps)
    prof.export_chrome_trace(torch_trace)
    blocks["untraced_before_torch_cpu_cuda"] = timed_steps(train_step, steps)
    # Not the process's first CUPTI session: CUPTI's one-time start-up, which a lone torch_cpu_cuda
    # process pays, is not in this figure (it can only make torch.profiler look cheaper).
    start = time.perf_counter_ns()
    with profile(activities=PROFILER_ACTIVITIES["torch_cpu_cuda"]) as prof:
        blocks["torch_cpu_cuda"] = timed_steps(train_step, steps)
    prof.export_chrome_trace(cpu_cuda_trace)
    end_to_end_us["torch_cpu_cuda"] = ((time.perf_counter_ns() - start) / 1000
                                       - steps * statistics.median(blocks["untraced_before_torch_cpu_cuda"]))
    return blocks, end_to_end_us


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["untraced", *PROFILER_ACTIVITIES, "paired"], default="untraced")
    parser.add_argument("--emit-nvtx", action="store_true")
    parser.add_argument("--step-ranges", action="store_true", help="each step inside an NVTX range \"step N\"")
    parser.add_argument("--trace", help="where the torch.profiler modes write their Chrome trace "
                        "(--mode paired: the CPU+CUDA one to this path + .cpu_cuda.json)")
    parser.add_argument("--window-file", help="--mode paired: the trace `cuprof run --output` writes, or the minimal tracer's window file")
    parser.add_argument("--timeout-s", type=float, default=60, help="--mode paired: longest wait for the window file")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--layers", type=int, default=9)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps wants at least 2 timed steps")
    if args.mode in (*PROFILER_ACTIVITIES, "paired") and not args.trace:
        parser.error(f"--mode {args.mode} needs --trace")
    if args.mode == "paired" and not args.window_file:
        parser.error("--mode paired needs --window-file (the path given to cuprof run --output)")
    if args.emit_nvtx and args.mode != "untraced":
        parser.error("--emit-nvtx is for --mode untraced (under `cuprof run`)")
    if not torch.cuda.is_available():
        parser.exit(1, "train_step.py: no CUDA device\n")

    global STEP_RANGES
    STEP_RANGES = args.step_ranges
    train_step = build(args.layers, args.width, args.batch)
    if args.mode == "paired":
        timed_steps(train_step, args.warmup)
        cpu_cuda_trace = args.trace + ".cpu_cuda.json"
        blocks, end_to_end_us = paired(train_step, args.window_file, args.trace, cpu_cuda_trace, args.steps,
                                       args.timeout_s)
        print(f"mode=paired\ntorch={torch.__version__}")
        for name, times_us in blocks.items():
            print(f"paired_{name}_steps={len(times_us)}")
            print(f"paired_{name}_us={statistics.median(times_us) if times_us else float('nan'):.1f}")
        # Counted once every block is done: reading the traces would add to their steps.
        tracer_kernels = kernels_in(args.window_file)
        print(f"paired_tracer_kernels={tracer_kernels}")
        # The minimal CUPTI tracer's window file lists no kernels: no cost per traced kernel to give.
        if tracer_kernels and end_to_end_us["tracer"] is not None:
            print(f"paired_tracer_end_to_end_us={end_to_end_us['tracer']:.1f}\n"
                  f"paired_tracer_end_to_end_after_window_us={end_to_end_us['tracer_after_window']:.1f}")
        print(f"paired_torch_kernels={kernels_in(args.trace)}")  # torch.profiler did trace after the tracer let CUPTI go
        print(f"paired_torch_cpu_cuda_kernels={kernels_in(cpu_cuda_trace)}\n"
              f"paired_torch_cpu_cuda_end_to_end_us={end_to_end_us['torch_cpu_cuda']:.1f}")
        # training_loop.py's common columns: the untraced steps
        print(f"steps_timed={len(blocks['untraced_before_torch'])}\n"
              f"step_us_median={statistics.median(blocks['untraced_before_torch']):.1f}")
        return
    nvtx = torch.autograd.profiler.emit_nvtx() if args.emit_nvtx else contextlib.nullcontext()
    start_to_trace_ms = None
    with nvtx:
        timed_steps(train_step, args.warmup)
        if args.mode in PROFILER_ACTIVITIES:
            # No warm-up profiling session: CUPTI's start-up is part of what a user pays.
            start = time.perf_counter_ns()
            with profile(activities=PROFILER_ACTIVITIES[args.mode]) as prof:
                times_us = timed_steps(train_step, args.steps)
            prof.export_chrome_trace(args.trace)
            start_to_trace_ms = (time.perf_counter_ns() - start) / 1e6
        else:
            times_us = timed_steps(train_step, args.steps)
    deciles = statistics.quantiles(times_us, n=10, method="inclusive")
    print(f"mode={args.mode}\nemit_nvtx={int(args.emit_nvtx)}\ntorch={torch.__version__}")
    print(f"steps_timed={args.steps}\nsteps_total={args.warmup + args.steps}")
    print(f"step_us_median={statistics.median(times_us):.1f}\nstep_us_p10={deciles[0]:.1f}\n"
          f"step_us_p90={deciles[8]:.1f}\ntimed_loop_ms={sum(times_us) / 1000:.1f}")
    if start_to_trace_ms is not None:
        print(f"profiler_start_to_trace_ms={start_to_trace_ms:.1f}")
