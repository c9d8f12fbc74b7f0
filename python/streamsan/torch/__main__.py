"""`python -m streamsan.torch [options] script.py args...`: run a PyTorch program, checked.

The script runs as `python script.py args...` would (sys.argv, sys.path[0] and __main__ as
Python sets them; `-m module` as `python -m module`), with checking on from its first line.
Exit status: 2 for bad options (a suppressions or baseline file with an error, a trace or
report that cannot be created, a script that does not exist), before the script runs; the
script's own status when it failed; else EXITCODE (default 66, as ThreadSanitizer) when a race
was found; else 0. With --halt-on-error the first race stops the
program with EXITCODE.
"""

import argparse
import os
import runpy
import sys

DESCRIPTION = """\
Run a PyTorch program with streamsan checking its CUDA streams: every ATen operator on CUDA
tensors, every caching-allocator block, stream, event and synchronization is recorded and
checked as it happens. Races are reported as they are found (text) or at the end (json).
"""

EPILOG = """\
exit status:
  2 when an option is bad (the error says which file and line), before the script runs;
  the script's own status when it exits non-zero or raises (1 for an uncaught exception);
  otherwise EXITCODE (default 66) when at least one race was found; otherwise 0.
  With --halt-on-error the program stops at the first race, with status EXITCODE.

examples:
  python -m streamsan.torch train.py --epochs 1
  python -m streamsan.torch --trace run.jsonl --report races.txt train.py
  python -m streamsan.torch --format json --report report.json -m mypkg.train
  streamsan check run.jsonl        (check a saved trace again, anywhere)
"""


def parser():
    p = argparse.ArgumentParser(
        prog="python -m streamsan.torch",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--trace", metavar="PATH", help="also write every record to a JSON Lines trace")
    p.add_argument("--report", metavar="PATH", help="write the report there (default: standard error)")
    p.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: one block per race as found, and a SUMMARY line; json: one report at the end",
    )
    p.add_argument(
        "--halt-on-error",
        action="store_true",
        help="stop the program at the first race (report printed, trace closed)",
    )
    p.add_argument(
        "--exitcode",
        type=int,
        default=66,
        metavar="N",
        help="exit status after a race (default 66)",
    )
    p.add_argument(
        "--suppressions",
        action="append",
        default=[],
        metavar="PATH",
        help="a suppressions file (docs/suppressions.md); may be given more than once",
    )
    p.add_argument("--baseline", metavar="PATH", help="a baseline JSON report: its races are not reported")
    p.add_argument(
        "--native",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="--native: record with the native recorder (no Python dispatch mode; built with a "
        "C++ compiler on first use), an error when it cannot be built; --no-native: with the "
        "Python dispatch mode, several times the cost per operator. Default: the native "
        "recorder where it can be built, else the dispatch mode with a note (also "
        "STREAMSAN_TORCH_NATIVE=1, 0 or auto); see docs/pytorch.md",
    )
    p.add_argument(
        "-m",
        dest="module",
        action="store_true",
        help="run TARGET as a module (as python -m TARGET)",
    )
    p.add_argument("target", metavar="script.py | module", help="the program to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def _exit_status(code):
    """The status `sys.exit(code)` gives, as Python computes it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if code >= 0 else code & 0xFF
    print(code, file=sys.stderr)
    return 1


def main(argv=None):
    opts = parser().parse_args(argv)
    from . import _api

    options = dict(
        trace=opts.trace,
        report=opts.report,
        format=opts.format,
        halt_on_error=opts.halt_on_error,
        exitcode=opts.exitcode,
        suppressions=list(opts.suppressions),
        baseline=opts.baseline,
        native=opts.native,
    )
    if not opts.module and not os.path.isfile(opts.target):
        # As python does for a script it cannot open (status 2), before checking starts.
        print(f"python -m streamsan.torch: error: cannot open {opts.target!r}: no such file", file=sys.stderr)
        return 2
    if opts.module:
        sys.argv = [opts.target, *opts.args]
        sys.path.insert(0, os.getcwd())
    else:
        script = opts.target
        sys.argv = [script, *opts.args]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
    status = 0
    halted = False
    try:
        _api.enable(**options)
    except (ValueError, OSError, RuntimeError) as e:
        # Bad options (a suppressions file with an error names its file and line; a trace or
        # report that cannot be created): nothing ran.
        print(f"python -m streamsan.torch: error: {e}", file=sys.stderr)
        return 2
    try:
        if opts.module:
            runpy.run_module(opts.target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(opts.target, run_name="__main__")
    except SystemExit as e:
        if _is_halt(e):
            halted = True
            status = opts.exitcode
        else:
            status = _exit_status(e.code)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        status = 1
    finally:
        sys.stdout.flush()
        races = _api.disable()
    if halted or status:
        return status
    return opts.exitcode if races else 0


def _is_halt(e):
    try:
        from .._native import Halt
    except ImportError:
        return False
    return isinstance(e, Halt)


if __name__ == "__main__":
    sys.exit(main())
