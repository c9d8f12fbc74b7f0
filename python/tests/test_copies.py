"""Copies between host and device, `.item()`, pinned host accesses (FakeSession, stand-in).

On the stand-in, CPU tensors are device tensors unless marked: `env.rec.declare_pinned(t)`
makes one pinned host memory (as PyTorch's pinned allocator would), `env.dev.mark_host(t)`
ordinary pageable memory.
"""

import gc

import torch

from streamsan.torch import _ops, _schema

aten = torch.ops.aten


def setup(env):
    """A device tensor x, a pinned h, a pageable p; their buffer ids."""
    x = torch.arange(4, dtype=torch.float32)
    h = torch.empty(4)
    p = torch.empty(4)
    env.dev.mark_host(p)
    env.rec.declare_pinned(h)
    h.zero_()  # a host write: h is pinned
    p.zero_()
    bx = env.fake.buffer_of(x.untyped_storage().data_ptr())
    bh = env.fake.buffer_of(h.untyped_storage().data_ptr())
    env.fake.clear()
    return x, h, p, bx, bh


def test_pinned_block_is_declared_as_host_memory(env):
    h = torch.zeros(4)  # first a "device" tensor on the stand-in ...
    env.fake.clear()
    env.rec.declare_pinned(h)  # ... until the recorder learns it is pinned
    assert env.fake.normalized() == [
        {"op": "free", "buf": 1},
        {"op": "alloc", "buf": 2, "bytes": 16, "space": "pinned", "addr": h.data_ptr(), "pool": "caching"}
    ]


def test_non_blocking_device_to_pinned_copy_is_asynchronous(env):
    x, h, p, bx, bh = setup(env)
    h.copy_(x, non_blocking=True)
    h.copy_(x, non_blocking=True)
    copy = {"op": "memcpy", "stream": 0, "src": (bx, 0, 16, "src: float32[4]"),
            "dst": (bh, 0, 16, "self: float32[4]"), "name": "aten::copy_"}
    # The pinned allocator will not reuse h's block before the copy's stream got past it:
    # a record_stream, once per (block, stream).
    assert env.fake.normalized() == [copy, {"op": "record_stream", "buf": bh, "stream": 0}, copy]


def test_blocking_copy_is_followed_by_a_stream_sync(env):
    x, h, p, bx, bh = setup(env)
    with env.stream(0x7000):
        h.copy_(x)
    assert [r["op"] for r in env.fake.normalized()] == ["stream", "memcpy", "stream_sync"]
    assert env.fake.of("stream_sync") == [{"op": "stream_sync", "stream": 0x7000}]


def test_pinned_to_device_copies(env):
    x, h, p, bx, bh = setup(env)
    x.copy_(h, non_blocking=True)
    x[1:3].copy_(h[0:2])
    assert env.fake.normalized() == [
        {"op": "memcpy", "stream": 0, "src": (bh, 0, 16, "src: float32[4]"),
         "dst": (bx, 0, 16, "self: float32[4]"), "name": "aten::copy_"},
        {"op": "record_stream", "buf": bh, "stream": 0},
        {"op": "memcpy", "stream": 0, "src": (bh, 0, 8, "src: float32[2]"),
         "dst": (bx, 4, 8, "self: float32[2]"), "name": "aten::copy_"},
        {"op": "stream_sync", "stream": 0},
    ]


def test_pageable_end_is_the_pageable_pseudo_buffer_at_its_address(env):
    x, h, p, bx, bh = setup(env)
    p.copy_(x)
    recs = env.fake.normalized()
    assert recs[0]["op"] == "alloc" and recs[0]["space"] == "host"
    pb = recs[0]["buf"]
    assert recs[1:] == [
        {"op": "memcpy", "stream": 0, "src": (bx, 0, 16, "src: float32[4]"),
         "dst": (pb, p.data_ptr(), 16, "self: float32[4]"), "name": "aten::copy_"},
        {"op": "stream_sync", "stream": 0},
    ]


def test_non_blocking_copy_with_pageable_memory_is_not_a_sync(env):
    # PyTorch calls cudaMemcpyAsync without a sync (Copy.cu); CUDA promises no host ordering
    # for async copies with pageable memory ("might be synchronous").
    x, h, p, bx, bh = setup(env)
    x.copy_(p, non_blocking=True)
    assert [r["op"] for r in env.fake.normalized()] == ["alloc", "memcpy"]


def test_to_cpu_non_blocking_gives_a_pinned_output_written_asynchronously(env):
    x, h, p, bx, bh = setup(env)
    y = x.to("cpu", copy=True, non_blocking=True)
    recs = env.fake.normalized()
    assert recs[0] == {"op": "alloc", "buf": recs[0]["buf"], "bytes": 16, "space": "pinned",
                       "addr": y.data_ptr(), "pool": "caching"}
    assert recs[1:] == [
        {"op": "memcpy", "stream": 0, "src": (bx, 0, 16, "self: float32[4]"),
         "dst": (recs[0]["buf"], 0, 16, "result: float32[4]"), "name": "aten::_to_copy"},
        {"op": "record_stream", "buf": recs[0]["buf"], "stream": 0},
    ]
    env.fake.clear()
    y.sum()  # a host read of pinned memory
    assert env.fake.normalized() == [
        {"op": "host_access", "reads": [(recs[0]["buf"], 0, 16, "self: float32[4]")], "writes": [],
         "name": "aten::sum"},
    ]


