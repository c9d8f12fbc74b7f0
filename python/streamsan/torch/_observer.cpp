// The native recorder of streamsan.torch (option `native`): an observer registered with ATen's
// RecordFunction that sees every operator without a Python dispatch mode, and records ordinary
// kernels (the GENERIC kind of _schema.py) itself. Built at run time against the running torch
// by _observer.py (torch.utils.cpp_extension), so it needs no CUDA headers and no torch ABI in
// the wheel.
//
// Why: entering a Python TorchDispatchMode costs about 10 us per operator by itself, twice what
// issue 13 allows for recording. Here an operator costs a GIL acquisition, the tensors' facts
// read in C++, a few lookups in the recorder's tables of storages (kept here, see Memory), and
// one call of the session's `launch`.
//
// What it records is what the dispatch mode records (_mode.py, _ops.py):
// - the operators the mode sees: those a CompositeImplicitAutograd kernel does not decompose
//   above the Python dispatch key, and none of the operators they call in turn;
// - a GENERIC operator as one launch, its reads and writes by the schema rules, each device
//   tensor's bytes exact (strided views through _ops._strided);
// - every other kind (copies, .item(), record_stream, pinning, empty with pin_memory), and any
//   GENERIC operator this file does not handle itself (pinned memory exists, a tensor that is
//   not strided, the CPU stand-in's host tensors), by the mode's own handlers in Python
//   (_observer.Bridge.after), with the operator's arguments converted to Python objects.
// Records that PyTorch's CUDA hooks make while an operator runs are held and written after it
// (Recorder.emit_hooked asks `hold`), as the mode does.
//
// Every Python object below is touched with the GIL held. The tables of operators and streams
// have a mutex of their own, never held while the GIL is taken.

#include <torch/extension.h>

#include <ATen/core/PythonFallbackKernel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/GPUTrace.h>
#include <c10/core/impl/PyInterpreter.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <frameobject.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <typeinfo>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace py = pybind11;

namespace {

// _schema.py's kinds.
constexpr int GENERIC = 0;
constexpr int NOTHING = 1;
constexpr int ONE = 1;

// _streams.py's special handles and ids.
constexpr uint64_t LEGACY_BASE = 1ULL << 62;
constexpr uint64_t PER_THREAD_BASE = (1ULL << 62) + (1ULL << 40);

// The Session's C entry (crates/streamsan-python/src/c_entry.rs): the same records as its
// Python methods, without Python objects per argument. Used when the session is a real
// streamsan._native.Session; tests' stand-in sessions get the Python calls.
struct CAccess {
  uint64_t buf, off, len;
  const char* label;
  size_t label_len;
};
struct CApi {
  uint32_t version;
  int (*alloc)(PyObject* session, uint64_t buf, uint64_t bytes, uint32_t device, uint64_t stream,
               uint64_t addr, uint64_t thread, const char* at, size_t at_len);
  int (*launch)(PyObject* session, uint64_t stream, const char* name, size_t name_len,
                const CAccess* reads, size_t n_reads, const CAccess* writes, size_t n_writes,
                uint64_t thread, const char* at, size_t at_len);
  int (*free)(PyObject* session, uint64_t buf, uint64_t thread, const char* at, size_t at_len);
};
constexpr uint32_t C_API_VERSION = 1;

// An access as the recorder gathers it: `(buf, off, len, label)` of the Python methods.
struct Entry {
  uint64_t buf;
  uint64_t off;
  int64_t len;
  py::object label;
};

struct Input {
  size_t index;    // in the schema's arguments (RecordFunction's inputs)
  py::object name; // the argument's name (str)
  bool write;
  int shape;       // ONE or LIST
};

struct Fresh {
  int64_t index;   // in the returns, -1 for the whole result of a single-return operator
  py::object name;
  int shape;
};

// One operator overload, worked out once (`Bridge.op`).
struct OpInfo {
  bool seen = false;        // an operator the dispatch mode would see
  // A CompositeImplicitAutograd kernel runs above the Python key for tensors of this backend
  // (the dispatch mode then sees the operators it calls instead), unless inference mode.
  bool decomposes_cuda = false, decomposes_cpu = false;
  int kind = NOTHING;
  py::object facts;         // _schema.OpFacts
  py::object name;          // facts.name
  std::vector<Input> inputs;
  std::vector<Fresh> fresh;
  std::vector<bool> kwarg_only;       // per schema argument
  std::vector<py::object> arg_names;  // per schema argument
};

// What the start callback hands to the end callback.
struct State;
struct Ctx : at::ObserverContext {
  State* owner = nullptr;  // the recording session it began in
  OpInfo* info = nullptr;
  int exceptions = 0;      // std::uncaught_exceptions() at the start
  std::vector<c10::IValue> inputs;  // the arguments, kept alive until the end
};

// A label's key: the argument, dtype and shape, held inline (no allocation per tensor); a
// tensor of more dimensions is labelled without the cache.
constexpr size_t LABEL_DIMS = 6;
struct LabelKey {
  PyObject* name;
  int dtype;
  int ndim;
  std::array<int64_t, LABEL_DIMS> sizes;  // the first `ndim`, the rest 0
  bool operator==(const LabelKey& o) const {
    return name == o.name && dtype == o.dtype && ndim == o.ndim && sizes == o.sizes;
  }
};
struct LabelHash {
  size_t operator()(const LabelKey& k) const {
    size_t h = std::hash<void*>()(k.name) ^ (size_t(k.dtype) * 0x9e3779b97f4a7c15ULL);
    for (int i = 0; i < k.ndim; ++i) h = h * 31 + std::hash<int64_t>()(k.sizes[i]);
    return h;
  }
};

struct SiteKey {
  PyObject* code;
  int lasti;
  bool operator==(const SiteKey& o) const { return code == o.code && lasti == o.lasti; }
};
struct SiteHash {
  size_t operator()(const SiteKey& k) const {
    return std::hash<void*>()(k.code) ^ (size_t(k.lasti) * 0x9e3779b97f4a7c15ULL);
  }
};

// The recorder's device storages by address, and the buffer ids it hands out (_recorder.Memory):
// kept here, where every operator and memory hook looks them up, rather than in Python
// dictionaries keyed by Python ints (an int made and a dictionary probed per lookup). The
// Recorder uses this one (`use_memory`), through Python mappings of its tables, once installed.
using Pend = std::pair<uint64_t, int64_t>;  // the pool's stream handle, the device
// Types of their own, not std::unordered_map: torch's headers convert those to and from dicts.
struct BufTable : std::unordered_map<uint64_t, uint64_t> {};
struct PendTable : std::unordered_map<uint64_t, Pend> {};
struct Memory {
  BufTable bufs;      // a declared storage's address -> buffer id
  PendTable pending;  // a block the allocation hook reported, not declared yet
  uint64_t next_buf = 1;
};

struct State {
  // Cleared by uninstall. A State is never freed: a callback in flight on another thread may
  // still hold it; its Python objects are released when the next session installs.
  std::atomic<bool> active{true};
  bool standin = false;
  const CApi* api = nullptr;  // the Session's C entry, or null: its Python methods
  py::object session;
  py::object bridge, rec, session_launch, session_alloc, session_free, thread_ids, number_thread, files, sites,
      classify, pin_starts, host_set, device;
  // The recorder's device storages (Recorder.memory), shared with it.
  std::shared_ptr<Memory> memory;
  at::CallbackHandle handle = 0;
  // Guarded by `mu`.
  std::mutex mu;
  std::unordered_map<const char*, std::unique_ptr<OpInfo>> ops;
  std::unordered_map<uint64_t, uint64_t> handles;  // (device << 56 | c10 stream id) -> handle
  // Guarded by the GIL.
  std::unordered_set<uint64_t> declared;  // stream ids the recorder declared
  std::unordered_map<LabelKey, std::pair<py::object, int64_t>, LabelHash> labels;
  // (code object, instruction offset) of a user frame -> its "file:line" (site()); the entry
  // holds the code object, so its address names no other code while the entry lives (up to
  // 65,536 entries, then cleared).
  std::unordered_map<SiteKey, std::pair<py::object, py::object>, SiteHash> site_of;
  // The recorder's tables of graph memory and unchecked storages (never replaced).
  std::vector<py::object> graph_tables;

