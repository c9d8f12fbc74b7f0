"""Python-level methods wrapped while recording: queries, CUDA graphs, printing, threads.

Why: some facts reach neither the dispatch mode nor the CUDA hooks.
- `Event.query()` / `Stream.query()` return whether the work is done; a True result is a
  synchronization (no false alarm on `while not ev.query(): pass`). No hook reports them.
- `CUDAGraph.capture_begin` / capture end / `replay` / `reset` (and the graph's death) are the
  graph records; the captured operators are recorded by the mode as usual.
- Printing a tensor (torch/_tensor_str.py, `_str`) turns dispatch modes off, so its copy to
  the host is recorded here, as a synchronous copy.
- Dispatch modes are per thread: threads started while recording get the mode too.
Each wrapper calls the original first (nothing is recorded for a call that failed) and is
removed again by `restore()`.
"""

import functools
import threading

import torch

from . import _hooks
from ._ops import DEV, _endpoint, access

_MISSING = object()


class Patches:
    def __init__(self):
        self._saved = []  # (owner, attribute, original value or _MISSING)

    def set(self, owner, name, value):
        self._saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
        setattr(owner, name, value)

    def restore(self):
        while self._saved:
            owner, name, old = self._saved.pop()
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)


def _after(orig, record):
    """A method that runs `orig`, then `record(recorder, self, result)` while recording."""

    @functools.wraps(orig)
    def method(self, *args, **kwargs):
        result = orig(self, *args, **kwargs)
        rec = _hooks.current
        if rec is not None:
            try:
                record(rec, self, result)
            except SystemExit:  # the session halted (halt_on_error)
                rec.halted()
                raise
            except Exception as e:
                rec.internal_error(orig.__name__, e)
        return result

    return method


def install_queries(p, event_cls, stream_cls):
    if getattr(event_cls, "query", None) is not None:
        p.set(
            event_cls,
            "query",
            _after(event_cls.query, lambda rec, ev, done: rec.on_event_query(ev.cuda_event, done)),
        )
    if getattr(stream_cls, "query", None) is not None:
        p.set(
            stream_cls,
            "query",
            _after(
                stream_cls.query,
                lambda rec, s, done: rec.on_stream_query(s.cuda_stream, max(s.device_index, 0), done),
            ),
        )


def install_graphs(p, graph_cls):
    def wrap(name, handler):
        orig = getattr(graph_cls, name, None)
        if orig is not None:
            p.set(graph_cls, name, _after(orig, lambda rec, g, _: handler(rec, g)))

    wrap("capture_begin", lambda rec, g: rec.on_graph_begin(g))
    # torch >= 2.10 splits capture_end into capture_end_pre (the capture ends) and _post;
    # capture_end calls capture_end_pre.
    end = "capture_end_pre" if hasattr(graph_cls, "capture_end_pre") else "capture_end"
    wrap(end, lambda rec, g: rec.on_graph_end(g))
    wrap("replay", lambda rec, g: rec.on_graph_launch(g))
    wrap("reset", lambda rec, g: rec.on_graph_reset(g))


def printed(rec, t, call):
    """Printing `t` (modes are off inside): a synchronous copy to the host for a device
    tensor, a host read for a pinned one."""
    if rec.quiet is None:
        return _printed(rec, t, call)
    # The native recorder sees the operators printing runs: they are this record's.
    old = rec.quiet(True)
    try:
        return _printed(rec, t, call)
    finally:
        rec.quiet(old)


def _printed(rec, t, call):
    try:
        nbytes = t.nbytes
        device = rec.is_device(t)
    except Exception:  # tensor subclasses without storage
        return call()
    if not nbytes or t.layout is not torch.strided or t.is_nested:
        return call()
    if not device:
        hreads = []
        access(rec, t, "self", None, hreads)
        result = call()
        if hreads:
            thread, at = rec.where()
            rec.session.host_access(hreads, [], name="print", thread=thread, at=at)
        return result
    tid = threading.get_ident()
    # Printing inside an operator (a debug print in a custom op) keeps that operator's queue.
    outer = rec.queues.get(tid)
    queue = rec.queues[tid] = []
    try:
        result = call()
    finally:
        if outer is None:
            del rec.queues[tid]
        else:
            rec.queues[tid] = outer
    thread, at = rec.where()
    index = rec.device_index(t)
    sid = rec.streams.id(rec.current_stream(index), index, thread, at)
    s = _endpoint(rec, t, DEV, "self", thread, at)
    d = (rec.pageable(thread, at), 0, s[2], None)
    # Formatting copies element after element to the host, each copy a sync of the same
    # stream with no work in between: one of them says it all.
    seen = set()
    queue = [r for r in queue if r[0] != "stream_sync" or not (r[1] in seen or seen.add(r[1]))]
    try:
        if s[0] is None:
            rec.unchecked += 1
        else:
            rec.session.memcpy(sid, s, d, blocking=False, name="print", thread=thread, at=at)
        rec.flush_then_sync(queue, sid, thread, at)
    except SystemExit:
        rec.halted()
        raise
    return result


def install_print(p, tensor_str):
    orig = tensor_str._str

    @functools.wraps(orig)
    def _str(self, *args, **kwargs):
        rec = _hooks.current
        if rec is None:
            return orig(self, *args, **kwargs)
        return printed(rec, self, lambda: orig(self, *args, **kwargs))

    p.set(tensor_str, "_str", _str)


def install_threads(p, mode_cls):
    orig = threading.Thread.start

    @functools.wraps(orig)
    def start(self):
        if _hooks.current is not None:
            run = self.run

            def run_recorded():
                rec = _hooks.current
                if rec is None:
                    return run()
                with mode_cls(rec):
                    return run()

            self.run = run_recorded
        return orig(self)

    p.set(threading.Thread, "start", start)
