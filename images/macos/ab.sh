#!/usr/bin/env bash
# On a self-hosted Apple Silicon runner: the A/B of two torch pins on MPS, as the reusable
# workflow's mps jobs run it. One `torch-matrix ab`, with a virtual environment per pin (made
# and cached by ab, torch pinned exactly), interleaved rounds and the policy's sequential looks:
# a decision, not one round per side.
#
# usage: images/macos/ab.sh --baseline VERSION --candidate VERSION [--backend mps|cpu] [--] AB_ARGS...
#   e.g. images/macos/ab.sh --baseline 2.13.0 --candidate 2.14.1 -- --out runs/ab
#   --backend cpu rehearses the recipe on any machine: no Apple or MPS checks, CPU cells.
# env: PYTHON (default: the first of python3.13 ... python3.10, Homebrew's python3, python3 that
#      is 3.10 or newer), TORCH_MATRIX_PYTHON (a Python that already has this torch-matrix: the
#      action's environment; default: a venv made here), TORCH_MATRIX_ENV_ROOT
#      (~/.cache/torch-matrix/macos), PIP_INDEX_URL and the rest of pip's variables.
# Exit codes: those of torch-matrix ab; 2 bad arguments; 3 not an Apple Silicon Mac, no Python
# 3.10 or newer, or an MPS device that does not compute (the cells would otherwise time the CPU
# and call it MPS).
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
baseline="" candidate="" backend=mps
fail() { echo "macos/ab.sh: $2" >&2; exit "$1"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --baseline) baseline="${2:-}"; shift 2 ;;
        --candidate) candidate="${2:-}"; shift 2 ;;
        --backend) backend="${2:-}"; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) fail 2 "unknown argument '$1' (the ab arguments go after --)" ;;
    esac
done
for pin in "$baseline" "$candidate"; do
    [[ "$pin" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] \
        || fail 2 "--baseline and --candidate must be exact versions such as 2.13.0 (got '${pin}')"
done
case "$backend" in
    mps)
        if [ "$(uname -s)" != Darwin ] || [ "$(uname -m)" != arm64 ]; then
            fail 3 "mps needs an Apple Silicon Mac; this is $(uname -s) $(uname -m) (--backend cpu rehearses the recipe)"
        fi ;;
    cpu) ;;
    *) fail 2 "--backend must be mps or cpu (got '${backend}')" ;;
esac

# A Python 3.10 or newer: the Command Line Tools' python3 is 3.9, which torch-matrix refuses.
recent() { "$1" -I -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; }
python=""
for candidate_python in "${PYTHON:-}" python3.13 python3.12 python3.11 python3.10 \
    /opt/homebrew/bin/python3 python3; do
    if [ -n "$candidate_python" ] && command -v "$candidate_python" >/dev/null \
        && recent "$candidate_python"; then
        python="$candidate_python"
        break
    fi
done
[ -n "$python" ] || fail 3 "no Python 3.10 or newer found: brew install python@3.12, or set PYTHON"

driver="${TORCH_MATRIX_PYTHON:-}"
if [ -z "$driver" ]; then
    # The driver expands the matrix, measures drift and decides: the suite of this checkout on
    # the candidate's torch. The sides' environments are ab's own (one per pin, cached).
    root="${TORCH_MATRIX_ENV_ROOT:-$HOME/.cache/torch-matrix/macos}"
    py_version="$("$python" -I -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    venv="$root/driver-torch-${candidate}-py${py_version}"
    [ -x "$venv/bin/python" ] || "$python" -I -m venv "$venv"
    "$venv/bin/python" -I -m pip install --quiet --disable-pip-version-check \
        "$repo" "torch==${candidate}"
    driver="$venv/bin/python"
fi
recent "$driver" || fail 3 "TORCH_MATRIX_PYTHON: $("$driver" -V 2>&1) is below 3.10"

if [ "$backend" = mps ]; then
    # is_available() is true in a VM whose Metal device cannot run a kernel: the worker's probe
    # also runs one (a matmul, torch.mps.synchronize(), checked against the CPU). Each side's
    # worker probes again with its own torch before any cell.
    "$driver" -I - <<'PY' || fail 3 "MPS does not compute here: refusing to time the CPU as MPS"
import sys

from suite.worker.backends import get

found = get("mps").probe()
print(f"macos/ab.sh: mps {'ready' if found.available else 'unavailable: ' + str(found.reason)}",
      file=sys.stderr)
sys.exit(0 if found.available else 1)
PY
fi

exec "$driver" -I -m suite ab --baseline "torch==${baseline}" --candidate "torch==${candidate}" \
    --backend "$backend" "$@"
