"""A PyTorch training loop with a second thread launching nonstop on a stream of its own, for the
windows checks (tests/gpu/gpu_check_windows.py, modes torch-nvtx and torch-slow).

The main thread trains a small MLP with SGD on batches from a torch.utils.data.DataLoader
(num_workers=2, pin_memory=True, a synthetic dataset whose tensors are made in __getitem__),
moved with .cuda(non_blocking=True). Each step is an NVTX range "step N" pushed and popped on the
main thread; a host sleep in each step keeps the steps' lengths even. A thread named "side-stream"
(its OS name, which the trace's thread lanes show) launches small matmuls and elementwise ops on
its own torch.cuda.Stream without pause, synchronizing that stream every 32 iterations, from
before step 0 until the last step ends; it is joined before exit.

  --steps N         steps to run (default 40)
  --capture SPANS   "5:8,15:18,25:28": an NVTX range "capture" pushed at the start of step 5
                    (before "step 5") and popped at the end of step 7 (after "step 7"), one per span
  --slow STEPS      "10,20": those steps sleep --slow-ms more (for --slow-steps)
  --slow-ms MS      the extra sleep of a slow step (default 150)
  --step-ms MS      the host sleep in every step (default 40)

Prints "done" at the end, and nothing else; exits 0."""
import argparse
import collections
import ctypes
import sys
import threading
import time

import torch

SIDE_THREAD = "side-stream"  # at most 15 bytes: the kernel's limit on a thread's name
SIDE_SYNC_EVERY = 32
IN, HIDDEN, OUT, BATCH = 512, 1024, 512, 64


def spans(text):
    """"5:8,15:18" -> [(5, 8), (15, 18)]."""
    out = []
    for part in filter(None, (text or "").split(",")):
        a, b = part.split(":")
        a, b = int(a), int(b)
        if not 0 <= a < b:
            raise argparse.ArgumentTypeError(f"bad span {part!r}: want A:B with 0 <= A < B")
        out.append((a, b))
    return out


def numbers(text):
    return {int(x) for x in (text or "").split(",") if x}


def name_this_thread(name):
    """The OS name of the calling thread (what /proc/self/task/TID/comm says), where Linux gives it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


class Synthetic(torch.utils.data.Dataset):
    """Each sample made when it is asked for, from its index (the same in every run)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(IN, generator=g), torch.randn(OUT, generator=g)


def side_stream_loop(stop, ready, errors):
    """Launches without pause on its own stream until `stop` is set."""
    name_this_thread(SIDE_THREAD)
    try:
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            a = torch.randn(256, 256, device="cuda")
            b = torch.randn(256, 256, device="cuda")
            n = 0
            while not stop.is_set():
                c = torch.relu(a @ b)
                c.mul_(0.5).add_(a)
                a = torch.tanh(c)
                n += 1
                if n % SIDE_SYNC_EVERY == 0:
                    s.synchronize()
                    ready.set()
            s.synchronize()
    except BaseException as e:  # reported by the main thread, which then fails
        errors.append(e)
    finally:
        ready.set()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--capture", type=spans, default=[])
    p.add_argument("--slow", type=numbers, default=set())
    p.add_argument("--slow-ms", type=float, default=150)
    p.add_argument("--step-ms", type=float, default=40)
    a = p.parse_args()
    opens = {s for s, _ in a.capture}
    closes = collections.Counter(b - 1 for _, b in a.capture)
    # The GIL passes between the threads every millisecond rather than every 5 ms: the main
    # thread's steps keep even lengths while the other thread launches (--slow-steps 2x).
    sys.setswitchinterval(0.001)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUT)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(Synthetic(a.steps * BATCH), batch_size=BATCH, num_workers=2,
                                         pin_memory=True, shuffle=False, drop_last=True)
    # The workers start (fork) here, before the side thread does.
    batches = iter(loader)

    stop, ready, errors = threading.Event(), threading.Event(), []
    side = threading.Thread(target=side_stream_loop, args=(stop, ready, errors), name=SIDE_THREAD)
    side.start()
    ready.wait(timeout=120)  # its stream, cuBLAS handle and first launches before step 0
    status = 0
    try:
        for i in range(a.steps):
            if i in opens:
                torch.cuda.nvtx.range_push("capture")
            torch.cuda.nvtx.range_push(f"step {i}")
            x, y = next(batches)
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            torch.cuda.current_stream().synchronize()
            time.sleep((a.step_ms + (a.slow_ms if i in a.slow else 0)) / 1000)
            torch.cuda.nvtx.range_pop()
            for _ in range(closes[i]):
                torch.cuda.nvtx.range_pop()
    finally:
        stop.set()
        side.join()
        del batches  # the workers end here
    if errors:
        print(f"side-stream thread: {type(errors[0]).__name__}: {errors[0]}", file=sys.stderr)
        status = 1
    print("done")
    return status


if __name__ == "__main__":
    sys.exit(main())
