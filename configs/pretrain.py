"""Pre-training configs: `--config=configs/pretrain.py:PRESET` (tiny, mini, base, large, demo).

The paper's recipe (§A.2) is `base`/`large`: batch 256 x 512 tokens for 1M steps, Adam
lr 1e-4, 10k warmup steps, linear decay, 90% of steps at sequence 128 then 10% at 512.
Every key can be overridden from the command line, e.g. `--config.learning_rate=2e-4`;
an unknown key fails at once with its name.
"""

from __future__ import annotations

import ml_collections

from bert_jax import run_config
from bert_jax.config import model_config_dict

defaults = run_config.sibling(__file__, "defaults")


def get_config(preset: str = "tiny") -> ml_collections.ConfigDict:
    c = defaults.training()
    c.preset = preset
    c.model = model_config_dict("tiny")
    c.data = defaults.data()
    # The paper's schedule (lengths per preset below).
    c.learning_rate = 1e-4
    c.warmup_steps = 10_000
    c.num_train_steps = 1_000_000
    c.global_batch_size = 256
    c.max_seq_length = 128
    c.max_predictions_per_seq = 20
    # Two-phase schedule: the last `phase2_fraction` of steps at the longer length.
    c.phase2_fraction = 0.0
    c.phase2_max_seq_length = 512
    c.phase2_max_predictions_per_seq = 80
    c.eval_every_steps = 10_000
    c.eval_steps = 0  # batches per eval; 0 = the whole held-out split
    c.eval_batch_size = 0  # 0 = global_batch_size
    c.baseline_batches = 0  # >0: also report the unigram baseline from that many batches

    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}: {', '.join(PRESETS)}")
    c.update(PRESETS[preset]())
    return c


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
    # (L2 H128) sees ~4M tokens, which buys more accuracy here than depth.
    return dict(
        model=model_config_dict("tiny", max_position_embeddings=128),
        global_batch_size=32,
        max_seq_length=128,
        max_predictions_per_seq=20,
        num_train_steps=1000,
        warmup_steps=100,
        learning_rate=2e-3,
        log_every_steps=50,
        eval_every_steps=500,
        checkpoint_every_steps=500,
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


def _paper(preset: str) -> dict:
    # Scanned layers: one compiled layer body (minutes less compilation on a pod).
    return dict(
        model=model_config_dict(preset, scan_layers=True),
        compute_dtype="bfloat16",
        global_batch_size=256,
        phase2_fraction=0.1,
        mesh_shape=(1, -1, 1),
    )


PRESETS = {
    "tiny": _tiny,
    "demo": _demo,
    "mini": _mini,
    "base": lambda: _paper("base"),
    "large": lambda: _paper("large"),
}
