"""r09, racy: an event is recorded after the producer, but nobody waits for it or polls it.

Rule: Event.query() (cudaEventQuery) returning True means all work the event captured has
completed: the host may then rely on it, and work the host enqueues afterwards on any stream is
ordered after it. Without a wait, a sync or a query that returned True, nothing orders the
consumer after the producer.
Docs: torch.cuda.Event.query ("Check if all work currently captured by event has completed"),
https://pytorch.org/docs/stable/generated/torch.cuda.Event.html; CUDA Runtime API cudaEventQuery;
CUDA Programming Guide, "Events".

The bug: the polling loop of the fixed twin is missing; the sum on s2 reads x while s1 is about
to write it.
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

s1 = torch.cuda.Stream()
s2 = torch.cuda.Stream()
x = torch.empty(N, device="cuda")

# Warm-up: every operator once, host-synchronized (CUDA loads kernels lazily and synchronizes on
# a kernel's first launch, which would hide the race below).
x.fill_(1.0)
torch.cuda._sleep(1)
torch.cuda.synchronize()
with torch.cuda.stream(s1):
    x.fill_(1.0)
torch.cuda.synchronize()
with torch.cuda.stream(s2):
    x.sum()
torch.cuda.synchronize()

# The racy part.
x.fill_(1.0)
torch.cuda.synchronize()  # x holds 1.0 everywhere, nothing is pending
ev = torch.cuda.Event()
with torch.cuda.stream(s1):
    torch.cuda._sleep(SPIN)
    x.fill_(2.0)  # producer on s1, after the spin
    ev.record(s1)  # captures the producer
# BUG: no `while not ev.query(): pass` here
with torch.cuda.stream(s2):
    y = x.sum()  # consumer on s2: unordered with the fill
torch.cuda.synchronize()
result(2.0 * N, y.item())
