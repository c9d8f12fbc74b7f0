"""The state of one recording session: buffers, events, graphs; the CUDA hook handlers.

Why one object: the dispatch mode, PyTorch's CUDA hooks, the query wrappers and the CUDA graph
wrappers all describe the same program, and their records must agree on buffer, stream and
event ids. The Recorder owns those ids and the Session (`streamsan._native.Session`, or a fake
in tests) they are written to; `_ops` turns operators into records with its help.

Memory:
- Device storages are caching-allocator blocks. The allocation hook gives only the address,
  so it is remembered with the stream current at that moment (the block's pool stream); the
  `alloc` record (pool "caching", addr = the storage's address, bytes = storage.nbytes()) is
  written the first time the dispatch mode sees a tensor on that storage, before its first
  access. A storage first seen with no allocation hook (allocated before recording began) is
  declared then, its pool stream the current stream. The deallocation hook frees the buffer
  (a host action) if its `alloc` was written, and forgets the address either way.
- Blocks allocated while a CUDA graph is being captured belong to the graph's private pool:
  every replay uses them again, so their frees are held back until the graph is reset or
  destroyed (else a replay would touch freed buffers). A held-back block handed out again
  during the capture keeps its buffer id.
- Pinned CPU storages are `space: "pinned"` caching blocks, declared when the recorder learns
  they are pinned (see `_ops`); a finalizer on the storage frees the buffer when it dies.
- Ordinary (pageable) CPU memory is one pseudo-buffer "pageable host memory" indexed by
  address, used only as the host end of copies: the engine needs the host end's `space` to
  apply the copy rules, and pageable host accesses themselves are not recorded.

Hook records that fire while an operator runs (a stream sync inside `.item()`, the event a
cross-device copy records) are held in a per-thread queue and written after the operator's own
record, which is where they happen (they follow the kernel they belong to). Frees are written
at once: the operator's accesses are taken after it ran and never name a storage it freed.
"""

import bisect
import functools
import sys
import threading
import weakref

from . import _frames

try:
    from .._native import LiveBlockOverlap
except ImportError:  # a build without the native extension: nothing raises it then
    LiveBlockOverlap = None
from ._streams import Streams

_get_ident = threading.get_ident
_site = _frames.site

# Bytes of the pageable pseudo-buffer: more than any user-space address.
PAGEABLE_BYTES = 1 << 60
# The engine's refusal of a caching alloc over a live block (src/engine/pool.rs).


def _pinned_died(ref, base, buf):
    rec = ref()
    if rec is not None and rec.active:
        rec.on_pinned_freed(base, buf)


class Memory:
    """The device storages by address, and the buffer ids handed out. The native recorder
    keeps these tables in C++ (_observer.cpp, Memory), where every operator and memory hook
    looks them up; its Python mappings have the dict operations the handlers here use (not
    equality with a dict; items() and keys() are lists)."""

    def __init__(self):
        self.bufs = {}  # a declared storage's address -> buffer id
        # A block the allocation hook reported, not declared yet -> (pool stream handle, device).
        self.pending = {}
        self.next_buf = 1


def _standin_storage_died(ref, base, buf):
    rec = ref()
    if rec is None or not rec.active:
        return
    if buf is None:
        if base in rec.unmodelled:
            rec.on_memory_deallocation(base)
        return
    mapped = rec.graph_mapped.get(base)
    if rec.dev_bufs.get(base) == buf or (mapped is not None and mapped[0] == buf):
        rec.on_memory_deallocation(base)


def _graph_died(ref, key):
    rec = ref()
    if rec is not None and rec.active:
        rec.on_graph_destroyed(key)


