"""r02, fixed: an event between two side streams, recorded after the producer.

Rule: `ev.record(s1)` after the producer captures it; `s2.wait_event(ev)` makes all later work
on s2 wait for it.
Docs: CUDA Programming Guide, "Events" and "Explicit Synchronization" (cudaStreamWaitEvent);
CUDA Runtime API cudaEventRecord; torch.cuda.Event.record / Stream.wait_event,
https://pytorch.org/docs/stable/generated/torch.cuda.Event.html.

Twin of r02_event_between_streams_racy.py with the record moved after the producer.
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

s1 = torch.cuda.Stream()
s2 = torch.cuda.Stream()
x = torch.empty(N, device="cuda")

# Warm-up: every operator once, host-synchronized (CUDA loads kernels lazily and synchronizes on
# a kernel's first launch, which would hide a race below).
x.fill_(1.0)
torch.cuda._sleep(1)
torch.cuda.synchronize()
with torch.cuda.stream(s1):
    x.fill_(1.0)
torch.cuda.synchronize()
with torch.cuda.stream(s2):
    x.sum()
torch.cuda.synchronize()

# The part that was racy.
ev = torch.cuda.Event()
with torch.cuda.stream(s1):
    torch.cuda._sleep(SPIN)
    x.fill_(2.0)  # producer on s1, after the spin
    ev.record(s1)  # FIX: recorded after the producer, it captures it
s2.wait_event(ev)  # s2's later work waits for the fill
with torch.cuda.stream(s2):
    y = x.sum()  # consumer on s2: ordered after the fill
torch.cuda.synchronize()
result(2.0 * N, y.item())
