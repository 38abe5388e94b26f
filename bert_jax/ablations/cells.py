"""The cells of an ablation table: how a cell is made (`cell_plan`), filled (`fill_cell`:
fine-tuned, feature-based, or the LM perplexity), read back (`cell_values`, `cell_done`),
and what the report says of each row's pre-training (`row_config`, `pretraining_summary`).
Shared by the runner and Figure 5.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import ml_collections

from bert_jax.ablations import task_data
from bert_jax.finetuning import feature_based, finetune
from bert_jax.model.flops import model_flops_per_step
from bert_jax.pretraining.pretrain import phases
from bert_jax.storage import atomic_files
from bert_jax.training import run_config

# Task name → the family whose data folder ``data_dirs`` gives.
_FAMILY = {"squad1.1": "squad", "squad2.0": "squad", "conll2003": "conll2003", "swag": "swag", "bbc": "bbc"}


def cell_plan(table: ml_collections.ConfigDict, row: str, column: str) -> dict[str, Any]:
    """How one cell is made: approach, the task config (with model, seed 0, data folder),
    the head, the layers and their combination."""
    settings, col = table.row_settings[row], table.columns[column]
    approach = col.approach if col.approach == "lm_ppl" else (settings.approach or col.approach)
    plan: dict[str, Any] = {"approach": approach, "model_from": settings.model_from, "metric": col.metric}
    if col.get("skip"):
        return {**plan, "approach": "n/a", "reason": col.skip}
    if approach == "lm_ppl":
        return plan
    config = ml_collections.ConfigDict(col.finetune.to_dict())
    config.init_checkpoint = settings.model_from  # resolved to its folder at run time
    config.do_lower_case = bool(table.rows[settings.model_from].data.do_lower_case)
    config.save_best_model = False  # one model per cell and seed would fill the disk
    if not config.data_dir:
        family = _FAMILY.get(config.task, "glue")
        config.data_dir = table.data_dirs.get(family, "")
    if approach == "features":
        if not feature_based.supports(config.task):  # e.g. a SQuAD column added to Table 7
            reason = "the feature-based approach serves NER and classification only"
            return {**plan, "approach": "n/a", "reason": reason}
        plan.update(layers=settings.layers or col.layers, combine=settings.combine or col.combine)
    elif settings.head:
        config.task = f"{config.task}+{settings.head}"
    plan["config"] = config
    return plan


def paper_values(table: ml_collections.ConfigDict, row: str, cols: list[str]) -> dict[str, float | None]:
    published = table.paper.get(row, {})
    return {c: (float(published[c]) if c in published else None) for c in cols}


def row_config(table: ml_collections.ConfigDict, row: str, cols: list[str]) -> dict[str, Any]:
    """What the row runs: its settings, its pre-training config (rows that pre-train) and
    each column's cell plan (task config and how it is made)."""
    out: dict[str, Any] = {"settings": table.row_settings[row].to_dict()}
    if row in table.rows:
        out["pretraining"] = table.rows[row].to_dict()
    cells = {}
    for c in cols:
        plan = cell_plan(table, row, c)
        if "config" in plan:
            plan["config"] = plan["config"].to_dict()
        cells[c] = plan
    out["cells"] = cells
    out["finetune_seeds"] = int(table.finetune_seeds)
    return out


# --- pre-training ---------------------------------------------------------------------


def read_pretraining(row_dir: str) -> dict[str, Any] | None:
    path = os.path.join(row_dir, "pretraining.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def pretraining_summary(
    table: ml_collections.ConfigDict, source: str, done: dict[str, Any] | None
) -> dict[str, Any]:
    config = table.rows[source]
    final = (done or {}).get("final", {})
    m, r = float(config.data.mask_token_prob), float(config.data.random_token_prob)
    nsp = bool(config.data.nsp)
    return {
        "model_from": source,
        "objective": config.data.objective,
        "nsp": nsp,
        "layers": int(config.model.num_hidden_layers),
        "hidden": int(config.model.hidden_size),
        "heads": int(config.model.num_attention_heads),
        "mask/same/rnd": f"{round(100 * m)}/{round(100 * (1 - m - r))}/{round(100 * r)}",
        "steps": int(config.num_train_steps),
        "lm_accuracy": final.get("mlm_accuracy"),
        "lm_accuracy_changed": final.get("mlm_accuracy_changed"),
        "lm_loss": final.get("mlm_loss"),
        "nsp_accuracy": final.get("nsp_accuracy") if nsp else None,
        "done": done is not None,
        "pretraining_flops": pretraining_flops(config),
        "recipe": recipe_summary(config),
        "plan": f"bert-jax plan --config=configs/ablations.py:{table.table}.{table.preset}/{source} "
        "--topology=TOPOLOGY",
    }


