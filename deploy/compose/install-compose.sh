#!/usr/bin/env bash
# Make a Compose implementation available for tests/deploy/test_compose.py, which validates
# deploy/compose.yaml with `config`. Uses `docker compose` (v2 plugin) or `docker-compose` when
# one is on PATH; otherwise installs Debian's docker-compose package (1.29, no daemon needed for
# `config`; needs root and apt). Idempotent. Usage: deploy/compose/install-compose.sh
set -euo pipefail

if docker compose version >/dev/null 2>&1; then
    echo "==> docker compose (v2) present"
    exit 0
fi
if command -v docker-compose >/dev/null 2>&1; then
    echo "==> docker-compose present: $(command -v docker-compose)"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
    echo "install-compose: no docker compose / docker-compose, and no apt-get as root to install" \
        "Debian's docker-compose; install one by hand" >&2
    exit 1
fi
echo "==> installing Debian's docker-compose (for \`docker-compose config\`)"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends docker-compose >/dev/null 2>&1 || {
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends docker-compose >/dev/null
}
docker-compose version --short
