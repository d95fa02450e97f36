"""A data-parallel training loop on every GPU of one host, as PyTorch users write one: an MLP
under DistributedDataParallel (NCCL all-reduces of its gradient buckets, overlapped with the
backward pass), an SGD step, one NVTX range per step ("step N"), and the losses printed by rank 0
(the same with and without a profiler: the output that must not change).

Run it with torchrun:
  torchrun --standalone --nproc_per_node 2 tests/gpu/torch_ddp_step.py [--steps 12]
      [--torch-profile DIR] [--slow-rank R] [--side-stream]

--torch-profile DIR  torch.profiler records steps 4-6 (schedule wait=3, warmup=1, active=3) and
                     writes DIR/rank<R>.json: the traces cuprof's are compared with.
--slow-rank R        rank R does extra work before each step's backward pass (a known straggler).
--side-stream        each step also copies the loss to a side stream that waits on the compute
                     stream's event (cudaStreamWaitEvent) and the CPU waits for it
                     (cudaEventSynchronize): a cross-stream dependency for the critical path.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--torch-profile", metavar="DIR")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--side-stream", action="store_true")
    a = p.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    torch.manual_seed(0)
    w = a.width
    model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(w, w), nn.GELU())], nn.Linear(w, 16)).cuda()
    ddp = DDP(model, device_ids=[local], bucket_cap_mb=16)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    gen = torch.Generator(device="cuda").manual_seed(1234 + rank)
    x = torch.randn(512, w, device="cuda", generator=gen)
    y = torch.randn(512, 16, device="cuda", generator=gen)
    extra = torch.randn(4096, 4096, device="cuda") if rank == a.slow_rank else None
    side = torch.cuda.Stream() if a.side_stream else None

    prof = None
    if a.torch_profile:
        from torch.profiler import ProfilerActivity, profile, schedule

        os.makedirs(a.torch_profile, exist_ok=True)
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                       schedule=schedule(wait=3, warmup=1, active=3, repeat=1),
                       on_trace_ready=lambda pr: pr.export_chrome_trace(os.path.join(a.torch_profile, f"rank{rank}.json")))
        prof.start()

    losses = []
    for step in range(a.steps):
        torch.cuda.nvtx.range_push(f"step {step}")
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(ddp(x), y)
        if extra is not None:
            for _ in range(6):
                extra = torch.tanh(extra @ extra) * 0.5
        loss.backward()
        opt.step()
        if side is not None:
            done = torch.cuda.Event()
            done.record()
            side.wait_event(done)
            with torch.cuda.stream(side):
                kept = loss.detach() * 1.0
            finished = torch.cuda.Event()
            finished.record(side)
            finished.synchronize()
            losses.append(float(kept))
        else:
            losses.append(float(loss))
        torch.cuda.nvtx.range_pop()
        if prof is not None:
            prof.step()
    if prof is not None:
        prof.stop()
    torch.cuda.synchronize()
    if rank == 0:
        print("losses " + " ".join(f"{v:.6f}" for v in losses))
        print(f"world_size={world}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
