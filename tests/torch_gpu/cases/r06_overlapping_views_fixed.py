"""r06, fixed: disjoint interleaved views, written and read on two streams with no sync.

Rule: `x[::2]` (even elements) and `x[1::2]` (odd elements) share no byte, so a writer of one
and a reader of the other never race, whatever the streams do: no synchronization is needed,
and a sanitizer that tracks whole allocations would raise a false alarm here.
Docs: PyTorch "Tensor Views", https://pytorch.org/docs/stable/tensor_view.html; PyTorch "CUDA
semantics", section "CUDA streams", https://pytorch.org/docs/stable/notes/cuda.html.

Twin of r06_overlapping_views_racy.py: the reader slices the odd elements, as intended.
Expected: streamsan reports nothing (exit 0); plain run prints RESULT ok.
"""

import os
import sys

import torch

N = 1 << 12  # elements: 16 KiB of float32; every sum below is an exact integer in float32
# (Small on purpose: x[::2] is N/2 separate 4-byte runs, and streamsan's front end records a
# view of more than 4,096 runs as its hull, which would make x[::2] and x[1::2] overlap.)
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

s1 = torch.cuda.Stream()
s2 = torch.cuda.Stream()
x = torch.empty(N, device="cuda")

# Warm-up: every operator once, host-synchronized (CUDA loads kernels lazily and synchronizes on
# a kernel's first launch, which would hide a race below).
x.fill_(1.0)
torch.cuda._sleep(1)
torch.cuda.synchronize()
with torch.cuda.stream(s1):
    x[::2].fill_(1.0)
torch.cuda.synchronize()
with torch.cuda.stream(s2):
    x[1::2].sum()
torch.cuda.synchronize()

# The part that was racy.
x.fill_(1.0)
torch.cuda.synchronize()  # x holds 1.0 everywhere, nothing is pending
with torch.cuda.stream(s1):
    torch.cuda._sleep(SPIN)
    x[::2].fill_(2.0)  # writer on s1: the even elements, after the spin
with torch.cuda.stream(s2):
    y = x[1::2].sum()  # reader on s2: the odd elements, disjoint from the writer's
torch.cuda.synchronize()
result(1.0 * (N // 2), y.item())  # the odd elements keep their 1.0s
