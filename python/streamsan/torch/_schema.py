"""What an ATen operator reads and writes, from its schema, worked out once per OpOverload.

Why: the dispatch mode runs for every operator, so it must not walk a schema each time. The
first call of an OpOverload builds an `OpFacts` (which argument positions and keywords hold
tensors, which of them the operator writes, which outputs are fresh, and whether the operator
needs special handling); later calls find it in `FACTS`, a dict keyed by the OpOverload.

The rules (the same as PyTorch's CUDA Sanitizer, torch/cuda/_sanitizer.py, ArgumentHandler):
- an argument whose schema type is `Tensor(a!)` (alias_info.is_write) is written: in-place
  `self`, `out=` arguments, and a custom operator's `mutates_args`;
- an argument `Tensor(a)` (an alias that is not written) belongs to a view: no access;
- any other tensor argument (also inside `Tensor[]` / `Tensor?[]` lists) is read;
- a return without alias_info is a fresh output, written; a return with alias_info is an input
  again (a view, or the written argument of an in-place / out= operator): nothing more.
Operators that launch no kernel (allocation without initialization, metadata-only in-place
operators, views whose schema lacks alias annotations) touch nothing; copies, `.item()`,
`record_stream`, pinning and empty-with-pin_memory get their own handling (kinds below).
"""

import torch

GENERIC = 0  # a kernel launch (or a host access on pinned tensors) by the schema rules
NOTHING = 1  # launches nothing, touches nothing
COPY = 2  # aten::copy_
TO_COPY = 3  # aten::_to_copy
SCALAR = 4  # aten::_local_scalar_dense (.item()): a synchronous device-to-host copy
RECORD_STREAM = 5  # aten::record_stream
PIN = 6  # aten::_pin_memory / pin_memory: a pinned copy made on the host
EMPTY = 7  # empty-like factories: nothing, unless pin_memory=True (a pinned block)

_SPECIAL = {
    "aten::copy_": COPY,
    "aten::_to_copy": TO_COPY,
    "aten::_local_scalar_dense": SCALAR,
    "aten::record_stream": RECORD_STREAM,
    "aten::_pin_memory": PIN,
    "aten::pin_memory": PIN,
    "aten::empty": EMPTY,
    "aten::empty_strided": EMPTY,
    "aten::empty_like": EMPTY,
    "aten::new_empty": EMPTY,
    "aten::new_empty_strided": EMPTY,
    "aten::empty_permuted": EMPTY,
}

# Operators that launch no kernel. By base name: every overload of each.
NO_KERNEL = frozenset(
    [
        # Queries and metadata.
        "aten::is_pinned",
        "aten::is_same_size",
        "aten::is_set_to",
        "aten::_has_same_storage_numel",
        "aten::sym_size",
        "aten::sym_stride",
        "aten::sym_numel",
        "aten::sym_storage_offset",
        "aten::size",
        "aten::stride",
        "aten::numel",
        "aten::dim",
        "aten::_version",
        "aten::_nested_tensor_size",
        # In-place operators that change only metadata (their schema says `Tensor(a!)`).
        "aten::set_",
        "aten::resize_",  # a growing resize_ also copies: not recorded (a known gap)
        "aten::resize_as_",
        "aten::_resize_output_",
        "aten::as_strided_",
        "aten::unsqueeze_",
        "aten::squeeze_",
        "aten::t_",
        "aten::transpose_",
        "aten::swapdims_",
        "aten::swapaxes_",
        "aten::detach_",
        "aten::requires_grad_",
        "aten::_coalesced_",
        # Views whose schema has no alias annotation.
        "aten::_unsafe_view",
        "aten::lift_fresh",
    ]
)

ONE, LIST = 1, 2


class OpFacts:
    """What one OpOverload touches.

    inputs: tuple of (position, name, is_write, shape) for each tensor-typed argument that is
      accessed; position is its index in `args`, or -1 for a keyword-only argument (looked up
      by name in `kwargs`); shape is ONE or LIST.
    fresh: tuple of (index, name, shape) for each fresh output; index -1 for the whole result
      of a single-return operator.
    """

    __slots__ = ("op", "name", "kind", "inputs", "fresh")

    def __init__(self, op, name, kind, inputs=(), fresh=()):
        self.op = op
        self.name = name
        self.kind = kind
        self.inputs = inputs
        self.fresh = fresh

    def __repr__(self):
        return f"OpFacts({self.name!r}, kind={self.kind}, inputs={self.inputs}, fresh={self.fresh})"


# id(OpOverload) -> OpFacts. Keyed by id: OpOverload's __hash__ is a Python method, slower
# than the rest of the lookup; `facts.op is func` confirms the entry (OpOverloads live as long
# as their operator is registered, so an id is reused only after that).
FACTS = {}
# How many OpOverloads had their facts worked out (a cache miss each): for tests.
stats = {"learned": 0}


def _tensor_shape(t):
    """ONE for Tensor / Tensor?, LIST for Tensor[] / Tensor?[], else None."""
    if isinstance(t, torch._C.OptionalType):
        t = t.getElementType()
    if isinstance(t, torch._C.TensorType):
        return ONE
    if isinstance(t, torch._C.ListType):
        e = t.getElementType()
        if isinstance(e, torch._C.OptionalType):
            e = e.getElementType()
        if isinstance(e, torch._C.TensorType):
            return LIST
    return None


def facts_of(func):
    """The facts of OpOverload `func`, worked out on its first call."""
    f = FACTS.get(id(func))
    if f is None or f.op is not func:
        f = learn(func)
    return f


def learn(func):
    """Works out the facts of OpOverload `func` and caches them in FACTS."""
    schema = func._schema
    base = schema.name  # "aten::add", without the overload
    name = func.name()  # "aten::add.Tensor" ("aten::clone" for a default overload)
    kind = _SPECIAL.get(base)
    if kind is None:
        kind = NOTHING if base in NO_KERNEL else GENERIC
    inputs = []
    fresh = []
    if kind == GENERIC:
        for i, arg in enumerate(schema.arguments):
            shape = _tensor_shape(arg.type)
            if shape is None:
                continue
            alias = arg.alias_info
            if alias is not None and not alias.is_write:
                continue  # a view's input
            write = alias is not None and alias.is_write
            position = -1 if arg.kwarg_only else i
            inputs.append((position, arg.name, write, shape))
        returns = schema.returns
        for i, ret in enumerate(returns):
            shape = _tensor_shape(ret.type)
            if shape is None or ret.alias_info is not None:
                continue
            label = ret.name or ("result" if len(returns) == 1 else f"result{i}")
            fresh.append((-1 if len(returns) == 1 else i, label, shape))
        if not inputs and not fresh:
            kind = NOTHING
    facts = OpFacts(func, name, kind, tuple(inputs), tuple(fresh))
    FACTS[id(func)] = facts
    stats["learned"] += 1
    return facts
