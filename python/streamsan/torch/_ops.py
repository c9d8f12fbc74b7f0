"""ATen operators to records, one handler per kind of operator (see `_schema`).

Why here and not in the mode: the mode only finds the facts and runs the operator; what the
operator did to memory is decided here, after it ran (its fresh outputs exist then, and an
`out=` argument has its final shape). Each handler makes at most one record for the operator
(a launch, a memcpy or a host access), plus the `alloc` of storages seen for the first time;
it returns the stream to synchronize for a synchronous copy, or None.

A tensor's access is exact: its bytes of its storage, `[storage_offset * itemsize, ...)`, one
range when contiguous, else one per contiguous run (`_ranges`). A copy's endpoints are single
ranges (a memcpy has one source and one destination), so a strided endpoint is its hull,
counted in `Recorder.hulls`. Pinned CPU tensors are host memory: operators on CPU tensors only
are host accesses when some tensor is pinned, and are not recorded otherwise.
"""

import torch
from torch import Tensor

_STRIDED = torch.strided

from ._ranges import hull, runs
from ._schema import ONE

DEV, PIN, PAGE = 1, 2, 3
# Appended to the argument of an access recorded as the hull of a strided view, so that a
# report on it says the bytes are conservative.
HULL_NOTE = " (strided view recorded as its hull)"


def _dev_buf(rec, t):
    """(buffer id, byte offset of t's first element) of a device tensor; declares the storage
    on first sight. Buffer None: a storage left unchecked."""
    p = t.data_ptr()
    buf = rec.dev_bufs.get(p)
    if buf is not None:
        return buf, 0
    return _storage_buf(rec, t, p)


def _storage_buf(rec, t, p):
    """`_dev_buf` past its first lookup (the tensor does not start its storage, or the storage
    is new): what callers that made that lookup themselves call."""
    storage = t.untyped_storage()
    base = storage.data_ptr()
    buf = rec.dev_bufs.get(base)
    if buf is not None:
        return buf, p - base
    if base in rec.unmodelled:
        return None, 0
    mapped = rec.graph_mapped.get(base) if rec.graph_mapped else None
    if mapped is None:
        mapped = rec.declare_device(t, storage, base)
    return mapped[0], p - base + mapped[1]


def access(rec, t, name, out, hout):
    """Appends the accesses of tensor `t` (schema argument `name`) to `out` when it is a device
    tensor (returns True), or to `hout` when it is pinned; nothing for other tensors. The
    per-operator path: a handful of tensor attribute reads and dict lookups."""
    if rec.is_device(t):
        if t.layout is not _STRIDED or t.is_nested:
            rec.unchecked += 1  # sparse, nested, ...: no single strided storage
            return True
        nbytes = t.nbytes
        if not nbytes:
            return False
        p = t.data_ptr()
        buf = rec.dev_bufs.get(p)
        if buf is None:
            buf, off = _storage_buf(rec, t, p)
            if buf is None:
                rec.unchecked += 1
                return True
        else:
            off = 0
        label = rec.label(name, t)
        if t.is_contiguous():
            out.append((buf, off, nbytes, label))
        else:
            _strided(rec, t, buf, off, label, out)
        return True
    if rec.pin_starts and hout is not None:
        p = t.data_ptr()
        base = rec.pinned_base(p)
        if base is not None:
            nbytes = t.nbytes
            if nbytes:
                label = rec.label(name, t)
                buf = rec.pin_bufs[base]
                if t.is_contiguous():
                    hout.append((buf, p - base, nbytes, label))
                else:
                    _strided(rec, t, buf, p - base, label, hout)
    return False


def _strided(rec, t, buf, off, label, out):
    r = runs(t.shape, t.stride(), t.itemsize)
    if r.__class__ is int:
        rec.hulls += 1
        out.append((buf, off, r, label + HULL_NOTE))
    else:
        for o, n in r:
            out.append((buf, off + o, n, label))


