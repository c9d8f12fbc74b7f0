"""What race checking costs per PyTorch operator: plain PyTorch, an empty TorchDispatchMode,
PyTorch's CUDA Sanitizer (CSAN) and streamsan's PyTorch front end, side by side in one run.

    python benches/torch/overhead.py [--device cuda|cpu] [--ops 2000] [--repeats 5] [--rounds 3]
                                     [--configs plain,empty,csan,streamsan,native[,native_inline,native_trampoline,native_other]]
                                     [--other-site DIR] [--out PATH]

Configurations, each in its own process of this same script (so one cannot leak into another):
  plain      PyTorch as is;
  empty      a TorchDispatchMode whose __torch_dispatch__ returns func(*args, **kwargs): the
             cost of intercepting every operator in Python, which any such checker pays;
  csan       torch.cuda._sanitizer.enable_cuda_sanitizer(). CSAN cannot be turned off again in
             a process (disable() pops its dispatch mode but its torch.cuda._gpu_trace callbacks
             stay registered, and merely importing the module registers them), hence the
             process per configuration. CUDA only;
  streamsan  inside `with streamsan.torch.sanitize(report=TMP, format="json", native=False)`:
             the Python dispatch mode. When streamsan.torch does not import, the column is
             skipped with the reason; any other error fails the run;
  native     the same with `native=True`: the native recorder (RecordFunction observer, no
             Python dispatch mode), streamsan's default. The parent builds it once before the
             first round, so no round times a compilation;
  native_inline  the native recorder with `checker_thread=False`: each record checked within
             the call that made it, as with a trace file (not in the default --configs).
  native_trampoline  the native recorder with STREAMSAN_TORCH_FAST_HOOKS=0: PyTorch's memory
             events reach its hooks through torch's Python trampoline, as before the observer
             bypassed it (not in the default --configs).
  native_other  the native recorder of another build of streamsan, installed in DIR
             (`pip install --target DIR`; --other-site): two builds before and after a change,
             side by side in one run (not in the default --configs). Its processes find DIR
             first on PYTHONPATH and build its observer in a torch extensions directory of
             their own, so that neither build's cached observer replaces the other's.

Operations, timed one after the other in each process: `x = x + 1` on a 1K-element float32
tensor; `c = a @ b` on 64x64 float32 matrices; the same two again after 5,000 more tensors of
1K elements were allocated (and written) inside the configuration, so that a checker's state
holds them. Each repeat times OPS operations with time.perf_counter_ns, with
torch.cuda.synchronize() before and after (inside the timed span: a launch-bound loop leaves
the GPU nearly idle, so the final drain adds well under 1% at 2,000 operations). A repeat's
figure is its time / OPS; a cell is the median over ROUNDS x REPEATS figures, ROUNDS processes
per configuration, the configurations interleaved round by round (rotating which goes first) so
that drift of the machine spreads over all of them. 200 untimed operations warm up each.

That figure is the program's time only while the loop is bound by its thread. Where the GPU
runs an operation more slowly than the thread issues it (`a @ b` took about 20 us per operation
on some H100s, plain), cheaper configurations hide under the GPU's time and the differences
shrink. So each operation is timed a second way too, issue time: OPS rounded down to a
multiple of ISSUE_CHUNK, in chunks of ISSUE_CHUNK, each chunk timed up to its last call and
synchronized after (untimed), so the GPU's queue never fills and only the program's thread
counts.

The markdown tables (median us/op, ratio to plain, difference to the empty mode, the same for
issue time, the spread, each process's median) go to stdout
and to PATH (default $OUT/torch_bench.md when OUT is set), with the machine's facts; the raw
figures go beside it as JSON (PATH with .json). `--device cpu` is a smoke test of the script
itself (no CSAN column); its figures say nothing about GPU programs.

Exit status: 0, or 1 when a configuration's process failed (its error is printed above).
"""

import argparse
import contextlib
import datetime
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

CONFIGS = ("plain", "empty", "csan", "streamsan", "native", "native_inline", "native_trampoline",
           "native_other")
NATIVE = ("native", "native_inline", "native_trampoline", "native_other")
CHECKERS = ("streamsan",) + NATIVE
LABELS = {"plain": "plain PyTorch", "empty": "empty TorchDispatchMode", "csan": "CSAN",
          "streamsan": "streamsan, dispatch mode", "native": "streamsan, native recorder",
          "native_inline": "native recorder, checked within each call",
          "native_trampoline": "native recorder, memory events through torch's trampoline",
          "native_other": "native recorder, the other build (--other-site)"}
