"""r04, fixed: the host synchronizes the stream before reading the pinned destination.

Rule: Stream.synchronize() returns after all work queued on the stream (the copy included) has
completed; host reads after it see the copied data.
Docs: torch.cuda.Stream.synchronize, https://pytorch.org/docs/stable/generated/torch.cuda.Stream.html;
PyTorch "CUDA semantics", section "Use pinned memory buffers",
https://pytorch.org/docs/stable/notes/cuda.html; CUDA Runtime API cudaStreamSynchronize.

Twin of r04_pinned_d2h_read_racy.py with the one-line fix.
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
# a kernel's first launch, which would hide a race below).
dst.copy_(g, non_blocking=True)
torch.cuda._sleep(1)
torch.cuda.synchronize()
dst.zero_()  # host write, after the sync

# The part that was racy.
torch.cuda._sleep(SPIN)  # the default stream is busy for a while
dst.copy_(g, non_blocking=True)  # async D2H into pinned memory: lands after the spin
torch.cuda.current_stream().synchronize()  # FIX: the host waits for the copy
got = dst.sum().item()  # the host reads dst after the copy landed
torch.cuda.synchronize()
result(3.0 * N, got)
