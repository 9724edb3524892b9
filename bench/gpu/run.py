"""One call on a GPU machine: everything a CUDA check of the suite needs, its evidence packed
into one archive that fits what comes back.

    python3 bench/gpu/run.py OUT [--wheels DIR] [--budget-s 470] [--dry-run]

Run from the repository root. The steps, in order, each bounded by what is left of the budget
and each recorded (command, exit code, wall time, what it found) in OUT/steps.json:

  deps    install requirements.txt from the wheel folder alone (no index) into a folder of
          this call, on the suite's import path for every later step
  env     `torch-matrix env --json`: machine, driver, torch and what each backend sees
  memory  bench/known_alloc.py on CUDA: the allocator's peak against the bytes each step
          allocates (64, 256 and 1024 MiB)
  detect  bench/detect.py on CUDA: the latency gate's A/A false-alarm and +5% detection rates
          (--tries cells each), written level by level so a cut-short run keeps what it has
  matrix  bench/gpu/matrix.yaml on --backend cuda: FlexAttention (masks, eager and compiled,
          fwd and fwd_bwd, bf16), SDPA, LCE, mlp_train, compile (cold/warm, graph breaks,
          recompiles, reduce-overhead), export (torch.export, ONNX in onnxruntime, AOTInductor),
          determinism (deterministic algorithms on and off), the CuTe DSL prototype; it gets
          what is left of the budget

--steps runs a subset (say `--steps detect` in a second call); deps, env and pack always run.
  pack    OUT/evidence.tar.gz (every step's output), OUT/summary.md and OUT/steps.json: three
          files, checked against the limits of what comes back (8 files of 16 MiB at most)

With --dry-run, or where torch sees no CUDA device, the same script runs everything up to the
device: it checks that the wheel folder holds the whole requirement set for the GPU machine's
Python (CPython 3.12, Linux x86-64) and fits what travels, runs env, memory and matrix (their
CUDA cells are recorded as skipped: no device), leaves detect out, and packs and checks the
archive. Exit status: 0 when every step that ran ended as it should, 1 when one did not, 2 when
the call itself is wrong (a missing or incomplete wheel folder, OUT not empty).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HERE = REPO / "bench" / "gpu"
TARGET_PYTHON = (3, 12)
TARGET_ARCH = "x86_64"
# What comes back from the device: at most 8 files of 16 MiB; what travels to it: 64 MiB.
RETURN_FILES, RETURN_BYTES = 8, 16 * 2**20
TRAVEL_BYTES = 64 * 2**20
PACK_RESERVE_S = 15.0
OPTIONAL_STEPS = ("memory", "detect", "matrix")
KNOWN_ALLOC = f"{REPO / 'bench' / 'known_alloc.py'}:KnownAlloc"
# The allocator's peak may exceed the requested bytes by its rounding and the step's own small
# tensors, never fall below them.
MEMORY_TOLERANCE = 0.05


class CallError(Exception):
    """The call is wrong (exit 2): say what and where."""


@dataclass
class Step:
    name: str
    command: list[str] = field(default_factory=list)
    status: str = "pending"  # ok, failed, timeout, not-run
    exit_code: int | None = None
    wall_s: float = 0.0
    found: dict[str, Any] = field(default_factory=dict)
    why: str = ""


@dataclass
class Call:
    out: Path
    work: Path
    wheels: Path | None
    deadline: float
    device: bool
    env: dict[str, str]
    steps: list[Step] = field(default_factory=list)

    def left_s(self) -> float:
        return self.deadline - time.monotonic() - PACK_RESERVE_S

    def run(self, step: Step, argv: list[str], cap_s: float, log: str) -> int | None:
        """One command of a step, its output to WORK/LOG, bounded by cap_s and the budget."""
        step.command = argv
        timeout = min(cap_s, self.left_s())
        if timeout <= 1:
            step.status, step.why = "not-run", "the budget was spent before this step"
            return None
        start = time.monotonic()
        with open(self.work / log, "wb") as fh:
            try:
                proc = subprocess.run(
                    argv, stdout=fh, stderr=subprocess.STDOUT, env=self.env, cwd=REPO,
                    timeout=timeout, check=False,
                )  # fmt: skip
                step.exit_code = proc.returncode
            except subprocess.TimeoutExpired:
                step.status, step.why = "timeout", f"stopped after {timeout:.0f}s"
        step.wall_s += time.monotonic() - start
        return step.exit_code


def _tail(path: Path, limit: int = 1500) -> str:
    try:
        return path.read_text("utf-8", errors="replace")[-limit:]
    except OSError:
        return ""


def wheel_tags_fit(filename: str) -> bool:
    """Does this wheel install on CPython 3.12 for Linux x86-64?"""
    from packaging.utils import parse_wheel_filename

    _, _, _, tags = parse_wheel_filename(filename)
    major, minor = TARGET_PYTHON
    for tag in tags:
        interpreter_ok = tag.interpreter in (f"py{major}", f"cp{major}{minor}", f"py{major}{minor}")
        if tag.abi == "abi3" and tag.interpreter.startswith(f"cp{major}"):
            interpreter_ok = int(tag.interpreter[len(f"cp{major}") :] or 0) <= minor
        platform_ok = tag.platform == "any" or (
            tag.platform.startswith("manylinux") and tag.platform.endswith(TARGET_ARCH)
        )
        if interpreter_ok and platform_ok:
            return True
    return False


def check_wheels(wheels: Path) -> dict[str, Any]:
    """The wheel folder holds an installable wheel for every requirement and its dependencies
    (pip resolves the set from the folder alone, for the target Python), and what travels fits."""
    if not wheels.is_dir():
        raise CallError(f"{wheels}: no wheel folder; make it with python bench/gpu/fetch_wheels.py")
    files = sorted(wheels.glob("*.whl"))
    unfit = [f.name for f in files if not wheel_tags_fit(f.name)]
    if unfit:
        raise CallError(f"{wheels}: not for CPython 3.12 on Linux x86-64: {', '.join(unfit)}")
    with tempfile.TemporaryDirectory(prefix="gpu-wheels-") as tmp:
        major, minor = TARGET_PYTHON
        argv = [
            sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
            "--no-index", "--find-links", str(wheels), "--only-binary=:all:", "--target", tmp,
            "--python-version", f"{major}.{minor}", "--implementation", "cp",
            "--platform", f"manylinux2014_{TARGET_ARCH}", "--platform",
            f"manylinux_2_28_{TARGET_ARCH}", "-r", str(HERE / "requirements.txt"),
        ]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        if proc.returncode != 0:
            raise CallError(
                f"{wheels}: the wheels do not cover {HERE / 'requirements.txt'}: "
                f"{proc.stderr.strip()[-800:]}"
            )
    tree = _tracked_bytes()
    wheel_bytes = sum(f.stat().st_size for f in files)
    if tree + wheel_bytes > TRAVEL_BYTES:
        raise CallError(
            f"{wheels}: {wheel_bytes / 2**20:.1f} MiB of wheels beside a {tree / 2**20:.1f} MiB "
            f"checkout exceed the {TRAVEL_BYTES // 2**20} MiB that travels"
        )
    return {"wheels": [f.name for f in files], "wheel_bytes": wheel_bytes, "tree_bytes": tree}


def _tracked_bytes() -> int:
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, timeout=60, check=False
    )
    names = [n for n in listed.stdout.decode().split("\0") if n]
    return sum((REPO / n).stat().st_size for n in names if (REPO / n).is_file())


def step_deps(call: Call) -> Step:
    step = Step("deps")
    if call.wheels is None:
        step.status, step.why = "not-run", "no --wheels: the machine must already have them"
        return step
    start = time.monotonic()
    try:
        step.found = check_wheels(call.wheels)
    finally:
        step.wall_s = time.monotonic() - start
    if not call.device:
        step.status, step.why = "ok", "checked for the GPU machine's Python; not installed here"
        return step
    deps = call.work / "deps"
    argv = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "--no-index", "--find-links", str(call.wheels), "--target", str(deps),
        "-r", str(HERE / "requirements.txt"),
    ]  # fmt: skip
    if call.run(step, argv, 120, "deps.log") == 0:
        call.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO), str(deps), call.env.get("PYTHONPATH", "")) if p
        )
        step.status = "ok"
    elif step.status == "pending":
        step.status, step.why = "failed", _tail(call.work / "deps.log")
    return step


def _suite(*args: str) -> list[str]:
    return [sys.executable, "-m", "suite", *args]


def step_env(call: Call) -> Step:
    step = Step("env")
    code = call.run(step, [*_suite("env", "--json")], 120, "env.json")
    if code == 0:
        record = json.loads((call.work / "env.json").read_text("utf-8"))
        cuda = record["backends"].get("cuda", {})
        step.found = {
            "torch": record["torch"]["version"], "cuda": record["torch"]["cuda"],
            "cuda_available": cuda.get("available"), "devices": cuda.get("devices"),
            "driver": cuda.get("driver"), "reason": cuda.get("reason"),
        }  # fmt: skip
        step.status = "ok"
    elif step.status == "pending":
        step.status, step.why = "failed", _tail(call.work / "env.json")
    return step


def _cells(run_dir: Path) -> list[dict[str, Any]]:
    cells = []
    for path in sorted((run_dir / "cells").glob("*.json")):
        doc = json.loads(path.read_text("utf-8"))
        cells.append(doc)
    return cells


def _statuses(docs: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for doc in docs:
        counts[doc["status"]] = counts.get(doc["status"], 0) + 1
    return counts


def _run_step(
    call: Call, name: str, args: list[str], cap_s: float, judge: Callable[[Step, Path], None]
) -> Step:
    step = Step(name)
    run_dir = call.work / f"run-{name}"
    argv = _suite("run", *args, "--backend", "cuda", "--out", str(run_dir))
    code = call.run(step, argv, cap_s, f"{name}.log")
    if (run_dir / "run.json").is_file():
        judge(step, run_dir)
    if step.status == "pending":
        # `run` exits 1 when a cell failed: a finding the record holds, not a broken step.
        broken = code not in (0, 1) or not (run_dir / "run.json").is_file()
        step.status = "failed" if broken else "ok"
        if broken:
            step.why = _tail(call.work / f"{name}.log")
    return step


def _judge_matrix(step: Step, run_dir: Path) -> None:
    docs = _cells(run_dir)
    step.found = {
        "statuses": _statuses(docs),
        "cells": {
            d["cell_id"]: {
                "status": d["status"],
                "p50_s": ((d.get("timing") or {}).get("summary") or {}).get("p50"),
                "peak_bytes": (d.get("memory") or {}).get("peak_bytes"),
                "correct": (d.get("correctness") or {}).get("passed"),
                "why": ((d.get("failure") or {}).get("message") or "")[:300],
            }
            for d in docs
        },
    }


def _judge_memory(step: Step, run_dir: Path) -> None:
    rows = {}
    for doc in _cells(run_dir):
        expected = ((doc.get("metrics") or {}).get("expected_bytes") or {}).get("value")
        peak = (doc.get("memory") or {}).get("peak_bytes")
        ratio = peak / expected if peak and expected else None
        ok = ratio is not None and 1.0 <= ratio <= 1.0 + MEMORY_TOLERANCE
        rows[doc["cell_id"]] = {
            "status": doc["status"], "expected_bytes": expected, "peak_bytes": peak,
            "ratio": ratio, "method": (doc.get("memory") or {}).get("method"), "ok": ok,
        }  # fmt: skip
    step.found = {"cells": rows, "tolerance": MEMORY_TOLERANCE}
    ran = [r for r in rows.values() if r["status"] == "ok"]
    if ran and not all(r["ok"] for r in ran):
        step.status, step.why = "failed", "a peak is off the known allocation"


def step_detect(call: Call, tries: int) -> Step:
    step = Step("detect")
    argv = [
        sys.executable, str(REPO / "bench" / "detect.py"), "--backend", "cuda",
        "--aa", str(tries), "--five", str(tries), "--ten", "0", "--loaded", "0",
        "--json", str(call.work / "detect.json"),
    ]  # fmt: skip
    if not call.device:
        step.command, step.status = argv, "not-run"
        step.why = "needs the device: its cells would all be skipped here"
        return step
    call.run(step, argv, 220, "detect.log")
    if (call.work / "detect.json").is_file():
        step.found = {"levels": json.loads((call.work / "detect.json").read_text("utf-8"))}
    if step.status == "pending":
        step.status = "ok" if step.exit_code == 0 else "failed"
    return step


def summary(call: Call) -> str:
    lines = ["# GPU check", "", f"device run: {'yes' if call.device else 'no (dry run)'}", ""]
    lines += ["| step | status | wall | command |", "|---|---|---|---|"]
    for step in call.steps:
        command = shlex.join(step.command).replace(str(REPO) + "/", "")[:160]
        lines.append(f"| {step.name} | {step.status} | {step.wall_s:.0f} s | `{command}` |")
    for step in call.steps:
        if step.why:
            lines += ["", f"{step.name}: {step.why.strip()[:600]}"]
    return "\n".join(lines) + "\n"


def pack(call: Call) -> None:
    (call.work / "steps.json").write_text(
        json.dumps([asdict(s) for s in call.steps], indent=2), "utf-8"
    )
    archive = call.out / "evidence.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(call.work.rglob("*")):
            if path.is_file() and "deps" not in path.relative_to(call.work).parts[:1]:
                tar.add(path, arcname=str(path.relative_to(call.work)))
    shutil.copy2(call.work / "steps.json", call.out / "steps.json")
    (call.out / "summary.md").write_text(summary(call), "utf-8")
    files = [p for p in call.out.rglob("*") if p.is_file()]
    big = [p.name for p in files if p.stat().st_size > RETURN_BYTES]
    if len(files) > RETURN_FILES or big:
        raise CallError(
            f"{call.out}: {len(files)} files ({', '.join(big) or 'none'} over 16 MiB): more than "
            "comes back"
        )


def _has_cuda(env: dict[str, str]) -> bool:
    probe = "import torch; print(torch.cuda.is_available() and torch.version.cuda is not None)"
    found = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120,
        check=False,
    )  # fmt: skip
    return found.stdout.strip() == "True"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for what comes back (empty or absent)")
    parser.add_argument("--wheels", type=Path, help="the folder fetch_wheels.py made")
    parser.add_argument("--budget-s", type=float, default=470.0, help="the whole call, s")
    parser.add_argument("--tries", type=int, default=20, help="detection cells per level")
    parser.add_argument("--dry-run", action="store_true", help="everything up to the device")
    parser.add_argument(
        "--steps", default=",".join(OPTIONAL_STEPS), help="which of memory,detect,matrix to run"
    )
    args = parser.parse_args(argv)
    try:
        return _main(args)
    except CallError as exc:
        print(f"bench/gpu/run.py: error: {exc}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace) -> int:
    chosen = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in OPTIONAL_STEPS]
    if unknown:
        raise CallError(f"--steps: no step {unknown[0]!r}; choose from {', '.join(OPTIONAL_STEPS)}")
    out: Path = args.out.resolve()
    if out.exists() and any(out.iterdir()):
        raise CallError(f"{out}: not empty; give a new folder (nothing was overwritten)")
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        call = Call(
            out=out, work=Path(tmp), wheels=args.wheels.resolve() if args.wheels else None,
            deadline=time.monotonic() + args.budget_s, device=False, env=env,
        )  # fmt: skip
        call.device = not args.dry_run and _has_cuda(call.env)
        call.steps.append(step_deps(call))
        call.steps.append(step_env(call))
        if "memory" in chosen:
            memory = ["--workload", KNOWN_ALLOC]
            call.steps.append(_run_step(call, "memory", memory, 120, _judge_memory))
        if "detect" in chosen:
            call.steps.append(step_detect(call, args.tries))
        if "matrix" in chosen:
            matrix = ["--matrix", str(HERE / "matrix.yaml"), "--timeout", "240"]
            call.steps.append(_run_step(call, "matrix", matrix, 600, _judge_matrix))
        pack(call)
    print(summary(call), end="")
    return 0 if all(s.status in ("ok", "not-run") for s in call.steps) else 1


if __name__ == "__main__":
    sys.exit(main())
