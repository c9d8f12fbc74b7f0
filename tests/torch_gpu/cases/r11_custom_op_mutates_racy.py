"""r11, racy: a custom operator writes its argument on a side stream; the default stream reads it.

Rule: a custom operator's declared mutations (`mutates_args`, schema `Tensor(a!)`) are its
writes, wherever its implementation does them; like any kernel, it is ordered with another
stream's work only by an explicit edge.
Docs: torch.library.custom_op ("mutates_args: The names of args that the function mutates.
This MUST be accurate, otherwise, the behavior is undefined"),
https://pytorch.org/docs/stable/library.html#torch.library.custom_op; PyTorch "CUDA semantics",
section "CUDA streams", https://pytorch.org/docs/stable/notes/cuda.html.

The bug: the default stream sums x right after `scale_(x, 3.0)` was queued on the side stream
behind a spin; the sum sees the old 1.0s.
Expected: streamsan reports read-after-write on x, the custom op vs the sum (exit 66); plain run
prints RESULT WRONG.
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


@torch.library.custom_op("streamsan_cases::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor, factor: float) -> None:
    """Multiplies x by factor in place. A sanitizer sees this operator and its schema
    (`Tensor(a!) x`), not the operators inside it."""
    x.mul_(factor)


main = torch.cuda.current_stream()  # the default stream
side = torch.cuda.Stream()
x = torch.empty(N, device="cuda")

# Warm-up: every operator once, host-synchronized (CUDA loads kernels lazily and synchronizes on
# a kernel's first launch, which would hide the race below).
x.fill_(1.0)
torch.cuda._sleep(1)
torch.cuda.synchronize()
with torch.cuda.stream(side):
    scale_(x, 1.0)
torch.cuda.synchronize()
x.sum()
torch.cuda.synchronize()

# The racy part.
x.fill_(1.0)
torch.cuda.synchronize()  # x holds 1.0 everywhere, nothing is pending
with torch.cuda.stream(side):
    torch.cuda._sleep(SPIN)
    scale_(x, 3.0)  # the custom op writes x on the side stream, after the spin
y = x.sum()  # BUG: the default stream reads x, unordered with the custom op
torch.cuda.synchronize()
result(3.0 * N, y.item())
