"""The native recorder (`enable(native=True)`, _observer.cpp) against the dispatch mode: the
same records for the same program, most operators recorded in C++, halt_on_error.

The whole suite also runs under the native recorder (python/test.sh sets
STREAMSAN_TORCH_NATIVE=1 the second time); these tests compare the two ways directly.
"""

import os
import sys

import pytest
import torch

import streamsan.torch as st
from fake_session import FakeHalt, FakeSession
from streamsan.torch import _api
from streamsan.torch._device import CpuStandIn


@pytest.fixture(scope="module")
def observer():
    from streamsan.torch import _observer

    try:
        return _observer.build()
    except Exception as e:  # no compiler here
        if os.environ.get("STREAMSAN_REQUIRE_NATIVE"):
            raise
        pytest.skip(f"the native recorder cannot be built here: {e}")


def program(dev):
    """Operators of every kind the recorder handles, on two fake streams."""
    x = torch.ones(8)
    y = torch.ones(2, 4, dtype=torch.float64)
    z = x.view(2, 4) + y
    z.t().contiguous()  # a strided read
    a = torch.arange(10).reshape(5, 2)
    parts = torch.split(a, 2)
    parts[1].add_(1)  # a view written in place
    torch.addr(torch.zeros(3, 3), torch.arange(1, 4), torch.arange(1, 4))
    q = torch.cat([x, x])
    q[::2].mul_(2)  # every other element
    torch.add(x, x, out=torch.empty(8))
    with dev.use_stream(0x5000):
        r = q * 3 + 1
        r.sum().item()  # a device-to-host copy
    host = r.to("cpu")  # a copy to host memory
    dev.mark_host(host)
    r.copy_(host)
    del x, y, z
    # Backward through an operator with a CompositeImplicitAutograd kernel beside its own
    # (silu_backward): the dispatch mode sees it whole.
    w = torch.ones(16, requires_grad=True)
    torch.nn.functional.silu(w).sum().backward()
    # Composite operators are seen as the operators they call (addmm, mm,
    # max_pool2d_with_indices) though a kernel sits on their Autograd alias key...
    torch.nn.functional.linear(torch.ones(2, 4), torch.ones(3, 4), torch.ones(3))
    torch.ones(2, 4) @ torch.ones(4, 3)
    torch.nn.functional.max_pool2d(torch.ones(1, 1, 4, 4), 2)
    # More dimensions than the observer's label cache keys (labelled without it), differing
    # only in the last one.
    torch.ones(1, 1, 1, 1, 1, 1, 2).add_(1)
    torch.ones(1, 1, 1, 1, 1, 1, 3).add_(1)
    # ... but reach the Python key whole in inference mode (aten::linear)...
    with torch.inference_mode():
        torch.nn.functional.linear(torch.ones(2, 4), torch.ones(3, 4))
        frozen = torch.ones(4)
    # ... and not when one input of several is an inference tensor.
    torch.true_divide(torch.ones(4), frozen)
    # A failing operator records nothing.
    a2, a3 = torch.ones(2), torch.ones(3)
    try:
        a2 + a3
    except RuntimeError:
        pass
    del a2, a3
    # An operator on another thread.
    import threading

    t = threading.Thread(target=lambda: torch.ones(4).neg_())
    t.start()
    t.join()


def record(native, body=program):
    """(FakeSession, handle) of `body(dev)` recorded on the CPU stand-in."""
    dev = CpuStandIn()
    fake = FakeSession()
    h = st.enable(_session=fake, _device=dev, native=native)
    try:
        body(dev)
    finally:
        st.disable()
    return fake, h


def launches(fake):
    return [r["name"] for r in fake.of("launch")]


def normalized(fake):
    """The records without their addresses (the allocator hands out others each run)."""
    return [{k: v for k, v in r.items() if k != "addr"} for r in fake.normalized(keep_at=True)]


