"""CUDA stream handles to trace stream ids, each stream declared once, on first sight.

Why: records name streams by id, and every id but the legacy default stream of device 0 must be
declared (with its kind and flags) before use. A stream's id is its CUDA handle, which is unique
across devices, except the null handle: 0 is the legacy default stream of whichever device is
current, so device d > 0 gets an id of its own. PyTorch's pool streams are created with
cudaStreamNonBlocking (c10/cuda/CUDAStream.cpp); streams from elsewhere (ExternalStream) have
their flags asked of the driver (cuStreamGetFlags) when libcuda can be loaded.
"""

import ctypes

# Ids for the legacy default stream of device d > 0, and for cudaStreamPerThread of (device,
# thread): far above any host address, so no real handle collides with them.
LEGACY_BASE = 1 << 62
PER_THREAD_BASE = (1 << 62) + (1 << 40)
# Special handles of the runtime API (driver_types.h).
CUDA_STREAM_LEGACY = 1
CUDA_STREAM_PER_THREAD = 2

_libcuda = None


def driver_flags(handle):
    """"non_blocking" or "blocking" as cuStreamGetFlags says, or None when the driver cannot be
    asked (no libcuda, or an error)."""
    global _libcuda
    if _libcuda is None:
        try:
            _libcuda = ctypes.CDLL("libcuda.so.1")
        except OSError:
            _libcuda = False
    if not _libcuda:
        return None
    flags = ctypes.c_uint(0)
    try:
        rc = _libcuda.cuStreamGetFlags(ctypes.c_void_p(handle), ctypes.byref(flags))
    except Exception:
        return None
    if rc != 0:
        return None
    # CU_STREAM_NON_BLOCKING = 0x1
    return "non_blocking" if flags.value & 1 else "blocking"


class Streams:
    """The streams of one recording session. `id()` is on the per-operator path: one set lookup
    for a stream already declared."""

    __slots__ = ("_session", "_flags_of", "_declared", "pool_streams")

    def __init__(self, session, flags_of):
        self._session = session
        self._flags_of = flags_of  # handle -> "blocking" / "non_blocking"
        self._declared = {0}  # the legacy default stream of device 0 needs no declaration
        # Handles the stream-creation hook reported: PyTorch's own, non-blocking.
        self.pool_streams = set()

    def id(self, handle, device, thread, at):
        """The trace id of stream `handle` of `device`, declared first if new."""
        if handle > CUDA_STREAM_PER_THREAD:
            sid = handle
        elif handle == 0 or handle == CUDA_STREAM_LEGACY:
            sid = LEGACY_BASE + device if device else 0
        else:
            sid = PER_THREAD_BASE + (device << 20) + thread
        if sid not in self._declared:
            self._declare(sid, handle, device, thread, at)
        return sid

    def _declare(self, sid, handle, device, thread, at):
        if handle > CUDA_STREAM_PER_THREAD:
            if handle in self.pool_streams:
                flags = "non_blocking"
            else:
                flags = self._flags_of(handle) or "non_blocking"
            self._session.stream(sid, device=device, kind="created", flags=flags, thread=thread, at=at)
        elif handle == CUDA_STREAM_PER_THREAD:
            self._session.stream(
                sid, device=device, kind="per_thread_default", flags="blocking", thread=thread, at=at
            )
        else:
            self._session.stream(
                sid, device=device, kind="legacy_default", flags="blocking", thread=thread, at=at
            )
        self._declared.add(sid)