  uint64_t native_ops = 0, python_ops = 0;

  // Drops every Python object (the GIL held); the struct stays for callbacks in flight.
  // Callbacks running Python for this state (GIL held to change it), and whether release()
  // waits for the last of them: a callback can hand the GIL to a thread that disables and
  // enables checking meanwhile.
  int inflight = 0;
  bool release_pending = false;

  // Drops every Python object (the GIL held), now or when the last callback in flight ends;
  // the struct stays for callbacks that have not taken the GIL yet (they see it inactive).
  void release() {
    if (inflight > 0) {
      release_pending = true;
      return;
    }
    release_pending = false;
    session = bridge = rec = session_launch = session_alloc = session_free = thread_ids =
        number_thread = files = sites = classify = pin_starts = host_set = device = py::object();
    memory.reset();
    graph_tables.clear();
    labels.clear();
    site_of.clear();
    // OpInfos keep their Python objects (the facts are PyTorch's operators', alive anyway):
    // on_start reads them without the GIL.
  }
};

// Marks a callback running Python for `s` (the GIL held) for its scope.
struct InFlight {
  State* s;
  explicit InFlight(State* state) : s(state) { ++s->inflight; }
  ~InFlight() {
    if (--s->inflight == 0 && s->release_pending) s->release();
  }
};

// The recording session's state (the last one installed; null before the first).
std::atomic<State*> g_state{nullptr};

// The state the callback running on this thread works for (see Using).
thread_local State* state = nullptr;

struct Using {
  State* old;
  explicit Using(State* s) : old(state) { state = s; }
  ~Using() { state = old; }
};

// The installed state while it records, else null.
State* live() {
  State* s = g_state.load();
  return s != nullptr && s->active.load(std::memory_order_relaxed) ? s : nullptr;
}

void halt_later();
bool declare(const at::Tensor& t, uintptr_t base, uint64_t& buf);

std::atomic<bool> stopped{false};     // the session halted: record nothing more

#ifdef STREAMSAN_PROBE
// A diagnostic build only (benches/torch/profile_op.py --stages, STREAMSAN_OBSERVER_PROBE=1):
// where an operator's time goes, by stopping the work at a stage. Bits 0-2: 1 = on_start
// returns at once, 2 = on_end returns before taking the GIL, 3 = after taking it, 4 = before
// the engine's launch call; 0 = everything. Bit 3: the memory hooks return at once.
std::atomic<int> probe{0};
inline int probe_stage() { return probe.load(std::memory_order_relaxed) & 7; }
inline bool probe_hooks_off() { return probe.load(std::memory_order_relaxed) & 8; }
#define PROBE_RETURN_IF(cond, ...) \
  if (cond) return __VA_ARGS__
#else
#define PROBE_RETURN_IF(cond, ...)
#endif

thread_local bool busy = false;       // inside this file's calls into Python
thread_local bool open_op = false;    // a recorded operator is running on this thread
thread_local bool held = false;       // hook records were held while it ran
// The user's line of the operator on_end is recording (a new reference, or null before it is
// looked up) and its host thread's number (-1 before): found once for all its records.
thread_local PyObject* op_at = nullptr;
thread_local int64_t op_thread = -1;

// Keeps a Python error pending before a callback took the GIL, and drops any the callback
// left (the GIL held for its scope).
struct ErrorKept {
  PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
  ErrorKept() { PyErr_Fetch(&type, &value, &trace); }
  ~ErrorKept() {
    PyErr_Clear();
    PyErr_Restore(type, value, trace);
  }
};

// Sets `busy` while Python runs from here: operators Python calls then are the recorder's own.
struct Busy {
  bool old;
  Busy() : old(busy) { busy = true; }
  ~Busy() { busy = old; }
};

// Whether the dispatcher runs `op`'s CompositeImplicitAutograd kernel for `backend` tensors
// at the autograd key: only when no kernel of the backend, of CompositeExplicitAutograd or of
// the backend's own autograd key is registered. (A kernel on the Autograd alias key loses to
// the CompositeImplicitAutograd one: c10's dispatch table rules; checked against
// torch._C._dispatch_dump_table on every operator of torch 2.15.)
bool decomposes(const c10::OperatorHandle& op, c10::DispatchKey backend, c10::DispatchKey autograd) {
  using K = c10::DispatchKey;
  return op.hasKernelForDispatchKey(K::CompositeImplicitAutograd) &&
         !op.hasKernelForDispatchKey(backend) &&
         !op.hasKernelForDispatchKey(K::CompositeExplicitAutograd) &&
         !op.hasKernelForDispatchKey(K::CompositeExplicitAutogradNonFunctional) &&
         !op.hasKernelForDispatchKey(autograd);
}

OpInfo* learn(State* s, const at::RecordFunction& fn) {
  auto opname = fn.operator_name();
  auto op = opname ? c10::Dispatcher::singleton().findOp(*opname) : std::nullopt;
  py::gil_scoped_acquire gil;
  ErrorKept kept;
  // Made and, if another thread learned the operator first, destroyed with the GIL held.
  auto info = std::make_unique<OpInfo>();
  if (op && s->active.load() && g_state.load() == s) {
    InFlight inflight(s);
    using K = c10::DispatchKey;
    info->decomposes_cuda = decomposes(*op, K::CUDA, K::AutogradCUDA);
    info->decomposes_cpu = decomposes(*op, K::CPU, K::AutogradCPU);
    Busy b;
    try {
      py::object facts = s->bridge.attr("op")(opname->name, opname->overload_name);
      if (!facts.is_none()) {
        info->facts = facts;
        info->name = facts.attr("name");
        info->kind = facts.attr("kind").cast<int>();
        const auto& args = op->schema().arguments();
        for (const auto& a : args) {
          info->kwarg_only.push_back(a.kwarg_only());
          info->arg_names.push_back(py::str(a.name()));
        }
        bool ok = true;
        for (auto item : facts.attr("inputs")) {
          auto t = item.cast<py::tuple>();
          int64_t pos = t[0].cast<int64_t>();
          std::string name = t[1].cast<std::string>();
          size_t index = args.size();
          if (pos >= 0) {
            index = size_t(pos);
          } else {
            for (size_t i = 0; i < args.size(); ++i) {
              if (args[i].name() == name) index = i;
            }
          }
          if (index >= args.size()) {
            ok = false;  // unexpected: leave the operator to nobody rather than guess
            break;
          }
          info->inputs.push_back({index, t[1], t[2].cast<bool>(), t[3].cast<int>()});
        }
        for (auto item : facts.attr("fresh")) {
          auto t = item.cast<py::tuple>();
          info->fresh.push_back({t[0].cast<int64_t>(), t[1], t[2].cast<int>()});
        }
        info->seen = ok;
      }
    } catch (const std::exception& e) {
      info->seen = false;
      try {
        s->bridge.attr("internal_error")("native op " + opname->name, py::str(e.what()));
      } catch (...) {
      }
      if (PyErr_Occurred()) PyErr_Clear();
    }
  }
  // Inserted with the GIL held: a losing duplicate holds Python objects.
  std::lock_guard<std::mutex> lock(s->mu);
  auto& slot = s->ops[fn.name()];
  if (!slot) slot = std::move(info);
  return slot.get();
}

// The first tensor argument: which backend's kernels run, and whether it is a tensor
// subclass or a fake (the Python key, FakeTensor, DTensor...).
struct FirstTensor {
  bool cuda = false, python = false;
  bool tensors = false, autograd = false;  // any tensor; any with an autograd dispatch key
};

FirstTensor inspect(c10::ArrayRef<const c10::IValue> inputs) {
  FirstTensor f;
  bool found = false;
  auto look = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    if (t.key_set().has(c10::DispatchKey::Python) ||
        t.key_set().has(c10::DispatchKey::PythonTLSSnapshot)) {
      f.python = true;
    }
    f.tensors = true;
    if (t.key_set().has_any(c10::autograd_dispatch_keyset)) f.autograd = true;
    if (!found) {
      found = true;
      f.cuda = t.is_cuda();
    }
  };
  for (const auto& v : inputs) {
    if (v.isTensor()) {
      look(v.toTensor());
    } else if (v.isTensorList()) {
      for (const auto& t : v.toTensorVector()) look(t);
    } else if (v.isList()) {
      for (const auto& e : v.toListRef()) {
        if (e.isTensor()) look(e.toTensor());
      }
    }
  }
  return f;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  PROBE_RETURN_IF(probe_stage() == 1, nullptr);
  // Operators inside a recorded one are its own (nested); the recorder's own are skipped.
  if (busy || open_op || stopped.load(std::memory_order_relaxed)) return nullptr;
  State* s = live();
  if (s == nullptr) return nullptr;
  // Under another TorchDispatchMode (FakeTensorMode while torch.compile traces, a user's
  // mode) the operators may run on no real memory: not recorded.
  if (c10::impl::TorchDispatchModeTLS::stack_len() > 0) return nullptr;
  OpInfo* info = nullptr;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    auto it = s->ops.find(fn.name());
    if (it != s->ops.end()) info = it->second.get();
  }
  if (info == nullptr) {
    // Only operators with a schema are cached: a string-named RecordFunction owns its name.
    if (!fn.operator_name()) return nullptr;
    info = learn(s, fn);
  }
  if (!info->seen) return nullptr;
  auto in = fn.inputs();
  FirstTensor first = inspect(in);
  // A tensor subclass's operator is redispatched to the operators on its real tensors.
  if (first.python) return nullptr;
  // The composite kernel runs at the autograd key: only where one is left (no inference mode;
  // some input not an inference tensor, or no tensor at all, as for factories).
  bool decomposed = first.cuda ? info->decomposes_cuda : info->decomposes_cpu;
  bool autograd = !c10::InferenceMode::is_enabled() && (first.autograd || !first.tensors);
  if (decomposed && autograd) return nullptr;
  open_op = true;
  held = false;
  auto ctx = std::make_unique<Ctx>();
  ctx->owner = s;
  ctx->info = info;
  ctx->exceptions = std::uncaught_exceptions();
  if (info->kind != NOTHING) ctx->inputs.assign(in.begin(), in.end());
  return ctx;
}

