"""Where streamsan's per-operator time goes on a GPU machine (a diagnostic, not a benchmark of
record: benches/torch/overhead.py makes the figures in docs/performance.md).

    python benches/torch/profile_op.py [--ops 5000]
    python benches/torch/profile_op.py --native [--ops 5000] [--op add|matmul|both]

In one process, in this order (PyTorch's GPU trace cannot be turned off again): `x = x + 1`
on 1K floats plain; inside an empty TorchDispatchMode; the same with the GPU trace on and a
no-op callback on each hook streamsan uses (what the hooks cost by themselves); under
streamsan; then once more under streamsan with cProfile, whose top functions are printed.

With --native, the native recorder's parts instead (for `x = x + 1`, `c = a @ b` on 64x64
floats, or both): plain; the empty mode; the native
recorder writing to a session that drops every record (the recording alone); plain again,
with PyTorch's GPU trace now on and streamsan's hooks doing nothing (the hooks' own cost); the
native recorder with the engine; the dispatch mode with the engine. Each row's operators
handled in C++ and in Python are printed beside it.
"""

import argparse
import cProfile
import os
import pstats
import statistics
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class Empty(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls):
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def step_of(op):
    """`x = x + 1` on 1K floats, or `c = a @ b` on 64x64 floats (benches/torch/overhead.py's)."""
    if op == "add":
        x = [torch.zeros(1024, device="cuda")]

        def add():
            x[0] = x[0] + 1

        return add
    a = torch.randn(64, 64, device="cuda")
    b = torch.randn(64, 64, device="cuda")
    c = [None]

    def matmul():
        c[0] = a @ b

    return matmul


def per_op(ops, op="add"):
    step = step_of(op)
    for _ in range(200):
        step()
    figures = []
    for _ in range(5):
        torch.cuda.synchronize()
        t = time.perf_counter_ns()
        for _ in range(ops):
            step()
        torch.cuda.synchronize()
        figures.append((time.perf_counter_ns() - t) / ops / 1000)
    return statistics.median(figures)


class Null:
    """A session that drops every record."""

    def __getattr__(self, name):
        return lambda *a, **k: None


def native_rows(ops, names):
    import streamsan.torch as st

    rows = [("plain", {op: per_op(ops, op) for op in names}, None)]
    with Empty():
        rows.append(("empty mode", {op: per_op(ops, op) for op in names}, None))
    for label, kwargs in (
        ("native recorder, records dropped", dict(_session=Null())),
        ("plain, GPU trace on, streamsan off", None),
        ("native recorder, engine", dict(report=os.devnull)),
        ("dispatch mode, engine", dict(report=os.devnull, native=False)),
    ):
        if kwargs is None:
            rows.append((label, {op: per_op(ops, op) for op in names}, None))
            continue
        kwargs.setdefault("native", True)
        h = st.enable(**kwargs)
        try:
            us = {op: per_op(ops, op) for op in names}
        finally:
            st.disable()
        rows.append((label, us, h.recorder.native_counts))
    base = rows[1][1]
    for op in names:
        print(f"-- {op}")
        for name, us, counts in rows:
            extra = f"  operators in C++ / Python (all ops): {counts[0]} / {counts[1]}" if counts else ""
            print(f"{name:45s} {us[op]:8.2f} us/op  ({us[op] - base[op]:+.2f} over the empty mode){extra}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ops", type=int, default=5000)
    p.add_argument("--native", action="store_true", help="the native recorder's parts")
    p.add_argument("--op", choices=("add", "matmul", "both"), default="add",
                   help="with --native: the operation (default add)")
    args = p.parse_args()
    ops = args.ops
    if args.native:
        return native_rows(ops, ("add", "matmul") if args.op == "both" else (args.op,))
    rows = [("plain", per_op(ops))]
    with Empty():
        rows.append(("empty mode", per_op(ops)))
    from torch.cuda import _gpu_trace

    from streamsan.torch._hooks import HOOKS

    for reg, _ in HOOKS:
        getattr(_gpu_trace, reg)(lambda *a: None)
    torch._C._activate_gpu_trace()
    with Empty():
        rows.append(("empty mode + GPU trace hooks (no-op)", per_op(ops)))
    import streamsan.torch as st

    with st.sanitize(report=os.devnull, native=False):
        rows.append(("streamsan (hooks above still registered)", per_op(ops)))
    base = rows[1][1]
    for name, us in rows:
        print(f"{name:45s} {us:8.2f} us/op  ({us - base:+.2f} over the empty mode)")
    prof = cProfile.Profile()
    with st.sanitize(report=os.devnull, native=False):
        prof.enable()
        per_op(ops)
        prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
