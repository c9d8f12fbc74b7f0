"""Which tensors are device tensors, and what the current stream is: CUDA, or a CPU stand-in.

Why: the recorder must be testable where there is no GPU (CI). Everything it asks about the
device goes through one of these objects, so tests (and the CLI under the test hook
STREAMSAN_TORCH_FAKE_DEVICE=cpu) can let CPU tensors play device tensors on fake streams, and
call the hook handlers themselves in place of PyTorch's CUDA hooks.

`Cuda` is the real thing. `CpuStandIn` is a test hook only: CPU tensors count as device
tensors of device 0, except those marked as host memory (`mark_host`, and the outputs of
copies to "cpu") and those the recorder knows as pinned; the current stream is whatever
`stream(handle)` set (0, the legacy default stream, at first); no CUDA hook fires.
"""

import contextlib
import operator
import weakref

import torch

_RECORD_STREAM = torch.ops.aten.record_stream.default


class Cuda:
    """CUDA tensors, CUDA streams, PyTorch's CUDA hooks."""

    standin = False
    # Storages need no finalizers: the caching allocator's deallocation hook reports frees.
    finalize_device_storages = False

    def __init__(self):
        self.is_device = operator.attrgetter("is_cuda")
        self.device_index = torch.Tensor.get_device
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is None:  # older torch: through the Stream object

            def raw(device):
                return torch.cuda.current_stream(device).cuda_stream

        self.current_stream = raw
        self.current_device = torch._C._cuda_getDevice
        self._handles = {}

    def bind(self, recorder):
        pass

    def stream_handle(self, stream):
        """(CUDA handle, device index) of a torch.Stream / torch.cuda.Stream argument."""
        key = (stream.stream_id, stream.device_index)
        h = self._handles.get(key)
        if h is None:
            s = torch.cuda.Stream(
                stream_id=stream.stream_id,
                device_index=stream.device_index,
                device_type=stream.device_type,
            )
            h = self._handles[key] = (s.cuda_stream, stream.device_index)
        return h

    def stream_flags(self, handle):
        from ._streams import driver_flags

        return driver_flags(handle)

    def is_pinned(self, t):
        return t.is_pinned()

    # Operators not to run (none: every operator runs).
    skip = frozenset()


class CpuStandIn:
    """Test hook: CPU tensors play CUDA tensors (see the module doc)."""

    standin = True
    # CPU storages have no deallocation hook: a finalizer on the storage frees its buffer.
    finalize_device_storages = True

    def __init__(self):
        self.stream = 0
        self.flags = {}  # handle -> "blocking", for tests of blocking streams
        self._host = set()  # storage addresses marked as (pageable) host memory
        self._recorder = None

    def bind(self, recorder):
        self._recorder = recorder

    def is_device(self, t):
        if t.device.type != "cpu":
            return False
        if t.layout is not torch.strided or t.is_nested:
            return True  # no one storage to look at (sparse, nested): a device tensor
        base = t.untyped_storage().data_ptr()
        if base in self._host:
            return False
        r = self._recorder
        return r is None or not r.pinned_base(t.data_ptr())

    def device_index(self, t):
        return 0

    def current_stream(self, device):
        return self.stream

    def current_device(self):
        return 0

    def stream_handle(self, stream):
        return stream.stream_id, max(stream.device_index, 0)

    def stream_flags(self, handle):
        return self.flags.get(handle, "non_blocking")

    def is_pinned(self, t):
        return False

    # record_stream has no CPU kernel: recorded, not run.
    skip = frozenset([_RECORD_STREAM])

    def mark_host(self, t):
        """Makes `t`'s storage ordinary (pageable) host memory for the stand-in, until it dies."""
        storage = t.untyped_storage()
        base = storage.data_ptr()
        if base and base not in self._host:
            self._host.add(base)
            weakref.finalize(storage, self._host.discard, base)

    @contextlib.contextmanager
    def use_stream(self, handle):
        old, self.stream = self.stream, handle
        try:
            yield
        finally:
            self.stream = old