def test_native_writes_the_records_the_dispatch_mode_writes(observer):
    mode, _ = record(False)
    native, h = record(True)
    assert normalized(native) == normalized(mode)
    names = {r["name"] for r in native.of("launch")}
    want = {"aten::silu_backward", "aten::linear", "aten::neg_", "aten::addmm", "aten::mm",
            "aten::max_pool2d_with_indices", "aten::div.Tensor"}
    assert want <= names, names
    assert "aten::matmul" not in names and "aten::true_divide.Tensor" not in names, names
    assert h.recorder.internal_errors == []
    # The source lines are the program's, found by the native walk of the Python stack.
    ats = {r.get("at") for r in native.normalized(keep_at=True)}
    assert any(a and a.startswith("python/tests/test_native.py:") for a in ats), ats


def test_ordinary_operators_are_recorded_in_cpp(observer):
    _, h = record(True)
    native_ops, python_ops = h.recorder.native_counts
    # torch.empty, .item() and the copies go to Python; the kernels are recorded in C++.
    assert native_ops >= 20 and python_ops <= 6, (native_ops, python_ops)


def test_the_recorder_keeps_its_storages_in_the_native_tables(observer):
    """Python's handlers and the observer share one table of storages and one id counter
    (records equal to the dispatch mode's, above, depend on that too)."""
    dev = CpuStandIn()
    fake = FakeSession()
    h = st.enable(_session=fake, _device=dev, native=True)
    rec = h.recorder
    try:
        assert isinstance(rec.memory, observer.Memory)
        x = torch.ones(4) + 1  # declared in C++
        base = x.untyped_storage().data_ptr()
        assert rec.dev_bufs.get(base) == fake.of("alloc")[-1]["buf"]
        assert rec.new_buf() == fake.of("alloc")[-1]["buf"] + 1  # Python takes the next id
        (x * 2).sum()
        assert len({r["buf"] for r in fake.of("alloc")}) == len(fake.of("alloc"))
    finally:
        st.disable()


def test_halt_on_error_stops_the_program_at_its_next_call(observer):
    fake = FakeSession(halt_on="launch")
    st.enable(_session=fake, _device=CpuStandIn(), native=True)
    try:
        with pytest.raises(FakeHalt) as e:
            torch.ones(4)
            len("the next call")  # where the halt is raised at the latest
        assert e.value.code == 66
        n = len(fake.calls)
        torch.ones(4) * 2  # recording stopped
        assert len(fake.calls) == n
    finally:
        st.disable()


@pytest.mark.parametrize("native", [True, False])
def test_a_halt_from_records_held_behind_a_failed_handler_stops_the_program(observer, native):
    """An operator's handler that fails (a recorder bug, a record the engine refused) still
    writes the records PyTorch's hooks made while it ran; when one of those halts the session,
    the program stops as for any halt, and recording stops."""
    import threading

    from streamsan.torch import _schema

    fake = FakeSession(halt_on="free")
    h = st.enable(_session=fake, _device=CpuStandIn(), native=native)
    rec = h.recorder

    def failing(*args, **kwargs):
        raise ValueError("a handler that fails")

    held = [("free", (12345,), {})]

    class Holding(dict):
        """The next operator's queue of held records starts with `held` (as if a deallocation
        hook had fired while it ran)."""

        def __setitem__(self, ident, queue):
            if held:
                queue.extend(held)
                held.clear()
            super().__setitem__(ident, queue)

    rec.handlers[_schema.SCALAR] = failing  # `.item()`
    x = torch.ones(4)
    y = x.sum()
    try:
        with pytest.raises(FakeHalt):
            rec.queues = Holding()
            if native:  # the observer's queue is made by the first hook that fires
                rec.queues[threading.get_ident()] = []
            y.item()
            len("the next call")  # where the native recorder raises the halt at the latest
        assert not rec.active
        n = len(fake.calls)
        x * 2
        assert len(fake.calls) == n
    finally:
        st.disable()


def uses_native(**options):
    """Whether enable(**options) picks the native recorder (it sets the recorder's `hold`)."""
    h = st.enable(_session=FakeSession(), _device=CpuStandIn(), **options)
    try:
        return h.recorder.hold is not None
    finally:
        st.disable()


