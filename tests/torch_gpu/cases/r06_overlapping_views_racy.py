"""r06, racy: two views of one tensor that share bytes, written and read on two streams.

Rule: a view accesses exactly its own bytes (storage offset, sizes, strides); two views race
where their bytes overlap and nothing orders the streams. `x[::2]` (even elements) and
`x[2::2]` (even elements from the second on) overlap in all but element 0.
Docs: PyTorch "Tensor Views", https://pytorch.org/docs/stable/tensor_view.html (a view shares
the underlying data with its base); PyTorch "CUDA semantics", section "CUDA streams",
https://pytorch.org/docs/stable/notes/cuda.html (cross-stream use needs synchronization).

The bug: the reader meant the odd elements `x[1::2]` (see the fixed twin, which needs no sync)
but slices `x[2::2]`, which are the elements s1 is writing. The spin makes the read come first.
Expected: streamsan reports read-after-write on x's even elements (exit 66); plain run prints
RESULT WRONG. (CSAN keys tensors by data_ptr(), which differs between the two views, so it is
not expected to see this one.)
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
# a kernel's first launch, which would hide the race below).
x.fill_(1.0)
torch.cuda._sleep(1)
torch.cuda.synchronize()
with torch.cuda.stream(s1):
    x[::2].fill_(1.0)
torch.cuda.synchronize()
with torch.cuda.stream(s2):
    x[2::2].sum()
torch.cuda.synchronize()

# The racy part.
x.fill_(1.0)
torch.cuda.synchronize()  # x holds 1.0 everywhere, nothing is pending
with torch.cuda.stream(s1):
    torch.cuda._sleep(SPIN)
    x[::2].fill_(2.0)  # writer on s1: the even elements, after the spin
with torch.cuda.stream(s2):
    y = x[2::2].sum()  # BUG: reader on s2 over even elements too, unordered with the writer
torch.cuda.synchronize()
result(2.0 * (N // 2 - 1), y.item())
