#!/usr/bin/env bash
# README command 2: set up what is missing, then run the linters and the whole test suite.
# PostgreSQL tests use $HI_MOE_LORA_TEST_POSTGRES_URL (default: postgres@127.0.0.1:5432/test).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
echo "==> ruff"
ruff check hi_moe_lora plugins registry migrations tests benchmarks
ruff format --check hi_moe_lora plugins registry migrations tests benchmarks
echo "==> mypy (strict)"
mypy
echo "==> import layers (import-linter, contracts in pyproject.toml)"
lint-imports
echo "==> pytest"
exec python -m pytest "$@"