def test_environment_variable_chooses_the_recorder(observer, monkeypatch):
    for value, native in (("1", True), ("0", False), ("auto", True), ("", True)):
        monkeypatch.setenv(_api.NATIVE_ENV, value)
        assert uses_native() is native, value
    monkeypatch.delenv(_api.NATIVE_ENV)
    assert uses_native() is True  # the default: where it can be built
    monkeypatch.setenv(_api.NATIVE_ENV, "1")
    assert uses_native(native=False) is False  # the argument wins


def test_a_bad_environment_value_is_an_error_naming_it(monkeypatch):
    monkeypatch.setenv(_api.NATIVE_ENV, "maybe")
    with pytest.raises(ValueError, match="STREAMSAN_TORCH_NATIVE='maybe': expected 1, 0 or auto"):
        st.enable(_session=FakeSession(), _device=CpuStandIn())
    assert st.enabled() is None


def test_by_default_a_build_failure_falls_back_to_the_dispatch_mode_with_one_note(monkeypatch, capsys):
    from streamsan.torch import _observer

    def fail():
        raise OSError("no compiler\nmore lines of the compiler's output")

    monkeypatch.setattr(_observer, "build", fail)
    monkeypatch.setattr(_api, "_fallback_said", False)
    monkeypatch.delenv(_api.NATIVE_ENV, raising=False)
    assert uses_native() is False
    err = capsys.readouterr().err
    assert "the native recorder could not be built (no compiler); recording with the Python dispatch mode" in err
    assert "more lines" not in err
    assert uses_native() is False
    assert capsys.readouterr().err == ""  # said once per process
    monkeypatch.setenv(_api.NATIVE_ENV, "0")
    monkeypatch.setattr(_api, "_fallback_said", False)
    assert uses_native() is False
    assert capsys.readouterr().err == ""  # the dispatch mode asked for: no build, no note


def test_a_build_failure_is_a_clear_error(monkeypatch):
    from streamsan.torch import _observer

    def fail():
        raise OSError("no compiler")

    monkeypatch.setattr(_observer, "build", fail)
    with pytest.raises(RuntimeError, match="native recorder could not be built"):
        st.enable(_session=FakeSession(), _device=CpuStandIn(), native=True)
    assert st.enabled() is None


def test_native_memory_hooks_write_what_the_python_ones_write(observer):
    """With CUDA, PyTorch's allocation and deallocation hooks call the observer's on_alloc and
    on_free directly (Bridge._native_memory_hooks); here they are called as the hooks would."""

    def run(native_hooks):
        dev = CpuStandIn()
        fake = FakeSession()
        h = st.enable(_session=fake, _device=dev, native=True)
        rec = h.recorder
        alloc, free = (
            (observer.on_alloc, observer.on_free)
            if native_hooks
            else (rec.on_memory_allocation, rec.on_memory_deallocation)
        )
        try:
            kept = []
            for i in range(3):
                t = torch.empty(64)  # an allocation no operator declared yet
                base = t.untyped_storage().data_ptr()
                with dev.use_stream(0x5000 + i):
                    alloc(base)  # its pool stream: the current one
                t.fill_(1.0)  # declared on first sight, in its pool stream
                free(base)  # the block goes back to the allocator
                free(base)  # a free nobody declared: nothing
                kept.append(t)
        finally:
            st.disable()
        return [{k: v for k, v in r.items() if k != "addr"} for r in fake.normalized(keep_at=True)]

    python_hooks = run(False)
    assert [r["op"] for r in python_hooks].count("free") == 3
    assert {r["stream"] for r in python_hooks if r["op"] == "alloc"} == {0x5000, 0x5001, 0x5002}
    assert run(True) == python_hooks


