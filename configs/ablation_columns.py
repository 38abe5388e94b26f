"""The columns of the ablation tables (`configs/ablations.py`): what each measures, how it
is fine-tuned at each scale, and the column sets a table spec can add (``+qa``).

A column is a fine-tuning task and the metric read from its ``results.json`` (the
paper's columns: the dev figure, as the paper reports), a BiLSTM on frozen layers
(``approach="features"``) or the held-out LM perplexity (``lm_ppl``).

The offline downstream suite (docs/downstream_tasks.md) gives columns that run with no
network, each standing in for one of the paper's (``stands_for``: the report puts that
column's published figure beside ours and ranks our rows against it). They follow the
paper's protocol (§A.3: the best hyper-parameters on dev), on a smaller grid: every
point of ``grid`` (learning rates x epoch counts; within a run the epoch is also chosen
on dev) is fine-tuned with the first ``grid_seeds`` seeds, the point with the best mean
dev ``metric`` is kept, and the column reports ``report_metric`` (the test split) over
``finetune_seeds`` seeds at that point. Column sets: ``+qa`` (disfl_qa, cpkc: the
paper's SQuAD column, where it finds its largest differences: LTR -10.7 F1, NSP -0.6),
``+pairs`` (movie dialog pairs for MRPC, VitaminC for MNLI-m: NSP's and LTR's
sentence-pair columns), ``+sentiment`` (Rotten Tomatoes for SST-2, a column where the
paper's rows barely differ: a control) and ``+offline`` (all five). Separate sets let a
table run the columns that test its claims first (Table 5: ``+qa``).
"""

from __future__ import annotations

from typing import Any

import ml_collections

from bert_jax.training import run_config


def _features(config: tuple[str, str | None], metric: str, label: str, layers: str) -> dict[str, Any]:
    """A feature-based column: a BiLSTM on the frozen, concatenated `layers`."""
    return dict(
        config=config, metric=metric, label=label, approach="features", layers=layers, combine="concat"
    )


def _offline(task: str, metric: str, label: str, stands_for: str, scale: float = 100.0) -> dict[str, Any]:
    """A column of the offline downstream suite: chosen on dev, reported on test."""
    return dict(
        config=("downstream", task), metric=metric, report_metric=f"test/{metric}", label=label,
        stands_for=stands_for, offline=True, scale=scale,
    )  # fmt: skip


# A known column: (config file and argument, dev metric in its results, label, approach).
COLUMNS: dict[str, dict[str, Any]] = {
    "mnli_m": dict(config=("glue", "mnli"), metric="accuracy", label="MNLI-m acc"),
    "qnli": dict(config=("glue", "qnli"), metric="accuracy", label="QNLI acc"),
    "mrpc": dict(config=("glue", "mrpc"), metric="accuracy", label="MRPC acc"),
    "sst2": dict(config=("glue", "sst2"), metric="accuracy", label="SST-2 acc"),
    "cola": dict(config=("glue", "cola"), metric="matthews_corr", label="CoLA MCC"),
    "rte": dict(config=("glue", "rte"), metric="accuracy", label="RTE acc"),
    "qqp": dict(config=("glue", "qqp"), metric="f1", label="QQP F1"),
    "stsb": dict(config=("glue", "stsb"), metric="spearman", label="STS-B Spearman"),
    # The official SQuAD scripts score in percent already (scale 1).
    "squad_f1": dict(config=("squad", "1.1"), metric="f1", label="SQuAD v1.1 F1", scale=1.0),
    "squad2_f1": dict(config=("squad", "2.0"), metric="best_f1", label="SQuAD v2.0 F1", scale=1.0),
    "swag": dict(config=("swag", None), metric="accuracy", label="SWAG acc"),
    "bbc": dict(config=("bbc", None), metric="accuracy", label="BBC topics acc", offline=True),
    # Feature-based BBC topics: a BiLSTM on the concatenated last two layers (all of an L2
    # model's), frozen.
    "bbc_features": {
        **_features(("bbc", None), "accuracy", "BBC feature-based acc", "-1,-2"),
        "offline": True,
    },
    "ner_f1": dict(config=("ner", None), metric="f1", label="CoNLL-2003 NER F1"),
    "ner_finetune_f1": dict(config=("ner", None), metric="f1", label="NER fine-tune F1"),
    "ner_feature_f1": _features(("ner", None), "f1", "NER feature-based F1", "-1,-2,-3,-4"),
    "lm_ppl": dict(
        config=None, metric="perplexity", label="LM ppl", approach="lm_ppl", scale=1.0, offline=True
    ),
    # The offline downstream suite; official v2.0 F1 at dev's no-answer threshold for disfl_qa.
    "disfl_qa": _offline("disfl_qa", "best_f1", "disfl_qa test F1 for SQuAD v1.1 F1", "squad_f1", 1.0),
    "cpkc": _offline("cpkc", "f1", "cpkc test F1 for SQuAD v1.1 F1", "squad_f1", 1.0),
    "dialog_pairs": _offline("dialog_pairs", "accuracy", "movie dialog pairs test acc for MRPC acc", "mrpc"),
    "vitaminc": _offline("vitaminc", "accuracy", "VitaminC test acc for MNLI-m acc", "mnli_m"),
    "rotten_tomatoes": _offline(
        "rotten_tomatoes", "accuracy", "Rotten Tomatoes test acc for SST-2 acc", "sst2"
    ),
}

# `+SET` in a table spec adds these columns.
COLUMN_SETS: dict[str, tuple[str, ...]] = {
    "qa": ("disfl_qa", "cpkc"),
    "pairs": ("dialog_pairs", "vitaminc"),
    "sentiment": ("rotten_tomatoes",),
    "offline": ("disfl_qa", "cpkc", "dialog_pairs", "vitaminc", "rotten_tomatoes"),
}

