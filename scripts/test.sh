#!/usr/bin/env bash
# The test command: sets up .venv if needed (idempotent), lints and checks the formatting,
# then runs the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export TF_CPP_MIN_LOG_LEVEL=2 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 JAX_PLATFORMS=cpu
.venv/bin/ruff check bert_jax configs tests bench launch scripts
.venv/bin/ruff format --check --quiet bert_jax configs tests bench launch scripts
exec .venv/bin/python -m pytest -q "$@" tests
