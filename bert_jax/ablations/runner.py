"""The ablation runner: pre-train the rows of a table, fill every column, write the report.

A table config (`configs/ablations.py`) has pre-training configs (``rows``), each row's
settings (``row_settings``: whose model it uses, the head, the approach) and the columns.
For each row and column the runner fills one cell:

- ``lm_ppl``: exp of the held-out LM loss of the row's pre-training;
- ``finetune``: `bert_jax.finetuning.finetune.finetune` from the row's model (``head="bilstm"``: the
  task ``<task>+bilstm``, a BiLSTM under the output layer), once per seed
  0..``finetune_seeds``-1, in ``WORKDIR/<row>/<column>/seed<k>/``;
- ``features`` (the column's approach or the row's): `feature_based.train`, a BiLSTM on
  the frozen features of ``layers`` of the row's model, once per seed likewise (NER and
  classification columns; others are "n/a").

A row pre-trains in ``WORKDIR/<row>/`` (its final held-out metrics kept in
``pretraining.json``: a rerun with the same ``num_train_steps`` does not evaluate again;
an unfinished one resumes); a cell whose ``results.json`` exists is read, not run. The
report (`ablation_report`: ours beside the paper's, Kendall's tau per column) is written
after every cell, so an interrupted run leaves a report of what it has.

``figure5``: each row pre-trains in stages, stopping at each of ``steps`` (the learning-
rate schedule is that of the whole run), and the columns are filled from each stage's
model (``WORKDIR/<row>/step<k>/<column>/seed<j>/``); the report has one row per (row,
step) and a plot against steps per column (`ablation_figure5`).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import ml_collections

from bert_jax.ablations import reports, task_data
from bert_jax.storage import atomic_files

# Task name → the family whose data folder ``data_dirs`` gives.
_FAMILY = {"squad1.1": "squad", "squad2.0": "squad", "conll2003": "conll2003", "swag": "swag", "bbc": "bbc"}


def _select(kind: str, wanted: list[str] | None, known: list[str], table: str) -> list[str]:
    if not wanted:
        return known
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise ValueError(f"{table} has no {kind}(s) {unknown}; {kind}s: {', '.join(known)}")
    return [k for k in known if k in wanted]


def check_table(table: ml_collections.ConfigDict) -> None:
    """Every row's model is a pre-trained row; every approach is known; the layers of a
    feature-based cell exist in its model (checked before anything is trained)."""
    for row in table.row_order:
        s = table.row_settings[row]
        if s.model_from not in table.rows:
            raise ValueError(
                f"row {row}: model_from {s.model_from!r} is not a pre-training row of {table.table}"
            )
        if s.approach not in ("", "finetune", "features"):
            raise ValueError(f"row {row}: approach {s.approach!r}: '', 'finetune' or 'features'")
        if s.head not in ("", "bilstm"):
            raise ValueError(f"row {row}: head {s.head!r}: '' or 'bilstm'")
    for name in table.column_order:
        col = table.columns[name]
        if col.approach not in ("finetune", "features", "lm_ppl"):
            raise ValueError(f"column {name}: approach {col.approach!r}: finetune, features or lm_ppl")
    for row in table.row_order:
        for name in table.column_order:
            plan = cell_plan(table, row, name)
            if plan["approach"] == "features":
                from bert_jax.finetuning import feature_based

                layers = int(table.rows[plan["model_from"]].model.num_hidden_layers)
                try:
                    feature_based.layer_indices(plan["layers"], layers)
                except ValueError as e:
                    raise ValueError(f"row {row}, column {name}: {e} ({plan['model_from']})") from None


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
        from bert_jax.finetuning import feature_based

        if not feature_based.supports(config.task):  # e.g. a SQuAD column added to Table 7
            reason = "the feature-based approach serves NER and classification only"
            return {**plan, "approach": "n/a", "reason": reason}
        plan.update(layers=settings.layers or col.layers, combine=settings.combine or col.combine)
    elif settings.head:
        config.task = f"{config.task}+{settings.head}"
    plan["config"] = config
    return plan


def run_table(
    table: ml_collections.ConfigDict,
    workdir: str,
    rows: list[str] | None = None,
    columns: list[str] | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Fills the cells of the chosen rows and columns (all by default, in table order)
    and writes the report; ``dry_run`` runs nothing and reports what exists already.
    Returns the report."""
    workdir = os.path.abspath(workdir)
    check_table(table)
    names = _select("row", rows, list(table.row_order), table.table)
    cols = _select("column", columns, list(table.column_order), table.table)
    if table.table == "figure5":
        from bert_jax.ablations import figure5

        return figure5.run(table, workdir, names, cols, dry_run)
    state = _Report(table, workdir, names, cols)
    state.write()
    if dry_run:
        return state.write()
    pretrained: dict[str, dict[str, Any] | None] = {}
    for row in names:
        source = table.row_settings[row].model_from
        if source not in pretrained:
            pretrained[source] = pretrain_row(table, source, workdir)
            if pretrained[source] is None:  # stopped (stop_after_step): a rerun continues
                return state.write()
        for column in cols:
            model_dir, cell_dir = os.path.join(workdir, source), os.path.join(workdir, row, column)
            fill_cell(table, row, column, model_dir, cell_dir, data_cache=os.path.join(workdir, "data"))
            state.write()
    return state.write()


