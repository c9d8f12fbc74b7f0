"""Replay a streamsan trace through PyTorch CSAN's event-handler model, and time it.

What it measures: how many trace records per second CSAN's race-detection model
(`torch.cuda._sanitizer.EventHandler`, the object CSAN calls once per CUDA event in a real
PyTorch program) processes, on the same trace that `streamsan check` reads, so that the two
checkers' throughput can be compared record for record (the performance issue asks for the
ratio). Each repeat times, one after the other on the same records:

  parse   reading the JSON Lines file into dicts (json.loads per line);
  no-op   the record -> handler-call mapping of this script, into a handler that does nothing;
  CSAN    the same mapping into a fresh EventHandler: mapping + CSAN's model;
  check   (with --check BIN) `BIN check TRACE` as a subprocess, end to end (it parses too).

CSAN's own cost is "CSAN" minus "no-op". The parsed records are frozen out of the garbage
collector (gc.freeze) before the replays, so collections do not rescan the benchmark's input.
The mapping is in README.md beside this file; records CSAN has no counterpart for are skipped
and counted. Each launch passes its trace line as CSAN's `operator`, so a race CSAN reports
reads as a (current line, previous line) pair, as in tests/corpus.

    python benches/csan/replay.py TRACE [--repeats N] [--check target/release/streamsan]

Exit status: 0 when CSAN reported no race, 1 when it reported one (like `streamsan check`).
"""

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
import traceback
import types
from collections import Counter

import torch
import torch.cuda._sanitizer as sanitizer
from torch.cuda._sanitizer import EventHandler

NO_OUTPUTS = frozenset()  # only used in CSAN's messages
HOST_SPACES = ("host", "pinned")  # CSAN tracks CUDA tensors only (`value.is_cuda`)
# For --no-stacks: stands in for the `traceback` module inside torch.cuda._sanitizer, so that
# its StackSummary.extract(walk_stack(frame)) runs on no frames.
NO_STACKS = types.SimpleNamespace(walk_stack=lambda frame: (), StackSummary=traceback.StackSummary)


def load(path):
    """The records of a trace as (line number, dict), header checked and left out."""
    with open(path, encoding="utf-8-sig") as f:
        header = json.loads(f.readline())
        if header.get("streamsan_trace") != 1:
            sys.exit(f"{path}: not a streamsan trace v1")
        return [(n, json.loads(l)) for n, l in enumerate(f, 2) if not l.isspace()]


def buf(access):
    """The buffer an access touches. CSAN tracks whole allocations by data pointer, so a view
    (bytes [off, off+len) of a buffer) is the whole buffer."""
    return access if access.__class__ is int else access["buf"]


def replay(records, h):
    """Feed every record to handler `h` in order; return (CSAN's errors, skipped records).

    Kept flat (one call from here into CSAN) because CSAN captures the Python stack on every
    launch and allocation: each extra frame would be charged to CSAN."""
    host = set()  # live host/pinned buffers: not CUDA tensors, invisible to CSAN
    errors, skipped = [], Counter()
    for line, r in records:
        op = r["op"]
        if op == "launch" or op == "host_func":
            reads = {buf(a) for a in r.get("reads", ())}
            writes = {buf(a) for a in r.get("writes", ())}
        elif op == "memcpy":
            reads, writes = {buf(r["src"])}, {buf(r["dst"])}
        elif op == "memset":
            reads, writes = set(), {buf(r["dst"])}
        else:
            if op == "wait":
                h._handle_event_wait(r["event"], r["stream"])
            elif op == "record":
                h._handle_event_record(r["event"], r["stream"])
            elif op == "alloc":
                if r["space"] in HOST_SPACES:
                    host.add(r["buf"])
                    skipped["alloc of host/pinned memory"] += 1
                else:
                    h._handle_memory_allocation(r["buf"])
            elif op == "free":
                if r["buf"] in host:
                    host.discard(r["buf"])
                    skipped["free of host/pinned memory"] += 1
                else:
                    h._handle_memory_deallocation(r["buf"])
            elif op == "event_sync" or (op == "event_query" and r["done"]):
                h._handle_event_synchronization(r["event"])
            elif op == "stream_sync" or (op == "stream_query" and r["done"]):
                h._handle_stream_synchronization(r["stream"])
            elif op == "device_sync":
                h._handle_device_synchronization()  # CSAN has no devices: every stream
            elif op == "stream":
                h._handle_stream_creation(r["id"])
            elif op == "event":
                h._handle_event_creation(r["id"])
            elif op == "event_destroy":
                h._handle_event_deletion(r["id"])
            elif op in ("event_query", "stream_query"):
                skipped[f"{op} not done (orders nothing)"] += 1
            else:  # host_access, record_stream, graph_*: no counterpart in CSAN's model
                skipped[op] += 1
            continue
        # A kernel launch, copy or memset.
        if host:
            touches_host = not reads.isdisjoint(host) or not writes.isdisjoint(host)
            reads, writes = reads - host, writes - host
        # As CSAN's dispatch mode does: read_only = read - written.
        errors += h._handle_kernel_launch(
            r["stream"], reads - writes, writes, NO_OUTPUTS, line, dict.fromkeys(reads | writes, ())
        )
        # A blocking copy to or from host memory is torch's memcpy_and_sync, which tells CSAN
        # about a stream synchronization.
        if op == "memcpy" and host and touches_host and r["blocking"]:
            h._handle_stream_synchronization(r["stream"])
    return errors, skipped


