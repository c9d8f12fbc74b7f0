"""Verdicts of the real engine on recorded programs: each racy program has a fixed twin.

CPU tensors play device tensors (the stand-in), `real.stream(h)` makes h the current stream,
and the Recorder's hook handlers stand for PyTorch's CUDA hooks. Stream 0 is the legacy
default stream; 0x7000 and 0x8000 are PyTorch-style non-blocking side streams.
"""

import json

import pytest
import torch

from conftest import line_of, dispatch_mode_only

S1, S2 = 0x7000, 0x8000


def cuda_stream(handle):
    return torch.Stream(stream_id=handle, device_index=0, device_type=1)


def races(real):
    return real.h.races


def test_cross_stream_read_after_write_races(real):
    x = torch.ones(1024)  # stream 0
    with real.stream(S1):
        x.sum()  # RACY-READ
    assert races(real) == 1
    text = real.h.report_text()
    assert "read-after-write" in text
    assert f"test_verdicts.py:{line_of('RACY-READ', __file__)}" in text
    assert '"aten::sum"' in text and "self: float32[1024]" in text
    report = json.loads(real.h.report_json())
    assert report["races"][0]["kind"] == "read-after-write"


def test_event_wait_orders_the_read(real):
    x = torch.ones(1024)
    real.rec.on_event_creation(0xE1)
    real.rec.on_event_record(0xE1, 0)
    real.rec.on_event_wait(0xE1, S1)
    with real.stream(S1):
        x.sum()
    assert races(real) == 0


def test_interleaved_views_on_two_streams_do_not_race(real):
    x = torch.zeros(64)
    real.rec.on_device_synchronization()
    with real.stream(S1):
        x[::2].fill_(1)
    with real.stream(S2):
        x[1::2].fill_(2)
    assert races(real) == 0


def test_overlapping_strided_views_race(real):
    x = torch.zeros(64)
    real.rec.on_device_synchronization()
    with real.stream(S1):
        x[::2].fill_(1)
    with real.stream(S2):
        x[::4].fill_(2)  # every element of x[::4] is in x[::2]
    assert races(real) == 1
    assert "write-after-write" in real.h.report_text()


def test_column_slices_race_only_where_they_overlap(real):
    m = torch.zeros(8, 8)
    real.rec.on_device_synchronization()
    with real.stream(S1):
        m[:, :4].fill_(1)
    with real.stream(S2):
        m[:, 4:].fill_(2)
    assert races(real) == 0
    with real.stream(S2):
        m[:, 3:5].fill_(3)  # column 3 was written on S1
    assert races(real) == 1


def allocator_reuse(real, record_stream):
    a = torch.empty(1024)
    addr = a.untyped_storage().data_ptr()
    real.rec.on_memory_allocation(addr)  # a's block, in the default stream's pool
    a.fill_(1)
    real.rec.on_device_synchronization()
    with real.stream(S1):
        y = a.sum()  # the side stream reads a
    if record_stream:
        a.record_stream(cuda_stream(S1))
    real.rec.on_memory_deallocation(addr)  # `del a`: the block goes back to the pool
    real.rec.on_memory_allocation(addr)  # `b = torch.empty(...)`: the same block
    a.fill_(5)  # b.fill_(5) on the default stream
    return y


def test_block_reused_while_another_stream_reads_it_races(real):
    allocator_reuse(real, record_stream=False)
    assert races(real) == 1
    assert "write-after-read" in real.h.report_text()


@dispatch_mode_only(
    "the CPU stand-in cannot run record_stream (no CPU kernel), which the dispatch mode records without running; the observer sees only operators that run (GPU runs cover it)"
)
def test_record_stream_makes_the_reuse_wait(real):
    allocator_reuse(real, record_stream=True)
    assert races(real) == 0


def pinned_readback(real, sync):
    x = torch.ones(1024)
    h = torch.empty(1024)
    real.rec.declare_pinned(h)
    h.copy_(x, non_blocking=True)  # async D2H on the default stream
    sync(real)
    return h.sum()  # a host read of the pinned buffer


def test_reading_pinned_memory_before_the_copy_lands_races(real):
    pinned_readback(real, lambda r: None)
    assert races(real) == 1


@pytest.mark.parametrize(
    "sync",
    [
        lambda r: r.rec.on_stream_synchronization(0),
        lambda r: r.rec.on_device_synchronization(),
        lambda r: torch.ones(2).sum().item(),  # .item() on the same stream waits for it
        lambda r: torch.ones(2).to("cpu", copy=True),  # so does .cpu()
    ],
    ids=["stream_sync", "device_sync", "item", "cpu"],
)
def test_a_synchronization_before_the_host_read_fixes_it(real, sync):
    pinned_readback(real, sync)
    assert races(real) == 0


def test_to_cpu_non_blocking_result_read_too_early_races(real):
    x = torch.ones(16)
    y = x.to("cpu", copy=True, non_blocking=True)
    y.sum()
    assert races(real) == 1


