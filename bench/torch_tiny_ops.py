"""The peer a user would pick instead: torch.profiler on a loop of tiny ops.

Prints key=value lines: untraced_ns and profiled_ns (profiler start to a
stopped profiler whose results are ready), for --ops in-place adds on a small
CUDA tensor, synchronizing every --batch ops as launch_bench does.
"""
if __name__ == "__main__":  # a module of bench/run, which sets up the imports of all of them
    raise SystemExit("run it as: bench/run torch-tiny-ops (bench/README.md)")

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile


def loop(x, ops, batch):
    for done in range(0, ops, batch):
        for _ in range(batch):
            x.add_(1)
        torch.cuda.synchronize()


def main(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--activities", choices=["cuda", "cpu_cuda"], default="cpu_cuda")
    args = parser.parse_args(argv)
    x = torch.zeros(32, device="cuda")
    activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if args.activities == "cpu_cuda" else [])
    loop(x, 2048, args.batch)
    with profile(activities=activities):  # CUPTI's one-off start-up out of the timing
        loop(x, 2048, args.batch)
    t0 = time.perf_counter_ns()
    loop(x, args.ops, args.batch)
    untraced = time.perf_counter_ns() - t0
    t0 = time.perf_counter_ns()
    with profile(activities=activities) as prof:
        loop(x, args.ops, args.batch)
    prof.events()  # results parsed and ready
    profiled = time.perf_counter_ns() - t0
    print(f"ops={args.ops}\nuntraced_ns={untraced}\nprofiled_ns={profiled}")
