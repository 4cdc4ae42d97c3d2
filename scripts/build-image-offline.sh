#!/usr/bin/env bash
# Build the CPU image of ./Dockerfile without a Docker daemon, Docker Hub or the PyTorch index, run it and fetch
# the web page from it. Needs root and a Debian bookworm host that reaches a Debian mirror and PyPI; the tools
# (mmdebstrap, buildah, podman, runc) are installed with apt when missing. See docs/operations.md, "Building the
# image without Docker".
#
#   sudo bash scripts/build-image-offline.sh            # build, run, fetch http://127.0.0.1:7860/, stop; keeps the image
#   sudo bash scripts/build-image-offline.sh --clean    # the same, then removes the image and its base
#
# Environment: WORK (scratch folder for the base's root filesystem, default /var/tmp/streamvid-image),
# PORT (loopback port of the page, default 7860), WAIT_S (how long to wait for the page, default 300).
set -euo pipefail
cd "$(dirname "$0")/.."

CLEAN=0
[ "${1:-}" = "--clean" ] && CLEAN=1
WORK=${WORK:-/var/tmp/streamvid-image}
PORT=${PORT:-7860}
WAIT_S=${WAIT_S:-300}
BASE=localhost/debian-py:bookworm
IMAGE=localhost/streamvid:cpu
NAME=streamvid-offline-check
# crun refuses hybrid cgroups (v1 + an empty v2 mount) and, like runc, may not raise rlimits past the host's, so:
# runc, cgroupfs, no systemd journal, and limits at or under the host's
PODMAN=(podman --runtime runc --cgroup-manager cgroupfs --events-backend file)
LIMITS=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=8192:8192)
CA=/etc/ssl/certs/ca-certificates.crt

[ "$(id -u)" = 0 ] || { echo "run as root (mmdebstrap, buildah and podman use root's storage here)" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] $*"; }

need=()
for t in mmdebstrap buildah podman runc curl; do command -v "$t" >/dev/null || need+=("$t"); done
if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
fi

cleanup() {
    "${PODMAN[@]}" rm -f "$NAME" >/dev/null 2>&1 || true
    rm -rf "$WORK/rootfs"
}
trap cleanup EXIT

# 1. the base: Debian bookworm's python3 (3.11) and python3-venv (the Dockerfile's cpu stage makes its venv at
#    /opt/venv from them, as it does on python:3.11-slim) and passwd (useradd). The host's local CAs go in too,
#    and pip / requests / ssl are pointed at the system bundle: where a proxy re-signs TLS, pip's own bundle would
#    reject PyPI
t0=$(date +%s)
log "base: mmdebstrap bookworm -> $BASE"
mkdir -p "$WORK"
rm -rf "$WORK/rootfs"
timeout 1200 nice -n 10 mmdebstrap --variant=apt --include=python3,python3-venv,passwd,ca-certificates \
    bookworm "$WORK/rootfs"
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$WORK/rootfs/usr/local/share/ca-certificates/"
    chroot "$WORK/rootfs" update-ca-certificates >/dev/null
fi
"${PODMAN[@]}" rmi -f "$BASE" >/dev/null 2>&1 || true
tar -C "$WORK/rootfs" -c . | "${PODMAN[@]}" import \
    --change 'ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV=LANG=C.UTF-8' --change "ENV=PIP_CERT=$CA" --change "ENV=SSL_CERT_FILE=$CA" \
    --change "ENV=REQUESTS_CA_BUNDLE=$CA" --change 'CMD=["python3"]' - "$BASE" >/dev/null
rm -rf "$WORK/rootfs"
log "base ready in $(( $(date +%s) - t0 )) s"

# 2. the image: the Dockerfile's cpu target on that base, torch / torchvision from PyPI
t1=$(date +%s)
log "build: $IMAGE"
timeout 3600 nice -n 10 buildah build --isolation chroot --pull=never \
    --build-arg CPU_BASE="$BASE" --build-arg TORCH_INDEX=https://pypi.org/simple \
    --target cpu -t "$IMAGE" .
log "built in $(( $(date +%s) - t1 )) s; $("${PODMAN[@]}" images --format '{{.Repository}}:{{.Tag}} {{.Size}}' "$IMAGE")"

# 3. run it with the image's own CMD (binds 0.0.0.0:7860 inside), published on loopback only
log "run: page on http://127.0.0.1:$PORT/"
"${PODMAN[@]}" rm -f "$NAME" >/dev/null 2>&1 || true
"${PODMAN[@]}" run -d --name "$NAME" "${LIMITS[@]}" -p "127.0.0.1:$PORT:7860" \
    -e STREAMVID_AUTH=me:a-long-password-here "$IMAGE" >/dev/null
code=000
deadline=$(( $(date +%s) + WAIT_S ))
while [ "$(date +%s)" -lt "$deadline" ]; do
    code=$(curl -s -m 10 -o "$WORK/page.html" -w '%{http_code}' "http://127.0.0.1:$PORT/" || true)
    [ "$code" = 200 ] && break
    [ "$("${PODMAN[@]}" inspect -f '{{.State.Running}}' "$NAME")" = true ] || break
    sleep 5
done
"${PODMAN[@]}" logs "$NAME" 2>&1 | tail -n 5
html=no
[ "$code" = 200 ] && grep -qi '<html' "$WORK/page.html" && html=yes
log "GET / -> HTTP $code, HTML: $html"
if [ "$code" = 200 ]; then head -c 200 "$WORK/page.html"; echo; fi
rm -f "$WORK/page.html"
"${PODMAN[@]}" stop -t 10 "$NAME" >/dev/null 2>&1 || true
"${PODMAN[@]}" rm -f "$NAME" >/dev/null

if [ "$CLEAN" = 1 ]; then
    "${PODMAN[@]}" rmi -f "$IMAGE" "$BASE" >/dev/null
    log "removed $IMAGE and $BASE"
fi
[ "$html" = yes ]
