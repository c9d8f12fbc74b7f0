"""What a native hook below the Python dispatch mode would cost per operator (issue 13): a probe,
not the front end. It builds, with torch.utils.cpp_extension.load_inline (a C++ compiler and the
Python headers needed; CUDA for the stream), an observer registered with ATen's RecordFunction
(`at::addGlobalCallback`, the mechanism the profiler's `record_shapes` uses) that does per
operator what a native recorder would:

  - looks up the operator's schema once (`c10::Dispatcher::findSchema`, cached by name) and
    keeps which arguments its alias annotations mark as written (`Tensor(a!)`);
  - at the start, reads each tensor argument's raw facts (storage data pointer, byte offset,
    element size, sizes and strides, device) into a fixed array;
  - at the end, reads each returned tensor's facts the same way;
  - reads the current CUDA stream's id;
  - passes them, as plain integers, to an `extern "C"` function standing in for the engine's C
    entry (it only folds them into a checksum, so nothing is optimized away);
  - with CUDA, a tracker attached to the caching allocator
    (`CUDACachingAllocator::attachAllocatorTraceTracker`, in place of the Python
    `torch.cuda._gpu_trace` hooks) sees every block allocated and freed, and counts them.

Timed side by side in one process, alternating repeat by repeat: plain PyTorch, an empty
TorchDispatchMode (the cost the Python front end starts from) and the observer. Each repeat
times OPS operations between two torch.cuda.synchronize() calls; a cell is the median over
REPEATS figures, in microseconds per operation.

    python benches/torch/native_probe.py [--ops 2000] [--repeats 15] [--out PATH]

It says nothing about checking: the engine call is a stub, and the Python line of each
operator (which the front end reports) is not taken. What it measures is the floor a native
hook would start from, against the +5 us per operator target of issue 13.
"""

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

import torch
import torch.utils.cpp_extension
from torch.utils._python_dispatch import TorchDispatchMode

SOURCE = r"""
#include <torch/extension.h>
#include <ATen/record_function.h>
#include <ATen/core/dispatch/Dispatcher.h>
#ifdef PROBE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#endif
#include <atomic>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

struct Facts {
  uint64_t ptr, offset, itemsize, device;
  int64_t dim;
  int64_t sizes[8];
  int64_t strides[8];
  bool written;
};

std::atomic<uint64_t> checksum{0};
std::atomic<uint64_t> allocator_events{0};
std::atomic<bool> tracking{false};
at::CallbackHandle handle = 0;

// Which arguments each operator writes, by the RecordFunction's name (stable per operator).
std::unordered_map<const char*, std::vector<bool>> written_args;

extern "C" void engine_stub(const Facts* facts, size_t n, uint64_t stream, const char* name) {
  uint64_t sum = stream + n + reinterpret_cast<uintptr_t>(name);
  for (size_t i = 0; i < n; ++i) sum += facts[i].ptr + facts[i].offset + facts[i].dim;
  checksum.fetch_add(sum, std::memory_order_relaxed);
}

const std::vector<bool>& written(const at::RecordFunction& fn) {
  auto it = written_args.find(fn.name());
  if (it != written_args.end()) return it->second;
  std::vector<bool> w;
  if (auto op = fn.operator_name()) {
    if (auto handle = c10::Dispatcher::singleton().findOp(*op)) {
      for (const auto& arg : handle->schema().arguments()) {
        w.push_back(arg.alias_info() && arg.alias_info()->isWrite());
      }
    }
  }
  return written_args.emplace(fn.name(), std::move(w)).first->second;
}

uint64_t current_stream() {
#ifdef PROBE_CUDA
  return c10::cuda::getCurrentCUDAStream().id();
#else
  return 0;
#endif
}

template <typename Values>
size_t collect(const Values& values, const std::vector<bool>* w, Facts* out) {
  size_t n = 0;
  for (size_t i = 0; i < values.size() && n < 16; ++i) {
    const auto& v = values[i];
    if (!v.isTensor()) continue;
    const auto& t = v.toTensor();
    if (!t.defined() || !t.has_storage()) continue;
    Facts& f = out[n++];
    f.ptr = reinterpret_cast<uintptr_t>(t.storage().data());
    f.itemsize = t.itemsize();
    f.offset = t.storage_offset() * f.itemsize;
    f.device = t.device().index();
    f.dim = t.dim();
    for (int64_t d = 0; d < f.dim && d < 8; ++d) {
      f.sizes[d] = t.sizes()[d];
      f.strides[d] = t.strides()[d];
    }
    f.written = w && i < w->size() && (*w)[i];
  }
  return n;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  Facts facts[16];
  size_t n = collect(fn.inputs(), &written(fn), facts);
  engine_stub(facts, n, current_stream(), fn.name());
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  Facts facts[16];
  size_t n = collect(fn.outputs(), nullptr, facts);
  engine_stub(facts, n, 0, fn.name());
}

}  // namespace

void enable() {
#ifdef PROBE_CUDA
  // A tracker cannot be detached: attached once, it counts only while enabled.
  static bool attached = false;
  if (!attached) {
    attached = true;
    c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker([](const auto& entry) {
      if (!tracking.load(std::memory_order_relaxed)) return;
      allocator_events.fetch_add(1, std::memory_order_relaxed);
      checksum.fetch_add(entry.addr_ + entry.size_, std::memory_order_relaxed);
    });
  }
#endif
  tracking = true;
  handle = at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end)
                                     .needsInputs(true)
                                     .needsOutputs(true)
                                     .scopes({at::RecordScope::FUNCTION}));
}

void disable() {
  tracking = false;
  at::removeCallback(handle);
  handle = 0;
}

uint64_t sum() { return checksum.load(); }

uint64_t allocs() { return allocator_events.load(); }
"""


class EmptyMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def timed(op, ops, sync):
    sync()
    t = time.perf_counter_ns()
    for _ in range(ops):
        op()
    sync()
    return (time.perf_counter_ns() - t) / ops / 1000


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--out", default=None)
    p.add_argument("--device", default="cuda", help="cpu: a smoke test of the probe itself")
    a = p.parse_args()
    cuda = a.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    t0 = time.time()
    ext = torch.utils.cpp_extension.load_inline(
        name="streamsan_native_probe",
        cpp_sources=SOURCE,
        functions=["enable", "disable", "sum", "allocs"],
        with_cuda=cuda,
        # NDEBUG as in the torch build: its headers assert on state only a debug build keeps.
        extra_cflags=["-O2", "-DNDEBUG"] + (["-DPROBE_CUDA"] if cuda else []),
        verbose=False,
    )
    build_s = time.time() - t0

    x = torch.zeros(1024, device=a.device)
    a_m = torch.randn(64, 64, device=a.device)
    b_m = torch.randn(64, 64, device=a.device)
    state = {"x": x}

    def add():
        state["x"] = state["x"] + 1

    def matmul():
        return a_m @ b_m

    configs = {
        "plain": (lambda: None, lambda: None),
        "empty TorchDispatchMode": None,
        "native observer": (ext.enable, ext.disable),
    }
    rows = {}
    observed_ops = 0
    for name, op in [("x = x + 1, 1K elements", add), ("a @ b, 64x64", matmul)]:
        for _ in range(200):
            op()
        figures = {c: [] for c in configs}
        for r in range(a.repeats):
            order = list(configs)
            order = order[r % len(order):] + order[: r % len(order)]
            for c in order:
                if c == "empty TorchDispatchMode":
                    with EmptyMode():
                        figures[c].append(timed(op, a.ops, sync))
                else:
                    on, off = configs[c]
                    observed_ops += a.ops if c == "native observer" else 0
                    on()
                    try:
                        figures[c].append(timed(op, a.ops, sync))
                    finally:
                        off()
        rows[name] = figures
    assert ext.sum() != 0, "the observer saw the operators"

    lines = [
        "## Native hook probe (issue 13)",
        "",
        f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
        f"{torch.cuda.get_device_name() if cuda else 'CPU'}; torch {torch.__version__}; Python "
        f"{platform.python_version()}; {a.repeats} repeats x {a.ops} operations, configurations "
        f"alternated; extension built in {build_s:.0f} s; allocator events seen by the tracker: "
        f"{ext.allocs() / max(observed_ops, 1):.2f} per observed operation",
        "",
        "| operation | " + " | ".join(configs) + " | observer minus plain | empty mode minus plain |",
        "| --- | " + " | ".join("---:" for _ in configs) + " | ---: | ---: |",
    ]
    for name, figures in rows.items():
        med = {c: statistics.median(v) for c, v in figures.items()}
        spread = {c: f"{min(v):.1f}-{max(v):.1f}" for c, v in figures.items()}
        cells = " | ".join(f"{med[c]:.2f} ({spread[c]})" for c in configs)
        lines.append(
            f"| {name} | {cells} | {med['native observer'] - med['plain']:+.2f} | "
            f"{med['empty TorchDispatchMode'] - med['plain']:+.2f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    out = a.out or (os.path.join(os.environ["OUT"], "native_probe.md") if "OUT" in os.environ else None)
    if out:
        with open(out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
