"""`streamsan ...` (the console script a pip install makes) and `python -m streamsan ...`: the
`streamsan` command line (`streamsan check trace.jsonl`, `--html`, `convert`, `stats`), the
same program as the Rust binary, compiled into the native extension. Checking a trace recorded
by `python -m streamsan.torch --trace` needs nothing else."""

import signal
import sys


def main(argv=None):
    from . import _native

    args = sys.argv[1:] if argv is None else list(argv)
    # Ctrl-C stops a long check at once, as it would stop the binary.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout.flush()
    return _native.cli(["streamsan", *args])


if __name__ == "__main__":
    sys.exit(main())