def recipe_summary(config: ml_collections.ConfigDict) -> str:
    """The pre-training recipe of a row in one line: its model switches, masking rate,
    schedule, dropout, batch and vocabulary (what a report names as its base recipe)."""

    model = run_config.bert_config(config)
    switches = ", ".join(model.switches_on()) or "the paper's architecture (post-LN, learned positions)"
    vocab = (
        f"a WordPiece vocabulary of {int(config.data.learned_vocab_size):,} learned on the corpus"
        if int(config.data.learned_vocab_size)
        else "the bert-base-uncased vocabulary"
    )
    return (
        f"{switches}; masking {float(config.data.masked_lm_prob):.0%}; {config.lr_schedule} schedule, "
        f"peak {float(config.learning_rate):g}; dropout {model.hidden_dropout_prob:g}; "
        f"batch {int(config.global_batch_size)} x {int(config.max_seq_length)}; {vocab}"
    )


def pretraining_flops(config: ml_collections.ConfigDict) -> float:
    """Training FLOPs of the whole pre-training run (matmuls, as `bert-jax plan` counts
    them; each phase at its own length): divided by a slice's sustained FLOP/s, its time."""

    model, batch = run_config.bert_config(config), int(config.global_batch_size)
    return float(
        sum(
            (p.end - p.start)
            * model_flops_per_step(
                model, batch, p.max_seq_length, p.max_predictions_per_seq, bool(config.data.nsp)
            )
            for p in phases(config)
        )
    )


# --- cells ----------------------------------------------------------------------------


def _seed_dirs(table: ml_collections.ConfigDict, cell_dir: str) -> list[str]:
    return [os.path.join(cell_dir, f"seed{k}") for k in range(int(table.finetune_seeds))]


def cell_values(
    table: ml_collections.ConfigDict, row: str, column: str, pretraining: dict[str, Any] | None, cell_dir: str
) -> list[float]:
    """The cell's figures in the paper's units, one per finished seed."""
    col = table.columns[column]
    if col.approach == "lm_ppl":
        loss = (pretraining or {}).get("final", {}).get("mlm_loss")
        return [] if loss is None else [math.exp(float(loss))]
    values = []
    for seed_dir in _seed_dirs(table, cell_dir):
        path = os.path.join(seed_dir, "results.json")
        if os.path.exists(path):
            with open(path) as f:
                results = json.load(f)
            if col.metric not in results["best"]:
                raise KeyError(f"{path}: no dev metric {col.metric!r} (has {sorted(results['best'])})")
            values.append(float(results["best"][col.metric]) * float(col.scale))
    return values


def cell_done(table: ml_collections.ConfigDict, row: str, column: str, cell_dir: str) -> bool:
    """Whether the cell has nothing left to train: every seed finished, or nothing to run
    (a skipped column, one the row's approach does not serve, or perplexity)."""
    if cell_plan(table, row, column)["approach"] in ("lm_ppl", "n/a"):
        return True
    return len(cell_values(table, row, column, None, cell_dir)) == int(table.finetune_seeds)


def fill_cell(
    table: ml_collections.ConfigDict,
    row: str,
    column: str,
    model_dir: str,
    cell_dir: str,
    data_cache: str,
) -> None:
    """Runs the seeds of one cell that have no ``results.json`` yet (task data given by a
    TFDS name that the task reads only from files is exported once under `data_cache`)."""
    plan = cell_plan(table, row, column)
    if plan["approach"] in ("lm_ppl", "n/a"):
        return
    for seed, seed_dir in enumerate(_seed_dirs(table, cell_dir)):
        if os.path.exists(os.path.join(seed_dir, "results.json")):
            continue
        config = ml_collections.ConfigDict(plan["config"].to_dict())
        config.init_checkpoint, config.seed = model_dir, seed
        config.data_dir = task_data.resolve(config.task, config.data_dir, data_cache)
        print(
            f"== {table.table} / {row} / {column}: {plan['approach']}, seed {seed} in {seed_dir}", flush=True
        )
        if plan["approach"] == "features":
            feature_based.train(config, table.feature_bilstm, plan["layers"], plan["combine"], seed_dir)
        else:
            result = finetune.finetune(config, seed_dir)
            if "stopped_at" in result:
                raise SystemExit(f"fine-tuning stopped at step {result['stopped_at']}; rerun to continue")


def _plain(metrics: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in metrics.items():
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            out[k] = v if isinstance(v, str | int | None) else str(v)
    return out


def _write_json(path: str, obj: Any) -> None:
    atomic_files.write_json(path, obj, indent=2)
