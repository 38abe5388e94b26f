"""The ablation runner: pre-train the rows of a table, fill every column, write the report.

A table (`spec.AblationTable`, resolved from `configs/ablations.py`) has pre-training configs
(``rows``), each row's settings (``row_settings``: whose model it uses, the head, the
approach) and the columns.
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
report (`reports`: ours beside the paper's, Kendall's tau per column) is written
after every cell, so an interrupted run leaves a report of what it has. As each job
starts, the table's line (`progress`) says what is done and about how long the rest takes.

``figure5``: each row pre-trains in stages, stopping at each of ``steps`` (the learning-
rate schedule is that of the whole run), and the columns are filled from each stage's
model (``WORKDIR/<row>/step<k>/<column>/seed<j>/``); the report has one row per (row,
step) and a plot against steps per column (`figure5`).
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Any

from bert_jax.ablations import cells, compile_cache, figure5, parallel, progress, reports, task_data
from bert_jax.ablations.spec import AblationTable
from bert_jax.finetuning import feature_based
from bert_jax.pretraining import pretrain


def _select(kind: str, wanted: list[str] | None, known: list[str], table: str) -> list[str]:
    if not wanted:
        return known
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise ValueError(f"{table} has no {kind}(s) {unknown}; {kind}s: {', '.join(known)}")
    return [k for k in known if k in wanted]


def check_table(table: AblationTable) -> None:
    """The layers of every feature-based cell exist in its model (checked before anything
    is trained; the rest of the table is checked as it is resolved, `AblationTable`)."""
    for row in table.row_order:
        for name in table.column_order:
            plan = cells.cell_plan(table, row, name)
            if plan["approach"] == "features":
                layers = table.pretraining[plan["model_from"]].model.num_hidden_layers
                try:
                    feature_based.layer_indices(plan["layers"], layers)
                except ValueError as e:
                    raise ValueError(f"row {row}, column {name}: {e} ({plan['model_from']})") from None


def check_data(table: AblationTable, workdir: str, rows: list[str], columns: list[str]) -> None:
    """Every cell of `rows` x `columns` still to fill can get its task data here
    (`task_data.check`): checked before the rows pre-train, not found at the first cell."""
    stages = [f"step{k}" for k in table.steps] if table.table == "figure5" else [""]
    seen = set()
    for row in rows:
        for name in columns:
            dirs = [os.path.join(workdir, row, stage, name) for stage in stages]
            if all(cells.cell_done(table, row, name, d) for d in dirs):
                continue
            config = cells.cell_plan(table, row, name).get("config")
            if config is not None and (config.task, config.data_dir) not in seen:
                seen.add((config.task, config.data_dir))
                task_data.check(config.task, config.data_dir, f"column {name} ({config.task})")


def run_table(
    table: AblationTable,
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
    if not dry_run:
        check_data(table, workdir, names, cols)
    with compile_cache.use(table, workdir):
        return _run(table, workdir, names, cols, dry_run)


def _run(
    table: AblationTable, workdir: str, names: list[str], cols: list[str], dry_run: bool
) -> dict[str, Any]:
    if table.table == "figure5":
        return figure5.run(table, workdir, names, cols, dry_run)
    state = _Report(table, workdir, names, cols)
    state.write()
    if dry_run:
        return state.write()
    count = functools.partial(progress.table_work, table, workdir, names, cols)
    if table.processes > 1:
        tracker = progress.TableProgress(table.table, count, processes=table.processes)
        return parallel.run(table, workdir, names, cols, state.write, tracker)
    tracker = progress.TableProgress(table.table, count)
    job, data_cache = functools.partial(tracker.job, progress.RUN), os.path.join(workdir, "data")
    pretrained: dict[str, dict[str, Any] | None] = {}
    for row in names:
        source = table.row_settings[row].model_from
        if source not in pretrained:
            pretrained[source] = pretrain_row(table, source, workdir, tracker)
            if pretrained[source] is None:  # stopped (stop_after_step): a rerun continues
                return state.write()
        for column in cols:
            model_dir, cell_dir = os.path.join(workdir, source), os.path.join(workdir, row, column)
            cells.fill_cell(table, row, column, model_dir, cell_dir, data_cache, job)
            state.write()
    return state.write()


class _Report:
    """The report of the rows and columns chosen, from what is on disk."""

    def __init__(self, table: AblationTable, workdir: str, names: list[str], cols: list[str]):
        self.table, self.workdir, self.names, self.cols = table, workdir, names, cols

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for row in self.names:
            settings = self.table.row_settings[row]
            final = cells.read_pretraining(os.path.join(self.workdir, settings.model_from))
            folder = lambda c, row=row: os.path.join(self.workdir, row, c)
            selections = {c: cells.cell_selection(self.table, row, c, folder(c)) for c in self.cols}
            out.append(
                {
                    "row": row,
                    "seeds": {c: cells.cell_values(self.table, row, c, final, folder(c)) for c in self.cols},
                    "paper": cells.paper_values(self.table, row, self.cols),
                    # A random-init row has no pre-training of its own to describe.
                    "pretraining": {}
                    if settings.random_init
                    else cells.pretraining_summary(self.table, settings.model_from, final),
                    "selection": {c: v for c, v in selections.items() if v is not None},
                    "config": cells.row_config(self.table, row, self.cols),
                }
            )
        return out

    def write(self) -> dict[str, Any]:
        labels = {c: self.table.columns[c].label for c in self.cols}
        report = reports.build(self.table.table, self.table.title, self.cols, labels, self.rows())
        report["notes"] = reports.column_notes(self.table, self.names, self.cols)
        reports.write(report, self.workdir)
        return report


def pretrain_row(
    table: AblationTable, row: str, workdir: str, tracker: progress.TableProgress | None = None
) -> dict[str, Any] | None:
    """The row's final held-out metrics: from ``pretraining.json`` when it is of a run to
    the same ``num_train_steps``, else by pre-training (or resuming) to the end, a job of
    the table's `tracker` when given. None when the run stopped early (``stop_after_step``
    or preemption)."""
    row_dir = os.path.join(workdir, row)
    done = cells.read_pretraining(row_dir)
    steps = table.pretraining[row].num_train_steps
    if done is not None and done["num_train_steps"] == steps:
        print(f"== {table.table} / {row}: pre-trained ({row_dir})", flush=True)
        return done
    with tracker.job(progress.PRETRAINING) if tracker else contextlib.nullcontext():
        print(f"== {table.table} / {row}: pre-training in {row_dir}", flush=True)
        final = pretrain.train_and_evaluate(table.pretraining[row], row_dir)
    if final.stopped:
        return None
    # Without held-out data ``pretraining.json`` keeps the step and the flag as its "final".
    metrics = final.metrics if final.held_out else {"step": final.step, "held_out": False}
    record = {"num_train_steps": steps, "final": cells._plain(metrics)}
    cells._write_json(os.path.join(row_dir, "pretraining.json"), record)
    return record
