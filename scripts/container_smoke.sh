#!/usr/bin/env bash
# Build the Dockerfile with podman and run the image: the health probe inside the container
# answers SERVING, the server runs as uid 10001 with its SQLite file on the volume, the light
# client on the host replays `wm demo` against it, and SIGTERM stops it with exit code 0.
#
# tests/deploy/test_container.py runs it (root, podman, runc and debootstrap; minutes). On
# a machine that can pull images, run it as is (base: python:3.11-slim-bookworm). On one that
# cannot (no registry reachable, as where the tests run), set WM_SMOKE_BOOTSTRAP=1: a Debian
# bookworm base with python3 is made with debootstrap from the Debian mirror and the host's
# CA bundle (for an intercepting proxy in front of PyPI), and passed as PYTHON_IMAGE.
# WM_SMOKE_RUNTIME picks the OCI runtime (runc where crun refuses hybrid cgroups).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNTIME=${WM_SMOKE_RUNTIME:-runc}
PODMAN=(podman --runtime "$(command -v "$RUNTIME")")
# Raising limits needs CAP_SYS_RESOURCE, which a container host may not have.
LIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1000:1000)
IMAGE=localhost/working-memory-service:smoke
NAME=wm-smoke-$$
VOLUME=wm-smoke-data-$$
BUILD_ARGS=()

if [ "${WM_SMOKE_BOOTSTRAP:-0}" = 1 ]; then
    ROOTFS=${WM_SMOKE_ROOTFS:-/tmp/wm-smoke-rootfs}
    if [ ! -x "$ROOTFS/usr/bin/python3" ]; then
        command -v debootstrap >/dev/null || apt-get install -y debootstrap
        rm -f "$ROOTFS.imported"  # a new folder (its files keep the packages' old times)
        debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
            bookworm "$ROOTFS" http://deb.debian.org/debian
    fi
    BASE=localhost/wm-smoke-base:bookworm
    # The base is imported again only when the folder has changed since (its record: the
    # image id it gave, in $ROOTFS.imported). Each import makes a new image id, and a new base
    # id makes podman rebuild every layer of the Dockerfile; with the same base, a layer is
    # reused exactly when its inputs (the files COPY'd, the steps before it) are unchanged,
    # which saves about 100 CPU s per run of the same tree (tests/deploy/test_container.py).
    if ! cmp -s /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/ca-certificates.crt"; then
        cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/ca-certificates.crt"
    fi
    IMPORTED=$(cat "$ROOTFS.imported" 2>/dev/null || true)
    if [ -z "$IMPORTED" ] \
        || [ "$(podman image inspect --format '{{.Id}}' "$BASE" 2>/dev/null)" != "$IMPORTED" ] \
        || [ -n "$(find "$ROOTFS" -newer "$ROOTFS.imported" -print -quit)" ]; then
        tar -C "$ROOTFS" -c . | podman import - "$BASE" >/dev/null
        podman image inspect --format '{{.Id}}' "$BASE" >"$ROOTFS.imported"
    fi
    BUILD_ARGS=(--build-arg PYTHON_IMAGE=$BASE)
fi

cleanup() {
    "${PODMAN[@]}" rm -f "$NAME" >/dev/null 2>&1 || true
    podman volume rm -f "$VOLUME" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# --format docker keeps the HEALTHCHECK (the OCI image format has no such field).
"${PODMAN[@]}" build --format docker --network=host "${LIMITS[@]}" "${BUILD_ARGS[@]}" -t "$IMAGE" .

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${PODMAN[@]}" run -d --name "$NAME" --network=host "${LIMITS[@]}" \
    -e WM_ADDRESS="127.0.0.1:$PORT" -e WM_LLM_PROVIDER=offline \
    -v "$VOLUME:/var/lib/wm" "$IMAGE" >/dev/null

for _ in $(seq 1 60); do
    if "${PODMAN[@]}" exec "$NAME" python -m wm_server.healthcheck --timeout 1 >/dev/null 2>&1; then
        break
    fi
    sleep 0.5
done
"${PODMAN[@]}" exec "$NAME" python -m wm_server.healthcheck
"${PODMAN[@]}" healthcheck run "$NAME" && echo "podman healthcheck: healthy"
[ "$("${PODMAN[@]}" exec "$NAME" id -u)" = 10001 ] && echo "runs as uid 10001"
"${PODMAN[@]}" exec "$NAME" test -f /var/lib/wm/wm.sqlite3 && echo "SQLite file on the volume"
if "${PODMAN[@]}" exec "$NAME" /opt/wm/bin/python -c 'import pytest' 2>/dev/null; then
    echo "dev tools found in the image" >&2
    exit 1
fi
WM_ADDRESS="127.0.0.1:$PORT" .venv/bin/wm demo >/dev/null && echo "wm demo against the container: ok"
"${PODMAN[@]}" exec -e WM_ADDRESS="127.0.0.1:$PORT" "$NAME" wm sessions list | grep demo >/dev/null \
    && echo "wm inside the container lists the demo session"
"${PODMAN[@]}" stop -t 30 "$NAME" >/dev/null
CODE=$("${PODMAN[@]}" inspect "$NAME" --format '{{.State.ExitCode}}')
[ "$CODE" = 0 ] && echo "stopped by SIGTERM, exit code 0"
echo "container smoke test passed"