OPS = (("add", "x = x + 1, 1K elements"),
       ("matmul", "a @ b, 64x64"),
       ("add_live", "x = x + 1, 1K elements, 5,000 live tensors"),
       ("matmul_live", "a @ b, 64x64, 5,000 live tensors"))
LIVE_TENSORS = 5000
ISSUE_CHUNK = 100  # operations between synchronizations in issue_loop: far from a full queue
MARK = "OVERHEAD_RESULT "  # the child's one line of JSON on stdout


# ----------------------------------------------------------------------------- child process

def time_loop(step, ops, repeats, sync):
    """us per operation of `ops` calls of step(), one figure per repeat."""
    for _ in range(min(ops, 200)):
        step()
    sync()
    figures = []
    for _ in range(repeats):
        gc.collect()
        sync()
        t0 = time.perf_counter_ns()
        for _ in range(ops):
            step()
        sync()
        figures.append((time.perf_counter_ns() - t0) / ops / 1000.0)
    return figures


def issue_loop(step, ops, repeats, sync):
    """us per operation on the program's thread alone: `ops` calls of step() (rounded down to
    a multiple of ISSUE_CHUNK, at least one chunk) in chunks of ISSUE_CHUNK, timed without the
    synchronization after each chunk, so the GPU's queue never fills and its speed does not
    count; one figure per repeat."""
    chunks = max(1, ops // ISSUE_CHUNK)
    figures = []
    for _ in range(repeats):
        gc.collect()
        spent = 0
        for _ in range(chunks):
            sync()
            t0 = time.perf_counter_ns()
            for _ in range(ISSUE_CHUNK):
                step()
            spent += time.perf_counter_ns() - t0
        sync()
        figures.append(spent / (chunks * ISSUE_CHUNK) / 1000.0)
    return figures


def measure(torch, device, ops, repeats, sync):
    """(figures, issue figures) per operation: time_loop's and issue_loop's."""
    x = [torch.zeros(1024, device=device)]
    a = torch.randn(64, 64, device=device)
    b = torch.randn(64, 64, device=device)
    c = [None]

    def add():
        x[0] = x[0] + 1

    def matmul():
        c[0] = a @ b

    out, issue, live = {}, {}, []
    for suffix in ("", "_live"):
        if suffix:
            live = [torch.zeros(1024, device=device) for _ in range(LIVE_TENSORS)]
            sync()
        for name, step in (("add", add), ("matmul", matmul)):
            out[name + suffix] = time_loop(step, ops, repeats, sync)
            issue[name + suffix] = issue_loop(step, ops, repeats, sync)
    del live
    return out, issue


def child(args):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class EmptyMode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("overhead.py: --device cuda, but torch sees no CUDA device (use --device cpu "
                 "for a smoke test)")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    emitted = {"config": args.child}
    report_path = None
    with contextlib.ExitStack() as stack:
        if args.child == "empty":
            stack.enter_context(EmptyMode())
        elif args.child == "csan":
            import torch.cuda._sanitizer as csan
            csan.enable_cuda_sanitizer()  # stays on until the process ends
        elif args.child in CHECKERS:
            try:
                import streamsan.torch as streamsan_torch
                where = getattr(streamsan_torch, "__file__", None) or "a namespace package"
                why = None if hasattr(streamsan_torch, "sanitize") else (
                    f"streamsan.torch ({where}) has no sanitize(): an incomplete install?")
            except ImportError as e:
                why = f"streamsan.torch does not import: {e!r}"
            if why:
                print(MARK + json.dumps({"config": args.child, "skipped": why}))
                return 0
            fd, report_path = tempfile.mkstemp(prefix="overhead-streamsan-", suffix=".json")
            os.close(fd)
            options = dict(report=report_path, format="json",
                           native=args.child in NATIVE)
            if args.child == "native_inline":
                options["checker_thread"] = False
            handle = stack.enter_context(streamsan_torch.sanitize(**options))
            emitted["fast_memory_hooks"] = getattr(handle.recorder, "fast_memory_hooks", None)
            emitted["streamsan_from"] = os.path.dirname(os.path.dirname(where))
        emitted["figures"], emitted["issue"] = measure(torch, torch.device(args.device), args.ops,
                                                       args.repeats, sync)
    if report_path:  # the benchmark has one stream: a race here would be a false alarm
        with open(report_path, encoding="utf-8") as f:
            report = json.load(f)
        os.unlink(report_path)
        emitted["races"] = report["summary"]["races"]
        emitted["records"] = report["summary"].get("records")
    emitted["facts"] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": (torch.cuda.get_device_name(0) if cuda
                   else f"CPU ({platform.processor() or platform.machine()})"),
    }
    print(MARK + json.dumps(emitted), flush=True)
    return 0


# ---------------------------------------------------------------------------- parent process