def bind_generic(rec):
    """The handler of GENERIC operators (a kernel: reads and writes by the schema rules, fresh
    outputs written), bound to `rec`. It runs for nearly every operator, so what it needs is
    held in closure variables rather than looked up on the recorder each time, and the label
    cache gives each (argument, dtype, shape) its label and byte count at once."""
    is_device = rec.is_device
    bufs = rec.dev_bufs
    labels = rec.labels  # cleared in place when it grows too big, never replaced
    where = rec.where
    stream_id = rec.streams.id
    current_stream = rec.current_stream
    device_index = rec.device_index
    session = rec.session
    pin_starts = rec.pin_starts  # sorted in place, never replaced
    standin = rec.device.standin

    def acc(t, name, out, hout):
        if is_device(t):
            if t.layout is not _STRIDED or t.is_nested:
                rec.unchecked += 1  # sparse, nested, ...: no single strided storage
                return True
            e = labels.get((name, t.dtype, t.shape))
            if e is None:
                e = rec.label_entry(name, t)
            label, nbytes = e
            if not nbytes:
                return False
            p = t.data_ptr()
            buf = bufs.get(p)
            if buf is None:
                buf, off = _storage_buf(rec, t, p)
                if buf is None:
                    rec.unchecked += 1
                    return True
            else:
                off = 0
            if t.is_contiguous():
                out.append((buf, off, nbytes, label))
            else:
                _strided(rec, t, buf, off, label, out)
            return True
        if pin_starts:
            access(rec, t, name, None, hout)
        return False

    def generic(facts, args, kwargs, out):
        reads = []
        writes = []
        # Pinned accesses, for an operator on CPU tensors (lists only when pinned memory
        # exists: most programs have none at most times).
        if pin_starts:
            hreads = []
            hwrites = []
        else:
            hreads = hwrites = None
        first = None
        n = len(args)
        for pos, name, write, shape in facts.inputs:
            v = args[pos] if 0 <= pos < n else kwargs.get(name)
            if v is None:
                continue
            if write:
                dl, hl = writes, hwrites
            else:
                dl, hl = reads, hreads
            if shape == ONE:
                # A Python number can stand for a Tensor argument (`x * 2`).
                if isinstance(v, Tensor) and acc(v, name, dl, hl) and first is None:
                    first = v
            else:
                for t in v:
                    if isinstance(t, Tensor) and acc(t, name, dl, hl) and first is None:
                        first = t
        if first is None and standin and _has_tensor_input(facts, args, kwargs):
            # Stand-in: an operator on host tensors only makes host tensors (the real CUDA
            # check needs no help: a CPU operator's outputs are CPU tensors).
            _mark_outputs_host(rec, facts, out)
            return _host_only(rec, facts, hreads, hwrites)
        for idx, name, shape in facts.fresh:
            v = out if idx < 0 else out[idx]
            if v is None:
                continue
            if shape == ONE:
                if acc(v, name, writes, hwrites) and first is None:
                    first = v
            else:
                for t in v:
                    if isinstance(t, Tensor) and acc(t, name, writes, hwrites) and first is None:
                        first = t
        if first is not None:
            thread, at = where()
            if hreads:
                # A CPU tensor among a CUDA operator's inputs is a 0-dim scalar, which the host
                # reads when it launches the kernel: in pinned memory, that read is checked
                # (an async copy still writing it races with it).
                session.host_access(hreads, [], name=facts.name, thread=thread, at=at)
            device = device_index(first)
            sid = stream_id(current_stream(device), device, thread, at)
            session.launch(sid, facts.name, reads, writes, thread, at)
            return None
        return _host_only(rec, facts, hreads, hwrites)

    return generic


def _host_only(rec, facts, hreads, hwrites):
    """A CPU operator: a host access if it touched pinned memory."""
    if hreads or hwrites:
        hreads = hreads or []
        hwrites = hwrites or []
        thread, at = rec.where()
        rec.session.host_access(hreads, hwrites, name=facts.name, thread=thread, at=at)
    return None


def _has_tensor_input(facts, args, kwargs):
    n = len(args)
    for pos, name, _write, shape in facts.inputs:
        v = args[pos] if 0 <= pos < n else kwargs.get(name)
        if isinstance(v, Tensor):
            return True
        if shape != ONE and v is not None and any(isinstance(t, Tensor) for t in v):
            return True
    return False


def _mark_outputs_host(rec, facts, out):
    for idx, _name, shape in facts.fresh:
        v = out if idx < 0 else out[idx]
        for t in [v] if shape == ONE else (v or ()):
            if isinstance(t, Tensor) and t.nbytes:
                rec.device.mark_host(t)


