"""Fail closed, tried as a careless or hostile user would: plugins that misbehave at import, a
YAML alias bomb and repeated keys, credentials inside values, an --out that holds the user's
files, a full disk, and round records edited between an A/B and its --resume. None of them may
end in "adopt", lose a user's file or print a secret."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

import pytest

from suite.core.errors import InputError
from suite.core.secrets import REDACTED
from suite.execute.docker import docker_run_line
from suite.execute.plugins import check_plugins
from suite.judge.policy import load_policy
from suite.pins.assess import assess, tree_of
from suite.worker.envinfo import relevant_env
from tests.helpers import REPO, cli, planted

QUICK = planted("Quick")
QUICK_CELL = "quick.8@cpu"


def _plugin(tmp_path: Path, body: str, name: str = "evil.py") -> str:
    path = tmp_path / "plugins" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    return f"{path}:Evil"


# --- plugins that misbehave at import ------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("import sys\nsys.exit(0)\n", "called sys.exit(0)"),
        ("import os\nos._exit(0)\n", "ended the process while being imported (exit code 0)"),
        ("raise RuntimeError('broken plugin')\n", "broken plugin"),
        (  # past Python's own streams, straight to the file descriptor
            "import os\nchunk = b'x' * 65536\nfor _ in range(800):\n    os.write(1, chunk)\n",
            "was stopped for writing more than 8 MiB",
        ),
    ],
    ids=["sys-exit-0", "os-exit-0", "raises", "writes-50-MB"],
)
def test_a_plugin_that_misbehaves_at_import_ends_ab_with_an_error_and_step_outputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, said: str
) -> None:
    ref = _plugin(tmp_path, body)
    outputs, summary = tmp_path / "github-output", tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_OUTPUT", str(outputs))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out = tmp_path / "x"
    code, stdout, stderr = cli(
        "ab", "--candidate", sys.executable, "--workload", "sdpa", "--workload", ref,
        "--rounds", "2", "--github-step", "--out", str(out),
    )  # fmt: skip
    assert code == 2, stderr  # never 0: no decision without the cells it names
    assert said in stderr and "evil.py" in stderr
    assert len(stdout) < 10_000 and len(stderr) < 20_000  # no flood on the terminal
    assert not (out / "decision.json").exists()
    written = outputs.read_text()
    assert "decision=\n" in written and "error=" in written  # a later step reads no pass
    assert "NO DECISION" in summary.read_text()


def test_an_endless_import_is_stopped_and_named(tmp_path: Path) -> None:
    ref = _plugin(tmp_path, "import time\nwhile True:\n    time.sleep(0.05)\n")
    with pytest.raises(InputError, match=r"did not finish within 3s") as caught:
        check_plugins([ref], timeout_s=3)
    assert "evil.py" in str(caught.value)


def test_what_a_plugin_prints_at_import_stays_out_of_the_json_on_stdout(tmp_path: Path) -> None:
    body = (
        "import sys\nfor _ in range(800):\n    print('noise from the plugin ' * 3000)\n"
        "from tests.plugins.planted import Quick as Evil  # noqa: F401\n"
    )  # 50 MB through print(): kept off stdout, and only 64 KiB of it shown on stderr
    ref = _plugin(tmp_path, body)
    plan_code, plan_out, plan_err = cli("plan", "--workload", ref, "--backend", "cpu")
    assert plan_code == 0 and json.loads(plan_out.splitlines()[-1])["include"]
    assert "noise from the plugin" not in plan_out
    assert 65536 <= len(plan_err) < 200_000 and "printed while it was imported" in plan_err
    code, _, stderr = cli(
        "run", "--workload", ref, "--cell", QUICK_CELL, "--out", str(tmp_path / "run"),
        "--python", sys.executable,
    )  # fmt: skip
    assert code == 0, stderr[-2000:]  # the cells still run


# --- YAML a pull request controls -----------------------------------------------------------


def _bomb() -> str:
    text = "name: env\ndependencies:\n  - python=3.11\n  - pip:\n      - &l0 torch==2.14.1\n"
    lines = ["_levels:"]
    prev = "l0"
    for level in range(1, 10):
        lines.append(f"  - &l{level} [{', '.join(['*' + prev] * 10)}]")
        prev = f"l{level}"
    return text + "\n".join(lines) + f"\nextra: *{prev}\n"


def test_a_yaml_alias_bomb_is_unknown_in_bounded_time() -> None:
    base = {"environment.yml": "name: env\ndependencies:\n  - pip:\n      - torch==2.13.0\n"}
    head = {"environment.yml": _bomb()}
    result = assess(tree_of(base), tree_of(head))  # 10**9 expanded items if it were expanded
    assert result.status == "unknown" and result.run
    (unknown,) = result.unknown
    assert unknown.file == "environment.yml" and "expands to more than" in unknown.reason


def test_a_policy_listing_a_gate_twice_is_an_error_naming_both_lines(tmp_path: Path) -> None:
    text = (REPO / "suite" / "data" / "default-policy.yaml").read_text()
    twice = text.replace(
        "      latency_p50:  {severity: soft, threshold: 0.15, may_be_missing: true}\n",
        "      latency_p50:  {severity: soft, threshold: 0.15, may_be_missing: true}\n"
        "      latency_p50:  {severity: soft, threshold: 0.90}\n",
        1,
    )
    assert twice != text
    policy = tmp_path / "policy.yaml"
    policy.write_text(twice)
    line = twice.splitlines().index("      latency_p50:  {severity: soft, threshold: 0.90}") + 1
    with pytest.raises(InputError, match=rf"'latency_p50' at line {line} repeats the one at line"):
        load_policy(policy, None)
    code, _, stderr = cli("validate", str(policy))
    assert code == 2 and str(policy) in stderr and "latency_p50" in stderr


def test_a_huge_policy_is_refused_unread(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("# padding\n" * 3_000_000)  # 30 MB
    with pytest.raises(InputError, match="refused unread"):
        load_policy(policy, None)


# --- credentials inside values ----------------------------------------------------------------

SECRETS = {
    "TORCH_INDEX_URL": ("https://reader:Idx-S3cret-1@pypi.example.com/simple", "Idx-S3cret-1"),
    "PYTORCH_DB_DSN": ("host=db user=bench password=Dsn-S3cret-2 port=5432", "Dsn-S3cret-2"),
    "TORCH_HOME_PW": ("Pw-S3cret-3", "Pw-S3cret-3"),
}


def test_a_credential_in_a_value_reaches_no_file_and_no_pasted_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, (value, _) in SECRETS.items():
        monkeypatch.setenv(name, value)
    recorded = relevant_env()
    assert recorded["TORCH_HOME_PW"] == REDACTED
    assert recorded["TORCH_INDEX_URL"] == "https://***@pypi.example.com/simple"  # host kept
    assert recorded["PYTORCH_DB_DSN"] == "host=db user=bench password=*** port=5432"
    out = tmp_path / "run"
    code, stdout, stderr = cli("run", "--workload", QUICK, "--cell", QUICK_CELL, "--out", str(out))
    assert code == 0, stderr
    for path in (p for p in out.rglob("*") if p.is_file()):
        data = path.read_bytes()
        assert not any(secret.encode() in data for _, secret in SECRETS.values()), path
    for text in (stdout, stderr):
        assert not any(secret in text for _, secret in SECRETS.values())
    # A pasted line passes them by name: the pasting shell's own value, never the recorded one.
    line = docker_run_line(
        "sha256:" + "a" * 64, "cpu", ["torch-matrix", "run", "--out", str(tmp_path / "o")],
        {**recorded, "TORCH_LOGS": "+dynamo"},
    )  # fmt: skip
    assert " -e TORCH_INDEX_URL " in line and " -e PYTORCH_DB_DSN " in line
    assert " -e TORCH_HOME_PW " in line and "-e TORCH_LOGS=+dynamo" in line
    assert "***" not in line and REDACTED not in line


def test_a_token_in_a_candidate_requirement_is_never_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_MATRIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    token = "Req-T0ken-4"
    spec = f"torch @ http://user:{token}@127.0.0.1:9/torch-2.14.1-cp311-none-any.whl"
    out = tmp_path / "ab"
    code, stdout, stderr = cli(
        "ab", "--candidate", spec, "--workload", "sdpa", "--cell",
        "sdpa.none.fp32.fwd.s256@cpu", "--out", str(out),
    )  # fmt: skip
    assert code == 3, stderr  # the index is not there: an environment problem
    assert token not in stdout + stderr and "http://***@127.0.0.1:9" in stderr
    for root in (out, tmp_path / "cache"):
        for path in root.rglob("*"):
            assert token not in str(path)
            if path.is_file():
                assert token.encode() not in path.read_bytes(), path


def test_an_unreachable_api_url_with_userinfo_is_named_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    decision = tmp_path / "decision.json"
    from tests.synthetic import research_decision

    decision.write_text(json.dumps(research_decision()))
    monkeypatch.setenv("GITHUB_API_URL", "http://admin:Api-Pass-5@127.0.0.1:9")
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_" + "b" * 36)
    code, stdout, stderr = cli(
        "comment", "--decision", str(decision), "--repo", "o/r", "--pr", "1",
        "--run-started-at", "2026-11-30T10:00:00Z",
    )  # fmt: skip
    assert code != 0
    assert "Api-Pass-5" not in stdout + stderr and "admin:" not in stdout + stderr
    assert "127.0.0.1:9" in stderr


# --- never overwrite, and a full disk -------------------------------------------------------


@pytest.mark.parametrize("command", ["ab", "run"])
def test_an_out_holding_the_users_files_is_refused_and_kept(tmp_path: Path, command: str) -> None:
    out = tmp_path / "mine"
    (out / "cells").mkdir(parents=True)
    (out / "decision.json").write_text("my own decision")
    (out / "cells" / f"{QUICK_CELL}.json").write_text("my own cell")
    args = ["--candidate", sys.executable] if command == "ab" else []
    code, _, stderr = cli(command, *args, "--workload", QUICK, "--out", str(out))
    assert code == 2 and "is not an empty folder" in stderr, stderr
    assert (out / "decision.json").read_text() == "my own decision"
    assert (out / "cells" / f"{QUICK_CELL}.json").read_text() == "my own cell"


def test_a_full_disk_is_one_message_exit_3_and_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import suite.core.results as results

    real = results.os.replace

    def full(src: str, dst: str) -> None:
        if str(dst).endswith("run.json"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(results.os, "replace", full)
    out = tmp_path / "run"
    code, _, stderr = cli("run", "--workload", QUICK, "--cell", QUICK_CELL, "--out", str(out))
    assert code == 3, stderr
    assert "the disk is full" in stderr and "Traceback" not in stderr
    assert stderr.count("torch-matrix: error:") == 1
    assert not [p for p in out.rglob("*.tmp")] and not [p for p in out.rglob(".*.tmp")]


# --- round records edited between an A/B and its --resume ------------------------------------


@pytest.mark.slow
def test_resume_redoes_an_edited_or_truncated_round_and_says_which(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    policy = tmp_path / "policy.yaml"
    text = (REPO / "suite" / "data" / "default-policy.yaml").read_text()
    policy.write_text(
        text.replace("      rollback:     {severity: hard, required: true}\n", "").replace(
            "  - {gate: rollback, verdicts: [fail, new-failure, untested, inconclusive], "
            'decision: defer,\n     reason: "rollback is not proven: adoption would be one-way"}\n',
            "",
        )
    )
    base = [
        sys.executable, "-m", "suite", "ab", "--candidate", "current", "--workload", QUICK,
        "--cell", QUICK_CELL, "--rounds", "2", "--no-traces", "--policy", str(policy),
        "--out", str(out),
    ]  # fmt: skip
    first = subprocess.run(base, capture_output=True, text=True, timeout=600)
    assert first.returncode in (0, 4, 5), first.stderr
    edited = out / "candidate" / "cells" / f"{QUICK_CELL}~r1.json"
    doc = json.loads(edited.read_text())
    doc["timing"]["samples_s"] = [s * 10 for s in doc["timing"]["samples_s"]]
    edited.write_text(json.dumps(doc))  # still valid JSON, still schema-valid
    truncated = out / "baseline" / "cells" / f"{QUICK_CELL}.json"
    truncated.write_text(truncated.read_text()[:50])
    again = subprocess.run([*base, "--resume"], capture_output=True, text=True, timeout=600)
    assert again.returncode in (0, 4, 5), again.stderr
    assert f"round 1 of {QUICK_CELL} is run again: it changed since it was written" in again.stderr
    assert f"round 0 of {QUICK_CELL} is run again" in again.stderr
    redone = json.loads(edited.read_text())
    assert redone["timing"]["samples_s"] != doc["timing"]["samples_s"]
    assert json.loads(truncated.read_text())["status"] == "ok"
