"""tests/gpu/torch_train_step.py under torch.autograd.profiler.emit_nvtx(): every aten op
(forward and backward) becomes an NVTX range ("aten::addmm, seq = N", ...). Under
`cuprof run`, those ranges must appear as user_annotation events and own the kernels
launched inside them (gpu_check_corpus.py). Same deterministic stdout as plain.

  python3 tests/gpu/torch_emit_nvtx.py [--steps 3]
"""
import argparse

import torch

from torch_train_step import train  # beside this file: Python puts a script's own folder on the path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    with torch.autograd.profiler.emit_nvtx():
        losses = train(args.steps)
    print(f"steps={args.steps}")
    print(f"final_loss={losses[-1]:.4f}")
    print(f"loss_decreased={losses[-1] < losses[0]}")


if __name__ == "__main__":
    main()
