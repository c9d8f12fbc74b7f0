"""r08, racy: a CUDA graph's output read on another stream, nothing ordering it after the replay.

Rule: `g.replay()` launches the captured work (cudaGraphLaunch) on the current stream: it runs
after that stream's earlier work, and later work on that stream runs after it. Another stream
is ordered after the replay only by an explicit edge (wait_stream / an event).
Docs: PyTorch "CUDA semantics", section "CUDA Graphs" (static outputs are refilled by each
replay), https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs; torch.cuda.graph and
torch.cuda.CUDAGraph.replay, https://pytorch.org/docs/stable/generated/torch.cuda.graph.html;
CUDA Programming Guide, "CUDA Graphs" (graph launch into a stream); CUDA Runtime API
cudaGraphLaunch ("each launch is ordered behind both any previous work in stream and any
previous launches of graphExec").

The bug: the sum on `other` reads `static_out` while the replay that refills it waits behind a
spin on the default stream; it sees the previous replay's 2.0s.
Expected: streamsan reports read-after-write on static_out, the graph's node vs the sum, at the
replay (exit 66); plain run prints RESULT WRONG. (CSAN does not see replays.)
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
other = torch.cuda.Stream()
static_in = torch.full((N,), 1.0, device="cuda")

# Warm up before capture, on a side stream, as the CUDA Graphs notes ask.
warm = torch.cuda.Stream()
warm.wait_stream(main)
with torch.cuda.stream(warm):
    static_in * 2.0
main.wait_stream(warm)

g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_out = static_in * 2.0  # captured, not run

# Warm-up of the rest: every operator once, host-synchronized (CUDA loads kernels lazily and
# synchronizes on a kernel's first launch, which would hide the race below).
g.replay()  # static_out = 2.0
static_in.fill_(1.0)
torch.cuda._sleep(1)
torch.cuda.synchronize()
with torch.cuda.stream(other):
    static_out.sum()
torch.cuda.synchronize()

# The racy part.
static_in.fill_(5.0)  # default stream
torch.cuda._sleep(SPIN)  # the default stream is busy for a while
g.replay()  # on the default stream, after the spin: static_out = 10.0
with torch.cuda.stream(other):
    y = static_out.sum()  # BUG: nothing orders `other` after the replay
torch.cuda.synchronize()
result(10.0 * N, y.item())
