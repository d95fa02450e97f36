"""A few AdamW training steps of a small MLP, annotated with NVTX: one range per step
("step N") and one per phase inside it ("forward", "backward", "optimizer"). For
gpu_check_corpus.py: run plain and under `cuprof run`, its stdout must be the same
(deterministic: seeded, the final loss rounded), and cuprof's trace must show the NVTX ranges
as user_annotation events owning the kernels launched inside them.

  python3 tests/gpu/torch_train_step.py [--steps 5]
"""
import argparse

import torch


def model(dim, hidden):
    return torch.nn.Sequential(torch.nn.Linear(dim, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                               torch.nn.ReLU(), torch.nn.Linear(hidden, 1))


def train(steps):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    net = model(64, 256).to(dev)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x = torch.randn(512, 64, device=dev)
    y = x[:, :1].sin() + 0.1 * x[:, 1:2]
    losses = []
    for step in range(steps):
        torch.cuda.nvtx.range_push(f"step {step}")
        torch.cuda.nvtx.range_push("forward")
        loss = torch.nn.functional.mse_loss(net(x), y)
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_push("backward")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_push("optimizer")
        opt.step()
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_pop()
        losses.append(loss.item())
    torch.cuda.synchronize()
    return losses


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    losses = train(args.steps)
    print(f"steps={args.steps}")
    print(f"first_loss={losses[0]:.4f}")
    print(f"final_loss={losses[-1]:.4f}")
    print(f"loss_decreased={losses[-1] < losses[0]}")


if __name__ == "__main__":
    main()
