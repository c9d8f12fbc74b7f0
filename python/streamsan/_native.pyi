"""The native extension: streamsan's Rust engine behind one class.

Built from `crates/streamsan-python` by maturin as `streamsan._native` (abi3, CPython 3.9+).
Every method appends one record of trace format v1 (minor 1, docs/trace-format.md) in call
order: numbered (the header is line 1), written to the trace file when one is open, checked by
the engine at once. Races are printed to the report sink as they are found (text format) and
folded for the final report. Invalid records (an id used before it was declared, a caching
alloc over a live block, ...) raise `ValueError` naming the record.

Ids are plain integers chosen by the caller: streams by their CUDA handle (0 on device 0 is the
legacy default stream, which need not be declared), events by their handle, buffers and graphs
by any counter. `at` is "file:line" of the user's code; `thread` a small host thread number.

An access is a tuple `(buf, off, len, arg)`: bytes `[off, off+len)` of buffer `buf`, `arg` a
label for reports (e.g. "self: float32[1024]") or None. `off=0, len=-1` means the whole buffer.
"""

from typing import Optional, Sequence, Tuple

Access = Tuple[int, int, int, Optional[str]]

def cli(argv: Sequence[str]) -> int:
    """Runs the `streamsan` command line (the Rust binary's own code) with `argv`, the program
    name first (`["streamsan", "check", "run.jsonl"]`); returns its exit status."""

class Halt(SystemExit):
    """Raised by the method whose record raced when `halt_on_error` is set, after the report
    was printed and the trace closed; its `code` is `exitcode`."""

class LiveBlockOverlap(ValueError):
    """Raised by `alloc` when a caching block is declared over bytes of a block that is still
    live; `args[1]` is that block's buffer id."""

class Session:
    def __init__(
        self,
        trace: Optional[str] = None,  # path of a JSON Lines trace to write, or None
        report: Optional[str] = None,  # path of the report file; None: standard error
        format: str = "text",  # "text": blocks as found + summary; "json": one report at finish()
        halt_on_error: bool = False,
        exitcode: int = 66,  # the status Halt carries
        suppressions: Sequence[str] = (),  # suppression files (docs/suppressions.md)
        baseline: Optional[str] = None,  # a baseline JSON report
        api: str = "torch",  # trace header "api": fix hints in PyTorch terms
        producer: str = "streamsan.torch",
        # Check records on a thread of the session's own: a call queues its record, every query
        # (races(), report_*(), records(), finish()) first checks what is queued. Ignored with a
        # trace or halt_on_error. A caching alloc over a live block still raises at once; other
        # refusals come back from late_errors() (and the session checks within each call from
        # then on). The thread ends before any fork() and starts again in the parent.
        checker_thread: bool = False,
    ) -> None: ...
    @property
    def checker_thread(self) -> bool:
        """Whether records are checked on the session's thread."""
    def late_errors(self) -> Tuple[int, list]:
        """(count, the first messages) of records the checker thread refused since the last
        call."""
    # Declarations.
    def stream(self, id: int, device: int = 0, kind: str = "created", flags: str = "non_blocking",
               name: Optional[str] = None, thread: int = 0, at: Optional[str] = None) -> None: ...
    def event(self, id: int, thread: int = 0, at: Optional[str] = None) -> None: ...
    def event_destroy(self, id: int, thread: int = 0, at: Optional[str] = None) -> None: ...
    # Memory. space: "device" | "pinned" | "managed" | "host"; pool: "driver" | "caching".
    # A caching block needs addr; its stream names the pool's stream (not an enqueue).
    def alloc(self, buf: int, bytes: int, device: int = 0, space: str = "device",
              stream: Optional[int] = None, addr: Optional[int] = None, pool: str = "driver",
              name: Optional[str] = None, thread: int = 0, at: Optional[str] = None) -> None: ...
    def free(self, buf: int, stream: Optional[int] = None, thread: int = 0,
             at: Optional[str] = None) -> None: ...
    def record_stream(self, buf: int, stream: int, thread: int = 0,
                      at: Optional[str] = None) -> None: ...
    # Work. name: the operator ("aten::add.Tensor").
    def launch(self, stream: int, name: str, reads: Sequence[Access], writes: Sequence[Access],
               thread: int = 0, at: Optional[str] = None) -> None: ...
    def memcpy(self, stream: int, src: Access, dst: Access, blocking: bool = False,
               name: Optional[str] = None, thread: int = 0, at: Optional[str] = None) -> None: ...
    def memset(self, stream: int, dst: Access, blocking: bool = False, name: Optional[str] = None,
               thread: int = 0, at: Optional[str] = None) -> None: ...
    def host_access(self, reads: Sequence[Access], writes: Sequence[Access],
                    name: Optional[str] = None, thread: int = 0, at: Optional[str] = None) -> None: ...
    # Ordering.
    def record(self, event: int, stream: int, thread: int = 0, at: Optional[str] = None) -> None: ...
    def wait(self, stream: int, event: int, thread: int = 0, at: Optional[str] = None) -> None: ...
    def event_sync(self, event: int, thread: int = 0, at: Optional[str] = None) -> None: ...
    def event_query(self, event: int, done: bool, thread: int = 0, at: Optional[str] = None) -> None: ...
    def stream_sync(self, stream: int, thread: int = 0, at: Optional[str] = None) -> None: ...
    def stream_query(self, stream: int, done: bool, thread: int = 0, at: Optional[str] = None) -> None: ...
    def device_sync(self, device: int = 0, thread: int = 0, at: Optional[str] = None) -> None: ...
    # CUDA graphs (stream capture).
    def graph_begin(self, graph: int, stream: int, thread: int = 0, at: Optional[str] = None) -> None: ...
    def graph_end(self, graph: int, stream: int, thread: int = 0, at: Optional[str] = None) -> None: ...
    def graph_launch(self, graph: int, stream: int, thread: int = 0, at: Optional[str] = None) -> None: ...
    def graph_destroy(self, graph: int, thread: int = 0, at: Optional[str] = None) -> None: ...
    # Results.
    def races(self) -> int:
        """Folded races so far, after suppressions and baseline."""
    def occurrences(self) -> int:
        """Race occurrences so far (all repeats counted), after suppressions and baseline."""
    def warnings(self) -> int: ...
    def records(self) -> int: ...
    def report_text(self) -> str:
        """The whole report so far as `streamsan check` prints it (blocks, SUMMARY)."""
    def report_json(self) -> str:
        """The report so far in the JSON schema of docs/report-format.md."""
    def finish(self) -> int:
        """Ends the session: closes the trace, writes the closing summary (text) or the JSON
        report (json) to the report sink, returns the number of folded races. Idempotent;
        later records raise ValueError."""
