"""`bert-jax pretrain --config=configs/pretrain.py[:preset] --workdir=DIR [--config.k=v]`."""

from __future__ import annotations

import os

import jax
from absl import flags, logging
from ml_collections import config_flags

from bert_jax.commands import run_settings
from bert_jax.training import exit_codes

FLAGS = flags.FLAGS


def define_flags() -> None:
    config_flags.DEFINE_config_file(
        "config", None, "Run config, e.g. configs/pretrain.py:base.", lock_config=True
    )
    flags.DEFINE_string("workdir", None, "Checkpoints, metrics and logs; a rerun resumes.")
    flags.DEFINE_string(
        "coordinator_address",
        None,
        "host:port of process 0 for multi-process runs off TPU (with --num_processes and "
        "--process_id). On a TPU pod set BERT_JAX_DISTRIBUTED=1 instead: JAX finds its peers.",
    )
    flags.DEFINE_integer("num_processes", None, "Number of processes (with --coordinator_address).")
    flags.DEFINE_integer("process_id", None, "This process's index (with --coordinator_address).")
    flags.mark_flags_as_required(["config", "workdir"])


def multihost_requested() -> bool:
    """Whether this process is one of several (`initialize_distributed` joins them)."""
    return bool(FLAGS.coordinator_address or os.environ.get("BERT_JAX_DISTRIBUTED"))


def initialize_distributed() -> None:
    """Multi-host start-up: before anything touches a device."""
    if FLAGS.coordinator_address:
        jax.distributed.initialize(
            coordinator_address=FLAGS.coordinator_address,
            num_processes=FLAGS.num_processes,
            process_id=FLAGS.process_id,
        )
    elif os.environ.get("BERT_JAX_DISTRIBUTED"):
        jax.distributed.initialize()


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise SystemExit(f"unexpected arguments: {argv[1:]}")
    # Orbax logs every save step at INFO; keep the console to the progress lines.
    logging.set_verbosity(logging.WARNING)
    # A peer that is gone (at start, or in a collective) exits with exit_codes.PEER_LOST: a
    # restart loop starts the job again, which resumes from the latest checkpoint.
    with exit_codes.peers_watched(multihost_requested()):
        initialize_distributed()
        run_settings.pretrain(FLAGS.config, FLAGS.workdir)
