"""Turning recording on and off: enable(), disable(), sanitize().

Why one active session per process: PyTorch's CUDA hooks are process-wide and cannot be
unregistered, and a program has one caching allocator, so two recorders would each see half of
it. `enable()` creates the Session (streamsan._native), the Recorder and the dispatch mode, and
installs the wrappers; `disable()` undoes all of it and finishes the session.
"""

import atexit
import os
import sys
import threading

from . import _hooks, _patches
from ._mode import SanitizerMode
from ._recorder import Recorder

# Test hook: with STREAMSAN_TORCH_FAKE_DEVICE=cpu, CPU tensors count as device tensors on fake
# streams (see _device.CpuStandIn). For this package's own tests only.
FAKE_DEVICE_ENV = "STREAMSAN_TORCH_FAKE_DEVICE"

_state = None  # the enabled session's (Sanitized, mode, patches, enabling thread)
_atexit_registered = False


class Sanitized:
    """The handle of a recording session: its verdict so far, and its reports."""

    def __init__(self, session, recorder):
        self.session = session
        self.recorder = recorder

    @property
    def races(self):
        """Folded races so far (after suppressions and baseline)."""
        return self.session.races()

    @property
    def occurrences(self):
        return self.session.occurrences()

    @property
    def warnings(self):
        return self.session.warnings()

    @property
    def records(self):
        return self.session.records()

    @property
    def hulls(self):
        """Tensors recorded as the hull of their bytes (conservative)."""
        return self.recorder.hulls

    def report_text(self):
        return self.session.report_text()

    def report_json(self):
        return self.session.report_json()

    def __repr__(self):
        return f"<streamsan.torch session: {self.races} race(s)>"


def _default_device():
    from ._device import Cuda, CpuStandIn

    fake = os.environ.get(FAKE_DEVICE_ENV, "")
    if fake == "cpu":
        return CpuStandIn()
    if fake:
        raise ValueError(f"{FAKE_DEVICE_ENV}={fake!r}: the only stand-in is 'cpu'")
    return Cuda()


def _producer():
    import torch

    try:
        from importlib.metadata import version

        mine = version("streamsan")
    except Exception:
        mine = "dev"
    return f"streamsan.torch {mine} (torch {torch.__version__})"


# STREAMSAN_TORCH_NATIVE=1: the native recorder, where enable() is not told otherwise.
NATIVE_ENV = "STREAMSAN_TORCH_NATIVE"


def enable(_session=None, _device=None, native=None, **options):
    """Starts checking: every CUDA operator, allocation, stream, event and synchronization of
    this process from now on is recorded and checked. `options` are the keyword arguments of
    `streamsan._native.Session`: trace, report, format, halt_on_error, exitcode, suppressions,
    baseline. Returns the session's handle (`Sanitized`).

    `native=True` (default: the environment variable STREAMSAN_TORCH_NATIVE=1) records
    operators with the native recorder (_observer.py: built with a C++
    compiler on first use, then cached) instead of a Python dispatch mode: the same records,
    at a fraction of the cost per operator. It raises RuntimeError when it cannot be built.

    `_session` and `_device` are test hooks: a Session-like object to write to, and a device
    model (`_device.Cuda`, `_device.CpuStandIn`)."""
    global _state, _atexit_registered
    if _state is not None:
        raise RuntimeError("streamsan.torch is already enabled (disable() it first)")
    import torch

    device = _device if _device is not None else _default_device()
    if native is None:
        native = os.environ.get(NATIVE_ENV, "") not in ("", "0")
    ext = None
    if native:
        from . import _observer

        try:
            ext = _observer.build()
        except Exception as e:
            raise RuntimeError(f"the native recorder could not be built ({e}); run without native") from e
    if _session is None:
        from .. import _native

        options.setdefault("api", "torch")
        options.setdefault("producer", _producer())
        _session = _native.Session(**options)
    rec = Recorder(_session, device)
    handle = Sanitized(_session, rec)
    if not device.standin:
        _hooks.register()
    patches = _patches.Patches()
    if ext is not None:
        from ._observer import Bridge

        mode = Bridge(rec, ext)
    else:
        mode = SanitizerMode(rec)
    try:
        _patches.install_queries(patches, torch.cuda.Event, torch.cuda.Stream)
        _patches.install_graphs(patches, torch.cuda.CUDAGraph)
        _patches.install_print(patches, torch._tensor_str)
        if ext is not None:
            mode.install()  # every thread: RecordFunction's callbacks are global
        else:
            _patches.install_threads(patches, SanitizerMode)
            mode.__enter__()
    except BaseException:
        patches.restore()
        raise
    _hooks.current = rec
    _state = (handle, mode, patches, threading.get_ident())
    if not _atexit_registered:
        atexit.register(_at_exit)
        _atexit_registered = True
    return handle


def disable():
    """Stops checking and finishes the session (the closing summary, or the JSON report, goes
    to the report sink); returns the number of folded races. Call it on the thread that called
    enable(). Does nothing (returns 0) when checking is off."""
    global _state
    if _state is None:
        return 0
    handle, mode, patches, _thread = _state
    _state = None
    rec = handle.recorder
    halted = not rec.active
    rec.active = False
    if _hooks.current is rec:
        _hooks.current = None
    patches.restore()
    try:
        if isinstance(mode, SanitizerMode):
            mode.__exit__(None, None, None)
        else:
            mode.uninstall()
        if not halted:
            try:
                rec.close()
            except ValueError:  # the session already finished (halted where nothing saw it)
                pass
    finally:
        races = handle.session.finish()
    if rec.unchecked:
        print(
            f"streamsan.torch: {rec.unchecked} access(es) or operator(s) were not checked "
            "(tensors without one strided storage such as sparse or nested ones, the bodies of "
            "higher-order operators such as torch.cond, memory a CUDA graph's pool handed out "
            "across several captured buffers; see docs/pytorch.md, Limitations)",
            file=sys.stderr,
        )
    if rec.internal_errors:
        where, first = rec.internal_errors[0]
        print(
            f"streamsan.torch: {len(rec.internal_errors)} internal error(s) while recording "
            f"(first, in {where}: {first}); what they concern was not checked, so the verdict "
            "may miss races",
            file=sys.stderr,
        )
    return races


def enabled():
    """The handle of the active session, or None."""
    return None if _state is None else _state[0]


def _at_exit():
    # A program that enabled and never disabled still gets its closing summary.
    if _state is not None and _state[3] == threading.get_ident():
        disable()


class sanitize:
    """`with streamsan.torch.sanitize(**options) as s:` checks the block; `s.races`,
    `s.report_text()`, `s.report_json()` stay usable after it."""

    def __init__(self, **options):
        self._options = options
        self._handle = None

    def __enter__(self):
        self._handle = enable(**self._options)
        return self._handle

    def __exit__(self, *exc):
        if enabled() is self._handle:
            disable()
        return False