def _klass(rec, t, ask=True):
    """DEV, PIN or PAGE for a copy endpoint; None for tensors elsewhere (meta, ...). `ask`:
    an unknown CPU tensor's pinnedness is asked of torch (and remembered)."""
    if rec.is_device(t):
        return DEV
    if t.device.type != "cpu":
        return None
    if rec.pinned_base(t.data_ptr()) is not None:
        return PIN
    if ask and rec.device.is_pinned(t):
        rec.declare_pinned(t)
        return PIN
    return PAGE


def _endpoint(rec, t, klass, name, thread, at):
    """One access for a copy endpoint: the tensor's range (its hull when strided)."""
    nbytes = t.nbytes
    label = rec.label(name, t)
    if not t.is_contiguous():
        h = hull(t.shape, t.stride(), t.itemsize)
        if h != nbytes:
            rec.hulls += 1
            label += HULL_NOTE
        nbytes = h
    if klass == DEV:
        buf, off = _dev_buf(rec, t)
    elif klass == PIN:
        p = t.data_ptr()
        base = rec.pinned_base(p)
        buf, off = rec.pin_bufs[base], p - base
    else:
        buf, off = rec.pageable(thread, at), t.data_ptr()
    return (buf, off, nbytes, label)


def _transfer(rec, name, src, sk, dst, dk, dev_t, non_blocking, src_name, dst_name):
    """A copy between host and device memory on the device side's current stream. PyTorch
    calls cudaMemcpyAsync, and then cudaStreamSynchronize unless non_blocking
    (aten/src/ATen/native/cuda/Copy.cu, copy_kernel_cuda / memcpy_and_sync)."""
    thread, at = rec.where()
    device = rec.device_index(dev_t)
    if device < 0:
        device = 0
    sid = rec.streams.id(rec.current_stream(device), device, thread, at)
    s = _endpoint(rec, src, sk, src_name, thread, at)
    d = _endpoint(rec, dst, dk, dst_name, thread, at)
    if s[0] is None or d[0] is None:
        rec.unchecked += 1
        return None if non_blocking else (sid, thread, at)
    rec.session.memcpy(sid, s, d, blocking=False, name=name, thread=thread, at=at)
    if non_blocking:
        # PyTorch's pinned allocator records an event on the stream of every async copy from
        # or to its blocks and reuses a block only once those completed
        # (CachingHostAllocator record_event): record_stream says the same to the engine.
        if sk == PIN:
            rec.pinned_used_by(s[0], sid, thread, at)
        if dk == PIN:
            rec.pinned_used_by(d[0], sid, thread, at)
        return None
    return (sid, thread, at)


def _host_copy(rec, name, src, sk, dst, dk, src_name, dst_name):
    """A copy the CPU makes: a host access where pinned memory is involved."""
    if sk != PIN and dk != PIN:
        return None
    thread, at = rec.where()
    reads = [_endpoint(rec, src, sk, src_name, thread, at)] if sk == PIN else []
    writes = [_endpoint(rec, dst, dk, dst_name, thread, at)] if dk == PIN else []
    rec.session.host_access(reads, writes, name=name, thread=thread, at=at)
    return None


def _kernel_copy(rec, name, src, dst, dst_name):
    """A device-to-device copy: a kernel (or cudaMemcpyAsync) on the source device's current
    stream, with the exact bytes of both sides."""
    reads = []
    writes = []
    access(rec, src, "self" if dst_name == "result" else "src", reads, None)
    access(rec, dst, dst_name, writes, None)
    thread, at = rec.where()
    device = rec.device_index(src)
    sid = rec.streams.id(rec.current_stream(device), device, thread, at)
    rec.session.launch(sid, name, reads, writes, thread=thread, at=at)
    return None


def copy(rec, facts, args, kwargs, out):
    """aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False)."""
    dst, src = args[0], args[1]
    nb = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
    if not dst.nbytes or not src.nbytes:
        return None
    dk = _klass(rec, dst)
    sk = _klass(rec, src)
    if dk is None or sk is None:
        return None
    if dk == DEV and sk == DEV:
        return _kernel_copy(rec, facts.name, src, dst, "self")
    if dk == DEV or sk == DEV:
        return _transfer(rec, facts.name, src, sk, dst, dk, dst if dk == DEV else src, nb, "src", "self")
    return _host_copy(rec, facts.name, src, sk, dst, dk, "src", "self")


