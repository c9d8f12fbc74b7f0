"""Caching-allocator blocks from the hooks, record_stream, blocks kept by a CUDA graph.

The tests call the Recorder's hook handlers themselves, as PyTorch's allocation and
deallocation hooks would (torch.cuda._gpu_trace), around CPU tensors playing device tensors.
`torch.empty` records nothing, so a tensor made with it is "allocated" but not yet seen.
"""

import gc

import pytest
import torch

from conftest import dispatch_mode_only

from streamsan.torch import _hooks


def addr(t):
    return t.untyped_storage().data_ptr()


def test_alloc_is_written_lazily_with_the_pool_stream_of_the_allocation(env):
    with env.stream(0x5000):
        x = torch.empty(4)
        env.rec.on_memory_allocation(addr(x))
    assert env.fake.calls == []  # the hook alone writes nothing
    x.fill_(1)  # first sight, on the default stream
    assert env.fake.normalized() == [
        {"op": "stream", "id": 0x5000},
        {"op": "alloc", "buf": 1, "bytes": 16, "stream": 0x5000, "addr": addr(x), "pool": "caching"},
        {"op": "launch", "stream": 0, "name": "aten::fill_.Scalar", "reads": [],
         "writes": [(1, 0, 16, "self: float32[4]")]},
    ]


def test_free_from_the_deallocation_hook(env):
    x = torch.empty(4)
    env.rec.on_memory_allocation(addr(x))
    x.fill_(1)
    env.fake.clear()
    env.rec.on_memory_deallocation(addr(x))  # LINE-free
    assert env.fake.normalized() == [{"op": "free", "buf": 1}]
    assert env.fake.calls[0][2]["at"].endswith("test_memory.py:%d" % (_line("LINE-free")))


def test_a_block_never_seen_is_forgotten_without_records(env):
    x = torch.empty(4)
    env.rec.on_memory_allocation(addr(x))
    env.rec.on_memory_deallocation(addr(x))
    assert env.fake.calls == []
    assert not env.rec.pending
    # The same bytes seen later (allocated before any hook): the current stream's pool.
    with env.stream(0x6000):
        x.fill_(2)
    assert env.fake.of("alloc")[0]["stream"] == 0x6000


def test_reused_address_gets_a_new_buffer(env):
    x = torch.empty(4)
    a = addr(x)
    env.rec.on_memory_allocation(a)
    x.fill_(1)
    env.rec.on_memory_deallocation(a)
    env.rec.on_memory_allocation(a)  # the block handed out again
    x.fill_(2)
    assert [r["op"] for r in env.fake.normalized()] == ["alloc", "launch", "free", "alloc", "launch"]
    first, second = env.fake.of("alloc")
    assert (first["buf"], second["buf"]) == (1, 2)
    assert first["addr"] == second["addr"] == a
    assert env.fake.of("launch")[1]["writes"][0][0] == 2


def test_allocation_hook_over_a_live_buffer_frees_it_first(env):
    x = torch.ones(4)  # declared (seen before any hook)
    env.fake.clear()
    env.rec.on_memory_allocation(addr(x))
    assert env.fake.normalized() == [{"op": "free", "buf": 1}]


@dispatch_mode_only(
    "the CPU stand-in cannot run record_stream (no CPU kernel), which the dispatch mode records without running; the observer sees only operators that run (GPU runs cover it)"
)
def test_record_stream_is_recorded_as_such(env):
    x = torch.ones(4)
    env.fake.clear()
    x.record_stream(torch.Stream(stream_id=0x7000, device_index=0, device_type=1))
    assert env.fake.normalized() == [
        {"op": "stream", "id": 0x7000},
        {"op": "record_stream", "buf": 1, "stream": 0x7000},
    ]


def test_stand_in_storage_death_frees_its_buffer(env):
    x = torch.ones(4)
    env.fake.clear()
    del x
    gc.collect()
    assert env.fake.normalized() == [{"op": "free", "buf": 1}]


def test_hooks_are_routed_to_the_active_recorder_and_errors_are_kept(env, capsys):
    x = torch.empty(4)
    _hooks._route("on_memory_allocation")(addr(x))
    assert addr(x) in env.rec.pending
    _hooks._route("on_event_record")("not a handle", None)  # a broken call
    assert len(env.rec.internal_errors) == 1
    assert "internal error" in capsys.readouterr().err


class Graph:
    """Stands for torch.cuda.CUDAGraph: only its identity matters to the recorder."""


