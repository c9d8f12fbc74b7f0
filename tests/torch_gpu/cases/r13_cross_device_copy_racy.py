"""r13, racy: a copy from GPU 0 to GPU 1, its output read on a side stream of GPU 1.

Rule: a copy between two devices runs on the source device's current stream, after an event
recorded on the destination device's current stream, and the destination device's current
stream then waits for an event recorded after the copy. So the copy is ordered before later
work on GPU 1's current stream, and before nothing else on GPU 1.
Docs: PyTorch "CUDA semantics", section "CUDA streams" (streams are ordered only by explicit
edges), https://pytorch.org/docs/stable/notes/cuda.html; the copy's barriers are
aten/src/ATen/native/cuda/Copy.cu, copy_device_to_device ("We always perform the copy on the
source device, using the current stream on the source device, and we fully synchronize on both
src and dst's current streams for completion of the copy"); CUDA Runtime API,
cudaStreamWaitEvent.

The bug: `y.sum()` runs on a side stream of GPU 1, which nothing orders after the copy into y.
The spin on GPU 0's current stream ahead of the copy makes the sum run first: it sees the old
1.0s of y.
Expected: streamsan reports read-after-write on y (exit 66); plain run prints RESULT WRONG.
Needs two GPUs (else SKIP, exit 77).
"""

import os
import sys

import torch

N = 1 << 20  # elements: 4 MiB of float32; every sum below is an exact integer in float32
# Cycles of torch.cuda._sleep (a spin kernel, invisible to the sanitizers): about 0.1 s on an
# H100, far longer than the host needs to enqueue the rest of the racy part.
SPIN = int(os.environ.get("TORCH_GPU_CASE_SPIN", "200000000"))


def result(expected, got):
    """The line the runner collects: what program order promises against what came out."""
    if got == expected:
        print("RESULT ok", flush=True)
    else:
        print(f"RESULT WRONG expected={expected} got={got}", flush=True)


if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
    print("SKIP: this program needs two CUDA devices", file=sys.stderr)
    sys.exit(77)

x = torch.empty(N, device="cuda:0")
y = torch.empty(N, device="cuda:1")
side1 = torch.cuda.Stream(device="cuda:1")

# Warm-up: every operator once, host-synchronized (CUDA loads kernels lazily and synchronizes on
# a kernel's first launch, which would hide the race below).
x.fill_(2.0)
y.fill_(1.0)
torch.cuda._sleep(1)
y.copy_(x)
for d in range(2):
    torch.cuda.synchronize(d)
with torch.cuda.stream(side1):
    y.sum()
torch.cuda.synchronize(1)

# The racy part.
y.fill_(1.0)
torch.cuda.synchronize(1)  # y holds 1.0 everywhere, nothing is pending on GPU 1
torch.cuda._sleep(SPIN)  # GPU 0's current stream is busy for a while
y.copy_(x)  # on GPU 0's current stream, after the spin; GPU 1's current stream waits for it
with torch.cuda.stream(side1):
    z = y.sum()  # consumer, GPU 1's side stream: BUG, nothing orders it after the copy
for d in range(2):
    torch.cuda.synchronize(d)
result(2.0 * N, z.item())
