"""The native recorder (option `native`): _observer.cpp, built against the running torch, and
the Python side it calls (`Bridge`).

Why: a Python TorchDispatchMode costs about 10 us per operator before it records anything. The
observer sees operators through ATen's RecordFunction instead and records ordinary kernels in
C++; everything else goes to the same handlers the dispatch mode uses (`_ops`), so both ways
write the same records (python/tests/test_native.py compares them).

Building needs a C++ compiler, ninja and torch's headers (all in a torch wheel but the
compiler); the first build takes a minute, later runs load it from torch's extension cache
(TORCH_EXTENSIONS_DIR). The module's name carries the torch version, so an upgraded torch
builds anew rather than loading a module made for another ABI.
"""

import os
import re
import sys
import threading

from . import _ops
from ._mode import after_operator
from ._schema import facts_of

_ext = None
_get_ident = threading.get_ident
# Records go through the Session's C entry where it has one (crates/streamsan-python/src/
# c_entry.rs); tests turn it off to compare with the Session's Python methods.
C_ENTRY = True


def build(verbose=False):
    """Builds (or loads from the cache) the observer module; returns it."""
    global _ext
    if _ext is not None:
        return _ext
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_observer.cpp")
    kind, defines = "", []
    if os.environ.get("STREAMSAN_OBSERVER_PROBE") == "1":
        # benches/torch/profile_op.py --stages: a diagnostic build that can stop at a stage.
        kind, defines = "probe", ["-DSTREAMSAN_PROBE"]
    _ext = load(source, kind, defines, verbose)
    return _ext


def load(source, kind="", defines=(), verbose=False):
    """Builds (or loads from the cache) observer source `source` as a module named after the
    running torch and `kind` ("" for the recorder's own; benchmarks load other builds)."""
    import torch
    import torch.utils.cpp_extension

    tag = re.sub(r"[^0-9A-Za-z]+", "_", torch.__version__)
    name = f"streamsan_observer_{tag}" + (f"_{kind}" if kind else "")
    if not _cached(name):
        # A first build is a minute of silence otherwise.
        print(
            f"streamsan.torch: building the native recorder for torch {torch.__version__} "
            "(first use only; about a minute)",
            file=sys.stderr,
            flush=True,
        )
    # `pip install ninja` puts ninja beside the interpreter, which a virtual environment that
    # is not activated leaves off PATH.
    path = os.environ.get("PATH", "")
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + path
    try:
        return torch.utils.cpp_extension.load(
            name=name,
            sources=[source],
            # NDEBUG as torch itself is built: RecordFunction has debug-only members.
            extra_cflags=["-O2", "-DNDEBUG", *defines],
            verbose=verbose,
        )
    finally:
        os.environ["PATH"] = path


def _cached(name):
    """Whether torch's extension cache holds a built module `name` (a guess: torch rebuilds
    it anyway when the source changed)."""
    import torch.utils.cpp_extension

    try:
        where = torch.utils.cpp_extension._get_build_directory(name, verbose=False)
    except Exception:
        return True  # unknown: say nothing
    return os.path.exists(os.path.join(where, f"{name}.so"))