# Fine-tuning at each scale: changes to every column's task config (base: the task file's).
FINETUNE_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(
        max_seq_length=64,
        global_batch_size=8,
        eval_batch_size=16,
        num_epochs=1,
        max_train_examples=48,
        max_eval_examples=32,
        length_buckets=(32, 64),
    ),
    "demo": dict(
        max_seq_length=128,
        global_batch_size=16,
        num_epochs=2,
        max_train_examples=2000,
        max_eval_examples=1000,
    ),
    # Small models from a short pre-training learn BBC topics at a high rate only (5e-5:
    # chance after 2 epochs; 2e-3: ~68% for the smallest Table 6 row).
    "cpu": dict(max_seq_length=128, global_batch_size=16, num_epochs=3, learning_rate=2e-3),
    "base": {},
}
FINETUNE_SEEDS = {"tiny": 1, "demo": 3, "cpu": 3, "base": 5}

# The offline suite at each scale, after `FINETUNE_PRESETS`: ``grid`` (learning rates x
# epoch counts) and per-task changes. A model of the demo's size wants lr ~1e-3 (1e-4
# leaves it at the majority class on Rotten Tomatoes: docs/downstream_tasks.md). At
# `cpu` the larger training sets are subsampled (a seeded draw per seed) so that a table
# stays within hours; dev and test are scored in full.
OFFLINE_GRID: dict[str, dict[str, tuple]] = {
    "tiny": dict(learning_rate=(1e-3, 3e-3), num_epochs=(1,)),
    "demo": dict(learning_rate=(5e-4, 1e-3), num_epochs=(2,)),
    "cpu": dict(learning_rate=(5e-4, 1e-3), num_epochs=(2,)),
    "base": dict(learning_rate=(5e-5, 3e-5, 2e-5), num_epochs=(2, 3)),  # the paper's, smaller
}
OFFLINE_PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "tiny": {},
    "demo": {},
    "cpu": {
        "disfl_qa": dict(global_batch_size=32, max_eval_examples=0),
        "cpkc": dict(global_batch_size=32, max_train_examples=4000, max_eval_examples=0),
        "dialog_pairs": dict(global_batch_size=32, max_train_examples=10000, max_eval_examples=0),
        "vitaminc": dict(global_batch_size=32, max_train_examples=10000, max_eval_examples=0),
        "rotten_tomatoes": dict(global_batch_size=32, max_eval_examples=0),
    },
    "base": {},
}
# Grid points each run with this many seeds before the best is chosen (then the chosen
# point runs the rest up to ``finetune_seeds``).
GRID_SEEDS = {"tiny": 1, "demo": 1, "cpu": 1, "base": 3}

# Columns whose data is on every machine; at `cpu` the others are skipped (no network).
OFFLINE_COLUMNS = tuple(name for name, spec in COLUMNS.items() if spec.get("offline"))


def expand(extra: list[str]) -> list[str]:
    """Column names with the sets among them replaced by their columns, each once."""
    out: list[str] = []
    for name in extra:
        out += [c for c in COLUMN_SETS.get(name, (name,)) if c not in out]
    return out


def finetune_config(file_and_arg: tuple[str, str | None], scale: str, name: str) -> ml_collections.ConfigDict:
    """The task config of a column at a scale (`FINETUNE_PRESETS`, then `OFFLINE_PRESETS`)."""
    file, arg = file_and_arg
    module = run_config.sibling(__file__, file)
    c = module.get_config() if arg is None else module.get_config(arg)
    changes = {**FINETUNE_PRESETS[scale], **OFFLINE_PRESETS[scale].get(name, {})}
    for key, value in changes.items():
        c[key] = min(value, c[key]) if key == "max_seq_length" else value
    if "doc_stride" in c:  # SQuAD windows at a shorter length
        c.doc_stride = min(c.doc_stride, c.max_seq_length // 2)
        c.max_query_length = min(c.max_query_length, c.max_seq_length // 4)
    return c


def column(name: str, scale: str) -> ml_collections.ConfigDict:
    """One column's config at a scale (``skip`` set where its data needs a network)."""
    if name not in COLUMNS:
        known = [*COLUMNS, *(f"{s} (set)" for s in COLUMN_SETS)]
        raise ValueError(f"unknown column {name!r}; known: {', '.join(known)}")
    spec = COLUMNS[name]
    c = ml_collections.ConfigDict()
    c.label = spec["label"]
    c.approach = spec.get("approach", "finetune")
    c.metric = spec["metric"]  # in results.json's "best": what a grid is chosen on (dev)
    c.report_metric = spec.get("report_metric", spec["metric"])  # the figure reported
    c.stands_for = spec.get("stands_for", "")  # the paper's column whose figures go beside ours
    c.scale = float(spec.get("scale", 100.0))  # ours in the paper's units (percent)
    c.layers = spec.get("layers", "-1,-2,-3,-4")
    c.combine = spec.get("combine", "concat")
    c.skip = ""  # a reason not to run the column (kept in the report, empty)
    if scale == "cpu" and name not in OFFLINE_COLUMNS:
        c.skip = "task data needs a network: TFDS or the original files"
    if spec["config"] is not None:
        c.finetune = finetune_config(spec["config"], scale, name)
    # The hyper-parameter grid (empty: the config's own values, seeds in <cell>/seed<k>/).
    grid = OFFLINE_GRID[scale] if spec["config"] and spec["config"][0] == "downstream" else {}
    c.grid = ml_collections.ConfigDict({k: tuple(v) for k, v in grid.items()})
    return c
