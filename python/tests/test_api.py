"""enable / disable / sanitize, and halting."""

import json
import os
import signal

import pytest
import torch

import streamsan.torch as st
from fake_session import FakeHalt, FakeSession
from streamsan.torch import _api, _hooks
from streamsan.torch._device import CpuStandIn


def test_sanitize_gives_the_verdict_and_the_reports(native, tmp_path):
    report = tmp_path / "report.txt"
    with st.sanitize(report=str(report), _device=CpuStandIn()) as s:
        x = torch.ones(64)
        with s.recorder.device.use_stream(0x7000):
            x.sum()
        assert s.races == 1
    assert st.enabled() is None
    assert s.races == 1  # still readable after the block
    assert "RACE read-after-write" in s.report_text()
    assert '"races"' in s.report_json()
    assert "SUMMARY: 1 race" in report.read_text()


def test_disable_returns_the_number_of_races(native, tmp_path):
    st.enable(report=str(tmp_path / "r.txt"), _device=CpuStandIn())
    x = torch.ones(8)
    st.enabled().recorder.device.stream = 0x7000
    x.cos()
    assert st.disable() == 1
    assert st.disable() == 0  # already off


def test_one_session_at_a_time():
    st.enable(_session=FakeSession(), _device=CpuStandIn())
    try:
        with pytest.raises(RuntimeError, match="already enabled"):
            st.enable(_session=FakeSession(), _device=CpuStandIn())
    finally:
        st.disable()


def test_halt_propagates_and_stops_recording():
    fake = FakeSession(halt_on="launch")
    st.enable(_session=fake, _device=CpuStandIn())
    try:
        with pytest.raises(FakeHalt) as e:
            torch.ones(4) * 2
        assert e.value.code == 66
        assert _hooks.current is None
        n = len(fake.calls)
        torch.ones(4) * 2  # recording stopped: the session is finished
        assert len(fake.calls) == n
    finally:
        st.disable()
    assert st.enabled() is None


def test_fake_device_environment_variable(monkeypatch):
    monkeypatch.setenv(_api.FAKE_DEVICE_ENV, "cpu")
    assert isinstance(_api._default_device(), CpuStandIn)
    monkeypatch.setenv(_api.FAKE_DEVICE_ENV, "tpu")
    with pytest.raises(ValueError):
        _api._default_device()
    monkeypatch.delenv(_api.FAKE_DEVICE_ENV)
    assert not _api._default_device().standin


def test_a_refused_record_does_not_reach_the_program_and_is_reported_at_the_end(tmp_path, capsys):
    from streamsan import _native
    from streamsan.torch._device import CpuStandIn

    session = _native.Session(report=str(tmp_path / "r.txt"), api="torch")
    h = st.enable(_session=session, _device=CpuStandIn())
    try:
        x = torch.ones(4)
        h.recorder.next_buf = 1  # a recorder bug: the next storage gets a live buffer's id
        y = x + 1  # the alloc is refused; the operator's result still comes back
    finally:
        st.disable()
    assert y.tolist() == [2.0, 2.0, 2.0, 2.0]
    assert h.recorder.internal_errors
    assert "internal error(s) while recording" in capsys.readouterr().err


def test_a_record_refused_on_the_checker_thread_is_reported_at_the_end(tmp_path, capsys):
    from streamsan import _native
    from streamsan.torch._device import CpuStandIn

    session = _native.Session(report=str(tmp_path / "r.txt"), api="torch", checker_thread=True)
    assert session.checker_thread
    h = st.enable(_session=session, _device=CpuStandIn())
    try:
        x = torch.ones(4)
        h.recorder.next_buf = 1  # as above: the next storage gets a live buffer's id
        y = x + 1  # refused on the thread: the call itself cannot know
    finally:
        st.disable()
    assert y.tolist() == [2.0, 2.0, 2.0, 2.0]
    assert h.recorder.internal_errors
    where, error = h.recorder.internal_errors[0]
    assert where == "the checker thread"
    assert "record not taken" in str(error) and "allocated again" in str(error)
    assert "internal error(s) while recording" in capsys.readouterr().err


def _two_streams_racing(dev, keep):
    """50 rounds of two races each: `x` written on the current stream and read on another,
    which writes `y`, read back on the current stream. Every tensor stays alive in `keep`, so
    no block is reused and the verdict does not depend on where the CPU allocator puts them."""
    for _ in range(50):
        x = torch.ones(256)
        with dev.use_stream(0x5100):
            y = x * 2
        keep += [x, y, y.sum()]


