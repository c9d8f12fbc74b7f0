"""A pure-Python stand-in for `streamsan._native.Session` that keeps the records it is given.

Its methods have the signatures of python/streamsan/_native.pyi, so a recorder call that the
real Session would refuse for its arguments fails here too (TypeError); each call is appended
to `calls` as (method, args, kwargs). `records()` gives them normalized: one dict per record,
the positional arguments named, the keyword arguments at their default left out, so tests
compare exactly what a recorder emitted. It checks nothing: verdicts come from the real Session.
"""

import inspect


class FakeHalt(SystemExit):
    """What `halt_on=` raises, standing in for streamsan._native.Halt."""


class FakeSession:
    def __init__(self, halt_on=None):
        self.calls = []
        self.history = []  # every call, also those clear() dropped from `calls`
        self.finished = False
        # A method name: that method raises FakeHalt(66) (as a Session with halt_on_error
        # raises Halt from the racing record).
        self.halt_on = halt_on

    def _add(self, method, args, kwargs):
        if self.finished:
            raise ValueError(f"{method} after finish()")
        self.calls.append((method, args, kwargs))
        self.history.append((method, args, kwargs))
        if method == self.halt_on:
            self.finished = True
            raise FakeHalt(66)

    # Declarations.
    def stream(self, id, device=0, kind="created", flags="non_blocking", name=None, thread=0, at=None):
        self._add("stream", (id,), dict(device=device, kind=kind, flags=flags, name=name, thread=thread, at=at))

    def event(self, id, thread=0, at=None):
        self._add("event", (id,), dict(thread=thread, at=at))

    def event_destroy(self, id, thread=0, at=None):
        self._add("event_destroy", (id,), dict(thread=thread, at=at))

    # Memory.
    def alloc(self, buf, bytes, device=0, space="device", stream=None, addr=None, pool="driver", name=None, thread=0, at=None):
        self._add(
            "alloc",
            (buf, bytes),
            dict(device=device, space=space, stream=stream, addr=addr, pool=pool, name=name, thread=thread, at=at),
        )

    def free(self, buf, stream=None, thread=0, at=None):
        self._add("free", (buf,), dict(stream=stream, thread=thread, at=at))

    def record_stream(self, buf, stream, thread=0, at=None):
        self._add("record_stream", (buf, stream), dict(thread=thread, at=at))

    # Work.
    def launch(self, stream, name, reads, writes, thread=0, at=None):
        self._add("launch", (stream, name, list(reads), list(writes)), dict(thread=thread, at=at))

    def memcpy(self, stream, src, dst, blocking=False, name=None, thread=0, at=None):
        self._add("memcpy", (stream, src, dst), dict(blocking=blocking, name=name, thread=thread, at=at))

    def memset(self, stream, dst, blocking=False, name=None, thread=0, at=None):
        self._add("memset", (stream, dst), dict(blocking=blocking, name=name, thread=thread, at=at))

    def host_access(self, reads, writes, name=None, thread=0, at=None):
        self._add("host_access", (list(reads), list(writes)), dict(name=name, thread=thread, at=at))

    # Ordering.
    def record(self, event, stream, thread=0, at=None):
        self._add("record", (event, stream), dict(thread=thread, at=at))

    def wait(self, stream, event, thread=0, at=None):
        self._add("wait", (stream, event), dict(thread=thread, at=at))

    def event_sync(self, event, thread=0, at=None):
        self._add("event_sync", (event,), dict(thread=thread, at=at))

    def event_query(self, event, done, thread=0, at=None):
        self._add("event_query", (event, done), dict(thread=thread, at=at))

    def stream_sync(self, stream, thread=0, at=None):
        self._add("stream_sync", (stream,), dict(thread=thread, at=at))

    def stream_query(self, stream, done, thread=0, at=None):
        self._add("stream_query", (stream, done), dict(thread=thread, at=at))

    def device_sync(self, device=0, thread=0, at=None):
        self._add("device_sync", (), dict(device=device, thread=thread, at=at))

    # Graphs.
    def graph_begin(self, graph, stream, thread=0, at=None):
        self._add("graph_begin", (graph, stream), dict(thread=thread, at=at))

    def graph_end(self, graph, stream, thread=0, at=None):
        self._add("graph_end", (graph, stream), dict(thread=thread, at=at))

    def graph_launch(self, graph, stream, thread=0, at=None):
        self._add("graph_launch", (graph, stream), dict(thread=thread, at=at))

    def graph_destroy(self, graph, thread=0, at=None):
        self._add("graph_destroy", (graph,), dict(thread=thread, at=at))

    # Results.
    def races(self):
        return 0

    def occurrences(self):
        return 0

    def warnings(self):
        return 0

    def records(self):
        return len(self.calls)

    def report_text(self):
        return ""

    def report_json(self):
        return "{}"

    def finish(self):
        self.finished = True
        return 0

    # For tests.
    def ops(self):
        """The method names called, in order."""
        return [c[0] for c in self.calls]

    def normalized(self, keep_at=False):
        """The records as dicts: {"op": name, positional parameters by name, keyword
        arguments that differ from their defaults}; `at` left out unless keep_at."""
        out = []
        for method, args, kwargs in self.calls:
            sig = inspect.signature(getattr(self, method))
            params = list(sig.parameters.values())
            d = {"op": method}
            for p, a in zip(params, args):
                d[p.name] = a
            for k, v in kwargs.items():
                if k == "at" and not keep_at:
                    continue
                if v != sig.parameters[k].default:
                    d[k] = v
            out.append(d)
        return out

    def of(self, op):
        """The normalized records of one op."""
        return [r for r in self.normalized() if r["op"] == op]

    def clear(self):
        """Forgets the calls so far for `calls`, `ops()`, `normalized()`, `of()`; `history` and
        `buffer_of()` keep them."""
        self.calls.clear()

    def buffer_of(self, addr):
        """The buffer id of the last alloc at `addr`."""
        ids = [c[1][0] for c in self.history if c[0] == "alloc" and c[2]["addr"] == addr]
        if not ids:
            raise KeyError(f"no alloc at {addr:#x}")
        return ids[-1]