class NoOp:
    """A handler with EventHandler's methods that does nothing: times the mapping alone."""

    def _handle_kernel_launch(self, *args):
        return ()

    def _nothing(self, *args):
        pass

    _handle_event_creation = _handle_event_deletion = _handle_event_record = _nothing
    _handle_event_wait = _handle_memory_allocation = _handle_memory_deallocation = _nothing
    _handle_stream_creation = _handle_device_synchronization = _nothing
    _handle_stream_synchronization = _handle_event_synchronization = _nothing


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--check", metavar="BIN", help="also time `BIN check TRACE` each repeat")
    p.add_argument("--no-stacks", action="store_true",
                   help="also time CSAN with its per-launch/alloc stack capture walking no frames")
    args = p.parse_args()

    # Timed inline, not through a helper: a helper's frame would be on every stack CSAN walks.
    secs = {k: [] for k in ("parse", "no-op", "CSAN", "CSAN, no stacks", "check")}
    for _ in range(args.repeats):
        records = None
        gc.unfreeze()
        gc.disable()  # building a large list of dicts otherwise triggers repeated full scans
        t = time.perf_counter()
        records = load(args.trace)
        secs["parse"].append(time.perf_counter() - t)
        gc.enable()
        gc.collect()
        gc.freeze()
        t = time.perf_counter()
        replay(records, NoOp())
        secs["no-op"].append(time.perf_counter() - t)
        t = time.perf_counter()
        errors, skipped = replay(records, EventHandler())
        secs["CSAN"].append(time.perf_counter() - t)
        if args.no_stacks:
            sanitizer.traceback = NO_STACKS
            t = time.perf_counter()
            replay(records, EventHandler())
            secs["CSAN, no stacks"].append(time.perf_counter() - t)
            sanitizer.traceback = traceback
        if args.check:
            t = time.perf_counter()
            subprocess.run([args.check, "check", args.trace], capture_output=True)
            secs["check"].append(time.perf_counter() - t)

    n = len(records)
    print(f"trace: {args.trace}, {n} records; torch {torch.__version__}; "
          f"Python {sys.version.split()[0]}; {args.repeats} repeats")
    print("| records/s | median | min | max |")
    print("| --- | --- | --- | --- |")
    rate = {}
    for k, v in secs.items():
        if v:
            rates = sorted(n / s for s in v)
            rate[k] = statistics.median(rates)
            print(f"| {k} | {rate[k]:,.0f} | {rates[0]:,.0f} | {rates[-1]:,.0f} |")
    for k in ("CSAN", "CSAN, no stacks"):
        if secs[k]:
            alone = n / statistics.median(c - m for c, m in zip(secs[k], secs["no-op"]))
            print(f"{k} model alone ({k} - no-op, median of repeats): {alone:,.0f} records/s")
            if args.check:
                per = sorted(c / s for c, s in zip(secs[k], secs["check"]))
                print(f"ratio: streamsan check / {k} replay = {rate['check'] / rate[k]:.1f}x "
                      f"(per repeat: median {statistics.median(per):.1f}x, "
                      f"min {per[0]:.1f}x, max {per[-1]:.1f}x)")
    if args.check:
        e2e = n / statistics.median(p + c for p, c in zip(secs["parse"], secs["CSAN"]))
        print(f"ratio: streamsan check / CSAN parse+replay ({e2e:,.0f} records/s) = "
              f"{rate['check'] / e2e:.1f}x (both read the JSON Lines file)")
    for what, count in sorted(skipped.items()):
        print(f"skipped: {count} {what}")
    pairs = sorted({(e.current_access.operator, e.previous_access.operator) for e in errors})
    print(f"CSAN races: {len(errors)}; (current line, previous line) pairs: {pairs[:10]}"
          + (" ..." if len(pairs) > 10 else ""))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
