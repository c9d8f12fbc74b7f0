"""The dispatch mode's records for operators, exactly (FakeSession, CPU stand-in)."""

import threading

import torch

from conftest import line_of, dispatch_mode_only
from streamsan.torch import _ranges
from streamsan.torch._ops import HULL_NOTE

F32 = 4


def buf(fake, t):
    """The buffer id the alloc records gave t's storage."""
    return fake.buffer_of(t.untyped_storage().data_ptr())


def test_fresh_output_is_declared_then_written(env):
    x = torch.ones(8)
    recs = env.fake.normalized()
    addr = x.untyped_storage().data_ptr()
    assert recs == [
        {"op": "alloc", "buf": 1, "bytes": 32, "stream": 0, "addr": addr, "pool": "caching"},
        {"op": "launch", "stream": 0, "name": "aten::ones", "reads": [],
         "writes": [(1, 0, 32, "result: float32[8]")]},
    ]


def test_reads_writes_and_labels(env):
    x = torch.ones(8)
    y = torch.ones(2, 4, dtype=torch.float64)
    env.fake.clear()
    z = x.view(2, 4) + y
    launch = env.fake.of("launch")[-1]
    bx, by, bz = buf(env.fake, x), buf(env.fake, y), buf(env.fake, z)
    assert launch["name"] == "aten::add.Tensor"
    assert launch["reads"] == [(bx, 0, 32, "self: float32[2, 4]"), (by, 0, 64, "other: float64[2, 4]")]
    assert launch["writes"] == [(bz, 0, 64, "result: float64[2, 4]")]
    # The view itself recorded nothing: one alloc (z) and one launch.
    assert env.fake.ops() == ["alloc", "launch"]


def test_views_and_metadata_ops_record_nothing(env):
    x = torch.ones(4, 4)
    env.fake.clear()
    x.view(16)
    x[1:]
    x.t()
    x.transpose(0, 1)
    x.expand(2, 4, 4)
    x.detach()
    x.as_strided((2,), (1,))
    x.unsqueeze_(0)
    x.squeeze_(0)
    torch.empty(3)
    torch.empty_like(x)
    x.new_empty(3)
    x.is_pinned()
    assert env.fake.calls == []


def test_in_place_op_writes_its_storage_range(env):
    x = torch.zeros(10)
    env.fake.clear()
    x[2:6].add_(1)
    launch = env.fake.of("launch")[0]
    assert launch["reads"] == []
    assert launch["writes"] == [(buf(env.fake, x), 2 * F32, 4 * F32, "self: float32[4]")]


def test_out_argument_is_written(env):
    a, b, out = torch.ones(4), torch.ones(4), torch.empty(4)
    env.fake.clear()
    torch.add(a, b, out=out)
    launch = env.fake.of("launch")[0]
    ba, bb, bo = (buf(env.fake, t) for t in (a, b, out))
    assert launch["reads"] == [(ba, 0, 16, "self: float32[4]"), (bb, 0, 16, "other: float32[4]")]
    assert launch["writes"] == [(bo, 0, 16, "out: float32[4]")]


def test_tensor_lists_are_read(env):
    a, b = torch.ones(2), torch.ones(3)
    c = torch.cat([a, b])
    launch = env.fake.of("launch")[-1]
    assert launch["reads"] == [(buf(env.fake, a), 0, 8, "tensors: float32[2]"),
                               (buf(env.fake, b), 0, 12, "tensors: float32[3]")]
    assert launch["writes"] == [(buf(env.fake, c), 0, 20, "result: float32[5]")]


