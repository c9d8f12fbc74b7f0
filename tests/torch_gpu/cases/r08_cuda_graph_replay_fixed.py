"""r08, fixed: the stream that reads a CUDA graph's output first waits for the replay's stream.

Rule: `other.wait_stream(main)` after `g.replay()` on `main` orders `other`'s later work after
all of the replay's nodes (cudaGraphLaunch work is part of `main`'s stream order).
Docs: PyTorch "CUDA semantics", section "CUDA Graphs",
https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs; torch.cuda.Stream.wait_stream,
https://pytorch.org/docs/stable/generated/torch.cuda.Stream.html; CUDA Runtime API
cudaGraphLaunch.

Twin of r08_cuda_graph_replay_racy.py with the one-line fix.
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
# synchronizes on a kernel's first launch, which would hide a race below).
g.replay()  # static_out = 2.0
static_in.fill_(1.0)
torch.cuda._sleep(1)
torch.cuda.synchronize()
with torch.cuda.stream(other):
    static_out.sum()
torch.cuda.synchronize()

# The part that was racy.
static_in.fill_(5.0)  # default stream
torch.cuda._sleep(SPIN)  # the default stream is busy for a while
g.replay()  # on the default stream, after the spin: static_out = 10.0
with torch.cuda.stream(other):
    other.wait_stream(main)  # FIX: `other` waits for the replay
    y = static_out.sum()  # ordered after the replay
torch.cuda.synchronize()
result(10.0 * N, y.item())
