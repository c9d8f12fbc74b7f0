"""r12, racy: a pinned buffer filled by an async copy on a side stream, read with no poll.

Rule: Stream.query() (cudaStreamQuery) returning True means all work queued on the stream has
completed; the host may read what that work wrote. Without such a query, a sync or a wait,
the host's read is unordered with the copy.
Docs: torch.cuda.Stream.query ("Check if all the work submitted has been completed"),
https://pytorch.org/docs/stable/generated/torch.cuda.Stream.html; CUDA Runtime API
cudaStreamQuery; PyTorch "CUDA semantics", section "Use pinned memory buffers",
https://pytorch.org/docs/stable/notes/cuda.html.

The bug: the polling loop of the fixed twin is missing; the host sums `dst` while the D2H copy
into it waits behind a spin on the side stream, and sees zeros.
Expected: streamsan reports read-after-write on dst, host read vs copy (exit 66); plain run
prints RESULT WRONG.
"""

import os
import sys

import torch

N = 1 << 20  # elements: 4 MiB of float32; every sum below is an exact integer in float32
# Cycles of torch.cuda._sleep (a spin kernel, invisible to the sanitizers): about 0.1 s on an
# H100, far longer than the host needs to enqueue the rest of the racy part, even under a
# sanitizer, so an unordered consumer runs before the producer every time.
SPIN = int(os.environ.get("TORCH_GPU_CASE_SPIN", "200000000"))


def result(expected, got):
    """The line the runner collects: what program order promises against what came out."""
    if got == expected:
        print("RESULT ok", flush=True)
    else:
        print(f"RESULT WRONG expected={expected} got={got}", flush=True)


if not torch.cuda.is_available():
    print("SKIP: this program needs a CUDA device", file=sys.stderr)
    sys.exit(77)

side = torch.cuda.Stream()
g = torch.full((N,), 3.0, device="cuda")
dst = torch.zeros(N, pin_memory=True)
torch.cuda.synchronize()  # g is written, nothing is pending

# Warm-up: every operator once, host-synchronized (CUDA loads kernels lazily and synchronizes on
# a kernel's first launch, which would hide the race below).
with torch.cuda.stream(side):
    dst.copy_(g, non_blocking=True)
    torch.cuda._sleep(1)
torch.cuda.synchronize()
dst.zero_()  # host write, after the sync

# The racy part.
with torch.cuda.stream(side):
    torch.cuda._sleep(SPIN)  # the side stream is busy for a while
    dst.copy_(g, non_blocking=True)  # async D2H into pinned memory: lands after the spin
# BUG: no `while not side.query(): pass` here
got = dst.sum().item()  # the host reads dst
torch.cuda.synchronize()
result(3.0 * N, got)
