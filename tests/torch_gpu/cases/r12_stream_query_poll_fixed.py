"""r12, fixed: the host polls the side stream until it is idle, then reads the pinned buffer.

Rule: once Stream.query() returned True, all work queued on the stream (the copy included) has
completed; the host's read after the loop is ordered after the copy. A polling loop is a sync.
Docs: torch.cuda.Stream.query, https://pytorch.org/docs/stable/generated/torch.cuda.Stream.html;
CUDA Runtime API cudaStreamQuery ("cudaSuccess if all operations in stream have completed");
PyTorch "CUDA semantics", section "Use pinned memory buffers",
https://pytorch.org/docs/stable/notes/cuda.html.

Twin of r12_stream_query_poll_racy.py with the polling loop.
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
g = torch.full((N,), 3.0, device="cuda")
dst = torch.zeros(N, pin_memory=True)
torch.cuda.synchronize()  # g is written, nothing is pending

# Warm-up: every operator once, host-synchronized (CUDA loads kernels lazily and synchronizes on
# a kernel's first launch, which would hide a race below).
with torch.cuda.stream(side):
    dst.copy_(g, non_blocking=True)
    torch.cuda._sleep(1)
torch.cuda.synchronize()
dst.zero_()  # host write, after the sync

# The part that was racy.
with torch.cuda.stream(side):
    torch.cuda._sleep(SPIN)  # the side stream is busy for a while
    dst.copy_(g, non_blocking=True)  # async D2H into pinned memory: lands after the spin
polls = 0
while not side.query():  # FIX: the host polls until the copy has completed
    polls += 1
print(f"NOTE polled {polls} times", flush=True)
got = dst.sum().item()  # the host reads dst after the copy landed
torch.cuda.synchronize()
result(3.0 * N, got)
