"""On a real CUDA device (skipped elsewhere): the assumptions the recorder makes about
PyTorch's hooks and operators, checked against what PyTorch actually does.

Each test records with the real CUDA device model into a FakeSession (exact records) and,
where it says so, into the engine (verdicts).
"""

import gc
import os

import pytest
import torch

import streamsan.torch as st
from fake_session import FakeSession
from streamsan.torch._streams import LEGACY_BASE  # noqa: F401

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture
def fake():
    torch.cuda.synchronize()
    session = FakeSession()
    st.enable(_session=session)
    try:
        yield session
    finally:
        st.disable()
        torch.cuda.synchronize()


def dump(fake):
    return "\n".join(repr(r) for r in fake.normalized())


def test_fresh_output_alloc_comes_from_the_hook_with_its_pool_stream(fake):
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.ones(1024, device="cuda")
    x.add_(1)  # on the default stream
    allocs = fake.of("alloc")
    assert len(allocs) == 1, dump(fake)
    assert allocs[0]["stream"] == side.cuda_stream, dump(fake)
    assert allocs[0]["addr"] == x.data_ptr()
    streams = fake.of("stream")
    assert streams == [{"op": "stream", "id": side.cuda_stream}], dump(fake)  # non_blocking
    launches = fake.of("launch")
    assert [l["stream"] for l in launches] == [side.cuda_stream, 0], dump(fake)
    buf = allocs[0]["buf"]
    del x
    gc.collect()
    assert fake.of("free") == [{"op": "free", "buf": buf}], dump(fake)


def test_the_native_recorders_memory_hooks_skip_torchs_trampoline():
    """The allocator's events reach the native recorder's hooks through the interpreter it put
    in GPUTrace (x86-64): torch's Python trampoline, which calls fire_callbacks, never runs,
    and the records are those of the test above."""
    import platform

    from torch.cuda import _gpu_trace

    torch.cuda.synchronize()
    session = FakeSession()
    h = st.enable(_session=session, native=True)
    try:
        if platform.machine() != "x86_64":
            assert h.recorder.fast_memory_hooks is False
            return
        assert h.recorder.fast_memory_hooks is True
        trampolined = []
        for registry in (_gpu_trace.MemoryAllocationCallbacks, _gpu_trace.MemoryDeallocationCallbacks):
            registry.fire_callbacks = trampolined.append  # disable() takes these away
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            x = torch.ones(1024, device="cuda")
        x.add_(1)
        buf = session.of("alloc")[0]["buf"]
        del x
        gc.collect()
    finally:
        st.disable()
        torch.cuda.synchronize()
    assert trampolined == []
    allocs = session.of("alloc")
    assert [a["stream"] for a in allocs] == [side.cuda_stream], dump(session)
    assert session.of("free") == [{"op": "free", "buf": buf}], dump(session)


def test_event_record_wait_and_syncs_come_from_the_hooks(fake):
    side = torch.cuda.Stream()
    ev = torch.cuda.Event()
    x = torch.ones(16, device="cuda")
    ev.record()
    side.wait_event(ev)
    ev.synchronize()
    side.synchronize()
    torch.cuda.synchronize()
    ops = [r["op"] for r in fake.normalized()]
    for op in ("event", "record", "wait", "event_sync", "stream_sync", "device_sync"):
        assert op in ops, dump(fake)
    rec = fake.of("record")[0]
    assert rec["event"] == ev.cuda_event and rec["stream"] == 0, dump(fake)
    assert fake.of("wait")[0]["stream"] == side.cuda_stream
    del x


def test_item_is_one_memcpy_and_one_stream_sync(fake):
    x = torch.ones(16, device="cuda")
    fake.clear()
    assert x.sum().item() == 16.0
    ops = [r["op"] for r in fake.normalized()]
    assert ops.count("memcpy") == 1 and ops.count("stream_sync") == 1, dump(fake)
    assert ops.index("memcpy") < ops.index("stream_sync"), dump(fake)


def test_cpu_and_tolist_and_print_are_synchronous_copies(fake):
    x = torch.ones(4, device="cuda")
    fake.clear()
    x.cpu()
    x.tolist()
    repr(x)
    memcpys = fake.of("memcpy")
    syncs = fake.of("stream_sync")
    assert len(memcpys) == 3, dump(fake)
    assert len(syncs) == 3, dump(fake)
    assert [m["name"] for m in memcpys] == ["aten::_to_copy", "aten::_to_copy", "print"], dump(fake)


