"""Where a record comes from: the user's source line (`at`) and a small host thread number.

Reports must name the user's line, never a line inside torch or this package, so `site()` walks
the Python stack outward to the first frame whose file is neither. Whether a file is internal is
decided once per file name and cached, and each (file, line) string is built once: the walk
costs a few dict lookups per frame on the per-operator path.
"""

import os
import sys
import threading

_getframe = sys._getframe
_get_ident = threading.get_ident

# File name -> the string used in `at` for it, or None for files inside torch or streamsan.
_files = {}
# File name -> {line -> "file:line"}.
_sites = {}
_internal_prefixes = ()


def _init_prefixes():
    global _internal_prefixes
    prefixes = []
    import torch

    prefixes.append(os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)
    # The whole streamsan package (this front end and the pytest plugin).
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    prefixes.append(here + os.sep)
    # weakref.finalize runs the finalizers that free pinned storages: the user's line is the
    # one that dropped the last reference, one frame further out.
    import weakref

    prefixes.append(os.path.abspath(weakref.__file__))
    _internal_prefixes = tuple(prefixes)


def _classify(filename):
    """The `at` spelling of `filename`, or None when it is internal. Paths under the working
    directory are written relative to it, so reports and traces do not depend on the checkout's
    location."""
    if not _internal_prefixes:
        _init_prefixes()
    full = filename if filename.startswith("<") else os.path.abspath(filename)
    # "<eval_with_key>.N": the code torch.fx generates for a graph (torch.compile runs it);
    # the user's line is the call of the compiled function, further out.
    if full.startswith(_internal_prefixes) or full.startswith("<eval_with_key>"):
        shown = None
    else:
        shown = filename
        if not filename.startswith("<"):
            cwd = os.getcwd() + os.sep
            shown = full[len(cwd):] if full.startswith(cwd) else full
    _files[filename] = shown
    _sites[filename] = {}
    return shown


def site():
    """"file:line" of the innermost frame outside torch and streamsan (the caller's frame is
    the first looked at); None when every frame is internal."""
    f = _getframe(1)
    files = _files
    while f is not None:
        name = f.f_code.co_filename
        shown = files.get(name, 0)
        if shown == 0:
            shown = _classify(name)
        if shown is not None:
            line = f.f_lineno
            lines = _sites[name]
            s = lines.get(line)
            if s is None:
                s = lines[line] = f"{shown}:{line}"
            return s
        f = f.f_back
    return None


class Threads:
    """Host thread numbers for records: 0 for the thread that enabled recording, then 1, 2, ...
    in the order threads are first seen (`threading.get_ident` values are large and reused)."""

    __slots__ = ("ids",)

    def __init__(self):
        self.ids = {_get_ident(): 0}

    def number(self, ident):
        n = self.ids.get(ident)
        if n is None:
            n = self.ids[ident] = len(self.ids)
        return n

    def current(self):
        return self.number(_get_ident())
