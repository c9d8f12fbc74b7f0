"""The bytes a strided tensor view touches inside its storage, as contiguous runs.

Why: the engine checks byte ranges, so two views race only where their bytes overlap. A view
such as `x[::2]` touches every other element; recording its hull would make it overlap
`x[1::2]`, a false race. So a non-contiguous view is split into maximal contiguous runs (dims
that are contiguous with each other are merged first). A view with more than `MAX_RUNS` runs is
recorded as its hull instead: conservative (it may report a race between interleaved views that
do not share a byte), and counted by the recorder so the limitation is visible.

Runs are computed once per (sizes, strides, itemsize) and cached relative to the view's offset.
"""

import os

# At most this many runs per view (STREAMSAN_TORCH_MAX_RUNS overrides it): each run is one
# access for the engine, so a view of a million interleaved elements would cost milliseconds
# per operator.
MAX_RUNS = int(os.environ.get("STREAMSAN_TORCH_MAX_RUNS", "") or 4096)
_CACHE_LIMIT = 4096

# (sizes, strides, itemsize) -> tuple of (byte offset from the view's first element, length),
# or an int: the hull's length in bytes (too many runs).
_cache = {}


def runs(sizes, strides, itemsize):
    """The runs of a view with these sizes and strides (in elements), relative to its first
    element, in bytes: a tuple of (offset, length) sorted by offset, adjacent runs merged; or an
    int, the length of the hull, when there would be more than MAX_RUNS runs. The view must not
    be empty (numel > 0); strides are non-negative, as torch's are."""
    key = (sizes, strides, itemsize)
    r = _cache.get(key)
    if r is None:
        r = _compute(sizes, strides, itemsize)
        if len(_cache) >= _CACHE_LIMIT:
            _cache.clear()
        _cache[key] = r
    return r


def _compute(sizes, strides, itemsize):
    # Size-1 dims and broadcast (stride-0) dims do not add bytes.
    dims = sorted((st, sz) for sz, st in zip(sizes, strides) if sz != 1 and st != 0)
    run = 1  # elements in one contiguous run
    i = 0
    while i < len(dims) and dims[i][0] == run:
        run *= dims[i][1]
        i += 1
    outer = dims[i:]
    count = 1
    for _, sz in outer:
        count *= sz
    if count > MAX_RUNS:
        last = sum((sz - 1) * st for sz, st in zip(sizes, strides))
        return (last + 1) * itemsize
    starts = [0]
    for st, sz in outer:
        starts = [s + k * st for s in starts for k in range(sz)]
    starts.sort()
    out = []
    length = run * itemsize
    for s in starts:
        b = s * itemsize
        if out and out[-1][0] + out[-1][1] >= b:
            # Adjacent (or overlapping, for self-overlapping views): one run.
            o, l = out[-1]
            out[-1] = (o, max(l, b + length - o))
        else:
            out.append((b, length))
    return tuple(out)


def hull(sizes, strides, itemsize):
    """Length in bytes of the smallest range holding every element of a non-empty view."""
    last = sum((sz - 1) * st for sz, st in zip(sizes, strides))
    return (last + 1) * itemsize
