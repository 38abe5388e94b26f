"""`bert-jax prepare-data`: text → prepared pre-training instances, once, in parallel.

The original `create_pretraining_data.py` flag names where they apply; the output is a
folder of unmasked instance shards (one per input file, or per part of a TFDS split) that
`pretrain` streams with ``--config.data.source=prepared --config.data.input_files=DIR``
and masks on the fly. Memory is bounded by one input file; rerunning after an
interruption keeps the finished shards (the same flags, vocabulary and inputs resume; an
existing folder of other settings, or a finished one, is refused unless ``--overwrite``,
and nothing is created before the vocabulary and inputs are checked). On a pod, run it on
every host with ``--task_index=$HOST --num_tasks=$HOSTS`` and one shared ``--output_dir``.
"""

from __future__ import annotations

from absl import flags

from bert_jax.commands import vocab_flags
from bert_jax.data import prepare

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string(
        "input_file",
        None,
        "Input text glob(s), comma-separated: one sentence per line, blank lines between "
        "documents; a one-line document (prose, a paragraph a line) is split into sentences "
        "(.xml/.xml.bz2 files are read as MediaWiki dumps).",
    )
    flags.DEFINE_string("tfds_name", "", "A TFDS text dataset instead, e.g. wikipedia/20230601.en.")
    flags.DEFINE_string("tfds_split", "train", "The TFDS split.")
    flags.DEFINE_string(
        "tfds_data_dir",
        "",
        "TFDS's data folder (default: $TFDS_DATA_DIR or ~/tensorflow_datasets); "
        "gs://tfds-data/datasets reads TFDS's own prepared copies in place.",
    )
    flags.DEFINE_integer("tfds_num_shards", 64, "Parts of the TFDS split, one shard each.", lower_bound=1)
    flags.DEFINE_string("output_dir", None, "The prepared folder (shared by all hosts of a pod).")
    vocab_flags.define()
    flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
    flags.register_validator("max_seq_length", lambda v: v >= 8, "must be at least 8")
    flags.DEFINE_integer(
        "dupe_factor", 10, "Pairings of the data (each with its own random pairs).", lower_bound=1
    )
    flags.DEFINE_float("short_seq_prob", 0.1, "Probability of a shorter target length.")
    flags.DEFINE_integer("random_seed", 12345, "Random seed of the pairings.")
    flags.DEFINE_bool("nsp", True, "Sentence pairs for next-sentence prediction (False: single segments).")
    flags.DEFINE_bool(
        "full_sentences",
        False,
        "RoBERTa's FULL-SENTENCES rows: documents streamed into full rows, no pairs (needs --nonsp).",
    )
    flags.DEFINE_float(
        "eval_fraction",
        0.005,
        "Fraction of each input's documents held out for evaluation (0: none; pretrain then "
        "trains without held-out evaluation).",
    )
    flags.DEFINE_integer("num_workers", 1, "Worker processes on this host.", lower_bound=1)
    flags.DEFINE_integer("task_index", 0, "This host's index on a pod (prepares shards i, i+n, ...).")
    flags.DEFINE_integer("num_tasks", 1, "Hosts preparing into the same output_dir.", lower_bound=1)
    flags.DEFINE_bool(
        "overwrite",
        False,
        "Replace what --output_dir holds: a finished preparation, or one of other flags, "
        "vocabulary or inputs (an unfinished one of the same settings is resumed without it).",
    )
    flags.mark_flags_as_required(["output_dir"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")

    if bool(FLAGS.input_file) == bool(FLAGS.tfds_name):
        raise ValueError("pass exactly one of --input_file and --tfds_name")
    if not 0 <= FLAGS.task_index < FLAGS.num_tasks:
        raise ValueError(f"--task_index={FLAGS.task_index} must be in [0, --num_tasks={FLAGS.num_tasks})")
    inputs = prepare.list_inputs(
        FLAGS.input_file or "",
        FLAGS.tfds_name,
        FLAGS.tfds_split,
        FLAGS.tfds_num_shards,
        tfds_data_dir=FLAGS.tfds_data_dir,
    )
    meta = prepare.prepare(
        inputs,
        FLAGS.output_dir,
        prepare.Options.from_flags(FLAGS),
        num_workers=FLAGS.num_workers,
        task_index=FLAGS.task_index,
        num_tasks=FLAGS.num_tasks,
        overwrite=FLAGS.overwrite,
    )
    if meta is None:
        print(f"task {FLAGS.task_index} done; {FLAGS.output_dir}/metadata.json follows when every task is")
        return
    n, shards = meta["counts"], len(meta["shards"])
    print(
        f"prepared {n['train']:,} train + {n['eval']:,} held-out instances from {n['documents']:,} "
        f"documents ({n['tokens']:,} tokens, {shards} shard{'' if shards == 1 else 's'}) "
        f"in {FLAGS.output_dir}"
    )