// -- the generic fast path ------------------------------------------------------------------

PyObject* as_int(uint64_t v) { return PyLong_FromUnsignedLongLong(v); }

// Borrowed UTF-8 of a str (null for None); valid while `s` lives.
std::pair<const char*, size_t> utf8(const py::object& s) {
  if (s.is_none()) return {nullptr, 0};
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s.ptr(), &n);
  if (p == nullptr) throw py::error_already_set();
  return {p, size_t(n)};
}

void check(int rc) {
  if (rc != 0) throw py::error_already_set();
}

py::object wrap(const at::Tensor& t) { return py::reinterpret_steal<py::object>(THPVariable_Wrap(t)); }

// "file:line" of user frame `f` (its file `filename`, shown as `shown`), through the cache
// _frames.site() shares.
py::object line_site(PyFrameObject* f, PyObject* filename, const py::object& shown) {
  int line = PyFrame_GetLineNumber(f);
  PyObject* lines = PyDict_GetItem(state->sites.ptr(), filename);
  py::object key = py::reinterpret_steal<py::object>(PyLong_FromLong(line));
  PyObject* known = lines ? PyDict_GetItem(lines, key.ptr()) : nullptr;
  if (known != nullptr) return py::reinterpret_borrow<py::object>(known);
  py::object out =
      py::reinterpret_steal<py::object>(PyUnicode_FromFormat("%U:%d", shown.ptr(), line));
  if (lines) PyDict_SetItem(lines, key.ptr(), out.ptr());
  return out;
}

// "file:line" of the innermost Python frame outside torch and streamsan, as _frames.site().
py::object site() {
  PyFrameObject* top = PyEval_GetFrame();  // borrowed
  if (top == nullptr) return py::none();
  py::object frame = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(top));
  while (frame) {
    auto* f = reinterpret_cast<PyFrameObject*>(frame.ptr());
    py::object code = py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(PyFrame_GetCode(f)));
    PyObject* filename = reinterpret_cast<PyCodeObject*>(code.ptr())->co_filename;
    py::object shown = py::reinterpret_borrow<py::object>(PyDict_GetItem(state->files.ptr(), filename));
    if (!shown) shown = state->classify(py::reinterpret_borrow<py::object>(filename));
    if (!shown.is_none()) {
      // The line number is a scan of the code's line table (as long as the code), so it is
      // found once per call site.
#if PY_VERSION_HEX >= 0x030B0000
      SiteKey where{code.ptr(), PyFrame_GetLasti(f)};
#else
      SiteKey where{code.ptr(), f->f_lasti};
#endif
      auto cached = state->site_of.find(where);
      if (cached != state->site_of.end()) return cached->second.second;
      if (state->site_of.size() > 65536) state->site_of.clear();
      py::object out = line_site(f, filename, shown);
      state->site_of.emplace(where, std::make_pair(code, out));
      return out;
    }
    frame = py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(PyFrame_GetBack(f)));
  }
  return py::none();
}

// site(), once per operator while on_end records it.
py::object op_site() {
  if (op_at == nullptr) op_at = site().release().ptr();
  return py::reinterpret_borrow<py::object>(op_at);
}

void forget_op_site() {
  Py_XDECREF(op_at);
  op_at = nullptr;
  op_thread = -1;
}

// This thread's number in the session `number_of` (thread_number()); a thread keeps its number
// for a session's life, and a State is never freed, so its address names one session.
thread_local State* number_of = nullptr;
thread_local int64_t number = -1;

int64_t thread_number() {
  if (number_of == state) return number;
  py::object ident = py::reinterpret_steal<py::object>(PyLong_FromUnsignedLong(PyThread_get_thread_ident()));
  PyObject* n = PyDict_GetItem(state->thread_ids.ptr(), ident.ptr());
  number = n != nullptr ? PyLong_AsLongLong(n) : state->number_thread(ident).cast<int64_t>();
  number_of = state;
  return number;
}

