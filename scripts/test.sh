#!/usr/bin/env bash
# The test command: sets up .venv if needed (idempotent), lints and checks the formatting,
# then runs the suite in parallel.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh test
export TF_CPP_MIN_LOG_LEVEL=2 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 JAX_PLATFORMS=cpu
.venv/bin/ruff check bert_jax configs tests bench launch scripts
.venv/bin/ruff format --check --quiet bert_jax configs tests bench launch scripts
# The folders' import order (pyproject.toml's contracts): quiet unless one is broken.
if ! imports=$(.venv/bin/lint-imports --no-cache 2>&1); then echo "$imports"; exit 1; fi
# One pytest worker per core (at most 4: each holds its own JAX and TensorFlow); a test
# file runs in one worker, so its module fixtures are built once. `-n 0` runs serially.
workers=$(nproc)
workers=$((workers > 4 ? 4 : workers))
exec .venv/bin/python -m pytest -q -n "$workers" --dist loadfile "$@" tests
