"""Where streamsan's per-operator time goes on a GPU machine (a diagnostic, not a benchmark of
record: benches/torch/overhead.py makes the figures in docs/performance.md).

    python benches/torch/profile_op.py [--ops 5000]
    python benches/torch/profile_op.py --native [--ops 5000] [--op add|matmul|both]
    python benches/torch/profile_op.py --stages [--ops 2000] [--repeats 9]
    python benches/torch/profile_op.py --compare OTHER_observer.cpp [--ops 2000] [--repeats 15]
    python benches/torch/profile_op.py --trampoline [--ops 2000] [--repeats 15]
    python benches/torch/profile_op.py --thread [--ops 2000] [--repeats 15]

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

With --stages, the native recorder's own parts, from a diagnostic build of it
(STREAMSAN_OBSERVER_PROBE=1, built beside the normal one) that can stop its work at a stage:
plain and the empty mode alternated first, then, under one recording session (PyTorch's GPU
trace on throughout), the stages alternated repeat by repeat, for both operations. The
differences between consecutive rows are what each stage costs.

With --compare, two builds of the native recorder in one process: this one's _observer.cpp and
another (`git show REV:python/streamsan/torch/_observer.cpp > other.cpp`), each repeat
recording with one and then the other, so that the machine's drift cancels out of each pair;
prints the medians and the median of the per-repeat differences (this minus the other); then
again with 5,000 live tensors allocated in each session.

With --trampoline, one recording session of the native recorder, its memory hooks reached
directly (the observer's interpreter in PyTorch's GPUTrace) and through torch's Python
trampoline (torch's interpreter put back, `fast_memory_hooks(False, False)`) alternately,
repeat by repeat (which goes first alternating too), for both operations, then again with 5,000 more live tensors; prints the
medians and the median of the per-repeat differences (direct minus trampoline).

With --thread, the records checked on the session's checker thread (the default) and within
each call (`checker_thread=False`), a session of each per repeat, alternated as with
--compare, for both operations, then again with 5,000 live tensors allocated in each session;
prints the medians and the median of the per-repeat differences (thread minus inline).
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


def timed(step, ops):
    """Microseconds per call of `step`, over `ops` calls between two synchronizations."""
    torch.cuda.synchronize()
    t = time.perf_counter_ns()
    for _ in range(ops):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - t) / ops / 1000


def per_op(ops, op="add"):
    step = step_of(op)
    for _ in range(200):
        step()
    return statistics.median(timed(step, ops) for _ in range(5))


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


# (probe level, what runs): _observer.cpp's `probe` bits, from the least work to all of it.
STAGES = (
    (1 | 8, "GPU trace on, RecordFunction on; the observer returns at once"),
    (1, "+ the memory hooks' native paths"),
    (2, "+ on_start (operator lookup, inputs kept)"),
    (3, "+ on_end takes the GIL"),
    (4, "+ the tensors' facts, new outputs declared, stream"),
    (0, "+ the launch record to the session (all)"),
)


def stage_rows(ops, repeats, checker_thread):
    os.environ["STREAMSAN_OBSERVER_PROBE"] = "1"
    import streamsan.torch as st
    from streamsan.torch import _observer

    names = ("add", "matmul")
    steps = {op: step_of(op) for op in names}
    for op in names:
        for _ in range(200):
            steps[op]()
    empty = Empty()
    base = {(c, op): [] for c in ("plain", "empty mode") for op in names}
    for _ in range(repeats):
        for op in names:
            base[("plain", op)].append(timed(steps[op], ops))
            with empty:
                base[("empty mode", op)].append(timed(steps[op], ops))
    figures = {(level, op): [] for level, _ in STAGES for op in names}
    h = st.enable(native=True, report=os.devnull, checker_thread=checker_thread)
    try:
        ext = _observer.build()
        for _ in range(repeats):
            for level, _ in STAGES:
                ext.set_probe(level)
                for op in names:
                    for _ in range(50):
                        steps[op]()
                    figures[(level, op)].append(timed(steps[op], ops))
        ext.set_probe(0)
    finally:
        st.disable()
    counts = h.recorder.native_counts
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, checker thread "
          f"{'on' if checker_thread else 'off'}, {ops} operations x {repeats} repeats, medians; "
          f"operators in C++ / Python: {counts[0]} / {counts[1]}")
    for op in names:
        print(f"-- {op}")
        plain = statistics.median(base[("plain", op)])
        for c in ("plain", "empty mode"):
            us = statistics.median(base[(c, op)])
            print(f"{c:70s} {us:7.2f} us  ({us - plain:+.2f} over plain)")
        prev = None
        for level, what in STAGES:
            us = statistics.median(figures[(level, op)])
            step = "" if prev is None else f", this stage {us - prev:+.2f}"
            print(f"{what:70s} {us:7.2f} us  ({us - plain:+.2f} over plain{step})")
            prev = us


def print_pair(label, first, second):
    """One line: both ways' medians and the median (quartiles) of the paired differences,
    second minus first; `first` and `second` are (name, figures per repeat)."""
    (na, a), (nb, b) = first, second
    diffs = sorted(y - x for x, y in zip(a, b))
    q = len(diffs) // 4
    print(f"{label:18s} {na} {statistics.median(a):6.2f}  {nb} {statistics.median(b):6.2f}  "
          f"{nb} - {na}: median {statistics.median(diffs):+.2f} "
          f"(quartiles {diffs[q]:+.2f}..{diffs[-1 - q]:+.2f})")


def paired_sessions(ops, repeats, ways, live=False):
    """Figures per (way, op): each repeat records a session of each way in turn (which goes
    first alternating), so that the machine's drift cancels out of each pair. `ways` is
    [(name, enable's options, observer module)]; with `live`, each session first allocates
    5,000 tensors of 1K floats and keeps them to its end."""
    import streamsan.torch as st
    from streamsan.torch import _observer

    this = _observer.build()
    names = ("add", "matmul")
    steps = {op: step_of(op) for op in names}
    figures = {(name, op): [] for name, _, _ in ways for op in names}
    try:
        for r in range(repeats):
            for name, options, ext in ways if r % 2 == 0 else ways[::-1]:
                _observer._ext = ext
                st.enable(native=True, report=os.devnull, **options)
                kept = [torch.zeros(1024, device="cuda") for _ in range(5000)] if live else []
                try:
                    for op in names:
                        for _ in range(50):
                            steps[op]()
                        figures[(name, op)].append(timed(steps[op], ops))
                finally:
                    del kept
                    st.disable()
    finally:
        _observer._ext = this
    return figures


def compare_rows(ops, repeats, other_source):
    from streamsan.torch import _observer

    ways = [("other", {}, _observer.load(other_source, "other")), ("this", {}, _observer.build())]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, {ops} operations x "
          f"{repeats} repeats; this build against {other_source}, us per operation")
    for live in (False, True):
        figures = paired_sessions(ops, repeats, ways, live)
        for op in ("add", "matmul"):
            print_pair(op + (" 5,000 live" if live else ""), ("other", figures[("other", op)]),
                       ("this", figures[("this", op)]))


def thread_rows(ops, repeats):
    from streamsan.torch import _observer

    ext = _observer.build()
    ways = [("inline", {"checker_thread": False}, ext), ("thread", {"checker_thread": True}, ext)]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, {ops} operations x "
          f"{repeats} repeats, a session per way and repeat; us per operation")
    for live in (False, True):
        figures = paired_sessions(ops, repeats, ways, live)
        for op in ("add", "matmul"):
            print_pair(op + (" 5,000 live" if live else ""), ("inline", figures[("inline", op)]),
                       ("thread", figures[("thread", op)]))


def trampoline_rows(ops, repeats):
    import streamsan.torch as st
    from streamsan.torch import _observer

    ext = _observer.build()
    names = ("add", "matmul")
    steps = {op: step_of(op) for op in names}
    figures = {}
    from streamsan.torch import _api

    h = st.enable(native=True, report=os.devnull)
    live = []
    try:
        if not h.recorder.fast_memory_hooks or len(_api._state[1].overridden) != 2:
            raise SystemExit("the memory hooks cannot skip PyTorch's trampoline here")
        for phase in ("", " 5,000 live"):
            if phase:
                live = [torch.zeros(1024, device="cuda") for _ in range(5000)]
            for r in range(repeats):
                ways = [("trampoline", False), ("direct", True)]
                for way, on in ways if r % 2 == 0 else ways[::-1]:  # which goes first alternates
                    assert ext.fast_memory_hooks(on, on) is on
                    for op in names:
                        for _ in range(50):
                            steps[op]()
                        figures.setdefault((way, op + phase), []).append(timed(steps[op], ops))
    finally:
        del live
        st.disable()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, {ops} operations x "
          f"{repeats} repeats, one session; us per operation")
    for key in sorted({k[1] for k in figures}, key=lambda k: (k.endswith("live"), k)):
        print_pair(key, ("trampoline", figures[("trampoline", key)]),
                   ("direct", figures[("direct", key)]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ops", type=int, default=5000)
    p.add_argument("--native", action="store_true", help="the native recorder's parts")
    p.add_argument("--op", choices=("add", "matmul", "both"), default="add",
                   help="with --native: the operation (default add)")
    p.add_argument("--stages", action="store_true",
                   help="the native recorder's stages (a diagnostic build of it)")
    p.add_argument("--repeats", type=int,
                   help="with --stages (default 9), --compare, --trampoline or --thread "
                        "(default 15)")
    p.add_argument("--no-checker-thread", action="store_true",
                   help="with --stages: the records checked within each call")
    p.add_argument("--compare", metavar="OTHER_CPP",
                   help="this build of the native recorder against another source of it")
    p.add_argument("--trampoline", action="store_true",
                   help="the memory hooks reached directly against through torch's trampoline")
    p.add_argument("--thread", action="store_true",
                   help="the records checked on the session's thread against within each call")
    args = p.parse_args()
    ops = args.ops
    if args.trampoline:
        return trampoline_rows(ops, args.repeats or 15)
    if args.thread:
        return thread_rows(ops, args.repeats or 15)
    if args.compare:
        return compare_rows(ops, args.repeats or 15, args.compare)
    if args.stages:
        return stage_rows(ops, args.repeats or 9, not args.no_checker_thread)
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
