"""Turning recording on and off: enable(), disable(), sanitize().

Why one active session per process: PyTorch's CUDA hooks are process-wide and cannot be
unregistered, and a program has one caching allocator, so two recorders would each see half of
it. `enable()` creates the Session (streamsan._native), the Recorder and the native recorder
(or the dispatch mode), and installs the wrappers; `disable()` undoes all of it and finishes
the session.
"""

import atexit
import os
import sys
import threading

from . import _hooks, _patches
from ._mode import SanitizerMode, register_higher_order_operators
from ._recorder import Recorder

# Test hook: with STREAMSAN_TORCH_FAKE_DEVICE=cpu, CPU tensors count as device tensors on fake
# streams (see _device.CpuStandIn). For this package's own tests only.
FAKE_DEVICE_ENV = "STREAMSAN_TORCH_FAKE_DEVICE"

_state = None  # the enabled session's (Sanitized, mode, patches, enabling thread, process)
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


# STREAMSAN_TORCH_NATIVE, where enable() is not told otherwise: 1 the native recorder (an
# error when it cannot be built), 0 the dispatch mode, unset or "auto" the native recorder
# where it can be built and the dispatch mode, with a note, where it cannot.
NATIVE_ENV = "STREAMSAN_TORCH_NATIVE"
_fallback_said = False


def native_requested():
    """What STREAMSAN_TORCH_NATIVE asks for: True, False, or None for "where it can be
    built". A value other than 0, 1, auto or empty is a ValueError naming it."""
    value = os.environ.get(NATIVE_ENV, "").strip().lower()
    if value in ("", "auto"):
        return None
    if value in ("1", "on", "yes", "true"):
        return True
    if value in ("0", "off", "no", "false"):
        return False
    raise ValueError(f"{NATIVE_ENV}={value!r}: expected 1, 0 or auto")


def _native_recorder(native):
    """The built observer module for `native` (True, False, None for where it can be built),
    or None for the dispatch mode."""
    global _fallback_said
    if native is False:
        return None
    from . import _observer

    try:
        return _observer.build()
    except Exception as e:
        if native:
            raise RuntimeError(f"the native recorder could not be built ({e}); run without native") from e
        if not _fallback_said:
            _fallback_said = True
            print(
                f"streamsan.torch: note: the native recorder could not be built ({_first_line(e)}); "
                f"recording with the Python dispatch mode instead, which costs about 30 us more "
                f"per operator (docs/pytorch.md, \"The native recorder\"; {NATIVE_ENV}=0 "
                "silences this)",
                file=sys.stderr,
            )
        return None


def _first_line(e):
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def enable(_session=None, _device=None, native=None, **options):
    """Starts checking: every CUDA operator, allocation, stream, event and synchronization of
    this process from now on is recorded and checked. `options` are the keyword arguments of
    `streamsan._native.Session`: trace, report, format, halt_on_error, exitcode, suppressions,
    baseline. Returns the session's handle (`Sanitized`).

    Operators are recorded by the native recorder (_observer.py: built with a C++ compiler on
    first use, then cached) where it can be built, else by a Python dispatch mode, with a note
    on standard error: the same records, the dispatch mode at several times the cost per
    operator. `native=True` requires the native recorder (RuntimeError when it cannot be
    built), `native=False` takes the dispatch mode; the default, None, follows the environment
    variable STREAMSAN_TORCH_NATIVE (1, 0, or unset for where it can be built).

    `_session` and `_device` are test hooks: a Session-like object to write to, and a device
    model (`_device.Cuda`, `_device.CpuStandIn`)."""
    global _state, _atexit_registered
    if _state is not None:
        raise RuntimeError("streamsan.torch is already enabled (disable() it first)")
    import torch

    device = _device if _device is not None else _default_device()
    if native is None:
        native = native_requested()
    ext = _native_recorder(native)
    if _session is None:
        from .. import _native

        options.setdefault("api", "torch")
        options.setdefault("producer", _producer())
        # The engine off the program's thread where that loses nothing (no trace, no halt).
        options.setdefault("checker_thread", True)
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
        register_higher_order_operators(SanitizerMode)
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
    _state = (handle, mode, patches, threading.get_ident(), os.getpid())
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
    handle, mode, patches, _thread, _pid = _state
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
    _take_late_errors(handle.session, rec)
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


def _take_late_errors(session, rec):
    """Records the checker thread refused (a recorder bug, as a ValueError of a call would be)
    become internal errors."""
    late = getattr(session, "late_errors", None)
    if late is None:
        return
    count, messages = late()
    for text in messages:
        rec.internal_error("the checker thread", ValueError(text))
    rest = ("the checker thread", ValueError("streamsan: more records not taken"))
    rec.internal_errors.extend([rest] * (count - len(messages)))


def enabled():
    """The handle of the active session, or None."""
    return None if _state is None else _state[0]


def _at_exit():
    # A program that enabled and never disabled still gets its closing summary.
    # Not in a forked child (its thread may have the same id): the report is the parent's.
    if _state is not None and _state[3] == threading.get_ident() and _state[4] == os.getpid():
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
