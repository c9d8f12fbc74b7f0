"""r07, racy: the result of `.to("cpu", non_blocking=True)` read before a sync.

Rule: `t.to("cpu", non_blocking=True)` on a CUDA tensor returns at once a new CPU tensor in
pinned memory that an asynchronous D2H copy will fill when the stream reaches it. Its contents
are undefined until a sync covers the copy.
Docs: torch.Tensor.to ("When non_blocking is set to True, the function attempts to perform the
conversion asynchronously with respect to the host"), https://pytorch.org/docs/stable/generated/torch.Tensor.to.html;
PyTorch tutorial "A guide on good usage of non_blocking and pin_memory()" ("attempting
cuda_tensor.to("cpu", non_blocking=True).mean() will result in erroneous outputs"),
https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html.

The bug: `h.sum()` reads the fresh pinned tensor while the copy waits behind a spin; it holds
whatever the pinned block held (the warm-up's -1.0s, or zeros).
Expected: streamsan reports read-after-write on h, host read vs copy (exit 66); plain run prints
RESULT WRONG.
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
# a kernel's first launch, which would hide the race below). The warm-up copies -1.0s, so a
# pinned block handed out again holds a value the program does not expect.
w = torch.full((N,), -1.0, device="cuda")
h = w.to("cpu", non_blocking=True)
torch.cuda._sleep(1)
torch.cuda.synchronize()
h.sum()
del h, w

# The racy part.
torch.cuda._sleep(SPIN)  # the default stream is busy for a while
h = g.to("cpu", non_blocking=True)  # a new pinned CPU tensor, filled by an async D2H copy
if not h.is_pinned():
    print("NOTE the non_blocking result is not pinned: its copy was synchronous", flush=True)
got = h.sum().item()  # BUG: the host reads h before the copy has landed
torch.cuda.synchronize()
result(3.0 * N, got)