def test_graph_keeps_blocks_allocated_during_capture_until_reset(env):
    g = Graph()
    with env.stream(0x6000):
        env.rec.on_graph_begin(g)
        tmp = torch.empty(4)
        env.rec.on_memory_allocation(addr(tmp))
        tmp.fill_(3)  # captured: a node of the graph
        a = addr(tmp)
        env.rec.on_memory_deallocation(a)  # freed during capture: kept for the replays
        env.rec.on_graph_end(g)
        env.rec.on_graph_launch(g)
    env.rec.on_graph_reset(g)
    assert env.fake.normalized() == [
        {"op": "stream", "id": 0x6000},
        {"op": "graph_begin", "graph": 1, "stream": 0x6000},
        {"op": "alloc", "buf": 1, "bytes": 16, "stream": 0x6000, "addr": a, "pool": "caching"},
        {"op": "launch", "stream": 0x6000, "name": "aten::fill_.Scalar", "reads": [],
         "writes": [(1, 0, 16, "self: float32[4]")]},
        {"op": "graph_end", "graph": 1, "stream": 0x6000},
        {"op": "graph_launch", "graph": 1, "stream": 0x6000},
        {"op": "graph_destroy", "graph": 1},
        {"op": "free", "buf": 1},
    ]


def test_graph_block_handed_out_again_during_capture_keeps_its_buffer(env):
    g = Graph()
    with env.stream(0x6000):
        env.rec.on_graph_begin(g)
        t = torch.empty(4)
        a = addr(t)
        env.rec.on_memory_allocation(a)
        t.fill_(1)
        env.rec.on_memory_deallocation(a)
        env.rec.on_memory_allocation(a)  # the private pool reuses the block
        t.fill_(2)
        env.rec.on_graph_end(g)
    assert [r["op"] for r in env.fake.normalized()] == [
        "stream", "graph_begin", "alloc", "launch", "launch", "graph_end"]
    assert {r["writes"][0][0] for r in env.fake.of("launch")} == {1}


def test_graph_destroyed_when_the_object_dies(env):
    g = Graph()
    env.rec.on_graph_begin(g)
    env.rec.on_graph_end(g)
    env.fake.clear()
    del g
    gc.collect()
    assert env.fake.normalized() == [{"op": "graph_destroy", "graph": 1}]


def _line(marker):
    from conftest import line_of

    return line_of(marker, __file__)


