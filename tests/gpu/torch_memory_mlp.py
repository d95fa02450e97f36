"""A small MLP's training steps under torch.profiler(profile_memory=True), each
phase in a record_function ("forward", "backward", "optimizer step"), after
two steps not profiled (the first steps load kernels lazily: CUPTI reports
that as overhead events, to which torch's table gives CUDA time the trace
does not hold), and
torch's own key_averages() table for every memory sort key: the fixture that
`cuprof table --sort KEY` must reproduce row for row.

  python3 tests/gpu/torch_memory_mlp.py OUT_DIR [--steps 3]

writes OUT_DIR/torch_memory_mlp.json (the trace) and
OUT_DIR/torch_memory_mlp.<key>.txt for each key, with every row (row_limit
large enough).
"""
import argparse
import os

import torch
from torch.profiler import ProfilerActivity, profile, record_function

KEYS = ("self_cuda_memory_usage", "cuda_memory_usage", "self_cpu_memory_usage", "cpu_memory_usage")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    dev = torch.device("cuda")
    net = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512)).to(dev)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x = torch.randn(1024, 512, device=dev)
    y = torch.randn(1024, 512, device=dev)

    def step():
        with record_function("forward"):
            loss = torch.nn.functional.mse_loss(net(x), y)
        with record_function("backward"):
            opt.zero_grad(set_to_none=True)
            loss.backward()
        with record_function("optimizer step"):
            opt.step()

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True) as prof:
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
    prof.export_chrome_trace(os.path.join(args.out, "torch_memory_mlp.json"))
    for key in KEYS:
        with open(os.path.join(args.out, f"torch_memory_mlp.{key}.txt"), "w") as f:
            f.write(prof.key_averages().table(sort_by=key, row_limit=1000) + "\n")
    print(prof.key_averages().table(sort_by="self_cuda_memory_usage", row_limit=15))


if __name__ == "__main__":
    main()
