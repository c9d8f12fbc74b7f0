"""r05, racy: a pinned source overwritten on the CPU while the async H2D copy from it is queued.

Rule: `gpu.copy_(pinned, non_blocking=True)` is cudaMemcpyAsync from page-locked memory: the
DMA reads the source when the stream reaches the copy, not at the call. The host must not write
the source until a sync covers the copy.
Docs: PyTorch "CUDA semantics", section "Use pinned memory buffers",
https://pytorch.org/docs/stable/notes/cuda.html; PyTorch tutorial "A guide on good usage of
non_blocking and pin_memory()", https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html;
CUDA Runtime API, "API synchronization behavior".

The bug: `src.fill_(9.0)` on the CPU runs while the copy that should carry the 1.0s waits behind
a spin; the GPU receives 9.0s.
Expected: streamsan reports write-after-read on src, host write vs copy (exit 66); plain run
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

src = torch.full((N,), 1.0, pin_memory=True)
g = torch.empty(N, device="cuda")

# Warm-up: every operator once, host-synchronized (CUDA loads kernels lazily and synchronizes on
# a kernel's first launch, which would hide the race below).
g.copy_(src, non_blocking=True)
g.sum()
torch.cuda._sleep(1)
torch.cuda.synchronize()
src.fill_(1.0)  # host write, after the sync

# The racy part.
torch.cuda._sleep(SPIN)  # the default stream is busy for a while
g.copy_(src, non_blocking=True)  # async H2D from pinned memory: reads src after the spin
src.fill_(9.0)  # BUG: the host overwrites the source before the copy has read it
got = g.sum().item()  # .item() synchronizes: g is whatever the copy read
result(1.0 * N, got)
