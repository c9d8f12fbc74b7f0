"""PyTorch CSAN's `TestArgumentHandler` (test/test_cuda_sanitizer.py), translated: which
tensors an operator reads and which it writes, as the dispatch mode records them (CPU stand-in,
FakeSession).

CSAN's tests feed its ArgumentHandler the operator's schema and arguments and compare the sets
of data pointers read and written. Here the operator runs under recording and the launch record
it leaves is compared, by buffer. Where the verdict differs from CSAN's assertion it is said at
the test: CSAN counts every output as written, views included, and streamsan follows the
schema's alias annotations, under which a view is no access at all.
"""

import torch


def buf(fake, t):
    return fake.buffer_of(t.untyped_storage().data_ptr())


def bufs(fake, *ts):
    return {buf(fake, t) for t in ts}


def accessed(launch, side):
    """The buffers of a launch's reads or writes."""
    return {a[0] for a in launch[side]}


def names(launch, side):
    """(buffer, argument name) of each access: the label up to its ':'."""
    return {(a[0], a[3].split(":")[0]) for a in launch[side]}


def only_launch(fake):
    launches = fake.of("launch")
    assert len(launches) == 1, launches
    return launches[0]


def test_add(env):
    a = torch.ones(5, 3)
    b = torch.randn(5, 3)
    env.fake.clear()
    c = torch.add(a, b)
    launch = only_launch(env.fake)
    assert accessed(launch, "reads") == bufs(env.fake, a, b)
    assert accessed(launch, "writes") == bufs(env.fake, c)


def test_cat(env):
    a = torch.ones(2, 4, 5)
    b = torch.zeros(2, 1, 5)
    c = torch.rand(2, 7, 5)
    env.fake.clear()
    d = torch.cat((a, b, c), dim=1)
    launch = only_launch(env.fake)
    assert accessed(launch, "reads") == bufs(env.fake, a, b, c)
    assert accessed(launch, "writes") == bufs(env.fake, d)


def test_split(env):
    # CSAN asserts that split writes its three outputs. They are views of `a` (the schema:
    # `split.Tensor(Tensor(a -> *) self, ...) -> Tensor(a)[]`; torch.split's page: "Each chunk
    # is a view of the original tensor"): no kernel runs and no byte is read or written, so
    # streamsan records nothing. The bytes are checked when the views are used.
    a = torch.arange(10).reshape(5, 2)
    env.fake.clear()
    out = torch.split(a, 2)
    assert len(out) == 3
    assert all(o.untyped_storage().data_ptr() == a.untyped_storage().data_ptr() for o in out)
    assert env.fake.calls == []
    env.fake.clear()
    out[1].add_(1)  # a use of a view is an access to a's bytes
    launch = only_launch(env.fake)
    assert launch["writes"] == [(buf(env.fake, a), 4 * 8, 4 * 8, "self: int64[2, 2]")]


def test_inplace(env):
    a = torch.rand(4, 2)
    env.fake.clear()
    a.add_(5)
    launch = only_launch(env.fake)
    assert accessed(launch, "reads") == set()
    assert accessed(launch, "writes") == bufs(env.fake, a)


def test_out(env):
    a = torch.arange(8)
    b = torch.empty(8)
    env.fake.clear()
    torch.mul(a, 3, out=b)
    launch = only_launch(env.fake)
    assert accessed(launch, "reads") == bufs(env.fake, a)
    assert accessed(launch, "writes") == bufs(env.fake, b)


def test_nonzero(env):
    # CSAN asserts the three outputs written; they are views of the one tensor aten::nonzero
    # writes (the tuple comes from unbinding it), so that tensor's bytes are the write.
    a = torch.ones(5, 3, 2)
    env.fake.clear()
    out = torch.nonzero(a, as_tuple=True)
    launch = only_launch(env.fake)
    assert launch["name"] == "aten::nonzero"
    assert accessed(launch, "reads") == bufs(env.fake, a)
    assert accessed(launch, "writes") == bufs(env.fake, *out)
    (w,) = launch["writes"]
    for o in out:
        start = o.storage_offset() * o.element_size()
        assert w[1] <= start and start + (o.numel() - 1) * o.stride(0) * o.element_size() < w[1] + w[2]


def test_tensor_names(env):
    # CSAN names the result "output"; streamsan uses the schema's name for an unnamed return,
    # "result", and records a read of `vec` for each of its two roles.
    vec = torch.arange(1, 4)
    M = torch.zeros(3, 3)
    env.fake.clear()
    out = torch.addr(M, vec, vec)
    launch = only_launch(env.fake)
    bm, bv, bo = buf(env.fake, M), buf(env.fake, vec), buf(env.fake, out)
    assert names(launch, "reads") == {(bm, "self"), (bv, "vec1"), (bv, "vec2")}
    assert names(launch, "writes") == {(bo, "result")}
