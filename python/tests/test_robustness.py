"""What real programs do that the schema rules alone get wrong or that used to stop the
program: factories that take a tensor for its metadata, a pin-memory thread handing batches
over, higher-order operators, sparse and nested tensors, a print inside an operator, a halt
raised inside a wrapped method. CPU stand-in; the real engine gives the verdicts."""

import threading

import pytest
import torch

from conftest import dispatch_mode_only

import streamsan.torch as st
from streamsan.torch import _ops, _patches
from streamsan.torch._schema import facts_of

S1 = 0x7000


def test_like_factories_do_not_read_their_template(real):
    y = torch.empty(1024)
    with real.stream(S1):
        y.fill_(1)  # y written on a side stream
    # Only y's shape, dtype and device are used: no read of y's data on the default stream.
    for make in (torch.zeros_like, torch.ones_like, torch.rand_like, torch.randn_like,
                 lambda t: torch.full_like(t, 3.0), lambda t: t.new_zeros(4), lambda t: t.new_ones(4),
                 lambda t: t.new_full((4,), 2.0), lambda t: torch.randint_like(t, 10)):
        make(y)
    assert real.h.races == 0, real.h.report_text()
    y.sum()  # a real read still races
    assert real.h.races == 1


def test_a_batch_pinned_on_another_thread_and_copied_on_this_one_is_no_race(real):
    # DataLoader(pin_memory=True): its pin thread makes each pinned batch (aten::_pin_memory)
    # and hands it over a queue; the main thread copies it to the GPU, non_blocking.
    facts = facts_of(torch.ops.aten._pin_memory.default)
    batches = []

    def pin_thread():
        src = torch.ones(1024)
        out = torch.empty(1024)
        out.copy_(src)  # (the CPU fill the real operator makes)
        batches.append(out)
        _ops.pin(real.rec, facts, (src,), {}, out)

    with torch.utils._python_dispatch._disable_current_modes():
        t = threading.Thread(target=pin_thread)
        t.start()
        t.join()
    dst = torch.empty(1024)
    dst.copy_(batches[0], non_blocking=True)
    assert real.h.races == 0, real.h.report_text()


@dispatch_mode_only(
    "the native recorder sees the operators inside a higher-order operator and records them, where the dispatch mode counts the operator unchecked"
)
def test_higher_order_operators_run_and_are_counted_unchecked(real):
    x = torch.randn(4)
    y = torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t - 1, (x,))
    assert y.shape == (4,)
    assert real.rec.unchecked >= 1
    assert real.rec.internal_errors == []


@pytest.mark.parametrize("kind", ["sparse", "nested"])
def test_tensors_without_one_strided_storage_are_skipped_not_fatal(real, kind):
    if kind == "sparse":
        t = torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, 2.0]), (2, 2))
        out = t.to_dense()
        assert out.sum().item() == 3.0
    else:
        t = torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)])
        out = t * 2
        assert out.is_nested
    assert real.rec.unchecked >= 1


def test_a_print_inside_an_operator_keeps_the_operators_records(real, capsys):
    @torch.library.custom_op("streamsan_tests::debug_print", mutates_args=())
    def debug_print(x: torch.Tensor) -> torch.Tensor:
        print("inside:", x[:2])
        return x * 2

    y = debug_print(torch.ones(8))
    assert y.sum().item() == 16.0
    assert "inside:" in capsys.readouterr().out
    assert real.rec.internal_errors == []


def test_a_halt_inside_a_wrapped_method_stops_recording_and_exits_with_the_code(tmp_path):
    from streamsan import _native
    from streamsan.torch._device import CpuStandIn

    session = _native.Session(report=str(tmp_path / "r.txt"), halt_on_error=True, exitcode=66)
    dev = CpuStandIn()
    h = st.enable(_session=session, _device=dev)
    try:
        rec = h.recorder

        class Graph:
            pass

        g = Graph()
        replay = _patches._after(lambda self: None, lambda rec, g, _: rec.on_graph_launch(g))
        x = torch.zeros(1024)
        with dev.use_stream(S1):
            rec.on_graph_begin(g)
            x.fill_(1)  # a node of the graph
            rec.on_graph_end(g)
        x.fill_(2)  # the default stream writes x
        with pytest.raises(SystemExit) as halt:
            with dev.use_stream(S1):
                replay(g)  # the replay's node writes x on S1, unordered: halt
        assert halt.value.code == 66
        assert not rec.active
    finally:
        st.disable()  # no error from a session that already finished


def test_a_copy_between_devices_is_ordered_by_the_events_pytorch_puts_around_it(tmp_path):
    # copy_device_to_device (aten/src/ATen/native/cuda/Copy.cu): record an event on the
    # destination's stream and make the copying stream wait on it, copy, then the reverse. The
    # hooks fire inside the operator; a dispatch mode below streamsan's plays PyTorch's C++.
    from torch.utils._python_dispatch import TorchDispatchMode

    from streamsan import _native
    from streamsan.torch._device import CpuStandIn

    on_device1 = set()

    class TwoDevices(CpuStandIn):
        cur = 0

        def device_index(self, t):
            return 1 if t.untyped_storage().data_ptr() in on_device1 else 0

        def current_device(self):
            return self.cur

    dev = TwoDevices()

    class CopyHooks(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            rec = st.enabled().recorder
            cross = func is torch.ops.aten.copy_.default and dev.device_index(args[0]) != dev.device_index(args[1])
            if cross:
                dst, src = dev.device_index(args[0]), dev.device_index(args[1])
                dev.cur = dst
                rec.on_event_record(0xE1, 0)  # dst_ready on the destination's stream
                dev.cur = src
                rec.on_event_wait(0xE1, 0)  # the copying stream waits for it
            out = func(*args, **(kwargs or {}))
            if cross:
                rec.on_event_record(0xE2, 0)  # src_ready on the copying stream
                dev.cur = dst
                rec.on_event_wait(0xE2, 0)  # the destination's stream waits for it
                dev.cur = 0
            return out

    session = _native.Session(report=str(tmp_path / "r.txt"))
    with CopyHooks():
        h = st.enable(_session=session, _device=dev)
        try:
            x0 = torch.ones(1024)  # device 0
            y1 = torch.empty(1024)
            on_device1.add(y1.untyped_storage().data_ptr())
            y1.fill_(3)  # device 1's default stream
            y1.copy_(x0)  # ordered after the fill by dst_ready
            y1.sum()  # device 1's stream, ordered after the copy by src_ready
        finally:
            st.disable()
    assert h.races == 0, h.report_text()
