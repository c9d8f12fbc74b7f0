"""Caching-allocator blocks from the hooks, record_stream, blocks kept by a CUDA graph.

The tests call the Recorder's hook handlers themselves, as PyTorch's allocation and
deallocation hooks would (torch.cuda._gpu_trace), around CPU tensors playing device tensors.
`torch.empty` records nothing, so a tensor made with it is "allocated" but not yet seen.
"""

import gc

import torch

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
    assert env.rec.pending == {}
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
