#!/usr/bin/env bash
# Build a Debian bookworm base image from Debian packages alone (no registry needed) and import
# it as torch-matrix/bookworm-base:<date>. Use it where Docker Hub is out of reach:
#   docker build --build-arg BASE_IMAGE=torch-matrix/bookworm-base:<date> -f images/cpu/Dockerfile .
#
# usage: images/base/build-offline-base.sh [--force] [--tag TAG]
#   --force    rebuild even when the tag already exists
#   --tag TAG  image tag (default: torch-matrix/bookworm-base:YYYYMMDD-PACKAGES, the date in UTC
#              and the first 8 hex digits of the sha256 of the package list)
# env: DEBIAN_MIRROR (default: the first Debian mirror in /etc/apt/sources.list*, else
#      http://deb.debian.org/debian), SUITE (default bookworm)
# stdout: one line, the image reference; progress goes to stderr. Needs root, debootstrap, docker.
set -euo pipefail

suite="${SUITE:-bookworm}"
# What the image holds besides minbase: Python with venv and pip, the C/C++ toolchain with
# Python's headers that torch.compile (Inductor's C++ kernels, AOTInductor) and Triton's launcher
# compile with, and Valgrind, which the instructions gate counts with. The tag names this list,
# so an image made from another list is never reused.
packages="python3,python3-venv,python3-pip,python3-dev,g++,valgrind,ca-certificates"
tag="torch-matrix/${suite}-base:$(date -u +%Y%m%d)-$(printf '%s' "$packages" | sha256sum | cut -c1-8)"
force=0
while [ $# -gt 0 ]; do
    case "$1" in
        --force) force=1 ;;
        --tag) tag="${2:?--tag needs a value}"; shift ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "build-offline-base.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done

log() { echo "build-offline-base: $*" >&2; }

for tool in debootstrap docker tar; do
    command -v "$tool" >/dev/null || { log "$tool is not installed (apt-get install -y debootstrap docker.io)"; exit 3; }
done
if [ "$(id -u)" -ne 0 ]; then
    log "debootstrap needs root; run with sudo"
    exit 3
fi

# The mirror this machine already uses is the one most likely to be reachable from here.
find_mirror() {
    local files=() f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] && files+=("$f")
    done
    [ ${#files[@]} -gt 0 ] || return 0
    # one-line form: "deb [opts] URI suite ..."; deb822 form: "URIs: URI ..."; skip security.
    grep -hE '^[[:space:]]*(deb[[:space:]]|URIs:)' "${files[@]}" 2>/dev/null \
        | sed -E 's/^[[:space:]]*deb[[:space:]]+(\[[^]]*\][[:space:]]+)?//; s/^[[:space:]]*URIs:[[:space:]]*//' \
        | tr ' ' '\n' | grep -E '^https?://' | grep -v -- '-security' | head -n 1 || true
}
mirror="${DEBIAN_MIRROR:-$(find_mirror)}"
mirror="${mirror:-http://deb.debian.org/debian}"

if [ "$force" -eq 0 ] && docker image inspect "$tag" >/dev/null 2>&1; then
    log "$tag exists ($(docker image inspect --format '{{.Id}}' "$tag")); --force rebuilds it"
    echo "$tag"
    exit 0
fi

workdir="$(mktemp -d /tmp/torch-matrix-base.XXXXXX)"
cleanup() { rm -rf "$workdir"; }
trap cleanup EXIT
rootfs="$workdir/rootfs"

log "debootstrap $suite from $mirror into $rootfs"
debootstrap --variant=minbase \
    --include="$packages" \
    "$suite" "$rootfs" "$mirror" >&2

# What an image needs no copy of: package caches and lists, logs, the host's resolver config.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/var/log/* "$rootfs"/tmp/* "$rootfs"/debootstrap
: > "$rootfs/etc/resolv.conf"

log "importing as $tag"
tar --numeric-owner -C "$rootfs" -c . | docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    --message "debootstrap --variant=minbase $suite $mirror" \
    - "$tag" >/dev/null

id="$(docker image inspect --format '{{.Id}}' "$tag")"
digests="$(docker image inspect --format '{{join .RepoDigests " "}}' "$tag")"
log "image id $id; repo digest ${digests:-none (imported locally, never pushed: the image id is its digest)}"
log "size $(docker image inspect --format '{{.Size}}' "$tag") bytes"
echo "$tag"