// thread_number(), once per operator while on_end records it.
int64_t op_thread_number() {
  if (op_thread < 0) op_thread = thread_number();
  return op_thread;
}

bool is_device(const at::Tensor& t) {
  if (!state->standin) return t.is_cuda();
  if (!t.is_cpu()) return false;
  if (t.layout() != at::kStrided || t.is_nested()) return true;
  py::object base = py::reinterpret_steal<py::object>(
      as_int(reinterpret_cast<uintptr_t>(t.storage().data())));
  return !PySet_Contains(state->host_set.ptr(), base.ptr());
}

// The label and byte count of tensor `t` passed as argument `name` (Recorder.label_entry).
std::pair<py::object, int64_t> label(const py::object& name, const at::Tensor& t) {
  auto sizes = t.sizes();
  auto entry = [&] {
    py::tuple e = state->rec.attr("label_entry")(name, wrap(t));
    return std::make_pair(py::object(e[0]), e[1].cast<int64_t>());
  };
  if (sizes.size() > LABEL_DIMS) return entry();
  LabelKey key{name.ptr(), int(t.scalar_type()), int(sizes.size()), {}};
  std::copy(sizes.begin(), sizes.end(), key.sizes.begin());
  auto it = state->labels.find(key);
  if (it != state->labels.end()) return it->second;
  if (state->labels.size() > 65536) state->labels.clear();
  return state->labels.emplace(key, entry()).first->second;
}

enum Acc { SKIP, DEVICE, FALLBACK };

// Appends the accesses of tensor `t` (argument `name`) to `out` (_ops.bind_generic's acc).
Acc access(const at::Tensor& t, const py::object& name, std::vector<Entry>& out) {
  // A Python number passed for a Tensor argument (`x * 2`) is a wrapped 0-dim CPU tensor
  // here; the dispatch mode sees the number.
  if (!t.defined() || t.unsafeGetTensorImpl()->is_wrapped_number()) return SKIP;
  if (!is_device(t)) {
    // A CPU tensor in a CUDA operator is a scalar the host reads: checked only when pinned
    // memory exists, which the Python handler does.
    return PyObject_IsTrue(state->pin_starts.ptr()) ? FALLBACK : SKIP;
  }
  if (t.layout() != at::kStrided || t.is_nested()) return FALLBACK;
  auto e = label(name, t);
  if (e.second == 0) return SKIP;
  uintptr_t base = reinterpret_cast<uintptr_t>(t.storage().data());
  uint64_t p = base + uint64_t(t.storage_offset()) * t.itemsize();
  auto& bufs = state->memory->bufs;
  auto found = bufs.find(base);
  uint64_t buf, off = p - base;
  if (found != bufs.end()) {
    buf = found->second;
  } else if (!declare(t, base, buf)) {
    py::object hit = state->bridge.attr("miss")(wrap(t), p);
    if (hit.is_none()) return DEVICE;  // left unchecked (counted by the recorder)
    py::tuple pair = hit;
    buf = pair[0].cast<uint64_t>();
    off = pair[1].cast<uint64_t>();
  }
  if (t.is_contiguous()) {
    out.push_back({buf, off, e.second, e.first});
  } else {
    py::list runs;
    state->bridge.attr("strided")(wrap(t), buf, off, e.first, runs);
    for (auto item : runs) {
      auto r = item.cast<py::tuple>();
      out.push_back({r[0].cast<uint64_t>(), r[1].cast<uint64_t>(), r[2].cast<int64_t>(), r[3]});
    }
  }
  return DEVICE;
}

// Calls f(tensor) for each tensor in an argument of shape ONE or LIST.
template <typename F>
Acc each(const c10::IValue& v, int shape, F f) {
  Acc seen = SKIP;
  if (shape == ONE) {
    if (v.isTensor()) return f(v.toTensor());
    return SKIP;
  }
  if (v.isTensorList()) {
    for (const auto& t : v.toTensorVector()) {
      Acc a = f(t);
      if (a == FALLBACK) return FALLBACK;
      if (a == DEVICE && seen == SKIP) seen = DEVICE;
    }
  } else if (v.isList()) {  // Tensor?[]
    for (const auto& e : v.toListRef()) {
      if (!e.isTensor()) continue;
      Acc a = f(e.toTensor());
      if (a == FALLBACK) return FALLBACK;
      if (a == DEVICE && seen == SKIP) seen = DEVICE;
    }
  }
  return seen;
}

// The CUDA handle of the current stream of `device` (the stand-in's fake handle).
uint64_t current_handle(int64_t device) {
  if (state->standin) return state->device.attr("stream").cast<uint64_t>();
  auto impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  c10::Stream s = impl->getStream(c10::Device(c10::DeviceType::CUDA, c10::DeviceIndex(device)));
  uint64_t key = (uint64_t(device) << 56) ^ uint64_t(s.id());
  {
    std::lock_guard<std::mutex> lock(state->mu);
    auto it = state->handles.find(key);
    if (it != state->handles.end()) return it->second;
  }
  uint64_t handle = state->bridge.attr("handle")(device, int64_t(s.id())).cast<uint64_t>();
  std::lock_guard<std::mutex> lock(state->mu);
  state->handles[key] = handle;
  return handle;
}

// The trace id of stream `handle` of `device` (Streams.id), declared through Python once.
uint64_t stream_of(uint64_t handle, int64_t device, int64_t thread, const py::object& at) {
  uint64_t sid;
  if (handle > 2) {
    sid = handle;
  } else if (handle == 0 || handle == 1) {
    sid = device ? LEGACY_BASE + uint64_t(device) : 0;
  } else {
    sid = PER_THREAD_BASE + (uint64_t(device) << 20) + uint64_t(thread);
  }
  if (state->declared.count(sid) == 0) {
    state->rec.attr("streams").attr("id")(handle, device, thread, at);
    state->declared.insert(sid);
  }
  return sid;
}

uint64_t stream_id(int64_t device, int64_t thread, const py::object& at) {
  return stream_of(current_handle(device), device, thread, at);
}

// No CUDA graph state and no storage left unchecked: the recorder's storages are only the
// plain tables of Memory, which the native paths below keep as the Python ones would.
bool plain_memory() {
  for (const auto& table : state->graph_tables) {
    if (PyObject_Length(table.ptr()) != 0) return false;
  }
  return true;
}

