"""Events, synchronizations and queries; hook records made while an operator runs; the
wrappers of Event/Stream.query and CUDAGraph."""

import torch

from conftest import dispatch_mode_only

import streamsan.torch as st
from streamsan.torch import _patches
from streamsan.torch._streams import LEGACY_BASE


def test_event_hooks(env):
    r = env.rec
    r.on_event_creation(0xE1)
    r.on_event_record(0xE1, 0)
    r.on_event_wait(0xE1, 0x7000)
    r.on_event_synchronization(0xE1)
    r.on_stream_synchronization(0x7000)
    r.on_device_synchronization()
    r.on_event_deletion(0xE1)
    assert env.fake.normalized() == [
        {"op": "event", "id": 0xE1},
        {"op": "record", "event": 0xE1, "stream": 0},
        {"op": "stream", "id": 0x7000},
        {"op": "wait", "stream": 0x7000, "event": 0xE1},
        {"op": "event_sync", "event": 0xE1},
        {"op": "stream_sync", "stream": 0x7000},
        {"op": "device_sync"},
        {"op": "event_destroy", "id": 0xE1},
    ]


def test_event_created_before_recording_is_declared_at_first_use(env):
    env.rec.on_event_record(0xE2, 0)
    env.rec.on_event_deletion(0xE3)  # never seen: nothing to destroy
    assert env.fake.normalized() == [
        {"op": "event", "id": 0xE2},
        {"op": "record", "event": 0xE2, "stream": 0},
    ]


def test_pool_streams_reported_by_the_creation_hook_are_non_blocking(env):
    env.dev.flags[0x8000] = "blocking"  # what the driver would say
    env.rec.on_stream_creation(0x8000)  # but PyTorch made it: non-blocking, not asked
    env.rec.on_stream_synchronization(0x8000)
    env.rec.on_stream_synchronization(0x9000)
    env.dev.flags[0xA000] = "blocking"
    env.rec.on_stream_synchronization(0xA000)
    streams = env.fake.of("stream")
    assert streams == [{"op": "stream", "id": 0x8000}, {"op": "stream", "id": 0x9000},
                       {"op": "stream", "id": 0xA000, "flags": "blocking"}]


def test_legacy_stream_of_another_device_has_its_own_id(env):
    env.rec.streams.id(0, 1, 0, None)
    env.rec.streams.id(0, 0, 0, None)
    assert env.fake.normalized() == [
        {"op": "stream", "id": LEGACY_BASE + 1, "device": 1, "kind": "legacy_default", "flags": "blocking"}
    ]


@dispatch_mode_only(
    "torch 2.15 does not report an operator implemented in Python (torch.library.custom_op) to RecordFunction (2.11 does); the native recorder then records the ATen operators it runs (docs/pytorch.md)"
)
def test_hook_records_during_an_operator_follow_its_launch(env):
    @torch.library.custom_op("streamsan_test::sync_inside", mutates_args=())
    def sync_inside(x: torch.Tensor) -> torch.Tensor:
        # What PyTorch's hooks do inside an operator (e.g. memcpy_and_sync's stream sync).
        env.rec.on_event_record(0xE5, 0)
        env.rec.on_stream_synchronization(0)
        return x + 1

    x = torch.ones(2)
    env.fake.clear()
    y = sync_inside(x)  # noqa: F841 (kept alive: its free would be one more record)
    assert [r["op"] for r in env.fake.normalized()] == ["alloc", "launch", "event", "record", "stream_sync"]


def test_stream_sync_of_a_synchronous_copy_is_not_doubled(env):
    # flush() drops the operator's own stream_sync when a hook reported it.
    q = [("stream_sync", (0,), {"thread": 0, "at": None})]
    assert env.rec.flush(q, 0) is None
    assert env.rec.flush([], 0) == 0
    assert env.fake.ops() == ["stream_sync"]


class FakeEvent:
    def __init__(self, handle, done):
        self.cuda_event = handle
        self.done = done

    def query(self):
        return self.done


class FakeStream:
    def __init__(self, handle, done):
        self.cuda_stream = handle
        self.device_index = 0
        self.done = done

    def query(self):
        return self.done


def test_query_results_are_recorded(env):
    p = _patches.Patches()
    original = FakeEvent.query
    _patches.install_queries(p, FakeEvent, FakeStream)
    try:
        assert FakeEvent(0xE7, False).query() is False
        assert FakeEvent(0xE7, True).query() is True
        assert FakeEvent(0, True).query() is True  # never created: nothing to record
        assert FakeStream(0x7000, True).query() is True
    finally:
        p.restore()
    assert FakeEvent.query is original
    assert env.fake.normalized() == [
        {"op": "event", "id": 0xE7},
        {"op": "event_query", "event": 0xE7, "done": False},
        {"op": "event_query", "event": 0xE7, "done": True},
        {"op": "stream", "id": 0x7000},
        {"op": "stream_query", "stream": 0x7000, "done": True},
    ]


class FakeGraph:
    def capture_begin(self, pool=None, capture_error_mode="global"):
        self.began = (pool, capture_error_mode)

    def capture_end(self):
        pass

    def replay(self):
        pass

    def reset(self):
        pass


def test_graph_methods_are_recorded(env):
    p = _patches.Patches()
    _patches.install_graphs(p, FakeGraph)
    try:
        g = FakeGraph()
        with env.stream(0x6000):
            g.capture_begin(capture_error_mode="relaxed")
            t = torch.ones(2)  # noqa: F841
            g.capture_end()
        g.replay()
        g.reset()
        g.replay()  # after reset: nothing to launch
        assert g.began == (None, "relaxed")
    finally:
        p.restore()
    assert [r["op"] for r in env.fake.normalized()] == [
        "stream", "graph_begin", "alloc", "launch", "graph_end", "graph_launch", "graph_destroy"]
    launch = env.fake.of("graph_launch")[0]
    assert launch == {"op": "graph_launch", "graph": 1, "stream": 0}


def test_torch_methods_are_wrapped_only_while_enabled():
    names = [(torch.cuda.Event, "query"), (torch.cuda.Stream, "query"),
             (torch.cuda.CUDAGraph, "capture_begin"), (torch.cuda.CUDAGraph, "replay"),
             (torch.cuda.CUDAGraph, "reset"), (torch._tensor_str, "_str")]
    before = [getattr(o, n) for o, n in names]
    from fake_session import FakeSession
    from streamsan.torch._device import CpuStandIn

    st.enable(_session=FakeSession(), _device=CpuStandIn())
    try:
        during = [getattr(o, n) for o, n in names]
    finally:
        st.disable()
    after = [getattr(o, n) for o, n in names]
    assert all(a is not b for a, b in zip(before, during))
    assert all(a is b for a, b in zip(before, after))


def test_printing_a_device_tensor_is_a_synchronous_copy(env):
    x = torch.ones(4)
    env.fake.clear()
    text = repr(x)
    assert text.startswith("tensor(")
    recs = env.fake.normalized()
    assert recs[0]["op"] == "alloc" and recs[0]["name"] == "pageable host memory"
    assert recs[1:] == [
        {"op": "memcpy", "stream": 0, "src": (1, 0, 16, "self: float32[4]"), "dst": (2, 0, 16, None),
         "name": "print"},
        {"op": "stream_sync", "stream": 0},
    ]
