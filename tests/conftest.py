"""Shared fixtures: one real run of the planted quick workload, reused by read-only tests.

With TORCH_MATRIX_NO_SKIPS=1 (set by .ci/run) a skipped test fails instead, unless it skipped
for hardware this machine cannot have: a tool missing from CI is coverage lost, not a skip.

Under pytest-xdist (.ci/run runs two workers, `-n 2 --dist loadgroup`): the tests marked
`docker` and the act tests run one after another on one worker, since they build, tag and
remove images (the act bench job builds the pins' images again under the CI images' tags, with
other labels: a docker test beside it saw its image's tag move to another image id); the tests
of a module that share a module-scoped fixture run on one worker, which builds it once; a test
marked `alone` runs with no other test of the suite beside it, since its assertions read timed
rounds that a busy neighbour would disturb; a test marked `heavy` (many ranks and agents at
once) runs beside ordinary tests, which hold whatever a busy neighbour does to their timings,
but never beside an `alone` test or another heavy one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import THREADS_ENV, cli, planted

os.environ.update(THREADS_ENV)  # before any test module imports torch (tests/helpers.py)


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("quick") / "run"
    code, _, err = cli(
        "run",
        "--workload",
        planted("Quick"),
        "--backend",
        "cpu",
        "--backend",
        "cuda",
        "--out",
        str(out),
        "--python",
        sys.executable,
    )
    assert code == 0, err
    return out


@pytest.fixture(autouse=True)
def _counting_where_asked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """An A/B counts instructions (minutes under Valgrind) only in tests marked `counting`:
    elsewhere the instructions gate of the built-in profiles is untested, as `--no-count`
    leaves it, and the tests of other things do not pay for counting."""
    if request.node.get_closest_marker("counting") is None:
        monkeypatch.setenv("TORCH_MATRIX_COUNT", "0")
    # A count kept by one test would be another's: each counts afresh unless it tests keeping.
    if request.node.get_closest_marker("keeps_counts") is None:
        monkeypatch.setenv("TORCH_MATRIX_KEEP_COUNTS", "0")
    # Two tests at a time on two cores disturb each other's rounds, and each disturbed round ran
    # again up to three times: most of an A/B test's time in CI, for timings it never asserts.
    # Only a test that reads timed rounds (marked `alone`, nothing beside it) runs them again.
    if request.node.get_closest_marker("alone") is None:
        monkeypatch.setenv("TORCH_MATRIX_RERUNS", "0")


# Skips that no amount of installing can avoid on a Linux CPU machine.
HARDWARE = re.compile(r"GPU|CUDA|ROCm|MPS|Apple Silicon|macOS|darwin", re.IGNORECASE)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if os.environ.get("TORCH_MATRIX_NO_SKIPS") != "1" or not report.skipped:
        return
    reason = (
        str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
    )
    if getattr(report, "wasxfail", None) is None and not HARDWARE.search(reason):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every tool the tests need is installed: {reason}"


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a fixture built once per module (a whole run, a fork server)."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d.scope in ("module", "package") for some in defs for d in some)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = getattr(item, "module", None)  # a Function's; other items have none
        act = module is not None and module.__name__.endswith("test_act_e2e")
        if act or item.get_closest_marker("docker") is not None:
            item.add_marker(pytest.mark.xdist_group("docker"))
        elif module is not None and _shares_a_module_fixture(item):
            # On one worker: split across two, each would build the module's fixture (the
            # built-in matrix's run, a fork server) once, twice in all.
            item.add_marker(pytest.mark.xdist_group(module.__name__))


@contextlib.contextmanager
def _turn(item: pytest.Item) -> Iterator[None]:
    """A readers-writer lock across the xdist workers: every test holds it shared, a test
    marked `alone` exclusively. The turnstile keeps a waiting `alone` test from being overtaken
    by the other worker's next tests. A test marked `heavy` also holds a lock of its own
    kind: it runs beside ordinary tests, never beside another heavy one."""
    workerinput = getattr(item.config, "workerinput", None)
    if workerinput is None:  # not under xdist: nothing runs beside it
        yield
        return
    folder = Path(tempfile.gettempdir()) / f"torch-matrix-tests-{workerinput['testrunuid']}"
    folder.mkdir(exist_ok=True)
    alone = item.get_closest_marker("alone") is not None
    heavy = item.get_closest_marker("heavy") is not None
    with (
        open(folder / "turnstile", "w") as turnstile,
        open(folder / "tests", "w") as tests,
        open(folder / "heavy", "w") as heavies,
    ):
        if heavy:  # first, so that no test waits at the turnstile behind one heavy for another
            fcntl.flock(heavies, fcntl.LOCK_EX)
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(tests, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(tests, fcntl.LOCK_UN)
            fcntl.flock(heavies, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    with _turn(item):
        yield
