"""`bert-jax plan --config=configs/pretrain.py:base --topology=v5e:4x4 [--output_json=F]`.

Compiles the real pre-training step of every phase of the run (the paper's sequence 128,
then 512) for a TPU slice (or ``--num_slices`` of them: multislice) on a machine without
one and prints per-chip memory, FLOPs and time of each phase and of the whole run. Needs
the `tpu` extra (libtpu matching jax: ``pip install -e '.[tpu]'``). A phase that does not
fit gets a line naming a setting that does, found by compiling a few (`--nofind_fit`
skips that search)."""

from __future__ import annotations

import json
import os

import jax
from absl import flags, logging
from ml_collections import config_flags

from bert_jax.commands import run_settings
from bert_jax.pretraining import plan, plan_text

FLAGS = flags.FLAGS


def define_flags() -> None:
    config_flags.DEFINE_config_file(
        "config", None, "Run config, e.g. configs/pretrain.py:base.", lock_config=True
    )
    flags.DEFINE_string(
        "topology",
        None,
        "TPU topology, e.g. v5e:4x4, v4:2x2x4, v5p:4x4x4, or an accelerator type (v5litepod-16, v4-32).",
    )
    flags.DEFINE_integer(
        "num_slices",
        1,
        "Slices of --topology joined over the data-centre network (multislice).",
        lower_bound=1,
    )
    flags.DEFINE_float(
        "mfu", 0.45, "Share of the chips' peak assumed for the time estimates (default: an assumption)."
    )
    flags.DEFINE_float(
        "measured_tokens_per_s",
        0.0,
        "tok/s a run of this config reached on this slice in phase 1: the time estimates from it, not --mfu.",
    )
    flags.DEFINE_bool(
        "find_fit", True, "For a phase that does not fit, compile a few other settings until one fits."
    )
    flags.DEFINE_string("output_json", None, "Also write the report as JSON here.")
    flags.mark_flags_as_required(["config", "topology"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise SystemExit(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)
    # The TPU compiler runs here without a TPU: keep JAX's own arrays on the CPU (JAX is
    # imported already and reads the variable once, so its config too; no backend has started).
    if "JAX_PLATFORMS" not in os.environ:
        os.environ["JAX_PLATFORMS"] = "cpu"
        jax.config.update("jax_platforms", "cpu")
    # Compiling needs no TPU, so two planners (or a test runner and a planner) may load
    # libtpu at once; without this the second one fails on libtpu's lock file.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

    report = plan.plan(
        run_settings.pretrain_settings(FLAGS.config),
        FLAGS.topology,
        mfu_assumed=FLAGS.mfu,
        find_fit=FLAGS.find_fit,
        mfu_given=FLAGS["mfu"].present,
        measured_tokens_per_s=FLAGS.measured_tokens_per_s,
        num_slices=FLAGS.num_slices,
        progress=lambda line: print(line, flush=True),
    )
    print(plan_text.format_report(report))
    if FLAGS.output_json:
        with open(FLAGS.output_json, "w") as f:
            json.dump(report.to_json(), f, indent=2)
        print(f"wrote {FLAGS.output_json}")