def test_enable_checks_on_a_thread_unless_a_trace_or_halt_needs_each_call_checked(tmp_path):
    from streamsan.torch._device import CpuStandIn

    verdicts = {}
    for options, threaded in (
        ({}, True),
        ({"trace": str(tmp_path / "t.jsonl")}, False),
        ({"checker_thread": False}, False),
    ):
        dev = CpuStandIn()
        h = st.enable(_device=dev, report=str(tmp_path / "r.txt"), format="json", **options)
        try:
            assert h.session.checker_thread is threaded, options
            counts, keep = [], []
            for _ in range(3):
                _two_streams_racing(dev, keep)
                counts.append((h.records, h.races, h.occurrences))  # every record so far
            report = json.loads(h.report_json())
        finally:
            st.disable()
        assert not h.session.checker_thread  # finished: the thread ended
        verdicts[threaded, "trace" in options] = (counts, report["summary"], report["races"])
    threaded, traced, inline = verdicts.values()
    assert threaded == inline == traced
    counts = threaded[0]
    assert counts[0][2] == 100 and counts[2][2] == 300  # two race occurrences per round
    h = st.enable(_device=CpuStandIn(), report=str(tmp_path / "r.txt"), halt_on_error=True)
    try:
        assert h.session.checker_thread is False
    finally:
        st.disable()


def test_a_forked_child_checks_within_its_calls_and_the_parent_goes_on(tmp_path):
    from streamsan.torch._device import CpuStandIn

    dev = CpuStandIn()
    h = st.enable(_device=dev, report=str(tmp_path / "r.txt"))
    try:
        assert h.session.checker_thread
        keep = []
        for _ in range(20):  # forks land while the thread has records to check
            _two_streams_racing(dev, keep)
            pid = os.fork()
            if pid == 0:  # the child: a query and more records, then out at once
                signal.alarm(30)  # a hang fails the test instead of stalling it
                try:
                    before = h.occurrences
                    ok = not h.session.checker_thread and before > 0
                    _two_streams_racing(dev, keep)
                    ok = ok and h.occurrences == before + 100
                finally:
                    os._exit(0 if ok else 1)
            _, status = os.waitpid(pid, 0)
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
            assert h.session.checker_thread  # the parent's thread runs again
        assert h.occurrences == 20 * 100  # the children's records are theirs alone
    finally:
        st.disable()


def test_a_session_dropped_unfinished_reports_what_it_had_queued(tmp_path):
    from streamsan import _native

    report = tmp_path / "r.txt"
    s = _native.Session(report=str(report), api="torch", checker_thread=True)
    s.stream(7, 0, "created", "non_blocking", None, 0, "prog.py:1")
    s.alloc(1, 64, 0, "device", 0, 0x1000, "caching", None, 0, "prog.py:2")
    s.launch(0, "aten::fill_", [], [(1, 0, 64, None)], 0, "prog.py:3")
    s.launch(7, "aten::sum", [(1, 0, 64, None)], [], 0, "prog.py:4")
    assert report.read_text() == ""  # queued: within WAKE of the last record
    del s  # the last reference: dropped here, and checks what it queued
    assert "RACE read-after-write" in report.read_text()


def test_a_session_made_directly_is_safe_across_fork_and_a_child_adds_no_report(tmp_path):
    # pthread_atfork (crates/streamsan-python/src/fork.rs) pauses every session's thread, not
    # only enable()'s; and a child's exit does not write the parent's report again.
    from streamsan import _native

    s = _native.Session(report=os.devnull, checker_thread=True)
    report = tmp_path / "r.json"
    h = st.enable(_device=CpuStandIn(), report=str(report), format="json")
    s.stream(7, 0, "created", "non_blocking", None, 0, "prog.py:1")
    for i in range(20):
        for j in range(500):  # forks land while the thread has records to check
            buf = 1 + i * 500 + j
            s.alloc(buf, 64, 0, "device", 7, None, "driver", None, 0, "prog.py:2")
            s.launch(0, "aten::fill_", [], [(buf, 0, 64, None)], 0, "prog.py:3")
            s.free(buf, None, 0, "prog.py:4")
        pid = os.fork()
        if pid == 0:
            signal.alarm(30)  # a hang fails the test instead of stalling it
            ok = not s.checker_thread and s.records() > 0 and not h.session.checker_thread
            _api._at_exit()  # what the child's exit runs (pytest would catch a SystemExit)
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        assert s.checker_thread and h.session.checker_thread
    assert s.records() == 1 + 20 * 500 * 3
    st.disable()
    json.loads(report.read_text())  # one report: the children wrote none