def test_to_cpu_non_blocking_output_is_pinned(fake):
    x = torch.ones(1024, device="cuda")
    y = x.to("cpu", non_blocking=True)
    assert y.is_pinned()
    pinned = [a for a in fake.of("alloc") if a.get("space") == "pinned"]
    assert len(pinned) == 1 and pinned[0]["addr"] == y.data_ptr(), dump(fake)
    assert "stream_sync" not in [r["op"] for r in fake.normalized()], dump(fake)
    torch.cuda.synchronize()
    fake.clear()
    y.sum()
    assert [r["op"] for r in fake.normalized()] == ["host_access"], dump(fake)


def test_pinned_tensor_is_learned_at_its_first_copy(fake):
    h = torch.zeros(64, pin_memory=True)
    g = torch.ones(64, device="cuda")
    h.copy_(g, non_blocking=True)
    spaces = [a.get("space", "device") for a in fake.of("alloc")]
    assert "pinned" in spaces, dump(fake)
    m = fake.of("memcpy")[-1]
    assert "stream_sync" not in [r["op"] for r in fake.normalized()][-2:], dump(fake)
    assert m["dst"][2] == 256


def test_graph_capture_and_replay(fake):
    static_in = torch.ones(1024, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = static_in * 2
    g.replay()
    ops = [r["op"] for r in fake.normalized()]
    assert ops.count("graph_begin") == 1 and ops.count("graph_end") == 1, dump(fake)
    assert ops.count("graph_launch") == 1, dump(fake)
    begin = ops.index("graph_begin")
    end = ops.index("graph_end")
    assert "launch" in ops[begin:end], dump(fake)
    del g
    gc.collect()
    assert "graph_destroy" in [r["op"] for r in fake.normalized()], dump(fake)
    del static_out


def test_verdict_side_stream_reads_default_stream_write(native, tmp_path):
    torch.cuda.synchronize()
    with st.sanitize(report=str(tmp_path / "r.txt")) as s:
        side = torch.cuda.Stream()
        x = torch.randn(1 << 16, device="cuda")
        with torch.cuda.stream(side):
            x.sum()  # RACY
        torch.cuda.synchronize()
    assert s.races == 1, s.report_text()
    with st.sanitize(report=str(tmp_path / "r2.txt")) as s:
        side = torch.cuda.Stream()
        x = torch.randn(1 << 16, device="cuda")
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            x.sum()
        torch.cuda.synchronize()
    assert s.races == 0, s.report_text()


BACKWARD_RACE = """
import torch
side = torch.cuda.Stream()
x = torch.randn(1 << 20, device="cuda", requires_grad=True)
w = torch.randn(1 << 20, device="cuda")
g = torch.ones(1 << 20, device="cuda")
(x * w).backward(g)  # every operator once
torch.cuda.synchronize()
y = x * w
with torch.cuda.stream(side):
    g.fill_(2.0)  # the gradient written on a side stream
y.backward(g)  # read by backward's first kernel, on autograd's device thread: a race
print("after the race", flush=True)
"""


def test_native_halt_on_a_race_in_backward_stops_the_program(native, tmp_path):
    """halt_on_error when the race is found on autograd's device thread (no Python frame):
    the thread that enabled checking stops once backward returns."""
    import subprocess
    import sys

    script = tmp_path / "prog.py"
    script.write_text(BACKWARD_RACE)
    cmd = [sys.executable, "-m", "streamsan.torch", "--native", "--halt-on-error", str(script)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 66, p.stderr
    assert "RACE" in p.stderr
    assert "after the race" not in p.stdout


def test_verdict_polling_loop_is_no_false_alarm(native, tmp_path):
    torch.cuda.synchronize()
    with st.sanitize(report=str(tmp_path / "r.txt")) as s:
        g = torch.ones(1 << 16, device="cuda")
        h = torch.empty(1 << 16, pin_memory=True)
        h.copy_(g, non_blocking=True)
        ev = torch.cuda.Event()
        ev.record()
        while not ev.query():
            pass
        h.sum()
    assert s.races == 0, s.report_text()


def test_bench_numbers(capsys):
    """Not an assertion on speed: prints the per-operator cost on this machine."""
    import time

    x = torch.ones(16, device="cuda")
    y = torch.ones(16, device="cuda")

    def per_op(n=3000):
        for _ in range(200):
            x.add_(y)
        torch.cuda.synchronize()
        best = 1e9
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(n):
                x.add_(y)
            torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - t) / n * 1e6)
        return best

    from torch.utils._python_dispatch import TorchDispatchMode

    class Empty(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    plain = per_op()
    with Empty():
        empty = per_op()
    st.enable(report=os.devnull)
    try:
        checked = per_op()
    finally:
        st.disable()
    with capsys.disabled():
        print(f"\nBENCH add_ on CUDA: plain {plain:.2f} us, empty mode {empty:.2f} us, "
              f"streamsan {checked:.2f} us (+{checked - empty:.2f})")