# Run in a process of its own: GPU tracing, once turned on, stays on for the process, and so do
# callbacks registered with torch.cuda._gpu_trace.
FAST_HOOKS_CHILD = r"""
import functools, json, sys
import torch
import streamsan.torch as st
from fake_session import FakeSession
from streamsan.torch import _api, _hooks, _observer
from streamsan.torch._device import CpuStandIn
from torch.cuda import _gpu_trace

ext = _observer.build()
_hooks.register()  # streamsan's callbacks, and GPU tracing on, as with CUDA
ALLOC, FREE = _gpu_trace.MemoryAllocationCallbacks, _gpu_trace.MemoryDeallocationCallbacks
# What reaches a registry's fire_callbacks: only torch's own interpreter calls it.
trampolined = {"alloc": [], "free": []}


def run(how):
    # how: "direct" (the hooks called), "traced" (events through GPUTrace), "partial" (the
    # same, with another allocation listener registered: only frees skip the trampoline).
    dev = CpuStandIn()
    fake = FakeSession()
    h = st.enable(_session=fake, _device=dev, native=True)
    _api._state[1]._native_memory_hooks()  # what install does with CUDA
    fast, ours = h.recorder.fast_memory_hooks, ext._gpu_trace_is_ours()
    if how == "direct":
        alloc, free = ext.on_alloc, ext.on_free
    else:
        # partial: no Python frame of its own, so the records' sites are the loop's lines
        alloc = functools.partial(ext._trace_event, "alloc")
        free = functools.partial(ext._trace_event, "free")
        if how == "traced":
            ALLOC.fire_callbacks = trampolined["alloc"].append
        FREE.fire_callbacks = trampolined["free"].append  # disable() takes these away
    try:
        kept = []
        for i in range(3):
            t = torch.empty(64)
            base = t.untyped_storage().data_ptr()
            with dev.use_stream(0x5000 + i):
                alloc(base)
            t.fill_(1.0)
            free(base)
            free(base)
            kept.append(t)
    finally:
        st.disable()
    records = [{k: v for k, v in r.items() if k != "addr"} for r in fake.normalized(keep_at=True)]
    return {"fast": fast, "ours": ours, "ours_after": ext._gpu_trace_is_ours()}, records


def device_sync():
    # Another event: torch's own slot, through whichever interpreter GPUTrace holds.
    syncs = []
    _gpu_trace.DeviceSynchronizationCallbacks.fire_callbacks = lambda: syncs.append(1)
    ext._trace_event("device_sync", 0)
    del _gpu_trace.DeviceSynchronizationCallbacks.fire_callbacks
    return len(syncs)


out = {}
direct_state, direct = run("direct")
out["direct"] = direct_state
out["traced"], traced = run("traced")
out["same"] = traced == direct
out["frees"] = [r["op"] for r in traced].count("free")
out["trampolined_while_on"] = {k: len(v) for k, v in trampolined.items()}
ALLOC.fire_callbacks = trampolined["alloc"].append
ext._trace_event("alloc", 4096)  # streamsan off: torch's interpreter again
del ALLOC.fire_callbacks
out["trampolined_after"] = trampolined["alloc"][-1:]
h = st.enable(_session=FakeSession(), _device=CpuStandIn(), native=True)
_api._state[1]._native_memory_hooks()
out["third_fast"] = h.recorder.fast_memory_hooks
sync_while_on = device_sync()
st.disable()
out["device_syncs"] = [sync_while_on, device_sync()]
# Another allocation listener (registered for good): allocations keep the trampoline, which
# calls it and streamsan's Python hook; frees still skip it.
other = []
_gpu_trace.register_callback_for_memory_allocation(other.append)
trampolined["free"].clear()
out["partial"], partial = run("partial")
out["partial_same"] = partial == direct
out["partial_other_listener"] = len(other)
out["partial_frees_trampolined"] = len(trampolined["free"])
print(json.dumps(out))
"""


def test_memory_events_reach_the_hooks_without_torchs_trampoline(observer):
    """Bridge._native_memory_hooks puts the observer's interpreter in GPUTrace: memory events
    made as PyTorch's allocator makes them reach on_alloc and on_free without torch's Python
    trampoline (neither registry's fire_callbacks is called) and write what direct calls write;
    other events still reach torch's (a device synchronization's fire_callbacks runs); torch's
    interpreter is back once recording stops (a memory event reaches fire_callbacks). With
    another allocation listener, allocations keep the trampoline (the listener hears them) and
    frees do not."""
    import json
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-c", FAST_HOOKS_CHILD],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=path),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if not got["traced"]["fast"] and os.uname().machine != "x86_64":
        pytest.skip("the trampoline is skipped only on x86-64")
    on = {"fast": True, "ours": True, "ours_after": False}
    assert got == {
        "direct": on,
        "traced": on,
        "same": True,
        "frees": 3,
        "trampolined_while_on": {"alloc": 0, "free": 0},
        "trampolined_after": [4096],
        "third_fast": True,
        "device_syncs": [1, 1],
        "partial": on,
        "partial_same": True,
        "partial_other_listener": 3,
        "partial_frees_trampolined": 0,
    }