class Recorder:
    def __init__(self, session, device):
        self.session = session
        self.device = device
        self.active = True
        self.threads = _frames.Threads()
        self.thread_ids = self.threads.ids  # ident -> number, read on the per-operator path
        self.streams = Streams(session, device.stream_flags)
        # Fast paths, bound once.
        self.is_device = device.is_device
        self.device_index = device.device_index
        self.current_stream = device.current_stream
        self.skip = device.skip
        # Device storages and the buffer ids handed out (Memory); dev_bufs and pending are
        # its tables, bound here for the per-operator paths.
        self.memory = Memory()
        self.dev_bufs = self.memory.bufs
        self.pending = self.memory.pending
        # Pinned storages: address -> buffer id, their sorted addresses and their ends.
        self.pin_bufs = {}
        self.pin_starts = []
        self.pin_ends = {}
        self.pin_streams = set()  # (pinned buffer, stream id) pairs given a record_stream
        self.pageable_buf = None
        self.events = set()
        # CUDA graphs: id(CUDAGraph) -> graph id; live graph ids; graph id -> origin stream id
        # while capturing; block address -> graph id for blocks allocated during a capture,
        # with their sizes; freed blocks a graph keeps: address -> (buf, bytes, graph id).
        self.graphs = {}
        self.live_graphs = set()
        self.capturing = {}
        self.graph_blocks = {}
        self.graph_sizes = {}
        self.graph_owned = {}
        # Storages the private pool of a live graph carved out of a graph buffer's bytes (a
        # block it handed out before, split): base -> (graph buffer, offset in it); how many
        # live storages each such buffer holds; graph buffers whose graph is gone, freed
        # once the last of those dies.
        self.graph_mapped = {}
        self.mapped_refs = {}
        self.orphans = set()
        # Storages that straddle graph buffers' bytes in a way no buffer can hold (part of one
        # buffer and part of another, or of bytes beyond): not recorded, so as not to invent
        # a use after free at a replay; `unchecked` counts the accesses left out.
        self.unmodelled = set()
        self.unchecked = 0
        self.next_graph = 1
        # Thread ident -> records held while that thread runs an operator.
        self.queues = {}
        # The native recorder's `hold`, `quiet` and `stop` (_observer.cpp), or None with the
        # dispatch mode.
        self.hold = None
        self.quiet = None
        self.stop = None
        self.native_counts = None  # (in C++, in Python) once the native recorder stopped
        self.native_c_entry = None  # whether its records go through the Session's C entry
        # Whether PyTorch's allocator calls the native recorder's memory hooks without its
        # Python trampoline (_observer.Bridge._native_memory_hooks).
        self.fast_memory_hooks = False
        # [thread ident, thread number, at or None] of the operator being recorded (see
        # where()); None between operators.
        self.op_site = None
        self.labels = {}
        # Tensors recorded as the hull of their bytes (more than _ranges.MAX_RUNS runs, or a
        # strided copy endpoint): conservative, counted for the user.
        self.hulls = 0
        self.internal_errors = []
        device.bind(self)
        from . import _ops
        from ._schema import COPY, EMPTY, GENERIC, PIN, RECORD_STREAM, SCALAR, TO_COPY

        # Operator kind -> handler(facts, args, kwargs, out) (see _ops and _mode).
        self.handlers = {
            GENERIC: _ops.bind_generic(self),
            COPY: functools.partial(_ops.copy, self),
            TO_COPY: functools.partial(_ops.to_copy, self),
            SCALAR: functools.partial(_ops.scalar, self),
            RECORD_STREAM: functools.partial(_ops.record_stream, self),
            PIN: functools.partial(_ops.pin, self),
            EMPTY: functools.partial(_ops.empty, self),
        }

    # -- small helpers ---------------------------------------------------------------------

    def where(self):
        """(thread number, at) for a record made now. While an operator runs, every record it
        makes (its outputs' allocs, hook records, the launch) has the same user line: the
        walk up the stack is made once per operator (`op_site`, set by the mode)."""
        ident = _get_ident()
        cached = self.op_site
        if cached is not None:
            if cached[0] == ident:
                if cached[2] is None:
                    site = cached[2] = _site()
                    return cached[1], site
                return cached[1], cached[2]
        return self.threads.number(ident), _site()

    def stream_id(self, device, thread, at):
        """The trace id of the current stream of `device` (declared if new)."""
        return self.streams.id(self.current_stream(device), device, thread, at)

    def emit_hooked(self, method, *args, **kwargs):
        """Writes a hook's record now, or after the operator this thread is running (with the
        native recorder, `hold()` says whether one is running, and holds the queue then)."""
        ident = _get_ident()
        q = self.queues.get(ident)
        if q is None and self.hold is not None and self.hold():
            q = self.queues[ident] = []
        if q is not None:
            q.append((method, args, kwargs))
        else:
            getattr(self.session, method)(*args, **kwargs)

    def flush_then_sync(self, queue, sid, thread, at):
        """The end of a synchronous copy on stream `sid`: the records held while it ran, then
        its stream_sync unless a hook already reported it."""
        if queue:
            sid = self.flush(queue, sid)
        if sid is not None:
            self.session.stream_sync(sid, thread=thread, at=at)

    def flush(self, queue, synced=None):
        """Writes the records held while an operator ran. `synced`: a stream id the operator
        synchronizes at its end (a synchronous copy): its stream_sync is written unless a hook
        already reported it."""
        session = self.session
        for method, args, kwargs in queue:
            if synced is not None and method == "stream_sync" and args[0] == synced:
                synced = None
            getattr(session, method)(*args, **kwargs)
        return synced

    def label_entry(self, name, t):
        """(label, bytes) of a tensor passed as schema argument `name`: the label is
        "<name>: <dtype>[<shape>]", e.g. "self: float32[1024]"; cached by (name, dtype,
        shape)."""
        labels = self.labels
        if len(labels) > 65536:
            labels.clear()
        dtype = str(t.dtype)
        if dtype.startswith("torch."):
            dtype = dtype[6:]
        e = labels[(name, t.dtype, t.shape)] = (f"{name}: {dtype}[{', '.join(map(str, t.shape))}]", t.nbytes)
        return e

    def label(self, name, t):
        e = self.labels.get((name, t.dtype, t.shape))
        if e is None:
            e = self.label_entry(name, t)
        return e[0]

    def internal_error(self, where, exc):
        """A hook handler failed (a bug in the recorder, or a record the engine rejected).
        Hooks run inside PyTorch, some in destructors, where raising is not an option: report
        once on stderr and keep the error for `internal_errors`."""
        self.internal_errors.append((where, exc))
        if len(self.internal_errors) == 1:
            print(f"streamsan.torch: internal error in {where}: {exc!r}", file=sys.stderr)

    def halted(self):
        """The Session halted (halt_on_error): it is finished, record nothing more."""
        self.active = False
        if self.stop is not None:
            self.stop()
        from . import _hooks

        if _hooks.current is self:
            _hooks.current = None

    # -- device storages -------------------------------------------------------------------

    def new_buf(self):
        """A buffer id never handed out before in this session."""
        m = self.memory
        buf = m.next_buf
        m.next_buf = buf + 1
        return buf

    @property
    def next_buf(self):
        return self.memory.next_buf

    @next_buf.setter
    def next_buf(self, value):
        self.memory.next_buf = value

    def use_memory(self, memory):
        """Keeps the device storages in `memory` from now on: the native recorder's tables
        (_observer.cpp, Memory), which it filled with this recorder's so far."""
        from . import _ops
        from ._schema import GENERIC

        self.memory = memory
        self.dev_bufs = memory.bufs
        self.pending = memory.pending
        self.handlers[GENERIC] = _ops.bind_generic(self)  # it binds dev_bufs

    def declare_device(self, t, storage, base):
        """Writes the `alloc` of `t`'s storage at `base` (first sight); returns (buffer id,
        offset of the storage in the buffer): 0 but for a storage inside a graph buffer."""
        nbytes = storage.nbytes()
        thread, at = self.where()
        pend = self.pending.pop(base, None)
        if pend is None:
            device = self.device_index(t)
            if device < 0:
                device = 0
            handle = self.current_stream(device)
        else:
            handle, device = pend
        if self.graph_owned or self.graph_sizes:
            hit = self._graph_bytes(t, base, nbytes, thread, at)
            if hit is not None:
                return hit
        sid = self.streams.id(handle, device, thread, at)
        buf = self.new_buf()
        # Positional: the per-operator path (keywords cost more to parse).
        try:
            self.session.alloc(buf, nbytes, device, "device", sid, base, "caching", None, thread, at)
        except ValueError as e:
            if not self._drop_stale(e, thread, at):
                raise
            self.session.alloc(buf, nbytes, device, "device", sid, base, "caching", None, thread, at)
        self.dev_bufs[base] = buf
        if base in self.graph_blocks:
            self.graph_sizes[base] = nbytes
        if self.device.finalize_device_storages:
            weakref.finalize(storage, _standin_storage_died, weakref.ref(self), base, buf)
        return buf, 0

    def _drop_stale(self, error, thread, at):
        """The engine refused an alloc over a buffer the recorder still holds live: memory no
        deallocation hook reports (a tensor on memory from outside the caching allocator, such
        as DLPack from another library), whose bytes the allocator now hands out. The stale
        buffer ends (freed) so the new block can be declared; True when that was the case."""
        # The engine's structured error names the block that is still live.
        if LiveBlockOverlap is None or not isinstance(error, LiveBlockOverlap):
            return False
        stale = int(error.args[1])
        for addr, buf in list(self.dev_bufs.items()):
            if buf == stale:
                if addr in self.graph_blocks or addr in self.graph_sizes:
                    return False  # a graph's buffer: not stale
                del self.dev_bufs[addr]
                self.session.free(stale, None, thread, at)
                return True
        return False

    def _graph_bytes(self, t, base, nbytes, thread, at):
        """A storage on bytes a graph keeps, as (buffer, offset), or None for a new buffer.
        The graph's replays touch those bytes as the buffers its nodes captured, so the bytes
        stay those buffers while the graph lives: the same block again keeps its buffer id,
        and a block the private pool split off a graph buffer's bytes is that buffer at an
        offset. Any other overlap ends the held-back buffers first (a caching alloc may not
        overlap a live block)."""
        kept = self.graph_owned.get(base)
        if kept is not None and nbytes <= kept[1]:
            del self.graph_owned[base]
            self.graph_blocks[base] = kept[2]
            self.graph_sizes[base] = kept[1]
            self.dev_bufs[base] = kept[0]
            return kept[0], 0
        end = base + nbytes
        for addr, (buf, size, _gid) in self.graph_owned.items():
            if addr <= base and end <= addr + size:
                return self._map(t, base, buf, base - addr)
        for addr, size in self.graph_sizes.items():
            if addr < base and end <= addr + size:
                buf = self.dev_bufs.get(addr)
                if buf is not None:
                    return self._map(t, base, buf, base - addr)
        overlaps = any(addr < end and base < addr + size for addr, (_b, size, _g) in self.graph_owned.items())
        overlaps = overlaps or any(
            addr < end and base < addr + size and addr in self.dev_bufs for addr, size in self.graph_sizes.items()
        )
        if overlaps:
            self.unmodelled.add(base)
            if self.device.finalize_device_storages:
                weakref.finalize(t.untyped_storage(), _standin_storage_died, weakref.ref(self), base, None)
            return None, 0
        return None

    def _map(self, t, base, buf, off):
        self.graph_mapped[base] = (buf, off)
        self.mapped_refs[buf] = self.mapped_refs.get(buf, 0) + 1
        if self.device.finalize_device_storages:
            storage = t.untyped_storage()
            weakref.finalize(storage, _standin_storage_died, weakref.ref(self), base, buf)
        return buf, off

    def _end_graph_buffer(self, buf, thread, at):
        """Frees a graph's buffer, or, while storages carved out of it live, leaves it to the
        last of them."""
        if self.mapped_refs.get(buf):
            self.orphans.add(buf)
        else:
            self.session.free(buf, None, thread, at)

    def on_memory_allocation(self, ptr):
        device = self.device.current_device()
        self.unmodelled.discard(ptr)
        if ptr in self.dev_bufs or ptr in self.graph_mapped:
            # Its deallocation was never reported (memory from outside the allocator?): the
            # bytes are someone else's now.
            self.on_memory_deallocation(ptr)
        self.pending[ptr] = (self.current_stream(device), device)
        if self.capturing:
            self.graph_blocks[ptr] = next(reversed(self.capturing))

    def on_memory_deallocation(self, ptr):
        self.pending.pop(ptr, None)
        if ptr in self.unmodelled:
            self.unmodelled.discard(ptr)
            self.graph_blocks.pop(ptr, None)
            return
        if self.graph_mapped:
            mapped = self.graph_mapped.pop(ptr, None)
            if mapped is not None:
                # The bytes stay the graph buffer's; its end may have waited for this storage.
                self.graph_blocks.pop(ptr, None)
                buf = mapped[0]
                left = self.mapped_refs[buf] - 1
                if left:
                    self.mapped_refs[buf] = left
                else:
                    del self.mapped_refs[buf]
                    if buf in self.orphans:
                        self.orphans.discard(buf)
                        thread, at = self.where()
                        self.session.free(buf, None, thread, at)
                return
        buf = self.dev_bufs.pop(ptr, None)
        gid = self.graph_blocks.pop(ptr, None)
        size = self.graph_sizes.pop(ptr, None)
        if buf is None:
            return
        if gid is not None and gid in self.live_graphs and size is not None:
            self.graph_owned[ptr] = (buf, size, gid)
            return
        thread, at = self.where()
        self._end_graph_buffer(buf, thread, at)

    # -- pinned storages -------------------------------------------------------------------

    def pinned_base(self, p):
        """The address of the declared pinned storage holding address `p`, or None."""
        if p in self.pin_bufs:
            return p
        starts = self.pin_starts
        if not starts:
            return None
        i = bisect.bisect_right(starts, p) - 1
        if i >= 0:
            b = starts[i]
            if p < self.pin_ends[b]:
                return b
        return None

    def declare_pinned(self, t):
        """Declares `t`'s storage as a pinned caching block if it is not yet; returns its
        address, or None for an empty storage."""
        storage = t.untyped_storage()
        base = storage.data_ptr()
        if base in self.pin_bufs:
            return base
        nbytes = storage.nbytes()
        if not nbytes:
            return None
        thread, at = self.where()
        old = self.dev_bufs.pop(base, None)
        if old is not None:
            # Only on the CPU stand-in, where a tensor played a device tensor until now.
            self.session.free(old, thread=thread, at=at)
        buf = self.new_buf()
        self.session.alloc(
            buf, nbytes, device=0, space="pinned", addr=base, pool="caching", thread=thread, at=at
        )
        self.pin_bufs[base] = buf
        self.pin_ends[base] = base + nbytes
        bisect.insort(self.pin_starts, base)
        weakref.finalize(storage, _pinned_died, weakref.ref(self), base, buf)
        return base

    def pinned_used_by(self, buf, sid, thread, at):
        """An async copy on stream `sid` used pinned block `buf`: the pinned allocator will
        not reuse the block before that copy is done (a record_stream, once per stream)."""
        key = (buf, sid)
        if key not in self.pin_streams:
            self.pin_streams.add(key)
            self.session.record_stream(buf, sid, thread=thread, at=at)

    def on_pinned_freed(self, base, buf):
        if self.pin_bufs.get(base) != buf:
            return
        del self.pin_bufs[base]
        del self.pin_ends[base]
        i = bisect.bisect_left(self.pin_starts, base)
        del self.pin_starts[i]
        try:
            thread, at = self.where()
            self.session.free(buf, thread=thread, at=at)
        except Exception as e:  # finalizers cannot raise
            self.internal_error("pinned free", e)

    def pageable(self, thread, at):
        """The pseudo-buffer of pageable host memory (declared on first use)."""
        buf = self.pageable_buf
        if buf is None:
            buf = self.pageable_buf = self.new_buf()
            self.session.alloc(
                buf,
                PAGEABLE_BYTES,
                space="host",
                name="pageable host memory",
                thread=thread,
                at=at,
            )
        return buf

    def close(self):
        """Ends what only the recorder made up: the pageable pseudo-buffer is freed, so that
        the session's end does not report it as a leak. Called by disable() before the
        session finishes."""
        buf, self.pageable_buf = self.pageable_buf, None
        if buf is not None:
            self.session.free(buf, None, self.threads.current(), None)

    # -- events, syncs, streams (PyTorch's CUDA hooks) -------------------------------------

    def _event(self, handle, thread, at):
        if handle not in self.events:
            self.events.add(handle)
            self.emit_hooked("event", handle, thread=thread, at=at)

    def _hook_stream(self, handle, thread, at):
        device = self.device.current_device()
        return self.streams.id(handle, device, thread, at)

    def on_event_creation(self, handle):
        thread, at = self.where()
        if handle in self.events:  # a deletion we did not see: the handle is a new event
            self.emit_hooked("event_destroy", handle, thread=thread, at=at)
            self.events.discard(handle)
        self._event(handle, thread, at)

    def on_event_deletion(self, handle):
        if handle in self.events:
            self.events.discard(handle)
            thread, at = self.where()
            self.emit_hooked("event_destroy", handle, thread=thread, at=at)

    def on_event_record(self, handle, stream):
        thread, at = self.where()
        self._event(handle, thread, at)
        sid = self._hook_stream(stream, thread, at)
        self.emit_hooked("record", handle, sid, thread=thread, at=at)

    def on_event_wait(self, handle, stream):
        thread, at = self.where()
        self._event(handle, thread, at)
        sid = self._hook_stream(stream, thread, at)
        self.emit_hooked("wait", sid, handle, thread=thread, at=at)

    def on_event_synchronization(self, handle):
        thread, at = self.where()
        self._event(handle, thread, at)
        self.emit_hooked("event_sync", handle, thread=thread, at=at)

    def on_stream_synchronization(self, stream):
        thread, at = self.where()
        sid = self._hook_stream(stream, thread, at)
        self.emit_hooked("stream_sync", sid, thread=thread, at=at)

    def on_device_synchronization(self):
        thread, at = self.where()
        device = self.device.current_device()
        self.emit_hooked("device_sync", device=device, thread=thread, at=at)

    def on_stream_creation(self, stream):
        self.streams.pool_streams.add(stream)

    # -- queries (wrapped Python methods) --------------------------------------------------

    def on_event_query(self, handle, done):
        if not handle:  # never created (PyTorch creates events lazily): nothing was queried
            return
        thread, at = self.where()
        self._event(handle, thread, at)
        self.emit_hooked("event_query", handle, bool(done), thread=thread, at=at)

    def on_stream_query(self, handle, device, done):
        thread, at = self.where()
        sid = self.streams.id(handle, device, thread, at)
        self.emit_hooked("stream_query", sid, bool(done), thread=thread, at=at)

    # -- CUDA graphs (wrapped CUDAGraph methods) -------------------------------------------

    def on_graph_begin(self, graph):
        key = id(graph)
        gid = self.graphs.get(key)
        if gid is None:
            gid = self.graphs[key] = self.next_graph
            self.next_graph += 1
            try:
                weakref.finalize(graph, _graph_died, weakref.ref(self), key)
            except TypeError:  # not weak-referenceable: destroyed only by reset()
                pass
        elif gid in self.live_graphs:
            self._destroy_graph(gid)
        thread, at = self.where()
        device = self.device.current_device()
        sid = self.stream_id(device, thread, at)
        self.session.graph_begin(gid, sid, thread=thread, at=at)
        self.live_graphs.add(gid)
        self.capturing[gid] = sid

    def on_graph_end(self, graph):
        gid = self.graphs.get(id(graph))
        sid = self.capturing.pop(gid, None)
        if sid is None:
            return
        thread, at = self.where()
        self.session.graph_end(gid, sid, thread=thread, at=at)

    def on_graph_launch(self, graph):
        gid = self.graphs.get(id(graph))
        if gid is None or gid not in self.live_graphs or gid in self.capturing:
            return
        thread, at = self.where()
        device = self.device.current_device()
        sid = self.stream_id(device, thread, at)
        self.session.graph_launch(gid, sid, thread=thread, at=at)

    def on_graph_reset(self, graph):
        gid = self.graphs.get(id(graph))
        if gid is not None and gid in self.live_graphs:
            self._destroy_graph(gid)

    def on_graph_destroyed(self, key):
        gid = self.graphs.pop(key, None)
        if gid is not None and gid in self.live_graphs:
            try:
                self._destroy_graph(gid)
            except Exception as e:  # finalizers cannot raise
                self.internal_error("graph destroy", e)

    def _destroy_graph(self, gid):
        thread, at = self.where()
        if gid in self.capturing:
            # A capture that never ended (it failed): end it so the id can be destroyed.
            self.session.graph_end(gid, self.capturing.pop(gid), thread=thread, at=at)
        self.session.graph_destroy(gid, thread=thread, at=at)
        self.live_graphs.discard(gid)
        for addr, (buf, _size, g) in list(self.graph_owned.items()):
            if g == gid:
                del self.graph_owned[addr]
                self._end_graph_buffer(buf, thread, at)
        for addr, g in list(self.graph_blocks.items()):
            if g == gid:
                del self.graph_blocks[addr]
                self.graph_sizes.pop(addr, None)
