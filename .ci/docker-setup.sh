#!/usr/bin/env bash
# CI: make Docker usable on a fresh Debian machine without Docker Hub, and build the CPU images
# of a real pin pair that the docker tests run (tests/test_docker.py), offline once the packages
# are fetched:
#   1. apt-get install docker.io debootstrap; start dockerd (no bridge, no iptables: containers
#      use --network none or host)
#   2. the base image from Debian packages (images/base/build-offline-base.sh)
#   3. per torch version, torch, numpy and every runtime dependency as wheels: downloaded once
#      into a cache outside the repository
#   4. per torch version, `torch-matrix image build --backend cpu` on that base from those
#      wheels, with --network none, smoke-tested (2.14.1 from PyPI is a CUDA build; it runs on
#      the CPU, its nvidia-* wheels included); steps 3 and 4 of the versions run side by side
# Prints each step's duration; the last stdout line is
#   export TORCH_MATRIX_TEST_BASE=BASE@sha256:ID TORCH_MATRIX_TEST_WHEELS=WHEEL_CACHE
#          TORCH_MATRIX_TEST_IMAGE=TAG_OF_THE_FIRST TORCH_MATRIX_TEST_IMAGE_CANDIDATE=TAG_OF_THE_SECOND
# and the same assignments go to $GITHUB_ENV when that is set.
# env: TORCH_VERSIONS ("2.13.0 2.14.1": baseline, then candidate; one version builds one image;
#      empty: no image, the engine and the base only),
#      WHEEL_CACHE (~/.cache/torch-matrix/wheels). Tags are torch-matrix/cpu:torch-VERSION-KEY,
#      KEY naming the recipe and the suite (suite/execute/images.py). Needs the suite installed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore DEBIAN_FRONTEND=noninteractive

# Unset: the pin pair. Set but empty: the engine and the base alone (.ci/run starts them beside
# the Python installs, then calls this again for the images, whose steps before are then quick).
read -r -a versions <<<"${TORCH_VERSIONS-2.13.0 2.14.1}"
WHEEL_CACHE="${WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torch-matrix/wheels}"

step_start=0
step() { step_start=$(date +%s); echo "== $*" >&2; }
done_step() { echo "   took $(( $(date +%s) - step_start ))s" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

step "install docker.io and debootstrap"
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
    as_root apt-get install -y -q docker.io debootstrap >/dev/null \
        || { as_root apt-get update -q >/dev/null && as_root apt-get install -y -q docker.io debootstrap >/dev/null; }
fi
done_step

step "start dockerd"
if ! docker info >/dev/null 2>&1; then
    as_root sh -c 'dockerd --bridge=none --iptables=false >/tmp/dockerd.log 2>&1 &'
    for _ in $(seq 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
    docker info >/dev/null 2>&1 || { echo "dockerd did not start; see /tmp/dockerd.log" >&2; tail -20 /tmp/dockerd.log >&2; exit 3; }
fi
done_step

step "build the offline base image"
base_image="$(as_root images/base/build-offline-base.sh | tail -n 1)"
# Imported, never pushed: no registry digest, so the base is pinned by its image id, and a build
# refuses it if the tag has been moved to another image since (suite/execute/bases.py).
base_image="${base_image}@$(docker image inspect --format '{{.Id}}' "$base_image")"
echo "   base: $base_image" >&2
done_step

mapfile -t requirements < <(python3 - <<'PY'
import tomllib

with open("pyproject.toml", "rb") as fh:
    project = tomllib.load(fh)
# The suite's runtime dependencies, the export extra the images install (onnx, onnxruntime) and
# what builds it (setuptools); torch pinned separately.
optional = project["project"]["optional-dependencies"]
for req in project["project"]["dependencies"] + optional["export"] + project["build-system"]["requires"]:
    if not req.replace(" ", "").lower().startswith("torch"):
        print(req)
PY
)

# One pipeline per version (wheels, then the image), the versions side by side: a build is
# mostly one core's pip install and the other's layer export, and the two overlap well on two
# cores. Each pipeline's progress goes to its own file, printed whole when it is done.
pipeline() {
    local torch_version="$1" cache="$WHEEL_CACHE/torch-$1"
    local log="/tmp/docker-build-cpu-$1.log" record="/tmp/docker-build-cpu-$1.json"

    step "wheels for torch==${torch_version} into ${cache}"
    mkdir -p "$cache"
    # pip download keeps the files already there: a second run fetches nothing new.
    # --only-binary: the build runs with --network none, so nothing may need building from source.
    python3 -m pip download -q --only-binary=:all: -d "$cache" \
        "torch==${torch_version}" "numpy>=1.26,<3" "${requirements[@]}"
    ls "$cache"/torch-"${torch_version}"*.whl >/dev/null
    echo "   $(find "$cache" -name '*.whl' | wc -l) wheels, $(du -sh "$cache" | cut -f1)" >&2
    done_step

    # The same builder the reusable workflow runs: the image is labelled with this checkout's
    # suite, built offline from the wheels, and smoke-tested (compile, AOTInductor) before use.
    step "torch-matrix image build: cpu, torch ${torch_version} (offline: --network none)"
    rm -f "$record"
    python3 -m suite image build --backend cpu --torch "$torch_version" --base "$base_image" \
        --wheel-dir "$cache" --no-pull --log "$log" --record "$record" >/dev/null \
        || { tail -40 "$log" >&2; exit 1; }
    local tag
    tag="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["tag"])' "$record")"
    echo "   $tag: $(docker image inspect --format '{{.Id}} {{.Size}} bytes' "$tag")" >&2
    done_step
}

if [ "${#versions[@]}" -eq 0 ]; then
    echo "export TORCH_MATRIX_TEST_BASE=${base_image}"
    exit 0
fi

pids=()
for torch_version in "${versions[@]}"; do
    pipeline "$torch_version" 2>"/tmp/docker-setup-$torch_version.progress" &
    pids+=($!)
done
failed=0
for i in "${!versions[@]}"; do
    wait "${pids[$i]}" || failed=1
    cat "/tmp/docker-setup-${versions[$i]}.progress" >&2
done
[ "$failed" -eq 0 ] || { echo "docker-setup: an image did not build (above)" >&2; exit 1; }
tags=()
for torch_version in "${versions[@]}"; do
    tags+=("$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["tag"])' \
        "/tmp/docker-build-cpu-${torch_version}.json")")
done

# The base and the wheels too: the end-to-end test builds the same images in the workflow's
# bench job, from Docker's layer cache.
exports="TORCH_MATRIX_TEST_BASE=${base_image} TORCH_MATRIX_TEST_WHEELS=${WHEEL_CACHE}"
exports+=" TORCH_MATRIX_TEST_IMAGE=${tags[0]}"
if [ "${#tags[@]}" -ge 2 ]; then
    exports+=" TORCH_MATRIX_TEST_IMAGE_CANDIDATE=${tags[1]}"
fi

if [ -n "${GITHUB_ENV:-}" ]; then
    tr ' ' '\n' <<<"$exports" >>"$GITHUB_ENV"
fi
echo "export $exports"