def test_to_cpu_blocking_is_a_synchronous_copy_to_pageable_memory(env):
    x, h, p, bx, bh = setup(env)
    y = x.to("cpu", copy=True)
    ops = [r["op"] for r in env.fake.normalized()]
    assert ops == ["alloc", "memcpy", "stream_sync"]
    env.fake.clear()
    y.add_(1)  # ordinary CPU memory: not recorded
    assert env.fake.calls == []


def test_dtype_conversion_on_the_device_is_a_launch(env):
    x, h, p, bx, bh = setup(env)
    y = x.to(torch.float64)
    recs = env.fake.normalized()
    by = env.fake.buffer_of(y.untyped_storage().data_ptr())
    assert recs[-1] == {"op": "launch", "stream": 0, "name": "aten::_to_copy",
                        "reads": [(bx, 0, 16, "self: float32[4]")],
                        "writes": [(by, 0, 32, "result: float64[4]")]}


def test_device_to_device_copy_is_a_launch_with_exact_bytes(env):
    x, h, p, bx, bh = setup(env)
    z = torch.zeros(8)
    bz = env.fake.buffer_of(z.untyped_storage().data_ptr())
    env.fake.clear()
    z[::2].copy_(x)
    launch = env.fake.of("launch")[0]
    assert launch["reads"] == [(bx, 0, 16, "src: float32[4]")]
    assert launch["writes"] == [(bz, 8 * i, 4, "self: float32[4]") for i in range(4)]


def test_strided_copy_endpoint_is_its_hull(env):
    x, h, p, bx, bh = setup(env)
    h2 = torch.zeros(8)
    env.rec.declare_pinned(h2)
    env.fake.clear()
    h2[::2].copy_(x, non_blocking=True)
    m = env.fake.of("memcpy")[0]
    assert m["dst"][1:3] == (0, 7 * 4)
    assert m["dst"][3].endswith("(strided view recorded as its hull)")
    assert env.rec.hulls == 1


def test_item_is_a_synchronous_copy(env):
    x, h, p, bx, bh = setup(env)
    assert x[2].item() == 2.0
    recs = env.fake.normalized()
    pb = recs[0]["buf"]
    assert recs[1:] == [
        {"op": "memcpy", "stream": 0, "src": (bx, 8, 4, "self: float32[]"), "dst": (pb, 0, 4, None),
         "name": "aten::_local_scalar_dense"},
        {"op": "stream_sync", "stream": 0},
    ]


def test_cpu_operators_on_pinned_memory_are_host_accesses(env):
    x, h, p, bx, bh = setup(env)
    h.add_(1)
    h[1:3].mul_(2)
    float(h[0])
    p.add_(1)  # pageable: nothing
    assert env.fake.normalized() == [
        {"op": "host_access", "reads": [], "writes": [(bh, 0, 16, "self: float32[4]")], "name": "aten::add_.Tensor"},
        {"op": "host_access", "reads": [], "writes": [(bh, 4, 8, "self: float32[2]")], "name": "aten::mul_.Tensor"},
        {"op": "host_access", "reads": [(bh, 0, 4, "self: float32[]")], "writes": [],
         "name": "aten::_local_scalar_dense"},
    ]


def test_pin_memory_output_is_a_pinned_block_whose_fill_is_not_recorded(env):
    # The new block is filled before anyone else can hold it; recording the fill would make a
    # DataLoader's pin thread look unordered with the main thread's copy (test_robustness).
    src = torch.ones(4)
    env.dev.mark_host(src)
    out = torch.empty(4)
    env.dev.mark_host(out)
    env.fake.clear()
    facts = _schema.learn(aten._pin_memory.default)
    _ops.pin(env.rec, facts, (src,), {}, out)  # what the mode does after _pin_memory ran
    recs = env.fake.normalized()
    assert recs == [
        {"op": "alloc", "buf": recs[0]["buf"], "bytes": 16, "space": "pinned", "addr": out.data_ptr(),
         "pool": "caching"},
    ]


def test_empty_with_pin_memory_declares_a_pinned_block(env):
    out = torch.empty(4)
    env.fake.clear()
    _ops.empty(env.rec, _schema.learn(aten.empty.memory_format), ([4],), {"pin_memory": True}, out)
    _ops.empty(env.rec, _schema.learn(aten.empty.memory_format), ([4],), {"pin_memory": False}, torch.empty(2))
    assert [(r["op"], r["space"]) for r in env.fake.normalized()] == [("alloc", "pinned")]


def test_pinned_storage_death_frees_its_buffer(env):
    x, h, p, bx, bh = setup(env)
    del h
    gc.collect()
    assert env.fake.normalized() == [{"op": "free", "buf": bh}]
    assert env.rec.pin_starts == []