def test_the_sessions_c_entry_writes_what_its_python_methods_write(observer, tmp_path, monkeypatch):
    pytest.importorskip("streamsan._native")
    from streamsan.torch import _observer

    def trace(c_entry):
        monkeypatch.setattr(_observer, "C_ENTRY", c_entry)
        path = tmp_path / f"c_entry_{c_entry}.jsonl"
        dev = CpuStandIn()
        h = st.enable(_device=dev, native=True, trace=str(path), report=str(tmp_path / "r.txt"))
        try:
            program(dev)
        finally:
            st.disable()
        assert h.recorder.internal_errors == []
        assert h.recorder.native_c_entry is c_entry
        import json

        records = [json.loads(line) for line in path.read_text().splitlines()[1:]]
        return [{k: v for k, v in r.items() if k != "addr"} for r in records]

    python_methods = trace(False)
    assert sum(r["op"] == "launch" for r in python_methods) >= 10
    assert trace(True) == python_methods


def test_operators_under_another_dispatch_mode_are_not_recorded(observer):
    """FakeTensorMode (what torch.compile traces under) runs operators on no memory."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    def body(dev):
        x = torch.ones(4)
        with FakeTensorMode() as m:
            a = m.from_tensor(x)
            (a * 2 + 1).sum()

    fake, _ = record(True, body)
    assert launches(fake) == ["aten::ones"]


def test_operators_under_a_users_dispatch_mode_are_recorded_once(observer):
    """A mode of the program's own that runs the operator: recorded once, as the dispatch mode
    records it (the call entering the mode is skipped, the mode's own call is recorded)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def body(dev):
        x = torch.ones(4)
        with Passthrough():
            x.add_(1)

    native, mode = (launches(record(n, body)[0]) for n in (True, False))
    assert native == mode == ["aten::ones", "aten::add_.Tensor"]


def test_compiled_functions_name_the_callers_line(observer):
    import torch._dynamo

    torch._dynamo.reset()
    defined = sys._getframe().f_lineno + 1
    g = torch.compile(lambda a: (a * 2).sin(), backend="eager")
    fake = FakeSession()
    st.enable(_session=fake, _device=CpuStandIn(), native=True)
    try:
        x = torch.ones(8)
        fake.clear()
        line = sys._getframe().f_lineno; g(x)  # noqa: E702 (the same line)
    finally:
        st.disable()
        torch._dynamo.reset()
    launches = fake.normalized(keep_at=True)
    launches = [r for r in launches if r["op"] == "launch"]
    assert [r["name"] for r in launches] == ["aten::mul.Tensor", "aten::sin"]
    # The compiled code's frame is the function's own (its first line), or the call's.
    ats = {r["at"] for r in launches}
    assert ats <= {f"python/tests/test_native.py:{n}" for n in (defined, line)}, ats


def test_repeated_calls_name_each_operators_own_line(observer):
    """The observer finds a call's line once per (code, instruction) and reuses it: every pass
    of a loop names each operator's own line, and a helper called from two lines names its
    own line (the innermost frame outside torch) both times."""
    def helper(t):
        return t - 1  # the helper's line

    def body(dev):
        x = torch.ones(4)
        for _ in range(3):
            x = x + 1
            x = x * 2
            x = helper(x)
        x = helper(x)

    def at(line):
        return f"python/tests/test_native.py:{line}"

    first = body.__code__.co_firstlineno  # the `def` line
    sub = ("aten::sub.Tensor", at(helper.__code__.co_firstlineno + 1))
    loop = [("aten::add.Tensor", at(first + 3)), ("aten::mul.Tensor", at(first + 4)), sub]
    fake, _ = record(True, body)
    ats = [(r["name"], r["at"]) for r in fake.normalized(keep_at=True) if r["op"] == "launch"]
    assert ats == [("aten::ones", at(first + 1))] + loop * 3 + [sub]
