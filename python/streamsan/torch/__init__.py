"""streamsan for PyTorch: records a PyTorch program's CUDA work and checks it for stream races.

    import streamsan.torch
    with streamsan.torch.sanitize() as s:      # options: trace=, report=, format=, ...
        run_step()
    assert s.races == 0, s.report_text()

or `python -m streamsan.torch script.py args...` (see `python -m streamsan.torch --help`), or
`enable(**options)` / `disable()` around any stretch of code. Records are trace format v1,
minor 1 (docs/trace-format.md), checked as they are made by streamsan's engine
(`streamsan._native.Session`); docs/pytorch.md says what is recorded and what is not.

Modules, one job each:
- `_api`: enable / disable / sanitize, one active session per process;
- `_observer`: the native recorder (the default), which sees every ATen operator through
  RecordFunction;
- `_mode`: the TorchDispatchMode that sees every ATen operator where the native recorder is not
  used;
- `_schema`: which arguments an operator reads and writes, worked out once per OpOverload;
- `_ops`: operators to records (launches, copies, host accesses);
- `_ranges`: the exact bytes of a strided view, as contiguous runs;
- `_recorder`: ids and state of one session (buffers, events, graphs), the CUDA hook handlers;
- `_hooks`: PyTorch's CUDA trace hooks, registered once, routed to the active recorder;
- `_patches`: wrapped Python methods (queries, CUDA graphs, printing, threads);
- `_streams`: CUDA stream handles to declared trace stream ids;
- `_device`: what counts as a device tensor and the current stream (CUDA, or the CPU stand-in
  that tests use);
- `_frames`: the user's source line and host thread numbers;
- `__main__`: the command line.
"""

from ._api import Sanitized, disable, enable, enabled, sanitize

__all__ = ["Sanitized", "disable", "enable", "enabled", "sanitize"]
