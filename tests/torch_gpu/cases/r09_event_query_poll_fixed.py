"""r09, fixed: the host polls the event until it reports done, then enqueues the consumer.

Rule: once Event.query() returned True, the work the event captured (the producer) has
completed; the consumer, enqueued by the host afterwards on another stream, runs after it. A
polling loop is a sync, so no stream wait is needed.
Docs: torch.cuda.Event.query, https://pytorch.org/docs/stable/generated/torch.cuda.Event.html;
CUDA Runtime API cudaEventQuery ("cudaSuccess if all captured work has been completed");
CUDA Programming Guide, "Events".

Twin of r09_event_query_poll_racy.py with the polling loop.
Expected: streamsan reports nothing (exit 0); plain run prints RESULT ok. (CSAN has no
query-as-sync and is expected to raise a false alarm here.)
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
x.fill_(1.0)
torch.cuda.synchronize()  # x holds 1.0 everywhere, nothing is pending
ev = torch.cuda.Event()
with torch.cuda.stream(s1):
    torch.cuda._sleep(SPIN)
    x.fill_(2.0)  # producer on s1, after the spin
    ev.record(s1)  # captures the producer
polls = 0
while not ev.query():  # FIX: the host polls until the producer has completed
    polls += 1
print(f"NOTE polled {polls} times", flush=True)
with torch.cuda.stream(s2):
    y = x.sum()  # consumer on s2: enqueued after the host saw the fill complete
torch.cuda.synchronize()
result(2.0 * N, y.item())