// Declares the storage of device tensor `t` at `base` on first sight (Recorder.declare_device
// when no graph is involved) as buffer `buf`; false to leave it to Python.
bool declare(const at::Tensor& t, uintptr_t base, uint64_t& buf) {
  if (!plain_memory()) return false;
  Memory& memory = *state->memory;
  int64_t nbytes = int64_t(t.storage().nbytes());
  int64_t thread = op_thread_number();
  py::object at = op_site();
  auto pend = memory.pending.find(base);
  bool pended = pend != memory.pending.end();
  Pend was{0, 0};
  if (pended) {
    was = pend->second;
    memory.pending.erase(pend);
  } else {
    int64_t device = t.get_device() < 0 ? 0 : t.get_device();
    was = Pend{current_handle(device), device};
  }
  auto [handle, device] = was;
  uint64_t sid = stream_of(handle, device, thread, at);
  buf = memory.next_buf;
  try {
    if (state->api == nullptr) {
      state->session_alloc(buf, nbytes, device, "device", sid, base, "caching", py::none(),
                           thread, at);
    } else {
      auto [a, a_len] = utf8(at);
      check(state->api->alloc(state->session.ptr(), buf, uint64_t(nbytes), uint32_t(device), sid,
                              base, uint64_t(thread), a, a_len));
    }
  } catch (py::error_already_set& e) {
    // A refused alloc (a stale live block, see Recorder._drop_stale): Python's way. Anything
    // else (a Halt) goes on up.
    if (!e.matches(PyExc_ValueError)) throw;
    if (pended) memory.pending[base] = was;
    return false;
  }
  memory.next_buf = buf + 1;
  memory.bufs[base] = buf;
  // The stand-in's storages have no deallocation hook: a finalizer frees their buffer.
  if (state->standin) state->bridge.attr("finalize")(wrap(t), base, buf);
  return true;
}

std::vector<CAccess> c_accesses(const std::vector<Entry>& list) {
  std::vector<CAccess> out;
  out.reserve(list.size());
  for (const auto& e : list) {
    auto [label, n] = utf8(e.label);
    out.push_back({e.buf, e.off, uint64_t(e.len), label, n});
  }
  return out;
}

py::list py_accesses(const std::vector<Entry>& list) {
  py::list out;
  for (const auto& e : list) out.append(py::make_tuple(e.buf, e.off, e.len, e.label));
  return out;
}

// The session's `launch`.
void launch(uint64_t sid, const py::object& name, const std::vector<Entry>& reads,
            const std::vector<Entry>& writes, int64_t thread, const py::object& at) {
  if (state->api == nullptr) {
    state->session_launch(sid, name, py_accesses(reads), py_accesses(writes), thread, at);
    return;
  }
  auto r = c_accesses(reads);
  auto w = c_accesses(writes);
  auto [n, n_len] = utf8(name);
  auto [a, a_len] = utf8(at);
  check(state->api->launch(state->session.ptr(), sid, n, n_len, r.data(), r.size(), w.data(),
                           w.size(), uint64_t(thread), a, a_len));
}

// Records a GENERIC operator; false when the Python handler must do it instead.
bool generic(Ctx& ctx, const std::vector<c10::IValue>& outputs) {
  OpInfo& info = *ctx.info;
  // With pinned memory on the stand-in, which CPU tensor is a device tensor is Python's call.
  if (state->standin && PyObject_IsTrue(state->pin_starts.ptr())) return false;
  std::vector<Entry> reads, writes;
  reads.reserve(4);
  writes.reserve(2);
  int64_t first = -2;  // the device of the first device tensor, -2 for none yet
  bool tensor_input = false;
  for (const auto& in : info.inputs) {
    if (in.index >= ctx.inputs.size()) return false;
    std::vector<Entry>& out = in.write ? writes : reads;
    Acc a = each(ctx.inputs[in.index], in.shape, [&](const at::Tensor& t) {
      tensor_input = tensor_input || (t.defined() && !t.unsafeGetTensorImpl()->is_wrapped_number());
      Acc r = access(t, in.name, out);
      if (r == DEVICE && first == -2) first = state->standin ? 0 : t.get_device();
      return r;
    });
    if (a == FALLBACK) return false;
  }
  // The stand-in's operator on host tensors only: Python decides what it was.
  if (first == -2 && state->standin && tensor_input) return false;
  for (const auto& fr : info.fresh) {
    size_t i = fr.index < 0 ? 0 : size_t(fr.index);
    if (i >= outputs.size()) continue;
    Acc a = each(outputs[i], fr.shape, [&](const at::Tensor& t) {
      Acc r = access(t, fr.name, writes);
      if (r == DEVICE && first == -2) first = state->standin ? 0 : t.get_device();
      return r;
    });
    if (a == FALLBACK) return false;
  }
  if (first == -2) return true;  // no device tensor, no pinned memory: nothing to record
  int64_t thread = op_thread_number();
  py::object at = op_site();
  int64_t device = first < 0 ? 0 : first;
  uint64_t sid = stream_id(device, thread, at);
  PROBE_RETURN_IF(probe_stage() == 4, true);
  launch(sid, info.name, reads, writes, thread, at);
  return true;
}

// The arguments as the dispatch mode gets them: positional ones in `args`, keyword-only ones
// in `kwargs`.
std::pair<py::tuple, py::dict> python_args(const Ctx& ctx) {
  const OpInfo& info = *ctx.info;
  std::vector<py::object> args;
  py::dict kwargs;
  for (size_t i = 0; i < ctx.inputs.size() && i < info.kwarg_only.size(); ++i) {
    py::object v = torch::jit::toPyObject(ctx.inputs[i]);
    if (info.kwarg_only[i]) {
      if (!v.is_none()) kwargs[info.arg_names[i]] = v;
    } else {
      args.push_back(v);
    }
  }
  py::tuple t(args.size());
  for (size_t i = 0; i < args.size(); ++i) t[i] = args[i];
  return {t, kwargs};
}

py::object python_out(const std::vector<c10::IValue>& outputs) {
  if (outputs.empty()) return py::none();
  if (outputs.size() == 1) return torch::jit::toPyObject(outputs[0]);
  py::tuple t(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) t[i] = torch::jit::toPyObject(outputs[i]);
  return t;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* raw) {
  auto* ctx = static_cast<Ctx*>(raw);
  if (ctx == nullptr) return;
  open_op = false;
  bool had_held = held;
  held = false;
  State* s = ctx->owner;
  OpInfo& info = *ctx->info;
  if (!s->active.load() || stopped.load(std::memory_order_relaxed)) return;
  if (info.kind == NOTHING && !had_held) return;
  PROBE_RETURN_IF(probe_stage() == 2);
  py::gil_scoped_acquire gil;
  PROBE_RETURN_IF(probe_stage() == 3);
  // Re-checked with the GIL: uninstall (which holds it) may have run meanwhile.
  if (!s->active.load() || g_state.load() != s) return;
  ErrorKept kept;  // restored after InFlight's end (which may release Python objects)
  InFlight inflight(s);
  Using using_(s);
  Busy b;
  struct Forget {
    ~Forget() { forget_op_site(); }
  } forget;
  try {
    if (info.kind != NOTHING) op_thread_number();  // numbered as the mode numbers it, per operator
    if (std::uncaught_exceptions() > ctx->exceptions) {
      // The operator failed: only the records held while it ran are written (below).
    } else if (info.kind == GENERIC && generic(*ctx, fn.outputs())) {
      ++state->native_ops;
    } else if (info.kind != NOTHING) {
      ++state->python_ops;
      auto [args, kwargs] = python_args(*ctx);
      state->bridge.attr("after")(info.facts, args, kwargs, python_out(fn.outputs()));
    }
  } catch (py::error_already_set& e) {
    try {
      state->bridge.attr("internal_error")(info.name, e.value());
    } catch (...) {
    }
  } catch (const std::exception& e) {
    try {
      state->bridge.attr("internal_error")(info.name, py::str(e.what()));
    } catch (...) {
    }
  }
  // The records hooks made while it ran come after its own, on every way out (Bridge.after
  // wrote them already; then there is nothing left).
  if (had_held) {
    try {
      state->bridge.attr("flush")();
    } catch (py::error_already_set& e) {
      try {
        state->bridge.attr("internal_error")(info.name, e.value());
      } catch (...) {
      }
    }
  }
  if (PyErr_Occurred()) PyErr_Clear();
  // halt_on_error: the exception is raised last, once no more Python runs here (Python code
  // run after it would take it instead of the program).
  halt_later();
}

