"""The TorchDispatchMode that sees every ATen operator and hands it to its handler in `_ops`.

Why a dispatch mode: it sees operators after autograd and decompositions of composite
operators, with their schema, on every device, which is exactly the granularity of kernel
launches. The per-operator path is kept short: one dict lookup for the operator's facts (its
schema is walked only the first time), the operator itself, the handler, one call into the
Session. Hook records fired while the operator ran are held in a per-thread queue and written
after the operator's own record (see `_recorder`).

A `Halt` (SystemExit) raised by the Session under halt_on_error stops recording and
propagates to the program. A record the engine refuses (ValueError) never reaches the program:
it is kept as an internal error and reported when recording ends.
"""

import threading

from torch._ops import OpOverload
from torch.utils._python_dispatch import TorchDispatchMode

from ._schema import COPY, FACTS, NOTHING, TO_COPY, learn

_get_ident = threading.get_ident


# Copies between devices order themselves with events around the copy.
_COPIES = frozenset([COPY, TO_COPY])


def _before_the_copy(rec, queue):
    """Writes the hook records that precede a copy's own record and returns the rest. A copy
    between devices (aten/src/ATen/native/cuda/Copy.cu, copy_device_to_device) first records an
    event on the destination's stream and makes the copying stream wait on it, copies, then
    records an event on the copying stream that the destination's stream waits on: the records
    up to the first wait come before the copy. Other copies' hook records (the pinned
    allocator's event record after an async copy) all come after."""
    for i, (method, _args, _kwargs) in enumerate(queue):
        if method == "wait":
            rec.flush(queue[: i + 1])
            return queue[i + 1 :]
    return queue


class SanitizerMode(TorchDispatchMode):
    # Higher-order operators (torch.cond, flex_attention, ...) come here whole: they run as they
    # are, and the operators inside them are not seen (counted as unchecked).
    supports_higher_order_operators = True

    @classmethod
    def _should_skip_dynamo(cls):
        # Dynamo must not trace into the recorder: torch.compile, and operators that compile
        # internally (flex_attention in eager mode), would inline it and fail or warn. torch
        # >= 2.9 then runs __torch_dispatch__ under torch._dynamo.disable, about 1 us per
        # operator on the development machine (python/tests/bench_overhead.py).
        return True

    def __init__(self, recorder):
        super().__init__()
        self.rec = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        rec = self.rec
        if not rec.active:
            return func(*args, **kwargs)
        if not isinstance(func, OpOverload):
            rec.unchecked += 1
            return func(*args, **kwargs)
        facts = FACTS.get(id(func))
        if facts is None or facts.op is not func:
            facts = learn(func)
        kind = facts.kind
        if kind == NOTHING:
            return func(*args, **kwargs)
        tid = _get_ident()
        queues = rec.queues
        queue = queues[tid] = []
        thread = rec.thread_ids.get(tid)
        if thread is None:
            thread = rec.threads.number(tid)
        site = rec.op_site = [tid, thread, None]
        try:
            if rec.skip and func in rec.skip:
                out = None
            else:
                out = func(*args, **kwargs)
        except BaseException:
            queues.pop(tid, None)
            if queue:
                rec.flush(queue)
            if rec.op_site is site:
                rec.op_site = None
            raise
        queues.pop(tid, None)
        after_operator(rec, facts, args, kwargs, out, queue, site)
        return out


def register_higher_order_operators(mode_cls):
    """torch before 2.5 does not look at `supports_higher_order_operators`: a higher-order
    operator under a mode it has no rule for fails ("Current active mode ... not registered").
    There, each known one gets the rule newer torch applies: the mode's __torch_dispatch__,
    with the mode popped."""
    import inspect

    import torch

    hop_class = getattr(torch._ops, "HigherOrderOperator", None)
    if hop_class is None:
        return
    try:
        if "supports_higher_order_operators" in inspect.getsource(hop_class.dispatch):
            return
    except (OSError, TypeError):
        return
    for hop in list(getattr(torch._ops, "_higher_order_ops", {}).values()):
        table = getattr(hop, "python_key_mode_table", None)
        if table is None or mode_cls in table:
            continue

        def rule(mode, *args, _hop=hop, **kwargs):
            return mode.__torch_dispatch__(_hop, [], args, kwargs)

        hop.py_impl(mode_cls)(rule)


def after_operator(rec, facts, args, kwargs, out, queue, site):
    """What happens once an operator ran (here and with the native recorder, _observer.py):
    its handler makes its records, then the hook records held while it ran are written."""
    kind = facts.kind
    try:
        rec.op_site = site
        if queue and kind in _COPIES:
            queue = _before_the_copy(rec, queue)
        sync = rec.handlers[kind](facts, args, kwargs, out)
        if sync is None:
            if queue:
                rec.flush(queue)
        else:
            rec.flush_then_sync(queue, *sync)
        queue = None
    except SystemExit:
        rec.halted()
        raise
    except Exception as e:
        # A record the engine refused, or a tensor the recorder does not understand (a
        # recorder bug, or a program doing what it does not model): the program goes on,
        # the error is reported at the end. The hook records still happened.
        rec.internal_error(facts.name, e)
        if queue:
            try:
                rec.flush(queue)
            except SystemExit:  # a held record halted the session
                rec.halted()
                raise
            except Exception as e2:
                rec.internal_error(facts.name, e2)
    finally:
        if rec.op_site is site:
            rec.op_site = None
