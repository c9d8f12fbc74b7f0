"""Byte ranges of strided views: exact runs, merged dims, the cap."""

import torch

from streamsan.torch import _ranges
from streamsan.torch._ranges import MAX_RUNS, runs


def view_bytes(t):
    """The set of byte offsets (in the storage) of t's elements, computed the slow way."""
    isz = t.element_size()
    base = t.storage_offset()
    out = set()
    for idx in torch.cartesian_prod(*[torch.arange(s) for s in t.shape]).reshape(-1, t.dim()).tolist():
        e = base + sum(i * st for i, st in zip(idx, t.stride()))
        out.update(range(e * isz, (e + 1) * isz))
    return out


def run_bytes(t):
    r = runs(t.shape, t.stride(), t.element_size())
    assert not isinstance(r, int)
    off = t.storage_offset() * t.element_size()
    out = set()
    for o, n in r:
        out.update(range(off + o, off + o + n))
    return out


def test_contiguous_is_one_run():
    assert runs((4, 8), (8, 1), 4) == ((0, 128),)


def test_interleaved_views_do_not_overlap():
    x = torch.zeros(16)
    even, odd = x[::2], x[1::2]
    assert runs(even.shape, even.stride(), 4) == tuple((8 * i, 4) for i in range(8))
    assert run_bytes(even).isdisjoint(run_bytes(odd))
    assert run_bytes(even) | run_bytes(odd) == set(range(64))


def test_column_slice_of_a_matrix():
    x = torch.zeros(4, 8)
    col = x[:, 2:4]
    assert runs(col.shape, col.stride(), 4) == ((0, 8), (32, 8), (64, 8), (96, 8))
    assert run_bytes(col) == view_bytes(col)
    assert run_bytes(x[:, 0:2]).isdisjoint(run_bytes(col))


def test_dims_contiguous_with_each_other_merge():
    x = torch.zeros(2, 3, 4, 5)
    v = x[:, 1]  # (2, 4, 5): inner (4, 5) contiguous, outer jumps
    assert runs(v.shape, v.stride(), 4) == ((0, 80), (240, 80))  # relative to v's offset
    assert run_bytes(v) == view_bytes(v)
    t = x.permute(3, 2, 1, 0)  # dense, permuted: one run
    assert runs(t.shape, t.stride(), 4) == ((0, 480),)


def test_broadcast_and_size_one_dims_add_no_bytes():
    x = torch.zeros(4)
    e = x.expand(3, 4)
    assert runs(e.shape, e.stride(), 4) == ((0, 16),)
    assert runs((1, 4, 1), (99, 1, 7), 2) == ((0, 8),)


def test_matches_slow_computation_for_assorted_views():
    x = torch.zeros(6, 5, 4)
    for v in (x[::2, 1:4, ::3], x[1:, :, 1], x.transpose(0, 2)[1:3], x[:, ::2].transpose(1, 2)):
        assert run_bytes(v) == view_bytes(v), v.shape


def test_more_runs_than_the_cap_give_the_hull():
    n = MAX_RUNS + 1
    r = runs((n,), (2,), 4)
    assert r == (2 * (n - 1) + 1) * 4
    assert isinstance(runs((MAX_RUNS,), (2,), 4), tuple)


def test_runs_are_cached():
    _ranges._cache.clear()
    a = runs((3, 2), (4, 1), 8)
    assert _ranges._cache[((3, 2), (4, 1), 8)] is a
    assert runs((3, 2), (4, 1), 8) is a
