"""The cells of an ablation table: how a cell is made (`cell_plan`), its runs (`pending_runs`,
`run_one`: fine-tuned or feature-based, one seed each; a column with a ``grid`` first
chooses its hyper-parameters on dev, `grid`), filled (`fill_cell`), read back
(`cell_values`, `cell_done`), and what the report says of each row's pre-training
(`row_config`, `pretraining_summary`). Shared by the runner, its parallel workers and
Figure 5.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable
from typing import Any

from bert_jax.ablations import grid, task_data
from bert_jax.ablations.spec import AblationTable
from bert_jax.finetuning import feature_based, finetune
from bert_jax.model.flops import model_flops_per_step
from bert_jax.pretraining.settings import PretrainSettings
from bert_jax.storage import atomic_files
from bert_jax.tasks import downstream_classification, downstream_qa
from bert_jax.training import resolver

# Task name → the family whose data folder ``data_dirs`` gives (others: "glue").
_FAMILY = {
    "squad1.1": "squad",
    "squad2.0": "squad",
    "conll2003": "conll2003",
    "swag": "swag",
    "bbc": "bbc",
    **{t: "downstream" for t in (*downstream_qa.VERSIONS, *downstream_classification.TASKS)},
}


def cell_plan(table: AblationTable, row: str, column: str) -> dict[str, Any]:
    """How one cell is made: approach, the task config (with model, seed 0, data folder),
    the head, the layers and their combination."""
    settings, col = table.row_settings[row], table.columns[column]
    approach = col.approach if col.approach == "lm_ppl" else (settings.approach or col.approach)
    plan: dict[str, Any] = {"approach": approach, "model_from": settings.model_from, "metric": col.metric}
    if col.skip:
        return {**plan, "approach": "n/a", "reason": col.skip}
    random_init = settings.random_init
    if random_init and approach != "finetune" and settings.approach != "features":
        # (a row that asks for features of fresh weights itself has them)
        return {**plan, "approach": "n/a", "reason": "a random-init row is fine-tuned only (not pre-trained)"}
    if approach == "lm_ppl":
        return plan
    job = col.finetune  # the column's fine-tuning settings
    changes: dict[str, Any] = {
        "init_checkpoint": settings.model_from,  # resolved to its folder at run time
        "data.do_lower_case": table.pretraining[settings.model_from].data.lower_case,
        "save_best_model": False,  # one model per cell and seed would fill the disk
        "random_init_baseline": False,  # the table has its own random_init row
        **({"random_init": True} if random_init else {}),
    }
    if not job.data_dir:
        changes["data_dir"] = table.data_dirs.get(_FAMILY.get(job.task, "glue"), "")
    if approach == "features":
        if not feature_based.supports(job.task):  # e.g. a SWAG column added to Table 7
            reason = "the feature-based approach serves NER, classification and span extraction only"
            return {**plan, "approach": "n/a", "reason": reason}
        plan.update(layers=settings.layers or col.layers, combine=settings.combine or col.combine)
    elif settings.head:
        changes["task"] = f"{job.task}+{settings.head}"
    config = resolver.updated(job, changes)
    plan["config"] = config
    if approach == "finetune" and grid.points(col):  # hyper-parameters chosen on dev
        plan["grid"] = [grid.point_name(p) for p in grid.points(col)]
    return plan


def paper_values(table: AblationTable, row: str, cols: list[str]) -> dict[str, float | None]:
    """The paper's figure of each column (an offline column: that of the paper's column it
    stands in for), None where the paper has none."""
    published = table.paper.get(row, {})
    keys = {c: table.columns[c].stands_for or c for c in cols}
    return {c: (float(published[keys[c]]) if keys[c] in published else None) for c in cols}


def row_config(table: AblationTable, row: str, cols: list[str]) -> dict[str, Any]:
    """What the row runs: its settings, its pre-training config (rows that pre-train) and
    each column's cell plan (task config and how it is made)."""
    out: dict[str, Any] = {"settings": table.row_settings[row].to_dict()}
    if row in table.pretraining:
        out["pretraining"] = table.pretraining[row].config
    cells = {}
    for c in cols:
        plan = cell_plan(table, row, c)
        if "config" in plan:
            plan["config"] = plan["config"].config  # the settings as written
        cells[c] = plan
    out["cells"] = cells
    out["finetune_seeds"] = table.finetune_seeds
    return out


