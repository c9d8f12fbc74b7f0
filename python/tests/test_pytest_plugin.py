"""The pytest plugin (streamsan.pytest_plugin, registered by the installed package's pytest11
entry point): a race fails the test it happened in, with the report; clean tests pass; the
marker, the `--streamsan` option, `expect_races` and the fixture do what they say. Each case
runs pytest in a subprocess on a generated test file, with the CPU stand-in
(STREAMSAN_TORCH_FAKE_DEVICE=cpu) playing the GPU."""

import os
import subprocess
import sys
import textwrap

import pytest

TESTS = """
import pytest
import torch
import streamsan.torch as st


def race():
    x = torch.ones(1024)
    with st.enabled().recorder.device.use_stream(0x7000):
        x.sum()  # the racy read


def clean():
    x = torch.ones(1024)
    x.sum()


@pytest.mark.streamsan
def test_marked_racy():
    race()


@pytest.mark.streamsan
def test_marked_clean():
    clean()


def test_unmarked_racy():
    if st.enabled() is None:
        return  # not checked: nothing to race with
    race()


@pytest.mark.streamsan(expect_races=True)
def test_expected(streamsan):
    race()
    assert streamsan.races == 1
    assert "read-after-write" in streamsan.report_text()


def test_fixture_checks_the_test(streamsan):
    clean()
    assert streamsan.races == 0
"""


@pytest.fixture
def pytest_run(tmp_path, native):
    path = tmp_path / "test_prog.py"
    path.write_text(textwrap.dedent(TESTS))

    def run(*options):
        env = dict(os.environ, STREAMSAN_TORCH_FAKE_DEVICE="cpu")
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *options, str(path)]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
        return p, p.stdout + p.stderr

    return run


def outcome(out, test):
    """PASSED / FAILED of `test` in pytest's -rA short summary."""
    for line in out.splitlines():
        if line.endswith(f"::{test}") or f"::{test} " in line:
            word = line.split()[0]
            if word in ("PASSED", "FAILED", "ERROR"):
                return word
    raise AssertionError(f"{test} not in the summary:\n{out}")


def test_a_race_fails_only_the_test_that_made_it_and_shows_the_report(pytest_run):
    p, out = pytest_run()
    assert p.returncode == 1, out
    assert outcome(out, "test_marked_racy") == "FAILED"
    assert outcome(out, "test_marked_clean") == "PASSED"
    assert outcome(out, "test_unmarked_racy") == "PASSED"  # not checked without --streamsan
    assert outcome(out, "test_expected") == "PASSED"
    assert outcome(out, "test_fixture_checks_the_test") == "PASSED"
    assert "CUDA stream race(s) in test_prog.py::test_marked_racy" in out
    assert "RACE read-after-write" in out
    assert "test_prog.py:10" in out  # the racy read's line in the test file


def test_option_checks_every_test(pytest_run):
    p, out = pytest_run("--streamsan")
    assert outcome(out, "test_unmarked_racy") == "FAILED"
    assert outcome(out, "test_marked_clean") == "PASSED"


def test_trace_dir_gets_one_trace_per_checked_test(pytest_run, tmp_path):
    traces = tmp_path / "traces"
    pytest_run("--streamsan-trace-dir", str(traces))
    names = sorted(os.listdir(traces))
    assert "test_prog.py__test_marked_racy.jsonl" in names
    assert "test_prog.py__test_unmarked_racy.jsonl" not in names
    with open(traces / "test_prog.py__test_marked_racy.jsonl") as f:
        assert '"api":"torch"' in f.readline().replace(" ", "")
