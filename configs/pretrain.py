"""Pre-training configs: `--config=configs/pretrain.py:PRESET`, or `SIZE+RECIPE`.

Sizes (model, batch, steps, learning rate), each with the paper's recipe unless a recipe
is named: `tiny` (tests), `demo` (the CPU demo's budget: L2 H128, 1,200 steps of 32 x
128), `mini`, `base`, `large` (the paper's, §A.2: batch 256, 1M steps, Adam lr 1e-4, 10k
warm-up steps, linear decay, 90% of steps at sequence 128 then 10% at 512).

Recipes (`RECIPES`): the switches each published small-compute recipe chose, as far as
bert_jax has them, with the paper that motivated them:

- `bert`: Devlin et al. (2019), §3.1 and §A.2 — post-LN, learned positions, dropout 0.1,
  sentence pairs with NSP, 15% masking, β2 0.999, linear decay. Every key at its default.
- `cramming`: Geiping & Goldstein (2022), "Cramming: Training a Language Model on a
  Single GPU in One Day", final recipe (arch `crammed-bert`, train `bert-o4`): pre-LN
  with a final LayerNorm, GeGLU, no biases in the linears, no dropout in pre-training,
  FULL-SENTENCES rows without NSP, 25% masking, AdamW β2 0.98 ε 1e-12, clipping 0.5, a
  triangular one-cycle schedule peaking at 75% of the steps (their "budget-triangle2"),
  scaled sinusoidal positions (fixed sinusoids times one learned scalar).
- `mosaicbert`: Portes et al. (2023), "MosaicBERT": GeGLU, ALiBi positions (a per-head
  distance penalty on the attention scores, no position embedding), FULL-SENTENCES rows
  without NSP, 30% masking, β2 0.98, no dropout in the attention probabilities; post-LN
  as theirs. Their unpadded attention is a kernel choice, not a change of the function.
- `modernbert`: Warner et al. (2024), "ModernBERT": pre-LN, GeGLU, rotary positions, no
  biases, no dropout, FULL-SENTENCES rows without NSP, 30% masking, β2 0.98, and the
  warm-up-stable-decay (trapezoidal) schedule. Theirs trains with StableAdamW at
  sequence 1024; the recipe keeps AdamW, which learned faster at the demo's size
  (`optimizer=stable_adamw` is theirs: docs/pretraining.md). At the sizes `base`,
  `demo`, ... the recipe keeps their architecture (global attention, a segment
  embedding); the sizes `modernbert-base` and `modernbert-large` are ModernBERT's
  architecture and shapes exactly (`bert_jax.model.config.MODERNBERT`: alternating
  local/global attention, no segment embedding, ...), at sequence 1,024.

`SIZE+RECIPE` applies a recipe to a size: `demo+bert` is the demo with the paper's recipe,
`base+modernbert` BERT-Base with ModernBERT's. The presets `cramming`, `mosaicbert` and
`modernbert` are their recipes at BERT-Base size with their published peak learning rates
(for accelerators). `demo` is `demo+modernbert` with a WordPiece vocabulary of 8,192 learned on
the corpus: the recipe that left the unigram stage fastest on this project's 2-core
machine (held-out curves of every recipe in docs/pretraining.md, "Which recipe learns here").
`demo-modernbert` is the same run in the ModernBERT family, so that it exports to a
`transformers` ModernBERT folder: no segment embedding and no attention LayerNorm in layer
0 (the two places where `demo` differs from what ModernBERT can hold), ModernBERT's
pooling head; everything else as `demo` (docs/modernbert.md).

`model.vocab_size=0` (the presets that learn a vocabulary) is the run's tokenizer's size,
padded to a multiple of `model.vocab_pad_multiple`: `--config.data.learned_vocab_size=N`
alone changes both. A size given explicitly must hold the tokenizer's ids.

Every key can be overridden from the command line, e.g. `--config.learning_rate=2e-4`;
an unknown key fails at once with its name.
"""

from __future__ import annotations

from typing import Any

import ml_collections

from bert_jax.model.config import model_config_dict
from bert_jax.training import run_config

defaults = run_config.sibling(__file__, "defaults")

# Dropout off, as Cramming, MosaicBERT (hidden) and ModernBERT pre-train.
_NO_DROPOUT = {"model.hidden_dropout_prob": 0.0, "model.attention_probs_dropout_prob": 0.0}
# RoBERTa's FULL-SENTENCES rows (Liu et al., 2019, §4.2) instead of NSP pairs.
_FULL_SENTENCES = {"data.nsp": False, "data.full_sentences": True}

