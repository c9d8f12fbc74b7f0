"""r02, racy: an event between two side streams, recorded before the producer.

Rule: cudaEventRecord captures the work enqueued on the stream *at the time of the call*; a
wait on the event orders the waiting stream after exactly that work. An event recorded before
the producer orders nothing of the producer.
Docs: CUDA Programming Guide, "Events" and "Explicit Synchronization" (cudaStreamWaitEvent);
CUDA Runtime API cudaEventRecord ("captures the contents of stream at the time of this call");
torch.cuda.Event.record / Stream.wait_event,
https://pytorch.org/docs/stable/generated/torch.cuda.Event.html.

The bug: `ev.record()` sits before the producer instead of after it, so `s2.wait_event(ev)`
waits for nothing that matters and the sum on s2 reads x while s1 is about to write it.
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
ev = torch.cuda.Event()
with torch.cuda.stream(s1):
    ev.record(s1)  # BUG: recorded before the producer, it captures none of its work
    torch.cuda._sleep(SPIN)
    x.fill_(2.0)  # producer on s1, after the spin
s2.wait_event(ev)  # orders s2 after nothing that matters
with torch.cuda.stream(s2):
    y = x.sum()  # consumer on s2: runs at once and reads the old 1.0s
torch.cuda.synchronize()
result(2.0 * N, y.item())
