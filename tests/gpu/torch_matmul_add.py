"""torch.profiler on the matmul + add of Hugging Face's "Profiling in PyTorch" (part 1), the peer of examples/matmul_add.cu.

Usage: python3 tests/gpu/torch_matmul_add.py --size 4096 --trace out.json
Same shapes, dtype (bf16), scopes and schedule (wait=1, warmup=1, active=3) as the C++ example.
gpu_check.py compares cuprof's trace of the example with this one's; it also recorded
tests/data/kineto/torch_matmul_add_{64,4096}.
"""
import argparse

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--trace", required=True)
    args = parser.parse_args()
    x, w, b = (torch.randn(args.size, args.size, device="cuda", dtype=torch.bfloat16) for _ in range(3))

    def step():
        with record_function("matmul_add"):
            return torch.add(torch.matmul(x, w), b)

    def ready(prof):
        prof.export_chrome_trace(args.trace)
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15))

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 schedule=schedule(wait=1, warmup=1, active=3, repeat=1), on_trace_ready=ready) as prof:
        for _ in range(5):
            step()
            prof.step()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
