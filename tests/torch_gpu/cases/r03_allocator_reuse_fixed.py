"""r03, fixed: a.record_stream(side) before the free keeps the block from reuse.

Rule: after `a.record_stream(side)`, the allocator records an event on `side` when `a` dies and
does not hand the block out again until that event has completed; the next allocation gets other
bytes (here: the rest of the same segment).
Docs: Tensor.record_stream, https://pytorch.org/docs/stable/generated/torch.Tensor.record_stream.html;
PyTorch "CUDA semantics", sections "CUDA streams" and "Memory management",
https://pytorch.org/docs/stable/notes/cuda.html.

Twin of r03_allocator_reuse_racy.py with the one-line fix.
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

side = torch.cuda.Stream()

# Warm-up: every operator once, host-synchronized (CUDA loads kernels lazily and synchronizes on
# a kernel's first launch, which would hide a race below). It also leaves the blocks cached:
# a 4 MiB tensor comes from a 20 MiB segment of the large pool, which is the only free block of
# the default stream's large pool afterwards, so the allocations below are deterministic.
a = torch.empty(N, device="cuda")
a.fill_(1.0)
torch.cuda._sleep(1)
torch.cuda.synchronize()
with torch.cuda.stream(side):
    a.sum()
torch.cuda.synchronize()
del a

# The part that was racy.
a = torch.empty(N, device="cuda")  # allocated on the default stream: its block is that pool's
a.fill_(1.0)
torch.cuda.synchronize()  # a holds 1.0 everywhere, nothing is pending
a_ptr = a.data_ptr()
with torch.cuda.stream(side):
    torch.cuda._sleep(SPIN)
    y = a.sum()  # the side stream reads a, after the spin
a.record_stream(side)  # FIX: no reuse until the side stream's queued work is done
del a
b = torch.empty(N, device="cuda")  # other bytes: a's block is held back
b.fill_(5.0)  # cannot touch the bytes the side stream reads
torch.cuda.synchronize()
print(f"NOTE b reused a's block: {b.data_ptr() == a_ptr}", flush=True)
result(1.0 * N, y.item())
