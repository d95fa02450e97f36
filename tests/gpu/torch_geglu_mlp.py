"""torch.profiler on the GeGLU MLP of Hugging Face's "Profiling in PyTorch" (part 2, 03_simple_mlp.py's shapes).

Usage: python3 tests/gpu/torch_geglu_mlp.py --trace out.json [--compile]
batch 64, seq 128, dim 768, hidden 3072, bf16, forward only under no_grad; the schedule the article
uses (wait=1, warmup=1, active=3), an "mlp_fwd" record_function per step, record_shapes on.
Eager: 3 GEMMs + a GeLU + a mul per step; --compile: the GeLU and the mul fused into one Triton
kernel. The trace is what `cuprof insights` is tested on (tests/data/kineto/).
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule


class SimpleGeGLUMLP(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        h = F.gelu(self.gate_proj(x), approximate="tanh")
        return self.down_proj(h * self.up_proj(x))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--hidden", type=int, default=3072)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--trace", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = SimpleGeGLUMLP(args.dim, args.hidden).to("cuda", torch.bfloat16).eval()
    forward = torch.compile(model) if args.compile else model
    x = torch.randn(args.batch, args.seq, args.dim, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        forward(x)  # compile (or load cuBLAS) outside the profiled steps, as the article does
        torch.cuda.synchronize()

        def ready(prof):
            prof.export_chrome_trace(args.trace)
            print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15))

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                     schedule=schedule(wait=1, warmup=1, active=3, repeat=1), on_trace_ready=ready) as prof:
            for _ in range(5):
                with record_function("mlp_fwd"):
                    forward(x)
                prof.step()
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