def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def package_version(name):
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:
        return "not installed"


def child_env(args, config):
    """The environment of `config`'s processes."""
    env = dict(os.environ)
    env.pop("STREAMSAN_TORCH_FAST_HOOKS", None)  # only native_trampoline's is set
    if config == "native_trampoline":
        env["STREAMSAN_TORCH_FAST_HOOKS"] = "0"
    if config == "native_other":
        site = os.path.abspath(args.other_site)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (site, env.get("PYTHONPATH"))))
        env["TORCH_EXTENSIONS_DIR"] = os.path.join(site, "_torch_extensions")
    return env


def build_other(args):
    """Builds the other build's observer once, in its processes' environment; None, or why
    it cannot be."""
    code = "from streamsan.torch import _observer; _observer.build()"
    proc = subprocess.run([sys.executable, "-c", code], env=child_env(args, "native_other"),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        return "the other build's native recorder cannot be built: " + proc.stdout.strip()[-500:]
    return None


def run_child(args, config):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", config, "--device", args.device,
           "--ops", str(args.ops), "--repeats", str(args.repeats)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=child_env(args, config))
    lines = [l for l in proc.stdout.splitlines() if l.startswith(MARK)]
    other = [l for l in proc.stdout.splitlines() if not l.startswith(MARK)]
    if other:
        sys.stdout.write("\n".join(other) + "\n")
    if proc.returncode != 0 or not lines:
        print(f"overhead.py: configuration {config!r} failed (exit {proc.returncode}); "
              "its errors are above", file=sys.stderr)
        sys.exit(1)
    return json.loads(lines[-1][len(MARK):])


