#!/usr/bin/env bash
# Install bert_jax on one Cloud TPU VM worker, and check that JAX sees the worker's TPU chips.
#
# The Ubuntu 22.04 TPU VM images ship Python 3.10 and the project needs >= 3.11, so the
# virtual environment is made with uv: with a python3.13/3.12/3.11 found on PATH, or else
# a CPython 3.11 that uv downloads. `launch/tpu_pod.py setup` ships the checkout to every
# worker and runs this script there from the checkout's root (`install` on all workers,
# then `check` on all workers at once: a multi-host slice starts its TPU runtime only when
# every host does).
#
#     bash launch/install_on_vm.sh install   # uv, the venv (Python >= 3.11), `.[tpu]`
#     bash launch/install_on_vm.sh check     # jax.devices() must list this worker's TPUs
#     bash launch/install_on_vm.sh           # both
#
# Environment:
#   BERT_JAX_VENV           the virtual environment (default: .venv in the checkout)
#   BERT_JAX_INSTALL_DRY=1  print the package install and the device check instead of
#                           running them; uv, the venv and its version check still run
#   BERT_JAX_WORKER         this worker's index in messages (default: the VM metadata's
#                           agent-worker-number)
#   BERT_JAX_SLICES         check: the slices JAX must see (a multislice job: every slice
#                           runs the check at once, `tpu_pod.py --num_slices`)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${BERT_JAX_VENV:-$ROOT/.venv}"
DRY="${BERT_JAX_INSTALL_DRY:-0}"
ACTION="${1:-all}"

worker_name() {
  local index="${BERT_JAX_WORKER:-}"
  if [ -z "$index" ]; then
    index="$(curl -sf -m 2 -H 'Metadata-Flavor: Google' \
      http://metadata.google.internal/computeMetadata/v1/instance/attributes/agent-worker-number \
      2>/dev/null || echo '?')"
  fi
  echo "worker $index ($(hostname))"
}
WORKER="$(worker_name)"

say() { echo "$WORKER: $*"; }
die() { echo "error: $WORKER: $*" >&2; exit 1; }

# A python that is at least 3.11 (exit status 0) or not.
is_new_enough() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; }

find_uv() {
  local uv
  for uv in "$(command -v uv || true)" "$HOME/.local/bin/uv"; do
    if [ -n "$uv" ] && [ -x "$uv" ]; then echo "$uv"; return; fi
  done
  # pip --user first (as MaxText does); Debian/Ubuntu 24.04 pythons refuse that without
  # --break-system-packages; the standalone installer last.
  if ! python3 -m pip install --user -q uv >&2 2>/dev/null; then
    echo "warning: $WORKER: pip install --user uv failed (no pip, or an externally managed Python); trying --break-system-packages, then the uv installer" >&2
    python3 -m pip install --user -q --break-system-packages uv >&2 \
      || curl -LsSf https://astral.sh/uv/install.sh | sh >&2 \
      || die "could not install uv (pip install --user uv, then astral.sh/uv/install.sh)"
  fi
  [ -x "$HOME/.local/bin/uv" ] || die "uv is not at $HOME/.local/bin/uv after installing it"
  echo "$HOME/.local/bin/uv"
}

# An interpreter path for `uv venv --python`: a python >= 3.11 on PATH, else "3.11", which
# uv resolves to a managed CPython it downloads.
choose_python() {
  local name path
  for name in python3.13 python3.12 python3.11 python3; do
    path="$(command -v "$name" || true)"
    if [ -n "$path" ] && is_new_enough "$path"; then echo "$path"; return; fi
  done
  echo "3.11"
}

make_venv() {
  local uv="$1" python
  if [ -x "$VENV/bin/python" ] && is_new_enough "$VENV/bin/python"; then
    say "reusing $VENV"
    return
  fi
  if [ -e "$VENV" ]; then
    echo "warning: $WORKER: replacing $VENV (its Python is older than 3.11 or missing)"
  fi
  python="$(choose_python)"
  say "creating $VENV with uv venv --python $python"
  "$uv" venv --quiet --clear --python "$python" "$VENV" || die "uv venv --python $python $VENV failed"
}

install() {
  local uv version
  uv="$(find_uv)"
  say "uv: $("$uv" --version)"
  make_venv "$uv"
  is_new_enough "$VENV/bin/python" || die "$VENV/bin/python is older than Python 3.11"
  version="$("$VENV/bin/python" -c 'import platform; print(platform.python_version())')"
  say "Python $version in $VENV"
  local cmd=("$uv" pip install --python "$VENV/bin/python" -e "${ROOT}[tpu]")
  if [ "$DRY" = 1 ]; then
    say "dry run, not running: ${cmd[*]}"
  else
    "${cmd[@]}" || die "${cmd[*]} failed"
  fi
}

check() {
  local python="$VENV/bin/python"
  if [ "$DRY" = 1 ]; then
    say "dry run, not running: $python -c 'import jax; print(jax.devices())'"
    return
  fi
  [ -x "$python" ] || die "$python is missing: run 'bash launch/install_on_vm.sh install' first"
  # The one gs:// client of every run (bert_jax/storage/gcs.py): gcsfs, with the retry policy.
  (cd "$ROOT" && "$python" -c 'import gcsfs; from bert_jax.storage import gcs; gcs.configure()') > /dev/null 2>&1 \
    || die "gcsfs (the gs:// client) does not import in $python: run 'bash launch/install_on_vm.sh install' again"
  # On failure one `error:` line naming the worker, and exit status 1.
  WORKER="$WORKER" SLICES="${BERT_JAX_SLICES:-1}" "$python" - <<'EOF' || exit 1
import os
import sys

worker = os.environ["WORKER"]
try:
    import jax

    devices = jax.devices()
except Exception as e:  # no jax, or a TPU runtime that did not start
    print(f"error: {worker}: jax.devices() failed: {type(e).__name__}: {e}", file=sys.stderr)
    sys.exit(1)
local = [d for d in jax.local_devices() if d.platform == "tpu"]
if not local:
    print(f"error: {worker}: no TPU devices; jax.devices() = {devices}", file=sys.stderr)
    sys.exit(1)
slices = len({getattr(d, "slice_index", 0) for d in devices})
if slices != int(os.environ["SLICES"]):
    print(f"error: {worker}: JAX sees {slices} slice(s) of TPUs, the job has {os.environ['SLICES']}", file=sys.stderr)
    sys.exit(1)
where = "in the slice" if slices == 1 else f"in {slices} slices"
print(f"{worker}: {len(local)} local TPU devices ({local[0].device_kind}), {len(devices)} {where}")
EOF
}

case "$ACTION" in
  install) install ;;
  check) check ;;
  all) install && check ;;
  *) die "unknown action '$ACTION' (install, check, or nothing for both)" ;;
esac
