"""r01, fixed: default-stream producer, side-stream consumer after side.wait_stream(default).

Rule: Stream.wait_stream(other) makes all future work on the stream wait for the work queued on
`other` at the time of the call (an event recorded on `other`, waited on by the stream).
Docs: PyTorch "CUDA semantics", section "CUDA streams" (the fixed form of its example),
https://pytorch.org/docs/stable/notes/cuda.html; torch.cuda.Stream.wait_stream,
https://pytorch.org/docs/stable/generated/torch.cuda.Stream.html; CUDA Runtime API,
cudaStreamWaitEvent.

Twin of r01_default_stream_racy.py with the one-line fix.
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

main = torch.cuda.current_stream()  # the default stream
side = torch.cuda.Stream()
x = torch.empty(N, device="cuda")

# Warm-up: every operator once, host-synchronized (CUDA loads kernels lazily and synchronizes on
# a kernel's first launch, which would hide a race below).
x.fill_(1.0)
torch.cuda._sleep(1)
torch.cuda.synchronize()
with torch.cuda.stream(side):
    x.sum()
torch.cuda.synchronize()

# The part that was racy.
x.fill_(1.0)
torch.cuda.synchronize()  # x holds 1.0 everywhere, nothing is pending
torch.cuda._sleep(SPIN)  # the default stream is busy for a while
x.fill_(2.0)  # producer, default stream: runs after the spin
with torch.cuda.stream(side):
    side.wait_stream(main)  # FIX: the side stream waits for the fill
    y = x.sum()  # consumer, side stream: ordered after the fill
torch.cuda.synchronize()
result(2.0 * N, y.item())
