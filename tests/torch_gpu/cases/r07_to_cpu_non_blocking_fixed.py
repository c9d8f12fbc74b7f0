"""r07, fixed: an event recorded after the non-blocking copy is synchronized before the read.

Rule: an event recorded on the stream after the copy captures it; Event.synchronize() returns
once that work has completed, after which the host may read the CPU tensor.
Docs: torch.cuda.Event.record / synchronize, https://pytorch.org/docs/stable/generated/torch.cuda.Event.html;
PyTorch tutorial "A guide on good usage of non_blocking and pin_memory()",
https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html; CUDA Runtime API
cudaEventSynchronize.

Twin of r07_to_cpu_non_blocking_racy.py with the fix.
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

# Warm-up: every operator once, host-synchronized (CUDA loads kernels lazily and synchronizes on
# a kernel's first launch, which would hide a race below). The warm-up copies -1.0s, so a
# pinned block handed out again holds a value the program does not expect.
w = torch.full((N,), -1.0, device="cuda")
h = w.to("cpu", non_blocking=True)
torch.cuda._sleep(1)
torch.cuda.synchronize()
h.sum()
del h, w

# The part that was racy.
torch.cuda._sleep(SPIN)  # the default stream is busy for a while
h = g.to("cpu", non_blocking=True)  # a new pinned CPU tensor, filled by an async D2H copy
if not h.is_pinned():
    print("NOTE the non_blocking result is not pinned: its copy was synchronous", flush=True)
ev = torch.cuda.Event()  # FIX: an event after the copy ...
ev.record()
ev.synchronize()  # ... and the host waits for it
got = h.sum().item()  # the host reads h after the copy landed
torch.cuda.synchronize()
result(3.0 * N, got)
