#!/usr/bin/env bash
# The main job: sets up .venv if needed (idempotent), then pre-trains a small BERT on the
# Wikipedia excerpt that ships with gensim, evaluates on held-out articles and prints the
# held-out MLM accuracy next to the unigram baseline. Extra flags are passed through,
# e.g. `bash scripts/demo.sh --config.num_train_steps=100`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export TF_CPP_MIN_LOG_LEVEL=2 JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
exec .venv/bin/bert-jax pretrain --config=configs/pretrain.py:demo \
  --workdir="${BERT_JAX_DEMO_WORKDIR:-runs/demo}" "$@"
