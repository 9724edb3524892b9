#!/usr/bin/env bash
# CI: make Docker usable on a fresh Debian machine without Docker Hub, and build the CPU image the
# docker tests run (tests/test_docker.py), entirely offline once the packages are fetched:
#   1. apt-get install docker.io debootstrap; start dockerd (no bridge, no iptables: containers
#      use --network none or host)
#   2. the base image from Debian packages (images/base/build-offline-base.sh)
#   3. torch and every runtime dependency as wheels into a directory of the build context
#   4. images/cpu on that base with those wheels, built with --network none
# Prints each step's duration; the last stdout line is `export TORCH_MATRIX_TEST_IMAGE=TAG`, and
# the same assignment goes to $GITHUB_ENV when that is set.
# env: TORCH_VERSION (2.13.0), WHEEL_DIR (.whl/torch-$TORCH_VERSION-cpu, inside the repository),
#      IMAGE_TAG (torch-matrix/cpu:torch-$TORCH_VERSION)
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore DEBIAN_FRONTEND=noninteractive

TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
WHEEL_DIR="${WHEEL_DIR:-.whl/torch-${TORCH_VERSION}-cpu}"
IMAGE_TAG="${IMAGE_TAG:-torch-matrix/cpu:torch-${TORCH_VERSION}}"
case "$WHEEL_DIR" in
    /*|../*) echo "docker-setup: WHEEL_DIR must be a relative path inside the repository (the build context)" >&2; exit 2 ;;
esac

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

# A Docker CLI that can run BuildKit builds: the default one when it has buildx; else the
# docker.io package's own 20.10 client, whose built-in BuildKit needs no plugin.
build_cli=(docker)
if ! docker buildx version >/dev/null 2>&1 && [ -x /usr/bin/docker ]; then
    build_cli=(/usr/bin/docker)
fi
export DOCKER_BUILDKIT=1

step "build the offline base image"
base_image="$(as_root images/base/build-offline-base.sh | tail -n 1)"
echo "   base: $base_image" >&2
done_step

step "download torch==${TORCH_VERSION} and the runtime dependencies into ${WHEEL_DIR}"
mkdir -p "$WHEEL_DIR"
mapfile -t requirements < <(python3 - <<'PY'
import tomllib

with open("pyproject.toml", "rb") as fh:
    project = tomllib.load(fh)
# The suite's runtime dependencies plus what builds it (setuptools), torch pinned separately.
for req in project["project"]["dependencies"] + project["build-system"]["requires"]:
    if not req.replace(" ", "").lower().startswith("torch"):
        print(req)
PY
)
# --only-binary: the build runs with --network none, so nothing may need building from source.
python3 -m pip download -q --only-binary=:all: -d "$WHEEL_DIR" "torch==${TORCH_VERSION}" "${requirements[@]}"
ls "$WHEEL_DIR"/torch-"${TORCH_VERSION}"*.whl >/dev/null
echo "   $(find "$WHEEL_DIR" -name '*.whl' | wc -l) wheels, $(du -sh "$WHEEL_DIR" | cut -f1)" >&2
done_step

step "build $IMAGE_TAG (offline: --network none)"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
version="$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')"
"${build_cli[@]}" build --network none --progress=plain \
    --build-arg BASE_IMAGE="$base_image" \
    --build-arg TORCH_VERSION="$TORCH_VERSION" \
    --build-arg TORCH_WHEEL_DIR="$WHEEL_DIR" \
    --build-arg REVISION="$revision" \
    --build-arg VERSION="$version" \
    -f images/cpu/Dockerfile -t "$IMAGE_TAG" . >/tmp/docker-build-cpu.log 2>&1 \
    || { tail -40 /tmp/docker-build-cpu.log >&2; exit 1; }
echo "   $(docker image inspect --format '{{.Id}} {{.Size}} bytes' "$IMAGE_TAG")" >&2
done_step

step "smoke: the image runs offline"
docker run --rm --network none "$IMAGE_TAG" --version >&2
done_step

if [ -n "${GITHUB_ENV:-}" ]; then
    echo "TORCH_MATRIX_TEST_IMAGE=$IMAGE_TAG" >>"$GITHUB_ENV"
fi
echo "export TORCH_MATRIX_TEST_IMAGE=$IMAGE_TAG"
