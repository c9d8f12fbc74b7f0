"""r10, racy: a pinned buffer filled by an async copy, read after a copy that does not sync.

Rule: `.cpu()`, `.item()` (and `.tolist()`, printing) copy to pageable host memory and return
only once the value is there: the host waits for the current stream up to that copy, which
covers every earlier async copy on the stream. `.to("cpu", non_blocking=True)` does not wait.
Docs: PyTorch "CUDA semantics", section "Asynchronous execution" ("PyTorch automatically
performs necessary synchronization when copying data between CPU and GPU"), and section "Use
pinned memory buffers", https://pytorch.org/docs/stable/notes/cuda.html; torch.Tensor.to
(non_blocking), https://pytorch.org/docs/stable/generated/torch.Tensor.to.html; CUDA Runtime
API, "API synchronization behavior".

The bug: both rounds fetch the total with `.to("cpu", non_blocking=True)` (the fixed twin uses
`.cpu()` and `.item()`), so nothing makes the host wait before it reads `dst` and the total.
Expected: streamsan reports read-after-write on dst and on the total, host reads vs copies
(exit 66); plain run prints RESULT WRONG.
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
# a kernel's first launch, which would hide the race below). The totals fetched here are of
# -1.0s, so a pinned block handed out again holds a value the program does not expect.
w = torch.full((N,), -1.0, device="cuda")
dst.copy_(g, non_blocking=True)
w.sum().cpu()
w.sum().item()
w.sum().to("cpu", non_blocking=True)
torch.cuda._sleep(1)
torch.cuda.synchronize()
del w

# The racy part, twice.
got = []
for rnd in range(2):
    dst.zero_()  # host write; the stream is idle here
    torch.cuda._sleep(SPIN)  # the default stream is busy for a while
    dst.copy_(g, non_blocking=True)  # async D2H into pinned memory: lands after the spin
    total = g.sum().to("cpu", non_blocking=True)  # BUG: asynchronous, the host does not wait
    got += [float(total), dst.sum().item()]  # host reads of total and dst
    torch.cuda.synchronize()
result([3.0 * N] * 4, got)
