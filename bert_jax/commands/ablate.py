"""`bert-jax ablate --config=configs/ablations.py:TABLE[.PRESET] --workdir=DIR
[--finetune_config=configs/glue.py:mnli] [--rows=a,b] [--set=key=value,...]`.

Pre-trains every row of one of the paper's ablation tables (5, 6 or 8), fine-tunes each
row's checkpoint on one task when `--finetune_config` is given, and writes
DIR/report.md. Reruns resume unfinished rows and skip finished ones.
"""

from __future__ import annotations

import ast

from absl import flags, logging
from ml_collections import config_flags

FLAGS = flags.FLAGS


def define_flags() -> None:
    config_flags.DEFINE_config_file(
        "config", None, "Ablation table, e.g. configs/ablations.py:table5.demo.", lock_config=True
    )
    config_flags.DEFINE_config_file(
        "finetune_config", None, "Optional fine-tuning config run on every row, e.g. configs/bbc.py.",
        lock_config=True,
    )  # fmt: skip
    flags.DEFINE_string("workdir", None, "One sub-folder per row, and report.md.")
    flags.DEFINE_list("rows", None, "Only these rows (default: all).")
    flags.DEFINE_list(
        "set", None, "Overrides for every row's pre-training config, e.g. num_train_steps=200,seed=1."
    )
    flags.mark_flags_as_required(["config", "workdir"])


def _overrides(items: list[str]) -> dict[str, object]:
    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"--set takes key=value, got {item!r}")
        try:
            out[key] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            out[key] = raw
    return out


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise SystemExit(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)
    from bert_jax import ablations

    table = FLAGS.config
    if FLAGS.set:
        with table.unlocked():
            for row in table.rows.values():
                ablations.set_keys(row, _overrides(FLAGS.set))
    ablations.run_table(table, FLAGS.workdir, FLAGS.finetune_config, FLAGS.rows)
    with open(f"{FLAGS.workdir}/report.md") as f:
        print(f.read())
