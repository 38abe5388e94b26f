"""Pre-training configs: `--config=configs/pretrain.py:PRESET` (tiny, mini, base, large, demo).

The paper's recipe (§A.2) is `base`/`large`: batch 256 x 512 tokens for 1M steps, Adam
lr 1e-4, 10k warmup steps, linear decay, 90% of steps at sequence 128 then 10% at 512.
Every key can be overridden from the command line, e.g. `--config.learning_rate=2e-4`;
an unknown key fails at once with its name.
"""

from __future__ import annotations

import ml_collections

from bert_jax.config import model_config_dict


def _data_config() -> ml_collections.ConfigDict:
    try:
        from bert_jax import input_pipeline
    except ImportError:  # the pipeline module is optional for synthetic-data runs
        data = ml_collections.ConfigDict()
        data.source = "synthetic"
        data.nsp = True
        return data
    return input_pipeline.default_config()


def get_config(preset: str = "tiny") -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.preset = preset
    c.model = model_config_dict("tiny")
    c.data = _data_config()
    c.seed = 42
    # Optimisation (the paper's values; schedule lengths per preset below).
    c.optimizer = "adamw"  # or "lamb" for large batches
    c.learning_rate = 1e-4
    c.warmup_steps = 10_000
    c.num_train_steps = 1_000_000
    c.weight_decay = 0.01
    c.adam_b1 = 0.9
    c.adam_b2 = 0.999
    c.adam_eps = 1e-6
    c.grad_clip_norm = 1.0
    c.grad_accum_steps = 1
    c.global_batch_size = 256
    c.max_seq_length = 128
    c.max_predictions_per_seq = 20
    # Two-phase schedule: the last `phase2_fraction` of steps at the longer length.
    c.phase2_fraction = 0.0
    c.phase2_max_seq_length = 512
    c.phase2_max_predictions_per_seq = 80
    c.compute_dtype = "float32"  # "bfloat16" on TPU/GPU; parameters stay float32
    c.remat_policy = "none"  # none | full | dots | dots_no_batch
    # Device mesh (data, fsdp, tensor); -1 takes the remaining devices.
    c.mesh_shape = (-1, 1, 1)
    # Bookkeeping.
    c.log_every_steps = 50
    c.eval_every_steps = 10_000
    c.eval_steps = 0  # batches per eval; 0 = the whole held-out split
    c.eval_batch_size = 0  # 0 = global_batch_size
    c.checkpoint_every_steps = 10_000
    c.keep_checkpoints = 3
    c.async_checkpointing = True
    c.stop_after_step = 0  # >0: checkpoint and stop there (a rerun continues)
    c.baseline_batches = 0  # >0: also report the unigram baseline from that many batches

    if preset == "tiny":
        c.model = model_config_dict("tiny")
        c.global_batch_size = 8
        c.max_seq_length = 64
        c.max_predictions_per_seq = 10
        c.num_train_steps = 20
        c.warmup_steps = 2
        c.learning_rate = 5e-4
        c.log_every_steps = 5
        c.eval_every_steps = 10
        c.eval_steps = 2
        c.checkpoint_every_steps = 10
    elif preset == "demo":
        # Fits in 10 minutes on a 2-core CPU, including start-up and the evals: a small
        # model (L2 H128) sees ~4M tokens, which buys more accuracy here than depth.
        c.model = model_config_dict("tiny", max_position_embeddings=128)
        c.global_batch_size = 32
        c.max_seq_length = 128
        c.max_predictions_per_seq = 20
        c.num_train_steps = 1000
        c.warmup_steps = 100
        c.learning_rate = 2e-3
        c.log_every_steps = 50
        c.eval_every_steps = 500
        c.checkpoint_every_steps = 500
        c.baseline_batches = 50
    elif preset == "mini":
        c.model = model_config_dict("mini")
        c.global_batch_size = 128
        c.num_train_steps = 100_000
        c.warmup_steps = 5_000
        c.learning_rate = 5e-4
    elif preset in ("base", "large"):
        # Scanned layers: one compiled layer body (minutes less compilation on a pod).
        c.model = model_config_dict(preset, scan_layers=True)
        c.compute_dtype = "bfloat16"
        c.global_batch_size = 256
        c.phase2_fraction = 0.1
        c.mesh_shape = (1, -1, 1)
    else:
        raise ValueError(f"unknown preset {preset!r}: tiny, mini, base, large or demo")
    return c
