"""pytest plugin: a CUDA stream race in a test fails that test, with the report.

Registered through the ``pytest11`` entry point when the package is installed, and inert until
asked: ``pytest --streamsan`` checks every test, ``@pytest.mark.streamsan`` one test, and the
``streamsan`` fixture gives a test its session (``streamsan.races``, ``streamsan.report_text()``)
to assert on. A test that is meant to race (a regression test for the checker itself) says so:
``@pytest.mark.streamsan(expect_races=True)`` checks it without failing it for its races. Each checked test runs in a session of its own, so a race is charged to the test
whose operators made it. torch is imported only when a test is checked.
"""

import os

import pytest

_KEY = pytest.StashKey() if hasattr(pytest, "StashKey") else None


def pytest_addoption(parser):
    group = parser.getgroup("streamsan", "CUDA stream race checking (streamsan)")
    group.addoption(
        "--streamsan",
        action="store_true",
        default=False,
        help="check every test for CUDA stream races (streamsan.torch); a race fails the test "
        "and shows the report",
    )
    group.addoption(
        "--streamsan-suppressions",
        action="append",
        default=[],
        metavar="PATH",
        help="a suppressions file (docs/suppressions.md); may be given more than once",
    )
    group.addoption(
        "--streamsan-baseline",
        default=None,
        metavar="PATH",
        help="a baseline JSON report: races it holds do not fail a test",
    )
    group.addoption(
        "--streamsan-trace-dir",
        default=None,
        metavar="DIR",
        help="write each checked test's trace to DIR/<test id>.jsonl, for `streamsan check`",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "streamsan(expect_races=False): check this test for CUDA stream races; a race fails it "
        "unless expect_races=True (streamsan.torch)",
    )


def _wanted(item):
    return (
        item.config.getoption("streamsan")
        or item.get_closest_marker("streamsan") is not None
        or "streamsan" in getattr(item, "fixturenames", ())
    )


def _trace_path(item):
    folder = item.config.getoption("streamsan_trace_dir")
    if not folder:
        return None
    os.makedirs(folder, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in item.nodeid)
    return os.path.join(folder, safe + ".jsonl")


def _options(item):
    return dict(
        report=os.devnull,
        trace=_trace_path(item),
        suppressions=list(item.config.getoption("streamsan_suppressions")),
        baseline=item.config.getoption("streamsan_baseline"),
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if not _wanted(item):
        yield
        return
    from streamsan.torch import sanitize

    checking = sanitize(**_options(item))
    session = checking.__enter__()
    item.stash[_KEY] = session
    try:
        outcome = yield
    finally:
        checking.__exit__(None, None, None)
    marker = item.get_closest_marker("streamsan")
    expected = marker is not None and marker.kwargs.get("expect_races", False)
    if session.races and outcome.excinfo is None and not expected:
        message = (
            f"streamsan: {session.races} CUDA stream race(s) in {item.nodeid}\n\n"
            + session.report_text()
        )
        failure = pytest.fail.Exception(message, pytrace=False)
        if hasattr(outcome, "force_exception"):  # pluggy >= 1.1
            outcome.force_exception(failure)
        else:  # older pluggy: an exception raised in a hookwrapper's teardown propagates
            raise failure


@pytest.fixture
def streamsan(request):
    """The test's checking session (see the module docs): ``.races``, ``.report_text()``,
    ``.report_json()``. Using the fixture checks the test."""

    class _Deferred:
        # The session starts with the test's call phase, after fixtures are set up.
        def __getattr__(self, name):
            session = request.node.stash.get(_KEY, None)
            if session is None:
                raise RuntimeError("the streamsan session starts when the test body runs")
            return getattr(session, name)

    return _Deferred()
