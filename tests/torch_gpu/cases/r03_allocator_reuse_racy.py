"""r03, racy: a caching-allocator block reused while another stream still reads it.

Rule: PyTorch's caching allocator knows only the stream a tensor was allocated on. When the
tensor dies, its block goes back to that stream's pool at once, and the next allocation on that
stream may get the same bytes, even though another stream's queued work still reads them.
`Tensor.record_stream(s)` tells the allocator not to reuse the block until the work queued on
`s` at the time of the free has completed.
Docs: Tensor.record_stream, https://pytorch.org/docs/stable/generated/torch.Tensor.record_stream.html
("the allocator might reuse the memory unexpectedly"); PyTorch "CUDA semantics", sections
"CUDA streams" and "Memory management", https://pytorch.org/docs/stable/notes/cuda.html.

The bug: `a` (allocated on the default stream) is read on the side stream behind a spin, then
deleted on the host with no record_stream; `b = torch.empty(...)` on the default stream gets
a's block and `b.fill_(5.0)` overwrites it before the side stream's sum has read it.
Expected: streamsan reports write-after-read across the reuse, naming both buffers (exit 66);
plain run prints RESULT WRONG (the sum sees 5.0s instead of 1.0s).
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
# a kernel's first launch, which would hide the race below). It also leaves the blocks cached:
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

# The racy part.
a = torch.empty(N, device="cuda")  # allocated on the default stream: its block is that pool's
a.fill_(1.0)
torch.cuda.synchronize()  # a holds 1.0 everywhere, nothing is pending
a_ptr = a.data_ptr()
with torch.cuda.stream(side):
    torch.cuda._sleep(SPIN)
    y = a.sum()  # the side stream reads a, after the spin
del a  # BUG: no a.record_stream(side): the block is free for reuse at once
b = torch.empty(N, device="cuda")  # the default stream's next allocation: a's block
b.fill_(5.0)  # the default stream is idle: this lands before the side stream's sum
torch.cuda.synchronize()
print(f"NOTE b reused a's block: {b.data_ptr() == a_ptr}", flush=True)
result(1.0 * N, y.item())