def fmt(us):
    return f"{us:.1f}" if us < 100 else f"{us:.0f}"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--ops", type=int, default=2000, help="operations per repeat (2000)")
    p.add_argument("--repeats", type=int, default=5, help="repeats per process (5)")
    p.add_argument("--rounds", type=int, default=3,
                   help="processes per configuration, interleaved (3): ROUNDS x REPEATS figures")
    p.add_argument("--configs", default=",".join(CONFIGS[:5]),
                   help="comma-separated subset of " + ",".join(CONFIGS))
    p.add_argument("--out", help="markdown file to write (default: $OUT/torch_bench.md when "
                                 "OUT is set, else none)")
    p.add_argument("--other-site", metavar="DIR",
                   help="where another build of streamsan is installed (native_other)")
    p.add_argument("--child", choices=CONFIGS, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)

    asked = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in asked if c not in CONFIGS]
    if unknown or not asked:
        p.error(f"unknown configuration(s) {unknown}; choose from {', '.join(CONFIGS)}")
    if "native_other" in asked and not (args.other_site and os.path.isdir(args.other_site)):
        p.error("native_other needs --other-site DIR, a directory holding the other build")
    # Columns in the canonical order; plain always (the ratios need it).
    configs = [c for c in CONFIGS if c in asked or c == "plain"]
    skipped = {}
    if args.device == "cpu" and "csan" in configs:
        skipped["csan"] = "CSAN checks CUDA tensors only; not run with --device cpu"
    for native in NATIVE:
        if native not in configs:
            continue
        if native == "native_other":
            why = build_other(args)
            if why:
                skipped[native] = why
            continue
        try:
            from streamsan.torch import _observer

            _observer.build()
        except Exception as e:
            skipped[native] = f"the native recorder cannot be built here: {e}"
    figures = {c: {op: [] for op, _ in OPS} for c in configs}
    issue = {c: {op: [] for op, _ in OPS} for c in configs}
    extra = {c: [] for c in configs}
    facts = {}
    started = time.time()
    for rnd in range(args.rounds):
        order = configs[rnd % len(configs):] + configs[:rnd % len(configs)]
        for config in order:
            if config in skipped:
                continue
            print(f"round {rnd + 1}/{args.rounds}: {LABELS[config]}", file=sys.stderr, flush=True)
            got = run_child(args, config)
            if "skipped" in got:
                skipped[config] = got["skipped"]
                print(f"  skipped: {got['skipped']}", file=sys.stderr)
                continue
            for op, values in got["figures"].items():
                figures[config][op] += values
            for op, values in got["issue"].items():
                issue[config][op] += values
            facts = facts or got["facts"]
            extra[config].append({k: got[k] for k in ("races", "records", "fast_memory_hooks",
                                                      "streamsan_from")
                                  if k in got})
    measured = [c for c in configs if c not in skipped]

    med = {c: {op: statistics.median(figures[c][op]) for op, _ in OPS} for c in measured}
    now = datetime.datetime.now(datetime.timezone.utc)
    md = ["# Cost of race checking per PyTorch operator", ""]
    md.append(f"- date: {now:%Y-%m-%d %H:%M} UTC; {time.time() - started:.0f} s for the whole run")
    md.append(f"- device: {facts.get('device')}")
    md.append(f"- torch {facts.get('torch')} (CUDA {facts.get('cuda')}), Python "
              f"{platform.python_version()}, streamsan {package_version('streamsan')}")
    md.append(f"- CPU: {cpu_model()}, {os.cpu_count()} logical cores; {platform.platform()}")
    md.append(f"- command: `python benches/torch/overhead.py {' '.join(sys.argv[1:])}`".rstrip())
    md.append(f"- each cell: median over {args.rounds} processes x {args.repeats} repeats of "
              f"{args.ops} operations (time / operations), synchronized before and after each "
              "repeat; configurations in separate processes, interleaved round by round")
    if "native_other" in measured:
        md.append(f"- native_other: the build installed in `{args.other_site}`")
    if args.device == "cpu":
        md.append("- **CPU smoke test**: these figures say nothing about GPU programs")
    def table(title, columns, cell):
        """A markdown table under `title`: one row per operation, cell(config, op) per column."""
        md.extend(["", title, "", "| operation | " + " | ".join(LABELS[c] for c in columns) + " |",
                   "| --- |" + " ---: |" * len(columns)])
        for op, label in OPS:
            md.append(f"| {label} | " + " | ".join(cell(c, op) for c in columns) + " |")

    table("Median microseconds per operation (ratio to plain PyTorch):", measured,
          lambda c, op: f"{fmt(med[c][op])} us" + (
              "" if c == "plain" else f" ({med[c][op] / med['plain'][op]:.2f}x)"))
    checkers = [c for c in measured if c in ("csan",) + CHECKERS]
    beyond_empty = "empty" in measured and checkers
    if beyond_empty:
        table("What the checking itself adds, beyond intercepting every operator (median minus "
              "the empty TorchDispatchMode's, us per operation):", checkers,
              lambda c, op: f"{med[c][op] - med['empty'][op]:+.1f}")
    imed = {c: {op: statistics.median(issue[c][op]) for op, _ in OPS} for c in measured}
    table(f"On the program's thread alone (issue time: the operations in chunks of {ISSUE_CHUNK}, "
          "each chunk timed up to its last call and synchronized after, untimed, so that the "
          "GPU's speed does not count), median us per operation:", measured,
          lambda c, op: fmt(imed[c][op]))
    if beyond_empty:
        table("Issue time beyond the empty TorchDispatchMode's (us per operation):", checkers,
              lambda c, op: f"{imed[c][op] - imed['empty'][op]:+.1f}")
    table("Spread over the repeats (min to max, us per operation):", measured,
          lambda c, op: f"{fmt(min(figures[c][op]))} to {fmt(max(figures[c][op]))}")

    def per_process(c, op):
        values = figures[c][op]
        return ", ".join(fmt(statistics.median(values[i:i + args.repeats]))
                         for i in range(0, len(values), args.repeats))

    # A process can run at one of two speeds on some hosts (docs/performance.md, "Two speeds
    # per process"): a cell's median then depends on how many of its processes ran slowly.
    table("Each process's median, in the order run (us per operation):", measured, per_process)
    notes = [f"- {LABELS[c]} not measured: {why}" for c, why in skipped.items()]
    for c in NATIVE:
        fast = sorted({str(e.get("fast_memory_hooks")) for e in extra.get(c, [])})
        if fast:
            notes.append(f"- {LABELS[c]}: memory hooks without torch's trampoline: {', '.join(fast)}")
        found = sorted({str(e.get("streamsan_from")) for e in extra.get(c, [])})
        if found:
            notes.append(f"- {LABELS[c]}: streamsan imported from {', '.join(found)}")
    races = [e["races"] for c in CHECKERS for e in extra.get(c, [])
             if e.get("races")]
    if races:
        notes.append(f"- **streamsan reported races in this single-stream benchmark** ({races}): "
                     "false alarms, look into them")
    if notes:
        md += ["", "Notes:", ""] + notes
    text = "\n".join(md) + "\n"
    print(text)

    out = args.out or (os.path.join(os.environ["OUT"], "torch_bench.md") if os.environ.get("OUT")
                       else None)
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
        with open(os.path.splitext(out)[0] + ".json", "w", encoding="utf-8") as f:
            json.dump({"date": now.isoformat(), "argv": sys.argv[1:], "facts": facts,
                       "skipped": skipped, "figures_us_per_op": figures,
                       "issue_us_per_op": issue,
                       **{c: extra.get(c, []) for c in CHECKERS}},
                      f, indent=1)
        print(f"written: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
