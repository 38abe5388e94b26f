"""`bert-jax ablate --config=configs/ablations.py:TABLE[.PRESET][+COLUMN...] --workdir=DIR
[--rows=a,b] [--columns=c,d] [--set=key=value,...] [--finetune_set=key=value,...] [--dry_run]
[--plan=TOPOLOGY [--mfu=0.45] [--chip_hour_usd=P] [--plan_compile]]`.

Pre-trains the rows of one of the paper's ablation tables (5, 6, 7, 8 or Figure 5), fills
every column (fine-tuning restarts, feature-based BiLSTMs, LM perplexity) and writes
DIR/report.md and DIR/report.json, ours beside the paper's with Kendall's tau per column.
Reruns resume unfinished rows and cells and skip finished ones. `--dry_run` runs nothing:
the report then has the paper's figures, every row's config and whatever cells are done.
`--plan=v5e:4x4` runs nothing either: DIR/plan.md and plan.json estimate the table's time
on that slice, its chip-hours and (with `--chip_hour_usd`) its cost; `--plan_compile`
compiles each pre-training row's step for the slice (`bert-jax plan`) instead of
assuming `--mfu`. Column sets follow the table's name: ``+qa``, ``+pairs``, ``+sentiment``,
``+offline`` (the offline downstream suite), ``+bbc_features`` or one column (``+cpkc``);
``--config.processes=2`` runs cells in two worker processes and compiled programs are
shared through ``--config.compilation_cache`` (default DIR/xla_cache).
"""

from __future__ import annotations

import ast
import os

from absl import flags, logging
from ml_collections import config_flags

from bert_jax.ablations import cost, runner
from bert_jax.commands import run_settings
from bert_jax.storage import files
from bert_jax.training import run_config

FLAGS = flags.FLAGS


def define_flags() -> None:
    config_flags.DEFINE_config_file(
        "config", None, "Ablation table, e.g. configs/ablations.py:table5.demo+bbc.", lock_config=True
    )
    flags.DEFINE_string("workdir", None, "One sub-folder per row, report.md and report.json.")
    flags.DEFINE_list("rows", None, "Only these rows (default: all).")
    flags.DEFINE_list("columns", None, "Only these columns (default: all of the table's).")
    flags.DEFINE_list(
        "set", None, "Overrides for every row's pre-training config, e.g. num_train_steps=200,seed=1."
    )
    flags.DEFINE_list(
        "finetune_set",
        None,
        "Overrides for every column's fine-tuning config, e.g. num_epochs=2,global_batch_size=16.",
    )
    flags.DEFINE_bool(
        "dry_run", False, "Write the report (paper's figures, configs, cells done); run nothing."
    )
    flags.DEFINE_string(
        "plan", None, "Estimate time and cost on this TPU slice (v5e:4x4, v5litepod-16); run nothing."
    )
    flags.DEFINE_float("mfu", 0.45, "Model-FLOPs utilisation assumed by --plan.")
    flags.DEFINE_float("chip_hour_usd", 0.0, "Price of one chip-hour, for --plan's cost (0: not priced).")
    flags.DEFINE_bool("plan_compile", False, "--plan compiles each pre-training row's step (minutes a row).")
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

    config = FLAGS.config
    if FLAGS.set:
        with config.unlocked():
            for row in config.rows.values():
                run_config.set_keys(row, _overrides(FLAGS.set))
    if FLAGS.finetune_set:
        with config.unlocked():
            for column in config.columns.values():
                if "finetune" in column:
                    run_config.set_keys(column.finetune, _overrides(FLAGS.finetune_set))
    table = run_settings.ablation_table(config)  # checked here, read typed from here on
    files.check_reachable(FLAGS.workdir, "--workdir", writable=True)  # before any run or plan
    if FLAGS.plan:
        if FLAGS.plan_compile:  # as `bert-jax plan`: the TPU compiler runs here without a TPU
            os.environ.setdefault("JAX_PLATFORMS", "cpu")
            os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

        plan = cost.estimate(
            table,
            FLAGS.plan,
            FLAGS.mfu,
            FLAGS.chip_hour_usd,
            FLAGS.rows,
            FLAGS.columns,
            FLAGS.plan_compile,
            progress=lambda line: print(line, flush=True),
        )
        print(cost.write(plan, FLAGS.workdir))
        return
    runner.run_table(table, FLAGS.workdir, FLAGS.rows, FLAGS.columns, dry_run=FLAGS.dry_run)
    with open(f"{FLAGS.workdir}/report.md") as f:
        print(f.read())
