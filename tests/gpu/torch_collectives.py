"""Explicit collectives of known sizes on every GPU of one host, for comparing the args cuprof
writes on NCCL kernels with torch.profiler's record_param_comms: per step (an NVTX range "step N"),
all_reduce of 1,048,576 fp32, all_gather_into_tensor of 262,144 bf16 per rank, reduce_scatter_tensor
of 4,194,304 fp32 (the input), broadcast of 123,457 int32 from rank 0. Rank 0 prints the checksums
(the same with and without a profiler).

  torchrun --standalone --nproc_per_node 2 tests/gpu/torch_collectives.py [--steps 6] [--torch-profile DIR]

--torch-profile DIR  torch.profiler (CPU and CUDA) records every step and writes DIR/rank<R>.json.
"""
import argparse
import os

import torch
import torch.distributed as dist

# (what, elements in, elements out per rank, dtype): also read by tests/gpu/gpu_check_ranks.py.
SIZES = {"all_reduce": (1048576, 1048576, "Float"), "all_gather": (262144, None, "BFloat16"),
         "reduce_scatter": (4194304, None, "Float"), "broadcast": (123457, 123457, "Int")}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--torch-profile", metavar="DIR")
    a = p.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    reduce_in = torch.full((SIZES["all_reduce"][0],), float(rank + 1), device="cuda")
    gather_in = torch.full((SIZES["all_gather"][0],), float(rank + 1), device="cuda", dtype=torch.bfloat16)
    gather_out = torch.empty(SIZES["all_gather"][0] * world, device="cuda", dtype=torch.bfloat16)
    scatter_in = torch.full((SIZES["reduce_scatter"][0],), float(rank + 1), device="cuda")
    scatter_out = torch.empty(SIZES["reduce_scatter"][0] // world, device="cuda")
    bcast = torch.full((SIZES["broadcast"][0],), rank + 7, device="cuda", dtype=torch.int32)

    prof = None
    if a.torch_profile:
        from torch.profiler import ProfilerActivity, profile

        os.makedirs(a.torch_profile, exist_ok=True)
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.start()
    sums = []
    for step in range(a.steps):
        torch.cuda.nvtx.range_push(f"step {step}")
        dist.all_reduce(reduce_in)
        dist.all_gather_into_tensor(gather_out, gather_in)
        dist.reduce_scatter_tensor(scatter_out, scatter_in)
        dist.broadcast(bcast, src=0)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        reduce_in.div_(world)
        sums.append(float(reduce_in.sum() + gather_out.float().sum() + scatter_out.sum() + bcast.sum()))
    if prof:
        prof.stop()
        prof.export_chrome_trace(os.path.join(a.torch_profile, f"rank{rank}.json"))
    if rank == 0:
        print("sums " + " ".join(f"{s:.1f}" for s in sums), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
