"""A few training steps of an MLP large enough that torch's caching allocator
calls cudaMalloc as the steps go, for gpu_check.py's memory checks.

After each step it prints torch.cuda.memory_reserved() (the bytes the caching
allocator holds from cudaMalloc) and marks the moment with an NVTX range
"reserved <bytes>", so that a cuprof trace of the run can be compared at the
same points: cuprof's bytes in use on the device, counted from the
cudaMalloc/cudaFree calls it saw.

  python3 tests/gpu/torch_memory_step.py [--steps 4]
  python3 tests/gpu/torch_memory_step.py --torch-trace OUT.json
      the same steps under torch.profiler(profile_memory=True, with_stack=True),
      its trace written to OUT.json and its memory table printed
"""
import argparse

import torch


def train(steps, marks):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    net = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096),
                              torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    losses = []
    for step in range(steps):
        x = torch.randn(256 * (step + 1), 1024, device=dev)  # a larger batch each step: new segments
        loss = net(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # synchronizes
        if marks:
            reserved = torch.cuda.memory_reserved()
            torch.cuda.nvtx.range_push(f"reserved {reserved}")
            torch.cuda.nvtx.range_pop()
            print(f"step={step} reserved={reserved}")
    return losses


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--torch-trace")
    args = parser.parse_args()
    if args.torch_trace:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True,
                     with_stack=True) as prof:
            train(2, marks=False)
        prof.export_chrome_trace(args.torch_trace)
        print(prof.key_averages().table(sort_by="self_cuda_memory_usage", row_limit=12))
        return
    losses = train(args.steps, marks=True)
    print(f"final_loss={losses[-1]:.4f}")


if __name__ == "__main__":
    main()