// Raises `halt` (a class, see _observer._halt_class) in this thread once it is back in Python.
void halt_later() {
  // A halt is pending only once the session stopped (Recorder.halted calls stop() before
  // `pending` is set); `stopped` is the live session's, so a callback whose session was
  // replaced meanwhile reads `pending` itself.
  if (!stopped.load(std::memory_order_relaxed) && g_state.load() == state) return;
  PyObject* halt = PyObject_GetAttrString(state->bridge.ptr(), "pending");
  if (halt != nullptr && halt != Py_None) {
    PyObject_SetAttrString(state->bridge.ptr(), "pending", Py_None);
    // A thread with no Python frame (autograd's device threads run backward) would never
    // raise it: the thread that enabled checking does, once back in Python.
    unsigned long thread = PyThread_get_thread_ident();
    if (PyEval_GetFrame() == nullptr) {
      PyObject* main = PyObject_GetAttrString(state->bridge.ptr(), "halt_thread");
      if (main != nullptr) thread = PyLong_AsUnsignedLong(main);
      Py_XDECREF(main);
    }
    if (PyThreadState_SetAsyncExc(thread, halt) == 0) {
      PySys_WriteStderr("streamsan.torch: halt_on_error: the thread to stop is gone\n");
    }
  }
  Py_XDECREF(halt);
  if (PyErr_Occurred()) PyErr_Clear();
}

// Runs a memory hook's native path, or `method` of the recorder when graphs are involved;
// errors go where the Python hooks' go (_hooks._route).
template <typename F>
void memory_hook(const char* method, uint64_t ptr, F native) {
  PROBE_RETURN_IF(probe_hooks_off());
  State* s = live();
  if (s == nullptr || stopped.load(std::memory_order_relaxed)) return;
  ErrorKept kept;  // restored after InFlight's end (which may release Python objects)
  InFlight inflight(s);
  Using using_(s);
  Busy b;
  try {
    if (plain_memory()) {
      native();
    } else {
      state->rec.attr(method)(ptr);
    }
  } catch (py::error_already_set& e) {
    try {
      state->bridge.attr("internal_error")(method, e.value());
    } catch (...) {
    }
  }
  halt_later();
}

}  // namespace

// PyTorch's allocation hook (torch.cuda._gpu_trace, called with the GIL held): the block's
// pool stream is the current stream (Recorder.on_memory_allocation).
void on_alloc(uint64_t ptr) {
  memory_hook("on_memory_allocation", ptr, [&] {
    Memory& memory = *state->memory;
    if (memory.bufs.count(ptr) != 0) {
      // Its deallocation was never reported: Python's way.
      state->rec.attr("on_memory_allocation")(ptr);
      return;
    }
    int64_t device = 0;  // the stand-in's one device
    if (!state->standin) {
      device = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getDevice().index();
    }
    memory.pending[ptr] = Pend{current_handle(device), device};
  });
}

// PyTorch's deallocation hook: the buffer's free, a host action (Recorder.on_memory_deallocation).
void on_free(uint64_t ptr) {
  memory_hook("on_memory_deallocation", ptr, [&] {
    Memory& memory = *state->memory;
    memory.pending.erase(ptr);
    auto found = memory.bufs.find(ptr);
    if (found == memory.bufs.end()) return;
    uint64_t buf = found->second;
    memory.bufs.erase(found);
    int64_t thread = thread_number();
    py::object at = site();
    if (state->api == nullptr) {
      state->session_free(buf, py::none(), thread, at);
    } else {
      auto [a, a_len] = utf8(at);
      check(state->api->free(state->session.ptr(), buf, uint64_t(thread), a, a_len));
    }
  });
}

// -- PyTorch's memory hooks without its Python trampoline ------------------------------------
//
// With GPU tracing on, PyTorch's allocator calls the interpreter GPUTrace holds for every block
// allocated and freed, twice per operator that makes a tensor. Torch's own implementation
// imports `torch.cuda` through Python's import machinery (for a package that runs importlib's
// `_handle_fromlist`), looks up `_gpu_trace.<registry>.fire_callbacks` and calls it: about half
// a microsecond per event before on_alloc or on_free starts. While they are the only listeners
// (Bridge._native_memory_hooks), GPUTrace holds an interpreter of ours instead: a copy of
// torch's vtable whose two memory slots call them directly, under the GIL and the TLS guard
// torch's takes; the other events, and the memory ones whenever ours are not engaged, still go
// to torch's. A slot's index is the Itanium C++ ABI's on x86-64 (a pointer to a virtual member
// function holds 1 + the slot's byte offset). Before the swap, the type info before torch's
// slots must name its vtable class and the memory slots must be two functions, and a self-test
// calls both replaced slots through the new interpreter (it proves the copy, not torch's layout,
// which the checks before it stand for); elsewhere, or if any fails, torch's stays.
namespace fast_trace {

using VTable = c10::impl::PyInterpreterVTable;

const c10::impl::PyInterpreter* torch_interp = nullptr;  // the one ours replaced
std::atomic<bool> alloc_on{false}, free_on{false};
thread_local int probing = 0;  // the self-test: 1 while it runs, then the slots it reached

// Our vtable: torch's copied (with the offset-to-top and type info words before its slots),
// the memory slots replaced. An object is only its vtable pointer.
constexpr long MAX_SLOTS = 512;
void* table[MAX_SLOTS + 2];
struct Object {
  void** vptr = nullptr;
} object;
c10::impl::PyInterpreter ours(reinterpret_cast<const VTable*>(&object));

// The vtable slot of virtual member function `f`, or -1 where the ABI is not the one known.
template <typename MemberFn>
long slot_of(MemberFn f) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  struct Rep {
    uintptr_t ptr;
    ptrdiff_t adj;
  };
  static_assert(sizeof(MemberFn) == sizeof(Rep), "an Itanium pointer to member function");
  Rep r;
  std::memcpy(&r, &f, sizeof r);
  if ((r.ptr & 1) == 0 || r.adj != 0 || (r.ptr - 1) % sizeof(void*) != 0) return -1;
  long slot = long((r.ptr - 1) / sizeof(void*));
  return slot < MAX_SLOTS ? slot : -1;
#else
  (void)f;
  return -1;
#endif
}

// The last slot to copy: every trace_gpu_* method (what GPUTrace's callers call) and the last
// virtual method declared (in torch 2.4 to 2.15), or -1.
long last_slot() {
  long last = -1;
  for (long slot : {slot_of(&VTable::reset_backward_hooks), slot_of(&VTable::trace_gpu_event_creation), slot_of(&VTable::trace_gpu_event_deletion),
                    slot_of(&VTable::trace_gpu_event_record), slot_of(&VTable::trace_gpu_event_wait),
                    slot_of(&VTable::trace_gpu_memory_allocation),
                    slot_of(&VTable::trace_gpu_memory_deallocation),
                    slot_of(&VTable::trace_gpu_stream_creation),
                    slot_of(&VTable::trace_gpu_device_synchronization),
                    slot_of(&VTable::trace_gpu_stream_synchronization),
                    slot_of(&VTable::trace_gpu_event_synchronization)}) {
    if (slot < 0) return -1;
    last = std::max(last, slot);
  }
  return last;
}