class _Report:
    """The report of the rows and columns chosen, from what is on disk."""

    def __init__(self, table: ml_collections.ConfigDict, workdir: str, names: list[str], cols: list[str]):
        self.table, self.workdir, self.names, self.cols = table, workdir, names, cols

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for row in self.names:
            source = self.table.row_settings[row].model_from
            final = read_pretraining(os.path.join(self.workdir, source))
            out.append(
                {
                    "row": row,
                    "seeds": {
                        c: cell_values(self.table, row, c, final, os.path.join(self.workdir, row, c))
                        for c in self.cols
                    },
                    "paper": paper_values(self.table, row, self.cols),
                    "pretraining": pretraining_summary(self.table, source, final),
                    "config": row_config(self.table, row, self.cols),
                }
            )
        return out

    def write(self) -> dict[str, Any]:
        labels = {c: self.table.columns[c].label for c in self.cols}
        report = reports.build(self.table.table, self.table.title, self.cols, labels, self.rows())
        reasons: dict[str, list[str]] = {}
        for c in self.cols:
            if self.table.columns[c].get("skip"):
                reasons.setdefault(self.table.columns[c].skip, []).append(labels[c])
        if reasons:
            report["notes"] = [f"Not run ({why}): {', '.join(cols)}." for why, cols in reasons.items()]
        reports.write(report, self.workdir)
        return report


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


def pretrain_row(table: ml_collections.ConfigDict, row: str, workdir: str) -> dict[str, Any] | None:
    """The row's final held-out metrics: from ``pretraining.json`` when it is of a run to
    the same ``num_train_steps``, else by pre-training (or resuming) to the end. None when
    the run stopped early (``stop_after_step`` or preemption)."""
    from bert_jax.pretraining import pretrain

    config, row_dir = table.rows[row], os.path.join(workdir, row)
    done = read_pretraining(row_dir)
    if done is not None and done["num_train_steps"] == int(config.num_train_steps):
        print(f"== {table.table} / {row}: pre-trained ({row_dir})", flush=True)
        return done
    print(f"== {table.table} / {row}: pre-training in {row_dir}", flush=True)
    final = pretrain.train_and_evaluate(config, row_dir)
    if "stopped_at" in final:
        return None
    record = {"num_train_steps": int(config.num_train_steps), "final": _plain(final)}
    _write_json(os.path.join(row_dir, "pretraining.json"), record)
    return record


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
    schedule, dropout and vocabulary (what a report names as its base recipe)."""
    from bert_jax.training import run_config

    model = run_config.bert_config(config)
    switches = ", ".join(model.switches_on()) or "the paper's architecture (post-LN, learned positions)"
    vocab = (
        f"a WordPiece vocabulary of {int(config.data.learned_vocab_size):,} learned on the corpus"
        if int(config.data.learned_vocab_size)
        else "the bert-base-uncased vocabulary"
    )
    return (
        f"{switches}; masking {float(config.data.masked_lm_prob):.0%}; {config.lr_schedule} schedule, "
        f"peak {float(config.learning_rate):g}; dropout {model.hidden_dropout_prob:g}; {vocab}"
    )


def pretraining_flops(config: ml_collections.ConfigDict) -> float:
    """Training FLOPs of the whole pre-training run (matmuls, as `bert-jax plan` counts
    them; each phase at its own length): divided by a slice's sustained FLOP/s, its time."""
    from bert_jax.pretraining.objective import model_flops_per_step
    from bert_jax.pretraining.pretrain import phases
    from bert_jax.training import run_config

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
            from bert_jax.finetuning import feature_based

            feature_based.train(config, table.feature_bilstm, plan["layers"], plan["combine"], seed_dir)
        else:
            from bert_jax.finetuning import finetune

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
