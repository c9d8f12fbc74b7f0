"""PyTorch's CUDA trace hooks (torch.cuda._gpu_trace), routed to the recording session.

Why a module-level router: callbacks registered with torch.cuda._gpu_trace cannot be
unregistered, so they are registered once per process and each looks up `current`, the active
Recorder, or None when recording is off (then a hook costs one global lookup). The same hooks
drive PyTorch's CUDA Sanitizer (torch/cuda/_sanitizer.py), which activates them with
torch._C._activate_gpu_trace().

A hook handler that fails is reported (Recorder.internal_error) and swallowed: hooks run inside
PyTorch's C++, some from destructors, where an exception cannot go anywhere useful.
"""

current = None  # the active Recorder

# (registration function in torch.cuda._gpu_trace, Recorder method). Each is used only where
# the running torch has it (all of them exist from torch 2.0 on).
HOOKS = (
    ("register_callback_for_event_creation", "on_event_creation"),
    ("register_callback_for_event_deletion", "on_event_deletion"),
    ("register_callback_for_event_record", "on_event_record"),
    ("register_callback_for_event_wait", "on_event_wait"),
    ("register_callback_for_memory_allocation", "on_memory_allocation"),
    ("register_callback_for_memory_deallocation", "on_memory_deallocation"),
    ("register_callback_for_stream_creation", "on_stream_creation"),
    ("register_callback_for_device_synchronization", "on_device_synchronization"),
    ("register_callback_for_stream_synchronization", "on_stream_synchronization"),
    ("register_callback_for_event_synchronization", "on_event_synchronization"),
)

_registered = False
# Registration function -> the callback registered with it (the native recorder replaces the
# memory ones while it records, where they are the only callbacks).
routes = {}


def _route(method):
    def hook(*args):
        rec = current
        if rec is None:
            return
        try:
            getattr(rec, method)(*args)
        except SystemExit:  # the session halted (halt_on_error)
            rec.halted()
            raise
        except Exception as e:
            rec.internal_error(method, e)

    hook.__name__ = f"streamsan_{method}"
    return hook


def register():
    """Registers the callbacks (once per process) and turns PyTorch's GPU tracing on."""
    global _registered
    if _registered:
        return
    import torch
    from torch.cuda import _gpu_trace

    for reg, method in HOOKS:
        fn = getattr(_gpu_trace, reg, None)
        if fn is not None:
            routes[reg] = _route(method)
            fn(routes[reg])
    torch._C._activate_gpu_trace()
    _registered = True