// In the slots past the copied ones: a method torch declares after those named above.
[[noreturn]] void trap() {
  std::fprintf(stderr, "streamsan.torch: PyTorch called a GPU trace method the native recorder "
                       "does not know; set STREAMSAN_TORCH_FAST_HOOKS=0\n");
  std::abort();
}

// Runs hook `f` as torch's trampoline would run the Python callback.
void run(void (*f)(uint64_t), uintptr_t ptr) {
  try {
    at::impl::MaybeSetTLSOnEntryGuard guard;
    py::gil_scoped_acquire gil;
    f(ptr);
  } catch (const std::exception& e) {
    // Inside the allocator: nowhere for an exception to go (torch's logs and goes on too).
    std::fprintf(stderr, "streamsan.torch: a memory hook failed: %s\n", e.what());
  }
}

// The allocation (`Alloc`) or deallocation slot: streamsan's hook directly while it is the
// only listener, else torch's own slot.
template <bool Alloc>
void memory_slot(const VTable*, c10::DeviceType type, uintptr_t ptr) {
  if (probing) {
    probing |= Alloc ? 2 : 4;
    return;
  }
  const std::atomic<bool>& on = Alloc ? alloc_on : free_on;
  if (type == c10::DeviceType::CUDA && on.load(std::memory_order_relaxed) && Py_IsInitialized()) {
    return run(Alloc ? &on_alloc : &on_free, ptr);
  }
  if constexpr (Alloc) {
    (*torch_interp)->trace_gpu_memory_allocation(type, ptr);
  } else {
    (*torch_interp)->trace_gpu_memory_deallocation(type, ptr);
  }
}

// Puts ours in GPUTrace (once); false where it cannot be.
bool swap_in() {
  const c10::impl::PyInterpreter* current = c10::impl::GPUTrace::get_trace();
  if (current == &ours) return true;
  if (current == nullptr) return false;  // GPU tracing is off
  // Built once: a thread may still be calling through ours after an earlier restore.
  if (current == torch_interp && object.vptr != nullptr) {
    c10::impl::GPUTrace::gpuTraceState.store(&ours, std::memory_order_release);
    return true;
  }
  if (torch_interp != nullptr) return false;  // another interpreter since: leave it be
  // Torch's slots are copied (the other events go through them to torch's own implementation);
  // the two memory slots are replaced.
  long a = slot_of(&VTable::trace_gpu_memory_allocation);
  long f = slot_of(&VTable::trace_gpu_memory_deallocation);
  long n = last_slot() + 1;
  if (a < 0 || f < 0 || n <= 0) return false;
  void* const* theirs = *reinterpret_cast<void* const* const*>(current->vtable_);
  // What the ABI says should be there: the type info of torch's vtable class before the slots
  // (nothing without RTTI), and two distinct memory slots.
  auto* type = static_cast<const std::type_info*>(theirs[-1]);
  if (type == nullptr || std::strstr(type->name(), "PyInterpreterVTable") == nullptr) return false;
  if (theirs[a] == nullptr || theirs[f] == nullptr || theirs[a] == theirs[f]) return false;
  std::memcpy(table, theirs - 2, size_t(n + 2) * sizeof(void*));
  for (long i = n; i < MAX_SLOTS; ++i) table[2 + i] = reinterpret_cast<void*>(&trap);
  table[2 + a] = reinterpret_cast<void*>(&memory_slot<true>);
  table[2 + f] = reinterpret_cast<void*>(&memory_slot<false>);
  object.vptr = table + 2;
  torch_interp = current;
  // Called as the allocator calls them (through a pointer the compiler cannot see through).
  const c10::impl::PyInterpreter* volatile through = &ours;
  probing = 1;
  (*through)->trace_gpu_memory_allocation(c10::DeviceType::CUDA, 0);
  (*through)->trace_gpu_memory_deallocation(c10::DeviceType::CUDA, 0);
  int reached = probing;
  probing = 0;
  if (reached != 7) {
    object.vptr = nullptr;
    return false;
  }
  c10::impl::GPUTrace::gpuTraceState.store(&ours, std::memory_order_release);
  return true;
}

}  // namespace fast_trace

// Engages (or not) the memory hooks without PyTorch's trampoline; with both off, torch's
// interpreter goes back to GPUTrace. Returns whether ours is in place (the GIL held).
bool fast_memory_hooks(bool alloc, bool free) {
  using namespace fast_trace;
  if (!alloc && !free) {
    alloc_on = free_on = false;
    const c10::impl::PyInterpreter* expected = &ours;
    c10::impl::GPUTrace::gpuTraceState.compare_exchange_strong(expected, torch_interp);
    return false;
  }
  if (!swap_in()) return false;
  alloc_on = alloc;
  free_on = free;
  return true;
}

// For tests: whether GPUTrace holds the observer's interpreter.
bool gpu_trace_is_ours() { return c10::impl::GPUTrace::get_trace() == &fast_trace::ours; }

// For tests: an event as PyTorch makes it, through GPUTrace, for CUDA: "alloc" or "free" of
// `ptr`, or "device_sync" (one of the events torch's own slots handle).
void trace_event(const std::string& kind, uint64_t ptr) {
  const c10::impl::PyInterpreter* interp = c10::impl::GPUTrace::get_trace();
  if (interp == nullptr) throw std::runtime_error("GPU tracing is off");
  if (kind == "alloc") {
    (*interp)->trace_gpu_memory_allocation(c10::DeviceType::CUDA, ptr);
  } else if (kind == "free") {
    (*interp)->trace_gpu_memory_deallocation(c10::DeviceType::CUDA, ptr);
  } else if (kind == "device_sync") {
    (*interp)->trace_gpu_device_synchronization(c10::DeviceType::CUDA);
  } else {
    throw std::invalid_argument("unknown event kind: " + kind);
  }
}

// The recorder's Memory, copied into one of ours, which the recorder uses from now on.
std::shared_ptr<Memory> adopt_memory(const py::object& rec) {
  auto memory = std::make_shared<Memory>();
  py::object old = rec.attr("memory");
  for (auto item : old.attr("bufs").attr("items")()) {
    auto kv = item.cast<py::tuple>();
    memory->bufs[kv[0].cast<uint64_t>()] = kv[1].cast<uint64_t>();
  }
  for (auto item : old.attr("pending").attr("items")()) {
    auto kv = item.cast<py::tuple>();
    memory->pending[kv[0].cast<uint64_t>()] = kv[1].cast<Pend>();
  }
  memory->next_buf = old.attr("next_buf").cast<uint64_t>();
  rec.attr("use_memory")(py::cast(memory));
  return memory;
}

