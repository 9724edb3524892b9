#!/usr/bin/env bash
# CI: give back the disk that earlier runs on this machine left behind, so that a machine that
# runs the suite again and again holds one run's worth, not one per run. A run needs about 40 GB
# above a fresh machine (images, their build cache, the side venvs, the wheels); on a machine
# kept between runs each run used to leave most of that behind under new names (images tagged
# with the suite's key, a build-cache layer per loopback index port, pytest's last three base
# folders), and a later run ran out of space in the middle of its tests.
#   reclaim.sh files            pytest's folders, act's job folders, side venvs unused for 6 h
#   reclaim.sh images           the suite's images and dangling ones (an earlier run's tags;
#                               this run builds its own, from the build cache)
#   reclaim.sh cache KEEP       the build cache down to KEEP (e.g. 12GB), least recently used
#                               first: run after this run's images are built, it keeps theirs
# Each mode prints the free space after it on one line.
set -euo pipefail

free() { echo "   free on /: $(df -h --output=avail / | tail -n 1 | tr -d ' ')" >&2; }

case "${1:-}" in
files)
    rm -rf "/tmp/pytest-of-$(id -un)"
    rm -rf "${XDG_CACHE_HOME:-$HOME/.cache}/act"
    venvs="${TORCH_MATRIX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torch-matrix}/venvs"
    # A venv's lock file is opened (its time set) whenever a run asks for that venv: one not
    # asked for in 6 hours goes, with its manifest. A venv whose key holds a loopback index's
    # port is never asked for again.
    if [ -d "$venvs" ]; then
        find "$venvs" -maxdepth 1 -name '*.lock' -mmin +360 -print0 |
            while IFS= read -r -d '' lock; do
                rm -rf "${lock%.lock}" "${lock%.lock}.manifest.json" "$lock"
            done
    fi
    ;;
images)
    docker ps -aq --filter status=exited --filter status=created | xargs -r docker rm -f >/dev/null
    docker image ls --format '{{.Repository}}:{{.Tag}}' |
        grep -E '^torch-matrix/(cpu|test|team):' | xargs -r docker rmi -f >/dev/null || true
    docker image prune -f >/dev/null
    ;;
cache)
    # Debian's docker.io client has no buildx and says so on stderr; the prune works the same.
    out="$(docker builder prune -f --keep-storage "${2:?reclaim.sh cache KEEP (e.g. 12GB)}" 2>&1)" ||
        { echo "$out" >&2; exit 1; }
    ;;
*)
    echo "usage: reclaim.sh files | images | cache KEEP" >&2
    exit 2
    ;;
esac
free
