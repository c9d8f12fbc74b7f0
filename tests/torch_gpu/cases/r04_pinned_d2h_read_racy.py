"""r04, racy: a pinned host tensor read on the CPU before the async D2H copy into it finished.

Rule: a copy with non_blocking=True into pinned (page-locked) memory is cudaMemcpyAsync: it
returns to the host at once and lands when the stream reaches it. The host may read the
destination only after a sync that covers the copy (stream/event/device synchronize).
Docs: PyTorch "CUDA semantics", section "Use pinned memory buffers",
https://pytorch.org/docs/stable/notes/cuda.html; PyTorch tutorial "A guide on good usage of
non_blocking and pin_memory()", https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html;
CUDA Runtime API, "API synchronization behavior" (async memcpy to pinned host memory is
asynchronous to the host).

The bug: `dst.sum()` runs on the CPU right after `dst.copy_(g, non_blocking=True)` was queued
behind a spin; it reads the zeros that were there before.
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

g = torch.full((N,), 3.0, device="cuda")
dst = torch.zeros(N, pin_memory=True)

# Warm-up: every operator once, host-synchronized (CUDA loads kernels lazily and synchronizes on
# a kernel's first launch, which would hide the race below).
dst.copy_(g, non_blocking=True)
torch.cuda._sleep(1)
torch.cuda.synchronize()
dst.zero_()  # host write, after the sync

# The racy part.
torch.cuda._sleep(SPIN)  # the default stream is busy for a while
dst.copy_(g, non_blocking=True)  # async D2H into pinned memory: lands after the spin
got = dst.sum().item()  # BUG: the host reads dst before the copy has landed
torch.cuda.synchronize()
result(3.0 * N, got)
