"""Fixtures: a recording session on the CPU stand-in (no GPU needed), written to a FakeSession
(exact records) or to the real engine (verdicts).

The stand-in (`streamsan.torch._device.CpuStandIn`) lets CPU tensors play CUDA tensors on fake
streams (`dev.use_stream(handle)`); tests call the Recorder's hook handlers (`rec.on_...`) in
place of PyTorch's CUDA hooks, which a CPU machine never fires.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402

import streamsan.torch as st  # noqa: E402
from fake_session import FakeSession  # noqa: E402
from streamsan.torch._device import CpuStandIn  # noqa: E402


def _native():
    try:
        from streamsan import _native

        return _native
    except ImportError:
        return None


class Env:
    """One enabled session: `fake` (or the real `session`), the stand-in `dev`, the
    Recorder `rec`, the handle `h`."""

    def __init__(self, session, dev, handle):
        self.session = session
        self.fake = session if isinstance(session, FakeSession) else None
        self.dev = dev
        self.h = handle
        self.rec = handle.recorder

    def stream(self, handle):
        return self.dev.use_stream(handle)


@pytest.fixture
def env():
    """Recording on the CPU stand-in into a FakeSession."""
    dev = CpuStandIn()
    fake = FakeSession()
    handle = st.enable(_session=fake, _device=dev)
    try:
        yield Env(fake, dev, handle)
    finally:
        st.disable()


@pytest.fixture
def real(tmp_path):
    """Recording on the CPU stand-in into the real engine (skipped without the extension)."""
    native = _native()
    if native is None:
        pytest.skip("streamsan._native is not built (bash python/dev-build.sh)")
    dev = CpuStandIn()
    # As enable() makes it: checked on the session's thread (every query waits for it).
    session = native.Session(report=os.path.join(tmp_path, "report.txt"), api="torch", checker_thread=True)
    handle = st.enable(_session=session, _device=dev)
    try:
        yield Env(session, dev, handle)
    finally:
        st.disable()


@pytest.fixture
def native():
    n = _native()
    if n is None:
        pytest.skip("streamsan._native is not built (bash python/dev-build.sh)")
    return n


def _native_recorder_in_use():
    """Which recorder enable() takes here: the suite runs with both (python/test.sh sets
    STREAMSAN_TORCH_NATIVE=0, then 1); the same records are expected, except where a test is
    about what only the dispatch mode does."""
    from streamsan.torch import _api

    try:
        return _api._native_recorder(_api.native_requested()) is not None
    except RuntimeError:  # required but not buildable: the tests that need it say why
        return True


NATIVE = _native_recorder_in_use()


def dispatch_mode_only(reason):
    """Skips a test under the native recorder, saying why it does not apply there."""
    return pytest.mark.skipif(NATIVE, reason=f"dispatch mode only: {reason}")


def line_of(marker, path):
    """The 1-based line of the first line of `path` containing `marker`."""
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if marker in line:
                return i
    raise AssertionError(f"{marker!r} not in {path}")


__all__ = ["Env", "NATIVE", "dispatch_mode_only", "line_of", "torch"]
