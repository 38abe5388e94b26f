"""`bert-jax finetune --config=configs/finetune.py:TASK --workdir=DIR [--config.k=v]`."""

from __future__ import annotations

from absl import flags, logging
from ml_collections import config_flags

FLAGS = flags.FLAGS


def define_flags() -> None:
    config_flags.DEFINE_config_file(
        "config", None, "Fine-tuning config, e.g. configs/finetune.py:bbc.", lock_config=True
    )
    flags.DEFINE_string("workdir", None, "Metrics (metrics.jsonl) and results.json.")
    flags.mark_flags_as_required(["config", "workdir"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise SystemExit(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)
    from bert_jax import finetune

    best = finetune.finetune(FLAGS.config, FLAGS.workdir)
    print(
        "best dev: "
        + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in best.items())
    )