def _carve(t, start, nbytes):
    """A float32 tensor on `nbytes` bytes of t's storage from byte `start`, with a storage of
    its own at that address: a block a caching pool split off t's block."""
    sub = t.untyped_storage()[start : start + nbytes]
    return torch.empty(0).set_(sub, 0, (nbytes // 4,), (1,))


def _capture_with_a_freed_block(e, g, pieces):
    """Begins capturing `g` on stream 0x6000, makes a 256-byte block (written: a graph
    buffer), frees it (kept for the replays), then has the private pool hand out `pieces`
    (byte offset, bytes) of it, each written. Returns the block's address and the pieces'
    tensors; the capture is still on."""
    e.rec.on_graph_begin(g)
    big = torch.empty(64)
    a = addr(big)
    e.rec.on_memory_allocation(a)
    big.fill_(1)
    e.rec.on_memory_deallocation(a)
    tensors = []
    for start, nbytes in pieces:
        t = _carve(big, start, nbytes)
        e.rec.on_memory_allocation(a + start)
        t.fill_(2)
        tensors.append(t)
    return a, tensors


def test_a_block_split_off_a_graph_buffer_is_that_buffer_at_an_offset(env):
    # PyTorch's whole-network capture example: the private pool hands a freed block out
    # again in smaller pieces during the capture. The first piece (same address) keeps the
    # buffer id; a later piece inside the old block's bytes is the same buffer at an offset,
    # not a new allocation overlapping a live one.
    g = Graph()
    with env.stream(0x6000):
        a, _pieces = _capture_with_a_freed_block(env, g, [(0, 64), (128, 64)])
        env.rec.on_graph_end(g)
        env.rec.on_memory_deallocation(a + 128)  # the piece dies: the bytes stay the graph's
        env.rec.on_graph_launch(g)
    env.rec.on_graph_reset(g)
    ops = [r["op"] for r in env.fake.normalized()]
    assert ops == ["stream", "graph_begin", "alloc", "launch", "launch", "launch", "graph_end",
                   "graph_launch", "graph_destroy"], ops
    launches = env.fake.of("launch")
    assert [w[:3] for w in (launch["writes"][0] for launch in launches)] == [
        (1, 0, 256), (1, 0, 64), (1, 128, 64)]
    env.rec.on_memory_deallocation(a)  # the first piece dies after the graph: its buffer ends
    assert env.fake.normalized()[-1] == {"op": "free", "buf": 1}


def test_a_graph_buffer_outlives_its_graph_while_a_piece_of_it_lives(env):
    g = Graph()
    with env.stream(0x6000):
        a, (out,) = _capture_with_a_freed_block(env, g, [(64, 64)])  # say, a static output
        env.rec.on_graph_end(g)
    env.rec.on_graph_reset(g)
    assert "free" not in [r["op"] for r in env.fake.normalized()]  # `out` still reads buffer 1
    env.fake.clear()
    out.sum()
    assert env.fake.of("launch")[0]["reads"][0][:3] == (1, 64, 64)
    env.rec.on_memory_deallocation(a + 64)
    assert env.fake.normalized()[-1] == {"op": "free", "buf": 1}


def test_split_graph_blocks_are_accepted_by_the_engine(real):
    g = Graph()
    with real.stream(0x6000):
        _capture_with_a_freed_block(real, g, [(0, 64), (128, 64)])
        real.rec.on_graph_end(g)
        real.rec.on_graph_launch(g)
        real.rec.on_graph_launch(g)
    assert real.rec.internal_errors == []
    assert real.h.races == 0


def test_a_block_straddling_graph_buffers_is_left_unchecked_not_freed(env):
    # make_graphed_callables: the backward capture shares the forward graph's pool, which
    # hands out a block across the bytes of two buffers the forward graph still replays.
    # Freeing those buffers would invent a use after free at the next replay; the straddling
    # storage is left out instead, and counted.
    g = Graph()
    with env.stream(0x6000):
        env.rec.on_graph_begin(g)
        whole = torch.empty(64)  # 256 bytes of the pool
        a = addr(whole)
        first, second = _carve(whole, 0, 128), _carve(whole, 128, 128)
        env.rec.on_memory_allocation(a)
        first.fill_(1)
        env.rec.on_memory_allocation(a + 128)
        second.fill_(2)
        env.rec.on_memory_deallocation(a)
        env.rec.on_memory_deallocation(a + 128)
        across = _carve(whole, 64, 128)
        env.rec.on_memory_allocation(a + 64)
        across.fill_(3)  # not recorded
        env.rec.on_graph_end(g)
        env.rec.on_memory_deallocation(a + 64)
        env.rec.on_graph_launch(g)
    ops = [r["op"] for r in env.fake.normalized()]
    assert ops == ["stream", "graph_begin", "alloc", "launch", "alloc", "launch", "launch",
                   "graph_end", "graph_launch"], ops
    assert env.fake.of("launch")[2]["writes"] == []
    assert env.rec.unchecked == 1
    env.rec.on_graph_reset(g)
    assert sorted(r["buf"] for r in env.fake.of("free")) == [1, 2]


def test_memory_no_hook_frees_is_ended_when_the_allocator_hands_its_bytes_out(real):
    # A tensor on memory from outside the caching allocator (DLPack from another library) is
    # declared at first sight, and no deallocation hook ever says it is gone; when the
    # allocator later hands out bytes overlapping it, the stale buffer ends there.
    whole = torch.empty(64)
    outside = _carve(whole, 0, 128)
    outside.fill_(1)  # declared: buffer 1, [a, a + 128)
    reused = _carve(whole, 64, 128)
    real.rec.on_memory_allocation(addr(reused))
    reused.fill_(2)  # a new block over half of it
    assert real.rec.internal_errors == []
    assert real.h.races == 0


def test_a_caching_block_over_a_live_one_is_a_structured_error_naming_it():
    # The recorder ends a stale block by the id the engine names (not by parsing the message).
    from streamsan._native import LiveBlockOverlap, Session

    s = Session()
    s.alloc(1, 128, 0, "device", None, 0x1000, "caching", None, 0, None)
    with pytest.raises(LiveBlockOverlap) as info:
        s.alloc(2, 128, 0, "device", None, 0x1040, "caching", None, 0, None)
    assert info.value.args[1] == 1
    assert isinstance(info.value, ValueError)
    assert "overlaps the live block 1" in info.value.args[0]