@dispatch_mode_only(
    "torch 2.15 does not report an operator implemented in Python (torch.library.custom_op) to RecordFunction (2.11 does); the native recorder then records the ATen operators it runs (docs/pytorch.md)"
)
def test_custom_op_with_mutates_args(env):
    @torch.library.custom_op("streamsan_test::fill_from", mutates_args=("dst",))
    def fill_from(src: torch.Tensor, dst: torch.Tensor) -> None:
        dst.copy_(src)

    src, dst = torch.ones(4), torch.zeros(4)
    env.fake.clear()
    fill_from(src, dst)
    assert env.fake.normalized() == [
        {"op": "launch", "stream": 0, "name": "streamsan_test::fill_from",
         "reads": [(buf(env.fake, src), 0, 16, "src: float32[4]")],
         "writes": [(buf(env.fake, dst), 0, 16, "dst: float32[4]")]},
    ]
    assert torch.equal(dst, src)  # the operator ran


def test_strided_views_are_exact_runs(env):
    x = torch.zeros(8)
    b = buf(env.fake, x)
    env.fake.clear()
    x[::2].fill_(1)
    x[1::2].fill_(2)
    even, odd = (r["writes"] for r in env.fake.of("launch"))
    assert even == [(b, 8 * i, 4, "self: float32[4]") for i in range(4)]
    assert odd == [(b, 8 * i + 4, 4, "self: float32[4]") for i in range(4)]


def test_column_slice_of_a_matrix_is_one_run_per_row(env):
    m = torch.zeros(3, 8)
    b = buf(env.fake, m)
    env.fake.clear()
    m[:, 2:5].zero_()
    assert env.fake.of("launch")[0]["writes"] == [
        (b, row * 32 + 8, 12, "self: float32[3, 3]") for row in range(3)
    ]


def test_more_runs_than_the_cap_record_the_hull_and_count_it(env):
    n = _ranges.MAX_RUNS + 1
    x = torch.zeros(2 * n)
    b = buf(env.fake, x)
    env.fake.clear()
    x[::2].fill_(1)
    assert env.fake.of("launch")[0]["writes"] == [(b, 0, (2 * (n - 1) + 1) * F32, f"self: float32[{n}]" + HULL_NOTE)]
    assert env.rec.hulls == 1
    assert env.h.hulls == 1


def test_zero_size_tensors_access_nothing(env):
    x = torch.zeros(0)
    x.add_(1)
    torch.zeros(4)[2:2].fill_(3)
    assert [r["name"] for r in env.fake.of("launch")] == ["aten::zeros"]
    assert env.fake.of("launch")[0]["writes"][0][2] == 16  # only the 4-element zeros


def test_current_stream_and_stream_declaration(env):
    x = torch.ones(4)
    with env.stream(0x7000):
        x.mul_(2)
        x.mul_(3)
    recs = env.fake.normalized()
    assert [r["op"] for r in recs] == ["alloc", "launch", "stream", "launch", "launch"]
    assert recs[2] == {"op": "stream", "id": 0x7000}  # created, non_blocking: the defaults
    assert recs[3]["stream"] == recs[4]["stream"] == 0x7000


def test_at_names_the_test_line_and_thread_zero(env):
    x = torch.ones(4)
    x.sin_()  # LINE-MARK-sin
    sin = [c for c in env.fake.calls if c[0] == "launch"][-1]
    at = sin[2]["at"]
    assert at.endswith(f"test_mode.py:{line_of('LINE-MARK-sin', __file__)}"), at
    assert sin[2]["thread"] == 0


def test_threads_started_while_recording_are_recorded_with_their_own_number(env):
    x = torch.ones(4)

    def work():
        x.cos_()

    t = threading.Thread(target=work)
    t.start()
    t.join()
    cos = [c for c in env.fake.calls if c[0] == "launch" and c[1][1] == "aten::cos_"]
    assert len(cos) == 1
    assert cos[0][2]["thread"] == 1


def test_operator_errors_propagate_and_record_nothing(env):
    a, b = torch.ones(3), torch.ones(4)
    env.fake.clear()
    try:
        a + b
    except RuntimeError:
        pass
    else:
        raise AssertionError("expected a shape error")
    assert env.fake.calls == []


def test_disabled_records_nothing(env):
    import streamsan.torch as st

    st.disable()
    n = len(env.fake.calls)
    torch.ones(4) * 2
    assert len(env.fake.calls) == n
