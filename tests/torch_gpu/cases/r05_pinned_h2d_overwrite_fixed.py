"""r05, fixed: the host synchronizes the device before overwriting the pinned source.

Rule: torch.cuda.synchronize() (cudaDeviceSynchronize) returns after all queued work on the
device, the copy included, has completed; the source may be reused after it.
Docs: torch.cuda.synchronize, https://pytorch.org/docs/stable/generated/torch.cuda.synchronize.html;
PyTorch "CUDA semantics", section "Use pinned memory buffers",
https://pytorch.org/docs/stable/notes/cuda.html; CUDA Runtime API cudaDeviceSynchronize.

Twin of r05_pinned_h2d_overwrite_racy.py with the one-line fix.
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

src = torch.full((N,), 1.0, pin_memory=True)
g = torch.empty(N, device="cuda")

# Warm-up: every operator once, host-synchronized (CUDA loads kernels lazily and synchronizes on
# a kernel's first launch, which would hide a race below).
g.copy_(src, non_blocking=True)
g.sum()
torch.cuda._sleep(1)
torch.cuda.synchronize()
src.fill_(1.0)  # host write, after the sync

# The part that was racy.
torch.cuda._sleep(SPIN)  # the default stream is busy for a while
g.copy_(src, non_blocking=True)  # async H2D from pinned memory: reads src after the spin
torch.cuda.synchronize()  # FIX: the host waits for the copy
src.fill_(9.0)  # the host reuses the source after the copy read it
got = g.sum().item()  # .item() synchronizes: g is whatever the copy read
result(1.0 * N, got)
