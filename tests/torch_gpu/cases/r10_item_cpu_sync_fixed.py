"""r10, fixed: `.cpu()` (round 1) and `.item()` (round 2) sync the host with the stream.

Rule: a copy to pageable host memory (`.cpu()`, `.item()`) returns after the stream has run up
to it, so the async copy queued before it on the same stream has landed too: the host's reads
of `dst` afterwards are ordered after that copy.
Docs: PyTorch "CUDA semantics", sections "Asynchronous execution" and "Use pinned memory
buffers", https://pytorch.org/docs/stable/notes/cuda.html; torch.Tensor.item,
https://pytorch.org/docs/stable/generated/torch.Tensor.item.html; CUDA Runtime API, "API
synchronization behavior" (a synchronous device-to-host copy returns after it completes).

Twin of r10_item_cpu_sync_racy.py: one round per synchronizing call.
Expected: streamsan reports nothing (exit 0); plain run prints RESULT ok.
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

g = torch.full((N,), 3.0, device="cuda")
dst = torch.zeros(N, pin_memory=True)

# Warm-up: every operator once, host-synchronized (CUDA loads kernels lazily and synchronizes on
# a kernel's first launch, which would hide a race below). The totals fetched here are of
# -1.0s, so a pinned block handed out again holds a value the program does not expect.
w = torch.full((N,), -1.0, device="cuda")
dst.copy_(g, non_blocking=True)
w.sum().cpu()
w.sum().item()
w.sum().to("cpu", non_blocking=True)
torch.cuda._sleep(1)
torch.cuda.synchronize()
del w

# The part that was racy, twice: round 0 syncs with .cpu(), round 1 with .item().
got = []
for rnd in range(2):
    dst.zero_()  # host write; the stream is idle here
    torch.cuda._sleep(SPIN)  # the default stream is busy for a while
    dst.copy_(g, non_blocking=True)  # async D2H into pinned memory: lands after the spin
    if rnd == 0:
        total = float(g.sum().cpu())  # FIX: .cpu() returns after the stream ran up to it
    else:
        total = g.sum().item()  # FIX: so does .item()
    got += [total, dst.sum().item()]  # host reads of total and dst: after the copy landed
    torch.cuda.synchronize()
result([3.0 * N] * 4, got)
