#!/usr/bin/env bash
# Make promtool available for the alert-rule tests (tests/deploy/test_alerts.py).
# Uses promtool from PATH when there is one; otherwise extracts it from Debian's `prometheus`
# package (without installing the package, so no service is started) into .tools/bin/promtool.
# Idempotent. Usage: deploy/prometheus/install-promtool.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
TARGET=.tools/bin/promtool

fail() {
    echo "install-promtool: $*" >&2
    exit 1
}

if command -v promtool >/dev/null 2>&1; then
    echo "==> promtool already on PATH: $(command -v promtool)"
    exit 0
fi
if [ -x "$TARGET" ]; then
    echo "==> promtool already at $TARGET"
    exit 0
fi
for tool in apt-get dpkg-deb; do
    command -v "$tool" >/dev/null 2>&1 \
        || fail "promtool is not on PATH and '$tool' is missing; install promtool by hand"
done

echo "==> extracting promtool from Debian's prometheus package into $TARGET"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
if ! (cd "$WORK" && apt-get download -q prometheus >/dev/null 2>&1); then
    echo "==> apt-get download failed; running apt-get update and retrying"
    apt-get update -q >/dev/null || fail "apt-get update failed (are you root, is the network up?)"
    (cd "$WORK" && apt-get download -q prometheus) \
        || fail "apt-get download prometheus failed (no such package in the configured sources?)"
fi
DEB=$(find "$WORK" -maxdepth 1 -name 'prometheus_*.deb' | head -n 1)
[ -n "$DEB" ] || fail "apt-get download left no prometheus_*.deb in $WORK"
dpkg-deb -x "$DEB" "$WORK/root" || fail "dpkg-deb could not extract $DEB"
[ -x "$WORK/root/usr/bin/promtool" ] || fail "$DEB holds no usr/bin/promtool"
mkdir -p "$(dirname "$TARGET")"
cp "$WORK/root/usr/bin/promtool" "$TARGET.tmp"
mv "$TARGET.tmp" "$TARGET"
echo "==> installed $("$TARGET" --version 2>&1 | head -n 1) at $TARGET (from $(basename "$DEB"))"