// Starts observing for `bridge` (an _observer.Bridge).
void install(py::object bridge) {
  if (live() != nullptr) throw std::runtime_error("the native recorder is already installed");
  // The previous session's Python objects go now (the GIL is held); its struct stays.
  if (State* old = g_state.load()) old->release();
  auto* s = new State();
  s->bridge = bridge;
  s->rec = bridge.attr("rec");
  s->standin = bridge.attr("standin").cast<bool>();
  s->device = s->rec.attr("device");
  s->session = s->rec.attr("session");
  try {
    auto native = py::module_::import("streamsan._native");
    if (bridge.attr("c_entry").cast<bool>() && py::isinstance(s->session, native.attr("Session")) &&
        py::hasattr(native, "_c_api")) {
      auto* api = static_cast<const CApi*>(
          PyCapsule_GetPointer(native.attr("_c_api").ptr(), "streamsan._native._c_api"));
      if (api != nullptr && api->version == C_API_VERSION) s->api = api;
    }
  } catch (py::error_already_set&) {
    // No native Session here (tests with a stand-in session): the Python methods.
  }
  if (PyErr_Occurred()) PyErr_Clear();
  s->session_launch = s->rec.attr("session").attr("launch");
  s->session_alloc = s->rec.attr("session").attr("alloc");
  s->session_free = s->rec.attr("session").attr("free");
  s->memory = adopt_memory(s->rec);
  s->thread_ids = s->rec.attr("thread_ids");
  s->number_thread = s->rec.attr("threads").attr("number");
  s->pin_starts = s->rec.attr("pin_starts");
  for (const auto* name : {"unmodelled", "graph_mapped", "graph_owned", "graph_sizes",
                           "graph_blocks", "mapped_refs", "capturing"}) {
    s->graph_tables.push_back(s->rec.attr(name));
  }
  s->host_set = s->standin ? s->device.attr("_host") : py::set();
  auto frames = py::module_::import("streamsan.torch._frames");
  s->files = frames.attr("_files");
  s->sites = frames.attr("_sites");
  s->classify = frames.attr("_classify");
  stopped = false;
  g_state = s;
  s->handle = at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end)
                                        .needsInputs(true)
                                        .needsOutputs(true)
                                        .scopes({at::RecordScope::FUNCTION}));
}

// Stops observing. Callbacks in flight on other threads see the state inactive and stop.
py::tuple uninstall() {
  State* s = live();
  if (s == nullptr) return py::make_tuple(0, 0);
  at::removeCallback(s->handle);
  s->active = false;
  return py::make_tuple(s->native_ops, s->python_ops);
}

// True when an operator this recorder records is running on this thread; the hook records
// made now are then held (Recorder.emit_hooked) and written after it.
bool hold() {
  if (!open_op) return false;
  held = true;
  return true;
}

// The session halted (halt_on_error): operators are no longer recorded.
void stop() { stopped = true; }

// Whether the live session's records go through its C entry (for tests).
bool c_entry_in_use() {
  State* s = live();
  return s != nullptr && s->api != nullptr;
}

// Ignores (true) or observes again (false) the operators this thread runs; returns the old
// setting. For operators the recorder accounts for itself (printing a tensor).
bool quiet(bool on) {
  bool old = busy;
  busy = on;
  return old;
}

// `key` as an address: false for anything else (not an int, negative, 2**64 or more).
bool try_key(const py::object& key, uint64_t& out) {
  if (!PyLong_Check(key.ptr())) return false;
  out = PyLong_AsUnsignedLongLong(key.ptr());
  if (out == uint64_t(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  return true;
}

// A table of Memory as a Python mapping of int addresses: the dict operations the recorder's
// handlers use (module-local, so that two builds of this file can live in one process). What
// iterates returns a snapshot, copied before any Python object is made: a collection run by
// those allocations may free storages, whose hooks erase entries.
template <typename Table>
void bind_table(py::module_& m, const char* name) {
  using Value = typename Table::mapped_type;
  auto snapshot = [](const Table& t) {
    return std::vector<std::pair<uint64_t, Value>>(t.begin(), t.end());
  };
  // The entry of `key`, or the end for none (and for a key no address can be).
  auto find = [](auto& t, const py::object& key) {
    uint64_t k;
    return try_key(key, k) ? t.find(k) : t.end();
  };
  auto missing_key = [](const py::object& key) {
    return py::key_error(py::repr(key).cast<std::string>());
  };
  // Removes the entry of `key` and returns its value, copied before any Python object is made
  // (making one may collect, and a collection may erase entries); none for no entry.
  auto take = [=](Table& t, const py::object& key) -> std::optional<Value> {
    auto it = find(t, key);
    if (it == t.end()) return std::nullopt;
    Value v = it->second;
    t.erase(it);
    return v;
  };
  auto keys = [=](const Table& t) {
    py::list out;
    for (const auto& kv : snapshot(t)) out.append(py::int_(kv.first));
    return out;
  };
  py::class_<Table>(m, name, py::module_local())
      .def("__len__", [](const Table& t) { return t.size(); })
      .def("__bool__", [](const Table& t) { return !t.empty(); })
      .def("__contains__",
           [=](const Table& t, const py::object& key) { return find(t, key) != t.end(); })
      .def("__getitem__",
           [=](const Table& t, const py::object& key) -> py::object {
             auto it = find(t, key);
             if (it == t.end()) throw missing_key(key);
             return py::cast(it->second);
           })
      .def("__setitem__", [](Table& t, uint64_t key, const Value& v) { t[key] = v; })
      .def("__delitem__",
           [=](Table& t, const py::object& key) {
             auto it = find(t, key);
             if (it == t.end()) throw missing_key(key);
             t.erase(it);
           })
      .def(
          "get",
          [=](const Table& t, const py::object& key, py::object missing) -> py::object {
            auto it = find(t, key);
            return it == t.end() ? missing : py::cast(it->second);
          },
          py::arg("key"), py::arg("default") = py::none())
      .def("pop",
           [=](Table& t, const py::object& key) -> py::object {
             if (auto v = take(t, key)) return py::cast(*v);
             throw missing_key(key);
           })
      .def("pop",
           [=](Table& t, const py::object& key, py::object missing) -> py::object {
             if (auto v = take(t, key)) return py::cast(*v);
             return missing;
           })
      .def("items",
           [=](const Table& t) {
             py::list out;
             for (const auto& [k, v] : snapshot(t)) out.append(py::make_tuple(k, v));
             return out;
           })
      .def("keys", keys)
      .def("__iter__", [=](const Table& t) { return py::iter(keys(t)); })
      .def("__repr__", [=](const Table& t) {
        py::dict out;
        for (const auto& [k, v] : snapshot(t)) out[py::int_(k)] = py::cast(v);
        return py::str("{}({})").format(name, py::repr(out));
      });
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  bind_table<BufTable>(m, "BufTable");
  bind_table<PendTable>(m, "PendTable");
  py::class_<Memory, std::shared_ptr<Memory>>(m, "Memory", py::module_local())
      .def(py::init<>())
      .def_property_readonly(
          "bufs", [](Memory& mem) { return &mem.bufs; }, py::return_value_policy::reference_internal)
      .def_property_readonly(
          "pending", [](Memory& mem) { return &mem.pending; },
          py::return_value_policy::reference_internal)
      .def_readwrite("next_buf", &Memory::next_buf);
  m.def("install", &install);
  m.def("uninstall", &uninstall);
  m.def("hold", &hold);
  m.def("quiet", &quiet);
  m.def("stop", &stop);
  m.def("c_entry_in_use", &c_entry_in_use);
  m.def("on_alloc", &on_alloc);
  m.def("on_free", &on_free);
  m.def("fast_memory_hooks", &fast_memory_hooks);
  m.def("_trace_event", &trace_event, py::call_guard<py::gil_scoped_release>());
  m.def("_gpu_trace_is_ours", &gpu_trace_is_ours);
#ifdef STREAMSAN_PROBE
  m.def("set_probe", [](int level) { probe = level; });
#endif
}