def test_polling_an_event_until_done_is_a_synchronization(real):
    x = torch.ones(1024)
    h = torch.empty(1024)
    real.rec.declare_pinned(h)
    h.copy_(x, non_blocking=True)
    real.rec.on_event_creation(0xE2)
    real.rec.on_event_record(0xE2, 0)
    real.rec.on_event_query(0xE2, False)
    real.rec.on_event_query(0xE2, True)  # `while not ev.query(): pass` ended
    h.sum()
    assert races(real) == 0


def test_an_event_query_that_said_not_ready_orders_nothing(real):
    x = torch.ones(1024)
    h = torch.empty(1024)
    real.rec.declare_pinned(h)
    h.copy_(x, non_blocking=True)
    real.rec.on_event_creation(0xE2)
    real.rec.on_event_record(0xE2, 0)
    real.rec.on_event_query(0xE2, False)
    h.sum()
    assert races(real) == 1


def test_stream_query_true_is_a_synchronization(real):
    x = torch.ones(1024)
    h = torch.empty(1024)
    real.rec.declare_pinned(h)
    with real.stream(S1):
        h.copy_(x, non_blocking=True)
    real.rec.on_stream_query(S1, 0, True)
    h.sum()
    # The copy on S1 read x, written on the default stream without ordering: that race is
    # the program's; the host read after the query is not.
    assert races(real) == 1
    assert "host_access" not in real.h.report_json()


class Graph:
    pass


def graph_replay(real, wait):
    static_in = torch.ones(256)
    real.rec.on_device_synchronization()
    g = Graph()
    with real.stream(S1):
        real.rec.on_graph_begin(g)
        static_out = static_in * 2  # captured
        real.rec.on_graph_end(g)
        real.rec.on_graph_launch(g)  # replay on S1
    if wait:
        real.rec.on_event_creation(0xE3)
        real.rec.on_event_record(0xE3, S1)
        real.rec.on_event_wait(0xE3, S2)
    with real.stream(S2):
        static_out.sum()  # read on another stream
    return g


def test_graph_output_read_on_another_stream_races_at_the_replay(real):
    graph_replay(real, wait=False)
    assert races(real) == 1
    report = json.loads(real.h.report_json())
    assert any("graph_launch" in r.get("previous", {}) or "graph_launch" in r for r in report["races"])


def test_graph_output_read_after_a_wait_is_clean(real):
    graph_replay(real, wait=True)
    assert races(real) == 0


def test_custom_op_mutated_argument_races_its_readers(real):
    @torch.library.custom_op("streamsan_test::bump", mutates_args=("dst",))
    def bump(src: torch.Tensor, dst: torch.Tensor) -> None:
        dst.add_(src)

    src, dst = torch.ones(64), torch.zeros(64)
    real.rec.on_device_synchronization()
    with real.stream(S1):
        bump(src, dst)  # writes dst, reads src
    with real.stream(S2):
        src.sum()  # read vs read: fine
    assert races(real) == 0
    with real.stream(S2):
        dst.sum()  # read vs the custom op's write
    assert races(real) == 1


def test_pinned_block_freed_after_an_async_copy_is_no_warning(real):
    # The pinned allocator waits for the copy's stream before reusing the block.
    import gc

    x = torch.ones(1024)
    h = torch.empty(1024)
    real.rec.declare_pinned(h)
    h.copy_(x, non_blocking=True)
    del h
    gc.collect()
    assert real.h.warnings == 0
    assert races(real) == 0


def test_a_clean_run_ends_without_warnings(tmp_path, native):
    # The pageable pseudo-buffer (host end of .cpu() / .item()) is the recorder's own: freed
    # at the end, never reported as a leak; caching blocks still alive are no leak either.
    import streamsan.torch as st
    from streamsan.torch._device import CpuStandIn

    session = native.Session(report=str(tmp_path / "report.txt"), api="torch")
    h = st.enable(_session=session, _device=CpuStandIn())
    try:
        x = torch.ones(1024)
        assert x.sum().item() == 1024.0
    finally:
        st.disable()
    assert h.records > 0
    assert h.warnings == 0, h.report_text()
    assert "SUMMARY: no races" in (tmp_path / "report.txt").read_text()


@pytest.mark.parametrize("synced", [False, True], ids=["racy", "fixed"])
def test_a_pinned_scalar_of_a_cuda_operator_is_read_by_the_host_at_launch(real, synced):
    # A 0-dim CPU tensor may stand for a scalar in a CUDA operator (`x * s`): the host reads
    # its value when it launches the kernel. In pinned memory an async copy may still be
    # writing it (cudaMemcpyAsync returns before the copy lands).
    x = torch.ones(1024)
    s = torch.empty(())
    real.rec.declare_pinned(s)
    s.copy_(x[0], non_blocking=True)  # async D2H into the pinned scalar
    if synced:
        real.rec.on_stream_synchronization(0)
    x * s
    assert races(real) == (0 if synced else 1)
