"""`python -m streamsan.torch`: runs the script as python would; exit status 66 after a race,
0 when clean, the script's own status when it failed. CPU stand-in through the test hook
STREAMSAN_TORCH_FAKE_DEVICE=cpu; the scripts switch fake streams with the stand-in's
`use_stream`."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

RACY = """
import torch
import streamsan.torch as st
x = torch.ones(1024)
with st.enabled().recorder.device.use_stream(0x7000):
    x.sum()  # the racy read
print("after the race", flush=True)
"""

CLEAN = """
import torch
x = torch.ones(1024)
print(float(x.sum()))
"""


@pytest.fixture
def run(tmp_path, native):
    def run(source, *options, args=(), name="prog.py", cwd=None):
        script = tmp_path / name
        script.write_text(textwrap.dedent(source))
        env = dict(os.environ, STREAMSAN_TORCH_FAKE_DEVICE="cpu")
        cmd = [sys.executable, "-m", "streamsan.torch", *options, str(script), *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd or tmp_path, timeout=120)

    return run


def test_race_exits_66_and_reports_the_script_line(run):
    p = run(RACY)
    assert p.returncode == 66, p.stderr
    assert "RACE read-after-write" in p.stderr
    assert "prog.py:6" in p.stderr
    assert "SUMMARY: 1 race" in p.stderr
    assert "after the race" in p.stdout


def test_clean_script_exits_0(run):
    p = run(CLEAN)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "1024.0"
    assert "SUMMARY: no races" in p.stderr


def test_failing_script_keeps_its_status_even_after_a_race(run):
    p = run(RACY + "\nraise SystemExit(3)\n")
    assert p.returncode == 3
    assert "RACE" in p.stderr


def test_uncaught_exception_exits_1_with_its_traceback(run):
    p = run("raise ValueError('boom')\n")
    assert p.returncode == 1
    assert "ValueError: boom" in p.stderr


def test_exitcode_option(run):
    assert run(RACY, "--exitcode", "9").returncode == 9


def test_halt_on_error_stops_at_the_first_race(run):
    p = run(RACY, "--halt-on-error")
    assert p.returncode == 66, p.stderr
    assert "RACE" in p.stderr
    assert "after the race" not in p.stdout


def test_json_report_and_trace(run, tmp_path):
    report, trace = tmp_path / "report.json", tmp_path / "trace.jsonl"
    p = run(RACY, "--format", "json", "--report", str(report), "--trace", str(trace))
    assert p.returncode == 66, p.stderr
    data = json.loads(report.read_text())
    assert data["summary"]["races"] == 1
    assert data["races"][0]["current"]["name"] == "aten::sum"
    lines = trace.read_text().splitlines()
    assert json.loads(lines[0])["streamsan_trace"] == 1
    assert any('"op":"launch"' in l and "aten::sum" in l for l in lines)


def test_argv_and_main_as_python_sets_them(run):
    p = run("import sys\nprint(__name__, sys.argv[1:], sys.argv[0].endswith('prog.py'))\n",
            args=("a", "--b", "-m"))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "__main__ ['a', '--b', '-m'] True"


def test_module_mode(run, tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "job.py").write_text(textwrap.dedent(RACY))
    env = dict(os.environ, STREAMSAN_TORCH_FAKE_DEVICE="cpu")
    p = subprocess.run([sys.executable, "-m", "streamsan.torch", "-m", "mypkg.job", "x"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert p.returncode == 66, p.stderr
    assert "job.py:6" in p.stderr


def test_help_explains_the_options_and_exit_status():
    p = subprocess.run([sys.executable, "-m", "streamsan.torch", "--help"], capture_output=True, text=True)
    assert p.returncode == 0
    for word in ("--trace", "--report", "--format", "--halt-on-error", "--exitcode", "--suppressions",
                 "--baseline", "-m", "66", "exit status"):
        assert word in p.stdout, word


def test_suppressions_file_takes_the_race_out_of_the_verdict(run, tmp_path):
    supp = tmp_path / "known.supp"
    supp.write_text('race:kernel=aten::sum   # the racy read of prog.py\n')
    p = run(RACY, "--suppressions", str(supp))
    assert p.returncode == 0, p.stderr
    assert "SUMMARY: no races" in p.stderr


def test_a_suppression_that_matches_nothing_leaves_the_race(run, tmp_path):
    supp = tmp_path / "other.supp"
    supp.write_text("race:kernel=aten::mul.Tensor\n")
    p = run(RACY, "--suppressions", str(supp))
    assert p.returncode == 66, p.stderr


def test_baseline_of_an_earlier_run_accepts_its_races(run, tmp_path):
    base = tmp_path / "baseline.json"
    first = run(RACY, "--format", "json", "--report", str(base))
    assert first.returncode == 66
    again = run(RACY, "--baseline", str(base))
    assert again.returncode == 0, again.stderr
    assert "SUMMARY: no races" in again.stderr


def test_a_bad_suppressions_file_is_an_error_naming_file_and_line(run, tmp_path):
    supp = tmp_path / "bad.supp"
    supp.write_text("race:kernel=aten::sum\nrace:nonsense\n")
    p = run(RACY, "--suppressions", str(supp))
    assert p.returncode == 2
    assert "bad.supp:2" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert "after the race" not in p.stdout  # nothing ran


def test_a_trace_that_cannot_be_created_is_an_error(run, tmp_path):
    p = run(CLEAN, "--trace", str(tmp_path / "no" / "such" / "dir" / "t.jsonl"))
    assert p.returncode == 2
    assert "cannot create the trace file" in p.stderr and "Traceback" not in p.stderr


def test_a_missing_script_is_an_error(run, tmp_path):
    p = run(CLEAN, name="prog.py", args=())
    missing = subprocess.run(
        [sys.executable, "-m", "streamsan.torch", str(tmp_path / "nope.py")],
        capture_output=True, text=True, timeout=120,
    )
    assert p.returncode == 0
    assert missing.returncode == 2
    assert "nope.py" in missing.stderr and "Traceback" not in missing.stderr


def test_the_streamsan_command_checks_a_recorded_trace_and_draws_it(run, tmp_path):
    # A pip install has no Rust binary: `streamsan` (and `python -m streamsan`) is the same
    # command line compiled into the extension.
    trace = tmp_path / "run.jsonl"
    assert run(RACY, "--trace", str(trace)).returncode == 66
    page = tmp_path / "run.html"
    p = subprocess.run([sys.executable, "-m", "streamsan", "check", "--html", str(page), str(trace)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr  # the CLI's status for a race
    assert "RACE read-after-write" in p.stdout + p.stderr
    assert "wait_stream" in page.read_text()  # PyTorch's fix in the timeline too
    script = os.path.join(os.path.dirname(sys.executable), "streamsan")
    if os.path.exists(script):
        q = subprocess.run([script, "check", "--format", "json", str(trace)], capture_output=True,
                           text=True, timeout=120)
        assert q.returncode == 1
        assert json.loads(q.stdout)["summary"]["races"] == 1
    bad = subprocess.run([sys.executable, "-m", "streamsan", "check", str(tmp_path / "nope.jsonl")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "nope.jsonl" in bad.stderr


def test_native_option(run):
    pytest.importorskip("streamsan.torch._observer")
    from streamsan.torch import _observer

    try:
        _observer.build()
    except Exception as e:
        if os.environ.get("STREAMSAN_REQUIRE_NATIVE"):
            raise
        pytest.skip(f"the native recorder cannot be built here: {e}")
    p = run(RACY, "--native")
    assert p.returncode == 66, p.stderr
    assert "RACE read-after-write" in p.stderr
    assert "prog.py:6" in p.stderr
    q = run(RACY, "--no-native")
    assert q.returncode == 66, q.stderr
    assert "prog.py:6" in q.stderr


def test_a_bad_native_setting_exits_2_naming_it(run, monkeypatch):
    monkeypatch.setenv("STREAMSAN_TORCH_NATIVE", "sometimes")
    p = run(CLEAN)
    assert p.returncode == 2, p.stderr
    assert "STREAMSAN_TORCH_NATIVE='sometimes': expected 1, 0 or auto" in p.stderr
    assert p.stdout == ""  # nothing ran