# --- pre-training ---------------------------------------------------------------------


def read_pretraining(row_dir: str) -> dict[str, Any] | None:
    path = os.path.join(row_dir, "pretraining.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def pretrained(table: AblationTable, workdir: str, source: str) -> bool:
    """Whether row `source`'s pre-training is done: its ``pretraining.json`` is of a run to
    the row's ``num_train_steps``."""
    done = read_pretraining(os.path.join(workdir, source))
    return done is not None and done["num_train_steps"] == table.pretraining[source].num_train_steps


def pretraining_summary(table: AblationTable, source: str, done: dict[str, Any] | None) -> dict[str, Any]:
    run = table.pretraining[source]
    final = (done or {}).get("final", {})
    m, r = run.data.mask_token_prob, run.data.random_token_prob
    nsp = run.data.nsp
    return {
        "model_from": source,
        "objective": run.data.objective,
        "nsp": nsp,
        "layers": run.model.num_hidden_layers,
        "hidden": run.model.hidden_size,
        "heads": run.model.num_attention_heads,
        "mask/same/rnd": f"{round(100 * m)}/{round(100 * (1 - m - r))}/{round(100 * r)}",
        "steps": run.num_train_steps,
        "lm_accuracy": final.get("mlm_accuracy"),
        "lm_accuracy_changed": final.get("mlm_accuracy_changed"),
        "lm_loss": final.get("mlm_loss"),
        "nsp_accuracy": final.get("nsp_accuracy") if nsp else None,
        "done": done is not None,
        "pretraining_flops": pretraining_flops(run),
        "recipe": recipe_summary(run),
        "plan": f"bert-jax plan --config=configs/ablations.py:{table.table}.{table.preset}/{source} "
        "--topology=TOPOLOGY",
    }


def recipe_summary(run: PretrainSettings) -> str:
    """The pre-training recipe of a row in one line: its model switches, masking rate,
    schedule, dropout, batch and vocabulary (what a report names as its base recipe)."""

    model, data, optimizer = run.model, run.data, run.training.optimization
    switches = ", ".join(model.switches_on()) or "the paper's architecture (post-LN, learned positions)"
    vocab = (
        f"a WordPiece vocabulary of {data.learned_vocab_size:,} learned on the corpus"
        if data.learned_vocab_size
        else "the bert-base-uncased vocabulary"
    )
    return (
        f"{switches}; masking {data.masked_lm_prob:.0%}; {optimizer.lr_schedule} schedule, "
        f"peak {optimizer.learning_rate:g}; dropout {model.hidden_dropout_prob:g}; "
        f"batch {run.global_batch_size} x {run.max_seq_length}; {vocab}"
    )


def pretraining_flops(run: PretrainSettings) -> float:
    """Training FLOPs of the whole pre-training run (matmuls, as `bert-jax plan` counts
    them; each phase at its own length): divided by a slice's sustained FLOP/s, its time."""

    return float(
        sum(
            (p.end - p.start)
            * model_flops_per_step(
                run.model, run.global_batch_size, p.max_seq_length, p.max_predictions_per_seq, run.data.nsp
            )
            for p in run.phases()
        )
    )


# --- cells ----------------------------------------------------------------------------


def _seed_dirs(table: AblationTable, cell_dir: str) -> list[str]:
    return [os.path.join(cell_dir, f"seed{k}") for k in range(table.finetune_seeds)]


def _has_grid(table: AblationTable, row: str, column: str) -> bool:
    return "grid" in cell_plan(table, row, column)


def cell_values(
    table: AblationTable, row: str, column: str, pretraining: dict[str, Any] | None, cell_dir: str
) -> list[float]:
    """The cell's figures in the paper's units, one per finished seed (a grid cell: those
    of the point chosen on dev, none until it is chosen)."""
    col = table.columns[column]
    if col.approach == "lm_ppl":
        if cell_plan(table, row, column)["approach"] == "n/a":
            return []
        loss = (pretraining or {}).get("final", {}).get("mlm_loss")
        return [] if loss is None else [math.exp(float(loss))]
    metric = col.report_metric
    if _has_grid(table, row, column):
        raw = grid.chosen_values(col, cell_dir, table.grid_seeds, table.finetune_seeds)
    else:
        raw = []
        for seed_dir in _seed_dirs(table, cell_dir):
            results = grid.read_results(seed_dir)
            if results is not None:
                raw.append(grid.metric_of(results, metric, seed_dir))
    return [v * col.scale for v in raw]


def cell_selection(table: AblationTable, row: str, column: str, cell_dir: str) -> dict | None:
    """A grid cell's dev figures per point and the point chosen (None: no grid)."""
    if not _has_grid(table, row, column):
        return None
    col = table.columns[column]
    return {**grid.selection(col, cell_dir, table.grid_seeds), "scale": col.scale}


def pending_runs(
    table: AblationTable, row: str, column: str, cell_dir: str
) -> list[tuple[int, str, dict[str, Any]]]:
    """The cell's runs that can start now: (seed, folder, config changes). A grid cell's
    chosen point's seeds become pending once every point has its grid seeds."""
    if cell_plan(table, row, column)["approach"] in ("lm_ppl", "n/a"):
        return []
    if _has_grid(table, row, column):
        col = table.columns[column]
        return grid.pending(col, cell_dir, table.grid_seeds, table.finetune_seeds)
    return [
        (seed, seed_dir, {})
        for seed, seed_dir in enumerate(_seed_dirs(table, cell_dir))
        if not os.path.exists(os.path.join(seed_dir, "results.json"))
    ]


def cell_done(table: AblationTable, row: str, column: str, cell_dir: str) -> bool:
    """Whether the cell has nothing left to train: every seed finished (a grid cell: at
    the chosen point), or nothing to run (a skipped column, one the row's approach does
    not serve, or perplexity)."""
    if cell_plan(table, row, column)["approach"] in ("lm_ppl", "n/a"):
        return True
    return len(cell_values(table, row, column, None, cell_dir)) == table.finetune_seeds


def run_one(
    table: AblationTable,
    row: str,
    column: str,
    model_dir: str,
    run: tuple[int, str, dict[str, Any]],
    data_cache: str,
) -> None:
    """One seed of one cell (`pending_runs`' entry `run`) from the model in `model_dir`
    (task data given by a TFDS name that the task reads only from files is exported once
    under `data_cache`)."""
    plan = cell_plan(table, row, column)
    seed, seed_dir, changes = run
    config = resolver.updated(plan["config"], {"init_checkpoint": model_dir, "seed": seed, **changes})
    data_dir = task_data.resolve(config.task, config.data_dir, data_cache)
    config = resolver.updated(config, {"data_dir": data_dir})
    print(f"== {table.table} / {row} / {column}: {plan['approach']}, seed {seed} in {seed_dir}", flush=True)
    if plan["approach"] == "features":
        result = feature_based.train(config, table.feature_bilstm, plan["layers"], plan["combine"], seed_dir)
    else:
        result = finetune.finetune(config, seed_dir)
    if result.stopped:
        raise SystemExit(f"fine-tuning stopped at step {result.step}; rerun to continue")


def fill_cell(
    table: AblationTable,
    row: str,
    column: str,
    model_dir: str,
    cell_dir: str,
    data_cache: str,
    job: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> None:
    """Runs the cell's seeds that have no ``results.json`` yet, one after another (a grid
    cell: its grid seeds at every point, then the chosen point's other seeds), each inside
    a `job()` (the table's progress)."""
    while runs := pending_runs(table, row, column, cell_dir):
        for run in runs:
            with job():
                run_one(table, row, column, model_dir, run, data_cache)


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
