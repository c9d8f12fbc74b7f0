"""Per-operator cost of recording, against an empty TorchDispatchMode (not a test: run it).

    python python/tests/bench_overhead.py [N]

CPU tensors play device tensors through a device model as cheap as the CUDA one (attribute
reads, no Python predicate), so what is measured is the recorder and the engine, not the
stand-in. Target: at most 5 us per operator beyond the empty mode. Prints the median of 7 runs
of N small `add`s (default 20000) for: plain, empty mode, recording (engine, no trace),
recording into a no-op session (the Python side alone), and both again with the native
recorder (`native=True`) where it can be built.
"""

import operator
import os
import statistics
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import streamsan.torch as st
from streamsan.torch._device import CpuStandIn


class FastCpu(CpuStandIn):
    """CPU tensors are device tensors of device 0, stream 0: attribute reads only."""

    def __init__(self):
        super().__init__()
        self.is_device = operator.attrgetter("is_cpu")

    def device_index(self, t):
        return 0

    def current_stream(self, device):
        return 0


class Null:
    """A session that drops every record."""

    def __getattr__(self, name):
        if name == "late_errors":
            return lambda: (0, [])
        return lambda *a, **k: 0


class Empty(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def per_op(n, x, y):
    for _ in range(200):
        torch.add(x, y)
    runs = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(n):
            torch.add(x, y)
        runs.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(runs)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    x, y = torch.ones(16), torch.ones(16)
    plain = per_op(n, x, y)
    with Empty():
        empty = per_op(n, x, y)
    st.enable(report=os.devnull, _device=FastCpu())
    try:
        engine = per_op(n, x, y)
    finally:
        st.disable()
    st.enable(_session=Null(), _device=FastCpu())
    try:
        python_side = per_op(n, x, y)
    finally:
        st.disable()
    rows = [
        ("plain", plain),
        ("empty dispatch mode", empty),
        ("streamsan, engine", engine),
        ("streamsan, no-op session", python_side),
    ]
    try:
        from streamsan.torch import _observer

        _observer.build()
    except Exception as e:
        print(f"(native recorder not measured: {e})")
    else:
        for label, kwargs in (
            ("native recorder, engine", dict(report=os.devnull)),
            ("native recorder, no-op session", dict(_session=Null())),
        ):
            st.enable(_device=FastCpu(), native=True, **kwargs)
            try:
                rows.append((label, per_op(n, x, y)))
            finally:
                st.disable()
    print(f"torch {torch.__version__}, {n} x torch.add(16 floats), median of 7, us per op")
    for label, value in rows:
        extra = f"  ({value - empty:+.2f} against the empty mode)" if label.startswith(("streamsan", "native")) else ""
        print(f"  {label:32} {value:7.2f}{extra}")


if __name__ == "__main__":
    main()