RECIPES: dict[str, dict[str, Any]] = {
    "bert": {},
    "cramming": {
        "model.pre_layer_norm": True,
        "model.gated_ffn": True,
        "model.use_bias": False,
        "model.position_embedding_type": "sinusoidal",
        **_NO_DROPOUT,
        **_FULL_SENTENCES,
        "data.masked_lm_prob": 0.25,
        "adam_b2": 0.98,
        "adam_eps": 1e-12,
        "grad_clip_norm": 0.5,
        "lr_schedule": "one_cycle",
        "warmup_proportion": 0.75,
    },
    "mosaicbert": {
        "model.gated_ffn": True,
        "model.position_embedding_type": "alibi",
        "model.attention_probs_dropout_prob": 0.0,
        **_FULL_SENTENCES,
        "data.masked_lm_prob": 0.3,
        "adam_b2": 0.98,
    },
    "modernbert": {
        "model.pre_layer_norm": True,
        "model.gated_ffn": True,
        "model.position_embedding_type": "rotary",
        "model.use_bias": False,
        **_NO_DROPOUT,
        **_FULL_SENTENCES,
        "data.masked_lm_prob": 0.3,
        "adam_b2": 0.98,
        "lr_schedule": "wsd",
    },
}


def get_config(preset: str = "tiny") -> ml_collections.ConfigDict:
    size, _, recipe = preset.partition("+")
    if preset in NAMED:
        size, recipe = NAMED[preset]
    if size not in SIZES:
        known = ", ".join(dict.fromkeys([*SIZES, *NAMED]))  # sizes also named as presets: once
        raise ValueError(f"unknown preset {preset!r}: {known}, or SIZE+RECIPE")
    if recipe and recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r} in {preset!r}: {', '.join(RECIPES)}")
    # Every key at its default (`PretrainSettings`' fields, the paper's schedule; each key's
    # comment and range there); the size and the recipe change what they need.
    c = defaults.pretraining()
    c.preset = preset
    c.model = model_config_dict("tiny")
    # The paper's warm-up (10,000 of its 1M steps); fine-tuning's default is its own.
    c.warmup_steps = 10_000
    c.update(SIZES[size]())
    run_config.set_keys(c, RECIPES[recipe or "bert"])
    if recipe:
        run_config.set_keys(c, SIZE_RECIPE.get((size, recipe), {}))
        _fit_predictions(c)
    return c


