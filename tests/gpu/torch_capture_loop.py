"""A PyTorch training loop that marks its own capture ranges, for `cuprof run --capture-range`
and `cuprof trigger` (tests/gpu/gpu_check_capture.py). Every step is an NVTX range "step N" and
the same work: a small MLP's forward, backward and SGD update, then a synchronize.

  --steps N            steps to run (default 30); --run-s S: run until S seconds have passed instead
  --profile A:B        torch.cuda.profiler.start() before step A, stop() after step B-1
  --nvtx A:B           an NVTX range "capture" around steps A to B-1
  --ready-file PATH    written once the warm-up steps are done (a trigger may come from then on)
  --step-sleep-ms MS   a host sleep inside each step (longer steps for a trigger's duration)

Prints steps=N at the end."""
import argparse
import time

import torch


def span(text):
    if not text:
        return None
    a, b = text.split(":")
    return int(a), int(b)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--run-s", type=float, default=0)
    p.add_argument("--profile", default="")
    p.add_argument("--nvtx", default="")
    p.add_argument("--ready-file", default="")
    p.add_argument("--step-sleep-ms", type=float, default=0)
    p.add_argument("--warmup", type=int, default=3)
    a = p.parse_args()
    profile, nvtx = span(a.profile), span(a.nvtx)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 512, device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()

    for _ in range(a.warmup):
        step()
    if a.ready_file:
        with open(a.ready_file, "w") as f:
            f.write("ready\n")
    start = time.monotonic()
    s = 0
    while (a.run_s and time.monotonic() - start < a.run_s) or (not a.run_s and s < a.steps):
        if profile and s == profile[0]:
            torch.cuda.profiler.start()
        if nvtx and s == nvtx[0]:
            torch.cuda.nvtx.range_push("capture")
        torch.cuda.nvtx.range_push(f"step {s}")
        step()
        if a.step_sleep_ms:
            time.sleep(a.step_sleep_ms / 1000)
        torch.cuda.nvtx.range_pop()
        if nvtx and s == nvtx[1] - 1:
            torch.cuda.nvtx.range_pop()
        if profile and s == profile[1] - 1:
            torch.cuda.profiler.stop()
        s += 1
    print(f"steps={s}")


if __name__ == "__main__":
    main()
