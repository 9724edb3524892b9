"""A candidate's venv holds the baseline's versions of everything it installs but torch and what
moves with it (suite/execute/pinned.py): pip's newest packaging on one side and the baseline's on
the other would be a changed workload, not the pin. What the candidate's own requirements forbid
is relaxed and named; the pins key the venv, and a venv built without them keeps its old key."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from suite.core.errors import EnvironmentProblem
from suite.core.secrets import redact_text, without_credential
from suite.execute import sides
from suite.execute.cache import cache_root
from suite.execute.holding import plan
from suite.execute.indexes import Indexes
from suite.execute.manifest import differences, read_manifest
from suite.execute.pinned import (
    PINS_FILE,
    BaselinePins,
    Installed,
    Relaxation,
    read_pins,
    read_record,
)
from suite.execute.prepared import PreparedSide
from suite.execute.sides import WORKER_REQUIREMENTS, prepare, venv_for, venv_path
from suite.judge.packages import COMPANIONS

LINUX = {"sys_platform": "linux", "platform_system": "Linux", "python_version": "3.11"}
BASELINE = {
    "torch": "2.13.0", "triton": "3.5.0", "pip": "23.2.1", "packaging": "26.4",
    "sympy": "1.12", "mpmath": "1.2.1", "numpy": "2.3.4", "jinja2": "3.1.4", "pygments": "2.17.2",
}  # fmt: skip


def _installed(**dists: tuple[str, list[str]]) -> Installed:
    return Installed({k.replace("_", "-"): (v, tuple(r)) for k, (v, r) in dists.items()}, LINUX)


def _pins(versions: dict[str, str] = BASELINE) -> BaselinePins:
    return BaselinePins.of(versions, COMPANIONS)


# --- what is pinned, relaxed or left, from plain data ---


def test_what_pip_moved_goes_back_and_what_torch_forbids_is_relaxed_and_named() -> None:
    installed = _installed(
        torch=("2.14.1", [
            "sympy>=1.13.3", "jinja2", "triton==3.6.0; platform_system == 'Linux'",
            'numpy>=2.4; sys_platform == "win32"',  # not here: numpy goes back
            'jinja2>=9; extra == "docs"',  # an extra nobody asked for
        ]),
        triton=("3.6.0", []), pip=("25.3", []), packaging=("26.3", []),
        sympy=("1.13.3", ["mpmath<1.4,>=1.1.0"]), mpmath=("1.3.0", []), numpy=("2.4.0", []),
        jinja2=("3.1.6", []), filelock=("3.20.0", []),
    )  # fmt: skip
    holding = plan(_pins(), installed)
    # What pip moved goes back; what the baseline holds and the venv lacks (pygments) goes in.
    assert holding.pinned == {
        "jinja2": "3.1.4", "mpmath": "1.2.1", "numpy": "2.3.4", "packaging": "26.4",
        "pygments": "2.17.2",
    }  # fmt: skip
    (sympy,) = holding.relaxed
    assert sympy == Relaxation("sympy", "1.12", "1.13.3", "torch 2.14.1 requires sympy>=1.13.3")
    assert sympy.line() == "sympy 1.12 → 1.13.3: torch 2.14.1 requires sympy>=1.13.3"
    assert "could not keep sympy at the baseline's 1.12" in sympy.warning()
    # torch, its companion, pip and a package the baseline lacks keep the venv's versions.
    left = {"torch", "triton", "pip", "filelock"}
    assert not left & {*holding.pinned, *(r.name for r in holding.relaxed)}


def test_what_a_relaxed_package_requires_moves_with_it_and_so_does_a_new_packages_need() -> None:
    installed = _installed(
        torch=("2.14.1", ["sympy>=1.13.3"]),
        sympy=("1.13.3", ["mpmath>=1.3"]), mpmath=("1.3.0", []),
        rich=("14.0.0", ["pygments<3,>=2.19"]), pygments=("2.19.2", []),  # the baseline has no rich
    )  # fmt: skip
    holding = plan(_pins(), installed)
    # The baseline's packages the venv lacks go in at the baseline's versions.
    assert holding.pinned == {"jinja2": "3.1.4", "numpy": "2.3.4", "packaging": "26.4"}
    assert [r.line() for r in holding.relaxed] == [
        "mpmath 1.2.1 → 1.3.0: sympy 1.13.3 requires mpmath>=1.3",
        "pygments 2.17.2 → 2.19.2: rich 14.0.0 requires pygments<3,>=2.19",
        "sympy 1.12 → 1.13.3: torch 2.14.1 requires sympy>=1.13.3",
    ]


def test_what_an_extra_asks_for_moves_with_the_package_that_asks_it() -> None:
    cuda = {"cuda-toolkit": "13.0.0", "nvidia-cublas": "13.0.0.19", "nvidia-cufft": "12.0.0"}
    installed = _installed(
        torch=("2.14.1", ["cuda-toolkit[cublas]==13.0.3; platform_system == 'Linux'"]),
        cuda_toolkit=("13.0.3", [
            'nvidia-cublas==13.1.0.3; extra == "cublas"', 'nvidia-cufft==12.1.0; extra == "cufft"',
        ]),
        nvidia_cublas=("13.1.0.3", []), nvidia_cufft=("12.1.0", []),
    )  # fmt: skip
    holding = plan(_pins({**BASELINE, **cuda}), installed)
    assert [r.line() for r in holding.relaxed] == [
        "cuda-toolkit 13.0.0 → 13.0.3: torch 2.14.1 requires cuda-toolkit==13.0.3",
        "nvidia-cublas 13.0.0.19 → 13.1.0.3: cuda-toolkit 13.0.3 requires nvidia-cublas==13.1.0.3",
    ]
    lacking = {"jinja2": "3.1.4", "mpmath": "1.2.1", "numpy": "2.3.4", "packaging": "26.4",
               "pygments": "2.17.2", "sympy": "1.12"}  # fmt: skip
    assert holding.pinned == {**lacking, "nvidia-cufft": "12.0.0"}  # no one asked for cufft
    # An extra that pip was given asks too.
    holding = plan(_pins({**BASELINE, **cuda}), installed, ["cuda-toolkit[cufft]"])
    assert holding.pinned == lacking


def test_a_package_the_venv_lacks_goes_in_unless_its_baseline_requirements_cannot_be_met() -> None:
    # The baseline's packaging went missing from the venv: the workloads would import another
    # copy (setuptools vendors one). An extension built for the baseline's torch cannot go in:
    # the candidate keeps its torch; and what needs that extension stays out with it.
    pins = replace(
        BaselinePins.of({**BASELINE, "torchao": "0.14.0", "ao-recipes": "1.0"}, COMPANIONS),
        requires=(
            ("torchao", ("torch<2.14,>=2.13",)), ("ao-recipes", ("torchao>=0.14",)),
            ("packaging", ('tomli; python_version < "3.11"',)),  # not here: no requirement
        ),
    )  # fmt: skip
    installed = _installed(torch=("2.14.1", []), numpy=("2.3.4", []), jinja2=("3.1.4", []))
    holding = plan(pins, installed)
    assert holding.pinned == {
        "mpmath": "1.2.1", "packaging": "26.4", "pygments": "2.17.2", "sympy": "1.12",
    }  # fmt: skip
    assert [r.line() for r in holding.relaxed] == [
        "ao-recipes 1.0 → absent: ao-recipes 1.0 requires torchao, which is left out too",
        "torchao 0.14.0 → absent: torchao 0.14.0 requires torch<2.14,>=2.13, and the candidate "
        "has torch 2.14.1",
    ]
    assert (
        holding.relaxed[1]
        .warning()
        .startswith("the candidate's venv could not add torchao at the baseline's 0.14.0: ")
    )


def test_the_same_version_spelled_otherwise_is_not_moved() -> None:
    installed = _installed(torch=("2.14.1", []), numpy=("2.3.4.0", []), jinja2=("3.1.4", []))
    assert not {"numpy", "jinja2"} & set(plan(_pins(), installed).pinned)


def test_the_pins_leave_out_what_moves_with_torch_and_what_pip_cannot_pin() -> None:
    pins = BaselinePins.of({"Jinja2": "3.1.4", "odd-dist": "not a version", **BASELINE}, COMPANIONS)
    assert "jinja2" in pins.versions and "odd-dist" not in pins.versions
    assert not {"torch", "triton", "pip"} & set(pins.versions)
    assert pins == BaselinePins.of(dict(reversed(list(BASELINE.items()))), COMPANIONS)


def test_the_pins_of_an_interpreter_are_what_it_imports() -> None:
    pins = read_pins(sys.executable, "baseline", COMPANIONS)
    assert pins.versions["packaging"] == version("packaging")
    assert not {"torch", "pip"} & set(pins.versions)


# --- the cache key ---


def _old_venv_path(requirement: str, python: str, with_requirements: tuple[str, ...]) -> Path:
    """venv_path as it was before pins existed (no indexes): the key of every venv built then."""
    extra = sorted({without_credential(r) for r in with_requirements})
    key_src = json.dumps(
        [
            without_credential(requirement), sys.version_info[:2], os.path.realpath(python),
            WORKER_REQUIREMENTS, *([extra] if extra else []),
        ]
    )  # fmt: skip
    key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", redact_text(requirement).replace("***@", ""))[:80]
    return cache_root() / "venvs" / f"{name}-{key}"


def test_the_pins_key_the_venv_and_no_pins_keep_the_old_key() -> None:
    def path(pins: BaselinePins | None, *extra: str) -> Path:
        return venv_path("torch==2.14.1", sys.executable, Indexes(), extra, pins)

    assert path(None) == _old_venv_path("torch==2.14.1", sys.executable, ())
    assert path(None, "tabulate") == _old_venv_path("torch==2.14.1", sys.executable, ("tabulate",))
    assert path(_pins()) != path(None)
    assert path(_pins()) != path(_pins({**BASELINE, "packaging": "26.3"}))
    assert path(_pins()) == path(_pins(dict(reversed(list(BASELINE.items())))))
    # What moves with torch is no pin: another torch on the baseline is the same venv.
    assert path(_pins()) == path(_pins({**BASELINE, "torch": "2.12.0"}))


# --- the build, with pip and the venv's interpreter stood in for ---


class FakeVenv:
    """subprocess.run for a venv's build: `python -m venv`, pip (which installs the newest
    packaging, then what the second call asks) and the venv's interpreter asked what it holds.
    lacking: the venv lacks four of the baseline's packages, which the second call adds."""

    def __init__(self, outcome: str = "held", *, lacking: bool = False) -> None:
        self.held = {"torch": ("2.14.1", ["sympy>=1.13.3"]), "sympy": ("1.13.3", []),
                     "packaging": ("26.3", []), "pip": ("25.3", [])}  # fmt: skip
        if not lacking:
            self.held.update({n: (BASELINE[n], []) for n in LACKING})
        self.pip_calls: list[list[str]] = []
        self.constraints = ""
        # held, failed (pip exits 1), left, broken (pip exits 0 regardless), no-wheel (pip
        # cannot add a package the venv lacks)
        self.outcome = outcome

    def __call__(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        if argv[1:4] == ["-I", "-m", "venv"]:
            (Path(argv[-1]) / "bin").mkdir(parents=True, exist_ok=True)
            (Path(argv[-1]) / "bin" / "python").write_text("")
        elif "install" in argv:
            self.pip_calls.append(argv)
            if "-c" in argv:
                self.constraints = Path(argv[argv.index("-c") + 1]).read_text()
                asked = dict(a.split("==") for a in argv[argv.index("-c") + 2 :])
                if self.outcome == "failed":
                    why = "ResolutionImpossible at https://ci:tok3n@pkgs.example.com/simple"
                    return subprocess.CompletedProcess(argv, 1, "", why)
                if self.outcome == "no-wheel" and set(asked) - set(self.held):
                    first = sorted(set(asked) - set(self.held))[0]
                    why = f"ERROR: No matching distribution found for {first}=={asked[first]}"
                    return subprocess.CompletedProcess(argv, 1, "", why)
                for name, version in asked.items():
                    if name == "packaging" and self.outcome == "left":
                        continue
                    needs = ["sympy<1.13"] if self.outcome == "broken" else []
                    self.held[name] = (version, needs if name == "packaging" else [])
        elif argv[1:3] == ["-I", "-S"] and argv[4] == "-c":  # the venv, asked what it holds
            dists = [[n, v, r, False] for n, (v, r) in self.held.items()]
            answer = json.dumps({"dists": dists, "markers": LINUX})
            return subprocess.CompletedProcess(argv, 0, "\n" + answer, "")
        return subprocess.CompletedProcess(argv, 0, "", "")


LACKING = ("jinja2", "mpmath", "numpy", "pygments")


def test_a_venv_that_lacks_the_baselines_packages_gets_them_or_names_why_not(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeVenv(lacking=True)
    monkeypatch.setattr(sides.subprocess, "run", fake)
    side = prepare("torch==2.14.1", "candidate", pins=_pins())
    _, second = fake.pip_calls
    added = [f"{n}=={BASELINE[n]}" for n in LACKING]
    assert sorted(second[second.index("-c") + 2 :]) == sorted([*added, "packaging==26.4"])
    assert {n: fake.held[n][0] for n in LACKING} == {n: BASELINE[n] for n in LACKING}
    assert [r.name for r in side.relaxed] == ["sympy"]
    # pip cannot add what the venv lacks: the venv is still held, and each package left out
    # is named with pip's own words.
    fake = FakeVenv("no-wheel", lacking=True)
    monkeypatch.setattr(sides.subprocess, "run", fake)
    side = prepare("torch==2.14.1", "candidate", pins=_pins(), with_requirements=("tabulate",))
    assert fake.held["packaging"][0] == "26.4" and not set(LACKING) & set(fake.held)
    left_out = {r.name: r for r in side.relaxed if r.candidate == "absent"}
    assert sorted(left_out) == sorted(LACKING)
    # pip names one package at a time: each is left out with its own words, the rest retried.
    for name in LACKING:
        assert f"No matching distribution found for {name}" in left_out[name].required
    assert "could not add numpy at the baseline's 2.3.4" in left_out["numpy"].warning()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TORCH_MATRIX_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_built_venv_is_held_to_the_baseline_and_says_so_when_reused(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeVenv()
    monkeypatch.setattr(sides.subprocess, "run", fake)
    side = prepare("torch==2.14.1", "candidate", pins=_pins())
    _, second = fake.pip_calls
    assert second[second.index("-c") + 2 :] == ["packaging==26.4"]
    constraints = fake.constraints.splitlines()
    assert "packaging==26.4" in constraints and "numpy==2.3.4" in constraints  # the baseline's
    assert "torch==2.14.1" in constraints and "sympy==1.13.3" in constraints  # what stays
    assert not [c for c in constraints if c.startswith(("sympy==1.12", "pip==", "triton=="))]
    assert not Path(second[second.index("-c") + 1]).parent.exists()  # removed after
    relaxed = Relaxation("sympy", "1.12", "1.13.3", "torch 2.14.1 requires sympy>=1.13.3")
    assert side.relaxed == (relaxed,) and side.pins == _pins()
    venv = Path(side.interpreter).parent.parent
    record = read_record(venv)
    assert record is not None and record.pinned == (("packaging", "26.4"),)
    assert record.baseline_digest == _pins().digest
    manifest = read_manifest(venv)
    assert manifest is not None and PINS_FILE in manifest and differences(venv, manifest) == []
    again = prepare("torch==2.14.1", "candidate", pins=_pins())
    assert (again.prepared_s, again.relaxed, again.interpreter) == (
        0.0,
        (relaxed,),
        side.interpreter,
    )
    assert len(fake.pip_calls) == 2  # reused: no pip
    # Without pins the same requirement is another venv, built as pip resolves it.
    plain = prepare("torch==2.14.1", "candidate")
    assert plain.interpreter != side.interpreter and plain.relaxed == () and plain.pins is None


@pytest.mark.parametrize(
    ("outcome", "says"),
    [
        ("failed", "(pip exited 1); only the torch pin may differ"),
        ("left", "pip left packaging 26.3"),
        ("broken", "packaging 26.4 requires sympy<1.13, but 1.13.3 is there"),
    ],
)
def test_pins_that_pip_cannot_hold_fail_the_build_naming_them(
    cache: Path, monkeypatch: pytest.MonkeyPatch, outcome: str, says: str
) -> None:
    monkeypatch.setattr(sides.subprocess, "run", FakeVenv(outcome))
    with pytest.raises(EnvironmentProblem) as caught:
        venv_for("torch==2.14.1", pins=_pins())
    message = str(caught.value)
    assert "could not hold the venv's packaging==26.4 at the baseline's versions" in message
    assert says in message
    if outcome == "failed":  # pip's own words, without the credential
        assert "ResolutionImpossible" in message and "https://***@pkgs.example.com" in message
        assert "tok3n" not in message
    assert not list((cache / "venvs").glob("*/bin"))  # the half-held venv is gone


def test_ab_holds_the_candidate_to_the_baseline_and_warns_once_per_relaxation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from suite.cli.ab import _prepare

    given: dict[str, BaselinePins | None] = {}
    relaxed = Relaxation("sympy", "1.12", "1.13.3", "torch 2.14.1 requires sympy>=1.13.3")

    def prepared(spec: str, role: str, **kw: Any) -> PreparedSide:
        given[role] = kw.get("pins")
        kind = sides.parse(spec, role)
        return PreparedSide(
            spec, spec, sys.executable, 0.0, kind, relaxed=(relaxed,) * (kind == "requirement")
        )

    monkeypatch.setattr(sides, "prepare", prepared)
    none = {"baseline": Indexes(), "candidate": Indexes()}
    _prepare("current", "torch==2.14.1", tmp_path, none, ())
    pins = given["candidate"]
    assert given["baseline"] is None and pins is not None
    assert pins.versions["packaging"] == version("packaging") and "torch" not in pins.versions
    err = capsys.readouterr().err
    assert err.count("could not keep sympy at the baseline's 1.12 (1.13.3 instead)") == 1
    # An interpreter candidate is built by nobody: the baseline is not asked for its pins.
    monkeypatch.setattr(sides, "read_pins", lambda *_: pytest.fail("pins read"))
    _prepare("current", sys.executable, tmp_path, none, ())
    assert given["candidate"] is None


# --- a real venv ---


def _stand_in_torch(folder: Path) -> Path:
    """A one-module torch 2.14.1 wheel that requires more-itertools>=11."""
    wheel = folder / "torch-2.14.1-py3-none-any.whl"
    info = "torch-2.14.1.dist-info"
    files = {
        "torch/__init__.py": "__version__ = '2.14.1'\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: torch\nVersion: 2.14.1\n"
        "Requires-Dist: more-itertools>=11\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return wheel


@pytest.mark.slow
def test_a_real_venv_holds_the_baselines_version_of_an_extra_package(
    tmp_path: Path, cache: Path
) -> None:
    wheel = _stand_in_torch(tmp_path)
    spec = f"torch @ {wheel.as_uri()}"
    pins = _pins({"tabulate": "0.8.10", "more-itertools": "10.8.0", "torch": "2.13.0"})
    side = prepare(spec, "candidate", with_requirements=("tabulate",), pins=pins)
    asked = (
        "import importlib.metadata as m; print(m.version('tabulate'), m.version('more-itertools'))"
    )
    held = subprocess.run(
        [side.interpreter, "-I", "-c", asked], capture_output=True, text=True, check=True
    ).stdout.split()
    assert held[0] == "0.8.10" and int(held[1].split(".")[0]) >= 11
    venv = Path(side.interpreter).parent.parent
    record = read_record(venv)
    assert record is not None and dict(record.pinned) == {"tabulate": "0.8.10"}
    (relaxed,) = side.relaxed
    assert (
        relaxed.line()
        == f"more-itertools 10.8.0 → {held[1]}: torch 2.14.1 requires more-itertools>=11"
    )
    again = prepare(spec, "candidate", with_requirements=("tabulate",), pins=pins)
    assert again.prepared_s == 0.0 and again.relaxed == side.relaxed  # the manifest holds