def _fit_predictions(c: ml_collections.ConfigDict) -> None:
    """Raises the prediction budget to what the recipe's masking rate needs (rounded up
    to a multiple of 4)."""
    for seq_key, pred_key in (
        ("max_seq_length", "max_predictions_per_seq"),
        ("phase2_max_seq_length", "phase2_max_predictions_per_seq"),
    ):
        need = round((c[seq_key] - 2) * c.data.masked_lm_prob)
        c[pred_key] = max(c[pred_key], -(-need // 4) * 4)


def _tiny() -> dict:
    return dict(
        model=model_config_dict("tiny"),
        global_batch_size=8,
        max_seq_length=64,
        max_predictions_per_seq=10,
        num_train_steps=20,
        warmup_steps=2,
        learning_rate=5e-4,
        log_every_steps=5,
        eval_every_steps=10,
        eval_steps=2,
        checkpoint_every_steps=10,
    )


def _demo() -> dict:
    # Fits in 10 minutes on a 2-core CPU, including start-up and the evals: a small model
    # (L2 H128) sees ~5M tokens, which buys more than depth here.
    return dict(
        model=model_config_dict("tiny", max_position_embeddings=128),
        global_batch_size=32,
        max_seq_length=128,
        max_predictions_per_seq=20,
        num_train_steps=1200,
        warmup_steps=100,
        learning_rate=2e-3,
        log_every_steps=50,
        eval_every_steps=200,
        checkpoint_every_steps=400,
        baseline_batches=50,
    )


def _mini() -> dict:
    return dict(
        model=model_config_dict("mini"),
        global_batch_size=128,
        num_train_steps=100_000,
        warmup_steps=5_000,
        learning_rate=5e-4,
    )


# Phase 2 (sequence 512) in micro-batches, so that it fits where phase 1 does: BERT-Base on
# v5e:2x2 needs 33.5 GiB of 16 per chip at once, 9.3 in 4 (`bert-jax plan`, docs/tpu_pods.md);
# BERT-Large on v5e:4x4 21.9, 11.6 in 2. The same gradient and FLOPs; a larger slice may
# set --config.phase2_grad_accum_steps=1 when its plan fits. On a slice where the preset's
# phase does not fit (large on v5e:2x2: 44.98 GiB in 2), the run takes `plan`'s fit at
# start (8 there), saying so in one line (`bert_jax.pretraining.preflight`).
_PHASE2_ACCUM = {"base": 4, "large": 2}


def _paper(preset: str) -> dict:
    # Layers: layer_loop="auto" scans them on a TPU (one compiled layer body: minutes less
    # compilation on a pod) and unrolls them on a GPU (a faster step; `model.numerics`).
    return dict(
        model=model_config_dict(preset),
        compute_dtype="bfloat16",
        global_batch_size=256,
        phase2_fraction=0.1,
        phase2_grad_accum_steps=_PHASE2_ACCUM[preset],
        # FSDP over every chip of a slice; on several slices (multislice) the slices line
        # up on data (`sharding.make_mesh`): data parallelism over DCN, FSDP inside each.
        mesh_shape=(1, -1, 1),
    )


def _demo_modernbert() -> dict:
    family = dict(type_vocab_size=0, first_layer_attention_norm=False, classifier_pooling="cls")
    return {**_demo(), "model": model_config_dict("tiny", max_position_embeddings=128, **family)}


# ModernBERT-base's step in micro-batches, so that it fits v5e:2x2 with the splash kernel
# (8: 10.8 GiB of 16 per chip; 65 GiB at once; `bert-jax plan`, docs/modernbert.md).
_MODERNBERT_ACCUM = {"modernbert-base": 8}


def _modernbert(preset: str) -> dict:
    # ModernBERT's architecture and shapes (`model.config.MODEL_PRESETS`) at its
    # pre-training length, 1,024 (Warner et al., 2024, §2.2); on a TPU scanned in groups of
    # one global and two local layers (`model.layer_scan`), on a GPU unrolled.
    return dict(
        model=model_config_dict(preset),
        compute_dtype="bfloat16",
        global_batch_size=256,
        max_seq_length=1024,
        phase2_fraction=0.0,
        grad_accum_steps=_MODERNBERT_ACCUM.get(preset, 1),
        mesh_shape=(1, -1, 1),  # as the paper sizes': data across slices, FSDP inside each
    )


SIZES = {
    "tiny": _tiny,
    "demo": _demo,
    "demo-modernbert": _demo_modernbert,
    "mini": _mini,
    "base": lambda: _paper("base"),
    "large": lambda: _paper("large"),
    "modernbert-base": lambda: _modernbert("modernbert-base"),
    "modernbert-large": lambda: _modernbert("modernbert-large"),
}

# Presets by name: (size, recipe).
NAMED = {
    "demo": ("demo", "modernbert"),
    "demo-modernbert": ("demo-modernbert", "modernbert"),
    "cramming": ("base", "cramming"),
    "mosaicbert": ("base", "mosaicbert"),
    "modernbert": ("base", "modernbert"),
    "modernbert-base": ("modernbert-base", "modernbert"),
    "modernbert-large": ("modernbert-large", "modernbert"),
}

# The demo learns its vocabulary from the corpus (8,192 WordPieces: a small corpus spreads
# too few examples over bert-base-uncased's 30,522); the model takes the tokenizer's size
# (model.vocab_size=0: `bert_jax.pretraining.model_vocab`), so the size is written here only.
_LEARNED_VOCAB = {"data.learned_vocab_size": 8192, "model.vocab_size": 0}

# What a recipe changes at a given size beyond its switches.
SIZE_RECIPE: dict[tuple[str, str], dict[str, Any]] = {
    **{("demo", r): _LEARNED_VOCAB for r in ("cramming", "mosaicbert", "modernbert")},
    ("demo-modernbert", "modernbert"): _LEARNED_VOCAB,
    # The published peak learning rates and lengths at BERT-Base size, one sequence length.
    ("base", "cramming"): {"learning_rate": 1e-3, "phase2_fraction": 0.0},
    ("base", "mosaicbert"): {"learning_rate": 5e-4, "warmup_proportion": 0.06, "phase2_fraction": 0.0},
    ("base", "modernbert"): {"learning_rate": 8e-4, "phase2_fraction": 0.0},
    # ModernBERT's published peak learning rates (base 8e-4, large 5e-4).
    ("modernbert-base", "modernbert"): {"learning_rate": 8e-4},
    ("modernbert-large", "modernbert"): {"learning_rate": 5e-4},
}
