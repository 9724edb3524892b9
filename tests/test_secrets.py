"""One rule for secrets: no file a run records and no container it starts ever sees a secret's
value, whatever its name's spelling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.core.secrets import REDACTED, RUNNER_CREDENTIALS, for_user_code, is_secret
from suite.execute.docker import forwarded_env
from suite.worker.envinfo import relevant_env
from tests.helpers import cli, planted

SECRETS = {
    "TORCH_HUB_AUTH": "auth-value-0a1b2c",
    "CUDA_API_KEY": "key-value-3d4e5f",
    "TORCH_MATRIX_PASSWD": "passwd-value-6a7b8c",
    "NCCL_CREDENTIALS": "credential-value-9d0e1f",
    "PYTORCH_TOKEN": "token-value-2a3b4c",
}


def test_the_rule() -> None:
    assert all(is_secret(name) for name in SECRETS)
    assert not any(is_secret(n) for n in ("TORCH_LOGS", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES"))


def test_no_recorded_file_of_a_run_holds_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    recorded = relevant_env()
    assert {recorded[name] for name in SECRETS} == {REDACTED}
    assert not set(SECRETS) & set(forwarded_env(dict(SECRETS)))
    out = tmp_path / "run"
    code, stdout, stderr = cli(
        "run", "--workload", planted("Quick"), "--cell", "quick.8@cpu", "--out", str(out)
    )
    assert code == 0, stderr
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name == "run.json" for p in files) and any(p.suffix == ".log" for p in files)
    for path in files:
        data = path.read_bytes()
        for value in SECRETS.values():
            assert value.encode() not in data, path
    for text in (stdout, stderr):
        assert not any(value in text for value in SECRETS.values())
    # The workers never had them (suite/execute/environment.py), so the record names none.
    recorded_by_worker = json.loads((out / "run.json").read_text())["environment"]["env_vars"]
    assert not set(SECRETS) & set(recorded_by_worker)


def test_what_user_code_may_inherit() -> None:
    """Secrets by name or value, the runner's own credentials (whatever their names say) and the
    names asked for are withheld; the rest passes as it is."""
    env = {
        **SECRETS,
        **dict.fromkeys(RUNNER_CREDENTIALS, "runner-value"),
        "TORCH_INDEX_URL": "https://reader:Idx-5ecret@pkgs.example.com/simple",
        "INDEX_USER": "reader",
        "TORCH_MATRIX_TEAM_BENCH_FAIL_ON": "2.14",
        "TORCH_LOGS": "+dynamo",
    }
    assert {"ACTIONS_CACHE_URL", "ACTIONS_RESULTS_URL"} <= RUNNER_CREDENTIALS
    assert for_user_code(env, also={"INDEX_USER"}) == {
        "TORCH_LOGS": "+dynamo",
        "TORCH_MATRIX_TEAM_BENCH_FAIL_ON": "2.14",
    }