class Bridge:
    """What the observer asks of Python, bound to one Recorder."""

    def __init__(self, rec, ext):
        self.rec = rec
        self.ext = ext
        self.standin = bool(rec.device.standin)
        self.overridden = []  # gpu_trace registries whose fire_callbacks is the observer's
        self.c_entry = C_ENTRY
        # halt_on_error inside an operator: the observer runs in ATen's C++, which cannot carry
        # a Python exception out, so it raises this class (see _halt_class) in the program's
        # thread as an asynchronous exception once it has left Python: the program stops at
        # its next function call or loop iteration, its exit status kept.
        self.pending = None

    def install(self):
        # halt_on_error in a thread with no Python frame (autograd's) stops this one instead.
        self.halt_thread = _get_ident()
        self.rec.hold = self.ext.hold
        self.rec.quiet = self.ext.quiet
        self.rec.stop = self.ext.stop
        self.ext.install(self)
        self.rec.native_c_entry = self.ext.c_entry_in_use()
        try:
            if not self.standin:
                self._native_memory_hooks()
        except BaseException:
            self.uninstall()
            raise

    def uninstall(self):
        if self.rec.fast_memory_hooks:
            self.ext.fast_memory_hooks(False, False)
            self.rec.fast_memory_hooks = False
        for registry in self.overridden:
            del registry.fire_callbacks
        self.overridden = []
        # (operators recorded in C++, operators handed to Python): for tests and benchmarks.
        self.rec.native_counts = tuple(self.ext.uninstall())
        self.rec.hold = self.rec.quiet = self.rec.stop = None

    def _native_memory_hooks(self):
        """PyTorch calls `<registry>.fire_callbacks(ptr)` of torch.cuda._gpu_trace for every
        block allocated and freed (twice per operator that makes a tensor). Where streamsan's
        are the only callbacks, the registry's `fire_callbacks` becomes the observer's own, so
        that the hook runs no Python code. Other listeners (CSAN) keep the Python way.

        Beyond that, PyTorch reaches `fire_callbacks` through Python's import machinery (2 to
        4 us per event on the GPU machines, docs/performance.md); where the observer can
        (`fast_memory_hooks`, x86-64), the allocator calls the hooks without it
        (rec.fast_memory_hooks says whether it does)."""
        from torch.cuda import _gpu_trace

        from . import _hooks

        overrides = []
        for registry_name, registration, fn in (
            ("MemoryAllocationCallbacks", "register_callback_for_memory_allocation", self.ext.on_alloc),
            ("MemoryDeallocationCallbacks", "register_callback_for_memory_deallocation", self.ext.on_free),
        ):
            registry = getattr(_gpu_trace, registry_name, None)
            ours = _hooks.routes.get(registration)
            listeners = getattr(registry, "callback_list", None)
            only_ours = registry is not None and ours is not None and listeners == [ours]
            overrides.append((registry, fn) if only_ours else None)
        engaged = [o is not None for o in overrides]
        # Before the overrides: were the swap's self-test to reach one of torch's own slots, its
        # event would find no recording hook yet.
        if any(engaged) and os.environ.get("STREAMSAN_TORCH_FAST_HOOKS", "1") != "0":
            self.rec.fast_memory_hooks = bool(self.ext.fast_memory_hooks(*engaged))
        for registry, fn in filter(None, overrides):
            registry.fire_callbacks = fn
            self.overridden.append(registry)

    # -- asked once per operator overload --------------------------------------------------

    def op(self, name, overload):
        """The OpFacts of operator `name` ("aten::add") overload `overload` ("Tensor", "" for
        the default), or None for one the dispatch mode would not record."""
        import torch

        ns, _, base = name.partition("::")
        try:
            packet = getattr(getattr(torch.ops, ns), base)
            func = getattr(packet, overload or "default")
        except (AttributeError, RuntimeError):
            return None
        if not isinstance(func, torch._ops.OpOverload):
            return None
        return facts_of(func)

    def handle(self, device, stream_id):
        """The CUDA handle of the c10 stream `stream_id` of `device`."""
        import torch

        return torch.cuda.Stream(stream_id=stream_id, device_index=device, device_type=1).cuda_stream

    # -- the per-operator slow paths -------------------------------------------------------

    def miss(self, t, p):
        """(buffer, offset) of tensor `t` (first element at `p`) whose storage the observer did
        not find: declared now, as `_ops._storage_buf` does; None when left unchecked."""
        buf, off = _ops._storage_buf(self.rec, t, p)
        if buf is None:
            self.rec.unchecked += 1
            return None
        return buf, off

    def finalize(self, t, base, buf):
        """The stand-in's storage `t` was declared as `buf`: its death frees it."""
        import weakref

        from ._recorder import _standin_storage_died

        weakref.finalize(t.untyped_storage(), _standin_storage_died, weakref.ref(self.rec), base, buf)

    def strided(self, t, buf, off, label, out):
        _ops._strided(self.rec, t, buf, off, label, out)

    def flush(self):
        """Writes the hook records held while the operator ran (after its own record)."""
        queue = self.rec.queues.pop(_get_ident(), None)
        if queue:
            self.rec.flush(queue)

    def after(self, facts, args, kwargs, out):
        """An operator the observer leaves to Python, after it ran: what SanitizerMode does
        once `func` returned."""
        rec = self.rec
        if not rec.active:
            return
        queue = rec.queues.pop(_get_ident(), None) or []
        site = [_get_ident(), rec.threads.current(), None]
        try:
            after_operator(rec, facts, args, kwargs, out, queue, site)
        except SystemExit as e:  # halted: after_operator marked the recorder (and stopped it)
            self.pending = _halt_class(e)

    def internal_error(self, where, exc):
        if isinstance(exc, SystemExit):
            self.rec.halted()
            self.pending = _halt_class(exc)
            return
        self.rec.internal_error(where, exc)


def _halt_class(exc):
    """A class of `exc`'s type whose instances carry its exit status: what an asynchronous
    exception can raise (it is raised by class, with no arguments)."""
    code = exc.code
    base = type(exc)

    def init(self):
        base.__init__(self, code)

    return type(base.__name__, (base,), {"__init__": init})
