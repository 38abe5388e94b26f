"""`bert-jax plan --config=configs/pretrain.py:base --topology=v5e:4x4 [--output_json=F]`.

Compiles the real pre-training step of every phase of the run (the paper's sequence 128,
then 512) for a TPU slice on a machine without one (needs the `tpu` extra: libtpu
matching jax) and prints per-chip memory, FLOPs and time of each phase and of the whole
run. A phase that does not fit gets a line naming a setting that does, found by compiling
a few (`--nofind_fit` skips that search).
"""

from __future__ import annotations

import json
import os

from absl import flags, logging
from ml_collections import config_flags

from bert_jax.pretraining import plan, plan_text

FLAGS = flags.FLAGS


def define_flags() -> None:
    config_flags.DEFINE_config_file(
        "config", None, "Run config, e.g. configs/pretrain.py:base.", lock_config=True
    )
    flags.DEFINE_string("topology", None, "TPU topology, e.g. v5e:4x4, v4:2x2x4, v5p:4x4x4.")
    flags.DEFINE_float("mfu", 0.45, "Model-FLOPs utilisation assumed for time estimates.")
    flags.DEFINE_bool(
        "find_fit", True, "For a phase that does not fit, compile a few other settings until one fits."
    )
    flags.DEFINE_string("output_json", None, "Also write the report as JSON here.")
    flags.mark_flags_as_required(["config", "topology"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise SystemExit(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)
    # The TPU compiler runs here without a TPU: keep JAX's own arrays on the CPU.
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    # Compiling needs no TPU, so two planners (or a test runner and a planner) may load
    # libtpu at once; without this the second one fails on libtpu's lock file.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

    report = plan.plan(FLAGS.config, FLAGS.topology, mfu_assumed=FLAGS.mfu, find_fit=FLAGS.find_fit)
    print(plan_text.format_report(report))
    if FLAGS.output_json:
        with open(FLAGS.output_json, "w") as f:
            json.dump(report.to_json(), f, indent=2)
        print(f"wrote {FLAGS.output_json}")
