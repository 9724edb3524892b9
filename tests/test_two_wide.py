"""The test suite's own two-wide run (tests/conftest.py under pytest-xdist): a test marked
`alone` has no other test beside it, a `heavy` one no other heavy one but ordinary tests, the
others run two at a time, the Docker and act tests stay on one worker, and so do the tests of
a module that share a module-scoped fixture. Checked on a planted module run by a real `pytest -n 2`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

# Each planted test records when it ran and on which worker; it holds long enough that two
# tests on two workers overlap when nothing keeps them apart.
PLANTED = """
import os, time, pytest

def _ran(name, hold=0.4):
    start = time.monotonic()
    time.sleep(hold)
    with open(os.environ["RAN_LOG"], "a") as log:
        log.write(f"{name} {start} {time.monotonic()} {os.environ['PYTEST_XDIST_WORKER']}\\n")

@pytest.mark.heavy
@pytest.mark.parametrize("i", range(3))
def test_heavy(i): _ran(f"heavy{i}", hold=1.0)  # first and longer: ordinary tests run beside

@pytest.mark.parametrize("i", range(5))
def test_before(i): _ran(f"before{i}")

@pytest.mark.alone
def test_alone(): _ran("alone")

@pytest.mark.parametrize("i", range(5))
def test_after(i): _ran(f"after{i}")

@pytest.mark.docker
@pytest.mark.parametrize("i", range(4))
def test_docker(i): _ran(f"docker{i}")

@pytest.fixture(scope="module")
def shared():
    return 1

@pytest.mark.parametrize("i", range(4))
def test_shared(shared, i): _ran(f"shared{i}")
"""
CONFTEST = "from tests.conftest import pytest_collection_modifyitems, pytest_runtest_protocol\n"


def test_an_alone_test_runs_with_nothing_beside_it_and_docker_tests_share_a_worker(
    tmp_path: Path,
) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_planted.py").write_text(PLANTED)
    log = tmp_path / "ran.log"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
         "--dist", "loadgroup", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
        env={"PATH": "/usr/bin:/bin", "RAN_LOG": str(log), "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = {}
    for line in log.read_text().splitlines():
        name, start, end, worker = line.split()
        ran[name] = (float(start), float(end), worker)
    assert len(ran) == 22 and {w for _, _, w in ran.values()} == {"gw0", "gw1"}

    def overlap(a: str, b: str) -> bool:
        return ran[a][0] < ran[b][1] and ran[b][0] < ran[a][1]

    assert [n for n in ran if n != "alone" and overlap("alone", n)] == []
    others = [n for n in ran if n != "alone"]
    assert any(overlap(a, b) for a in others for b in others if a < b)  # two-wide otherwise
    assert len({ran[f"docker{i}"][2] for i in range(4)}) == 1
    heavy = [f"heavy{i}" for i in range(3)]
    assert not any(overlap(a, b) for a in heavy for b in heavy if a < b)  # one heavy at a time
    assert not any(overlap("alone", h) for h in heavy)
    ordinary = [n for n in others if n not in heavy]
    assert any(overlap(h, n) for h in heavy for n in ordinary)  # beside ordinary tests
    assert len({ran[f"shared{i}"][2] for i in range(4)}) == 1  # one module fixture, one worker