def to_copy(rec, facts, args, kwargs, out):
    """aten::_to_copy(Tensor self, *, dtype, layout, device, pin_memory, non_blocking, ...):
    `.to()`, `.cpu()`, `.cuda()`, `.tolist()`. A copy from a CUDA tensor to the CPU with
    non_blocking=True gets a pinned output (aten/src/ATen/native/TensorConversions.cpp,
    _to_copy: pin_out), written asynchronously."""
    src = args[0]
    if out is None or not src.nbytes:
        return None
    target = kwargs.get("device")
    nb = bool(kwargs.get("non_blocking", False))
    sk = _klass(rec, src, ask=False)
    if sk is None:
        return None
    if target is None:
        to_device = sk == DEV
    elif target.type == "cpu":
        to_device = False
    elif rec.is_device(out):
        to_device = True
    else:
        return None  # meta, or another backend
    if to_device:
        if sk == DEV:
            return _kernel_copy(rec, facts.name, src, out, "result")
        # Host to device: PIN or PAGE source (asked now: only copies pay for the question).
        if sk == PAGE and rec.device.is_pinned(src):
            rec.declare_pinned(src)
            sk = PIN
        return _transfer(rec, facts.name, src, sk, out, DEV, out, nb, "self", "result")
    # The output is CPU memory.
    if kwargs.get("pin_memory") or (nb and sk == DEV):
        rec.declare_pinned(out)
        ok = PIN
    else:
        if rec.device.standin:
            rec.device.mark_host(out)
        ok = PAGE
    if sk == DEV:
        return _transfer(rec, facts.name, src, sk, out, ok, src, nb, "self", "result")
    if sk == PAGE and rec.device.is_pinned(src):
        rec.declare_pinned(src)
        sk = PIN
    return _host_copy(rec, facts.name, src, sk, out, ok, "self", "result")


def scalar(rec, facts, args, kwargs, out):
    """aten::_local_scalar_dense (`.item()`, `float(t)`, `if t:`): from a device tensor, a copy
    to pageable host memory and a stream sync (at::cuda::memcpy_and_sync); from a pinned tensor,
    a host read."""
    t = args[0]
    if not t.nbytes:
        return None
    if rec.is_device(t):
        thread, at = rec.where()
        device = rec.device_index(t)
        sid = rec.streams.id(rec.current_stream(device), device, thread, at)
        s = _endpoint(rec, t, DEV, "self", thread, at)
        d = (rec.pageable(thread, at), 0, t.itemsize, None)
        if s[0] is None:
            rec.unchecked += 1
        else:
            rec.session.memcpy(sid, s, d, blocking=False, name=facts.name, thread=thread, at=at)
        return (sid, thread, at)
    hreads = []
    access(rec, t, "self", None, hreads)
    if hreads:
        thread, at = rec.where()
        rec.session.host_access(hreads, [], name=facts.name, thread=thread, at=at)
    return None


def record_stream(rec, facts, args, kwargs, out):
    """aten::record_stream(Tensor(a!) self, Stream s): the caching allocator will not reuse the
    block before the work queued on `s` at its free has completed. Not a launch."""
    t, stream = args[0], args[1]
    if not rec.is_device(t) or not t.untyped_storage().nbytes():
        return None
    buf, _ = _dev_buf(rec, t)
    if buf is None:
        rec.unchecked += 1
        return None
    handle, device = rec.device.stream_handle(stream)
    thread, at = rec.where()
    sid = rec.streams.id(handle, device, thread, at)
    rec.session.record_stream(buf, sid, thread=thread, at=at)
    return None


def pin(rec, facts, args, kwargs, out):
    """aten::_pin_memory: a new pinned tensor, filled by the CPU at once. The fill is not
    recorded: no one else can hold the new block yet, and a DataLoader pins on a thread of its
    own and hands the batch over a queue, an edge between host threads that trace v1 cannot
    say (the copy that reads it on the main thread would look unordered with the fill). A
    pinned source is read on the host, as any host copy."""
    if out is None or not out.nbytes:
        return None
    src = args[0]
    rec.declare_pinned(out)
    if _klass(rec, src, ask=False) == PIN:
        thread, at = rec.where()
        reads = [_endpoint(rec, src, PIN, "self", thread, at)]
        rec.session.host_access(reads, [], name=facts.name, thread=thread, at=at)
    return None


def empty(rec, facts, args, kwargs, out):
    """empty / empty_like / new_empty / ...: nothing, unless pin_memory=True (a pinned block)."""
    if kwargs.get("pin_memory") and out is not None:
        rec.declare_pinned(out)
    return None
