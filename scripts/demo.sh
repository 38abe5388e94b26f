#!/usr/bin/env bash
# The main job: sets up .venv if needed (idempotent), then pre-trains a small BERT on the
# Wikipedia excerpt that ships with gensim, evaluates on held-out articles and prints the
# held-out MLM figures next to the unigram baseline and the learning curve.
# Extra flags are passed through, e.g. `bash scripts/demo.sh --config.num_train_steps=100`;
# `--config=configs/pretrain.py:demo+bert` runs another preset (the paper's recipe) in
# its own workdir (runs/<preset>).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export TF_CPP_MIN_LOG_LEVEL=2 JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
config=configs/pretrain.py:demo
args=()
for arg in "$@"; do
  case "$arg" in
    --config=*) config="${arg#--config=}" ;;
    *) args+=("$arg") ;;
  esac
done
exec .venv/bin/bert-jax pretrain --config="$config" \
  --workdir="${BERT_JAX_DEMO_WORKDIR:-runs/${config##*:}}" ${args[@]+"${args[@]}"}
