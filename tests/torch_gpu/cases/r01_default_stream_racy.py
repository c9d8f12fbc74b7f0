"""r01, racy: default-stream producer, side-stream consumer, nothing between them.

Rule: work on two streams is ordered only by an explicit edge (an event wait, wait_stream, or a
host sync). PyTorch's pooled streams (torch.cuda.Stream()) are created non-blocking, so not
even the legacy default stream's implicit barrier orders them.
Docs: PyTorch "CUDA semantics", section "CUDA streams": "when using non-default streams, it is
the user's responsibility to ensure proper synchronization", with this very example ("sum() may
start execution before normal_() finishes!"); https://pytorch.org/docs/stable/notes/cuda.html.
CUDA Programming Guide, "Streams": commands in different streams may execute out of order
with respect to one another or concurrently.

The bug: `y = x.sum()` on the side stream reads x while the default stream is still about to
write it. The spin ahead of the producer makes the sum run first: it sees the old 1.0s.
Expected: streamsan reports read-after-write on x (exit 66); plain run prints RESULT WRONG.
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

main = torch.cuda.current_stream()  # the default stream
side = torch.cuda.Stream()
x = torch.empty(N, device="cuda")

# Warm-up: every operator once, host-synchronized (CUDA loads kernels lazily and synchronizes on
# a kernel's first launch, which would hide the race below).
x.fill_(1.0)
torch.cuda._sleep(1)
torch.cuda.synchronize()
with torch.cuda.stream(side):
    x.sum()
torch.cuda.synchronize()

# The racy part.
x.fill_(1.0)
torch.cuda.synchronize()  # x holds 1.0 everywhere, nothing is pending
torch.cuda._sleep(SPIN)  # the default stream is busy for a while
x.fill_(2.0)  # producer, default stream: runs after the spin
with torch.cuda.stream(side):
    y = x.sum()  # consumer, side stream: BUG, nothing orders it after the fill
torch.cuda.synchronize()
result(2.0 * N, y.item())
