#!/usr/bin/env bash
# On a self-hosted Apple Silicon runner: make (once) the pinned environment of one side, check that
# torch can use the GPU (MPS), then run torch-matrix in it.
#
# usage: images/macos/setup-env.sh --role baseline|candidate --torch VERSION [--] ARGS...
#   e.g. images/macos/setup-env.sh --role candidate --torch 2.14.1 -- \
#          run --backend mps --out runs/candidate
#   (TORCH_VERSION in the environment stands for --torch)
# env: PYTHON (python3), TORCH_MATRIX_ENV_ROOT (~/.cache/torch-matrix/macos), PIP_INDEX_URL etc.
# Exit codes: those of torch-matrix; 2 bad arguments; 3 not an Apple Silicon Mac, or MPS not
# available to this torch (the cells would otherwise time the CPU and call it MPS).
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
role=""
torch_version="${TORCH_VERSION:-}"
while [ $# -gt 0 ]; do
    case "$1" in
        --role) role="${2:-}"; shift 2 ;;
        --torch) torch_version="${2:-}"; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) break ;;
    esac
done
fail() { echo "setup-env: $2" >&2; exit "$1"; }

case "$role" in
    baseline|candidate) ;;
    *) fail 2 "--role must be baseline or candidate (got '${role}')" ;;
esac
[[ "$torch_version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] \
    || fail 2 "--torch (or TORCH_VERSION) must be an exact version such as 2.13.0 (got '${torch_version}')"
if [ "$(uname -s)" != Darwin ] || [ "$(uname -m)" != arm64 ]; then
    fail 3 "this script is for Apple Silicon macOS runners; this is $(uname -s) $(uname -m)"
fi

python="${PYTHON:-python3}"
py_version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
root="${TORCH_MATRIX_ENV_ROOT:-$HOME/.cache/torch-matrix/macos}"
venv="$root/${role}-torch-${torch_version}-py${py_version}"

# torch once per (side, version, python): the expensive part, and the part that must not drift.
if [ ! -f "$venv/.torch-matrix-ready" ]; then
    rm -rf "$venv"
    mkdir -p "$root"
    echo "setup-env: creating $venv" >&2
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "torch==${torch_version}"
    echo "torch==${torch_version}" > "$venv/.torch-matrix-ready"
fi
# The suite from this checkout every time (it changes with the commit under test), torch held.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -c "$venv/.torch-matrix-ready" "$repo"

# Refuse rather than measure the wrong device: without MPS every mps cell would be skipped and a
# run of CPU-only cells could pass for an Apple GPU result.
if ! mps="$("$venv/bin/python" - <<'PY'
import platform
import sys

import torch

built, available = torch.backends.mps.is_built(), torch.backends.mps.is_available()
print(f"torch {torch.__version__}, macOS {platform.mac_ver()[0]}: "
      f"mps built={built}, available={available}")
sys.exit(0 if available else 1)
PY
)"; then
    fail 3 "MPS is not available ($mps). Is this an Apple Silicon Mac on macOS 12.3+, not a VM without Metal? Refusing to run."
fi
echo "setup-env: $role side ready: $mps" >&2

exec "$venv/bin/torch-matrix" "$@"
