"""streamsan: a CUDA stream sanitizer.

The engine (Rust) is `streamsan._native.Session`: one method per trace record, races reported
as they are found. `streamsan.torch` records PyTorch programs into it; the `streamsan` command
line checks recorded traces. `Session` and `Halt` are importable from here; the native
extension is loaded on first use, so `import streamsan` works without it.
"""


def __getattr__(name):
    if name in ("Session", "Halt"):
        from . import _native

        return getattr(_native, name)
    raise AttributeError(f"module 'streamsan' has no attribute {name!r}")
