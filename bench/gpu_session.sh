#!/usr/bin/env bash
# The GPU checks in one command, in order of value, each printing as it goes, on a machine
# with one NVIDIA GPU, JAX with its CUDA plugin, PyTorch and transformers (no network):
#   1. the GPU tests (cuDNN and Triton attention, the Triton LayerNorm, against the XLA
#      path, forward and gradients);
#   2. bench/gpu_attention.py: attention alone per kernel and Triton tile size
#      (GPU_ATTENTION=0 skips it);
#   3. bench/gpu_pretrain.py: bert_jax against PyTorch eager and torch.compile at every
#      shape (ratios and MFU as its last lines);
#   4. with GPU_PROFILE=1, bench/step_profile.py of bert_jax's step at each shape
#      (PROFILE_SHAPES="modernbert-1024" for some).
# Python packages the machine lacks (ml_collections, google-crc32c) are installed from build/wheels
# (on a machine with a network: `pip download ml_collections --no-deps -d build/wheels` and
# `pip download google-crc32c --no-deps --only-binary=:all: --python-version 3.12
# --platform manylinux2014_x86_64 -d build/wheels`, the GPU image's Python).
#
#   bash bench/gpu_session.sh [gpu_pretrain.py's flags, e.g. --only 512 --steps 5]
#
# Outputs also go to $OUT (default build/gpu_session). GPU_TESTS=0 skips step 1. On a
# machine without a GPU, `--tiny` checks the script itself (the GPU tests skip there).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-build/gpu_session}
mkdir -p "$OUT"
if ls build/wheels/*.whl >/dev/null 2>&1 && ! "$PY" -c "import ml_collections, google_crc32c" 2>/dev/null; then
  "$PY" -m pip install -q --no-deps build/wheels/*.whl
fi
tiny=""  # --tiny among the flags: every script at its tiny size
[[ " $* " == *" --tiny "* ]] && tiny=--tiny
export TF_CPP_MIN_LOG_LEVEL=2 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# JAX's persistent compilation cache, outside $OUT: the profile's step and a rerun on the
# same machine load what gpu_pretrain.py compiled (an unrolled BERT-Base step takes ~80 s
# to compile on the GPU machines) instead of compiling it again.
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-build/jax_cache}
command -v nvidia-smi >/dev/null && nvidia-smi -L
"$PY" -c "import jax, torch, transformers; print('jax', jax.__version__, jax.devices()[0].device_kind, \
'| torch', torch.__version__, '| transformers', transformers.__version__)"
# The GPU as XLA describes it: `bench/gpu_compile.py --target_config` compiles for it on a
# machine without one.
if target=$("$PY" -c "import jax; from jax._src.lib import xla_client as xc; \
print(xc.get_topology_for_devices(jax.devices()).target_config)" 2>/dev/null); then
  echo "$target" >"$OUT/target_config.txtpb"
fi
if [ "${GPU_TESTS:-1}" = 1 ]; then
  echo "== GPU tests"
  # The tests' conftest picks the CPU unless JAX_PLATFORMS says otherwise.
  platform=cpu
  command -v nvidia-smi >/dev/null && platform=cuda
  JAX_PLATFORMS=$platform "$PY" -m pytest -q -p no:cacheprovider -k "cudnn or gpu" \
    tests/model/test_attention_kernels.py tests/model/test_triton_attention.py \
    tests/model/test_triton_norm.py 2>&1 |
    tee "$OUT/gpu_tests.txt" | tail -n 15
fi
if [ "${GPU_ATTENTION:-1}" = 1 ]; then
  echo "== bench/gpu_attention.py"
  "$PY" bench/gpu_attention.py $tiny ${tiny:+--iters 2} 2>&1 | tee "$OUT/gpu_attention.txt"
fi
echo "== bench/gpu_pretrain.py $*"
"$PY" bench/gpu_pretrain.py "$@" 2>&1 | tee "$OUT/gpu_pretrain.txt"
if [ "${GPU_PROFILE:-0}" = 1 ]; then
  for shape in ${PROFILE_SHAPES:-128 512 modernbert-1024}; do
    echo "== bench/step_profile.py --shape $shape"
    "$PY" bench/step_profile.py --shape "$shape" --steps 3 --top 12 $tiny 2>&1 | tee "$OUT/profile_$shape.txt"
  done
fi
