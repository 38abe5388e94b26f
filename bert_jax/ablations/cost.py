"""Time and cost of a whole ablation table on a TPU slice, before running it.

Pre-training: each row's training FLOPs (`cells.pretraining_flops`: every phase at its
own length) at ``mfu`` of the slice's peak, or, with ``compile=True``, `bert_jax.pretraining.plan`'s
estimate from the row's step compiled for the slice (also its memory per chip and
whether it fits; minutes per row). Fine-tuning: per cell, every run it makes (its
seeds; a column with a ``grid``: each point's grid seeds, then the chosen point's other
seeds), each the steps of the column's task (``TRAIN_ROWS``, the paper's training sets
and the offline suite's, or ``max_train_examples``) times the encoder's FLOPs per step
at the task's length (the BiLSTM and the output layers are not counted; evaluation
neither); the feature-based approach runs the encoder forward only (a third of it).
Small fine-tuning batches use a large slice poorly, so its figure at the same ``mfu`` is
a lower bound. Cost: chip-hours times ``chip_hour_usd`` (0: not priced).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

from bert_jax.ablations import cells, grid
from bert_jax.ablations.spec import AblationTable
from bert_jax.model.flops import model_flops_per_step
from bert_jax.pretraining import plan
from bert_jax.storage import atomic_files
from bert_jax.training import hardware

# Windows per question (QA tasks' ``max_train_examples`` counts questions), where known.
QA_WINDOWS_PER_QUESTION = {"disfl_qa": 2.89, "cpkc": 2.18}
# Training rows (examples; SQuAD: windows of 384 pieces every 128) of the paper's tasks.
TRAIN_ROWS = {
    "mnli": 392_702,
    "qnli": 104_743,
    "mrpc": 3_668,
    "sst2": 67_349,
    "cola": 8_551,
    "rte": 2_490,
    "qqp": 363_846,
    "stsb": 5_749,
    "squad1.1": 88_641,
    "squad2.0": 131_944,
    "conll2003": 14_041,
    "swag": 73_546,
    "bbc": 1_771,
    # The offline downstream suite's train splits (docs/downstream_tasks.md); QA: windows of
    # 128 pieces every 64 (configs/downstream.py) with the demo's vocabulary: disfl_qa's
    # 6,464 questions give 18,681 (counted), cpkc's 14,069 about 30,700 (4,000 gave 8,722).
    "disfl_qa": 18_681,
    "cpkc": 30_680,
    "dialog_pairs": 40_105,
    "vitaminc": 44_234,
    "rotten_tomatoes": 9_918,
}


def _hours(seconds: float) -> float:
    return seconds / 3600.0


def run_epochs(table: AblationTable, row: str, column: str) -> list[int]:
    """The epoch count of each run a cell makes: its seeds, or for a grid cell every
    point's grid seeds and the chosen point's other seeds (counted at the grid's most
    epochs); [] for cells that train nothing."""
    plan = cells.cell_plan(table, row, column)
    if plan["approach"] in ("lm_ppl", "n/a"):
        return []
    seeds, epochs = table.finetune_seeds, plan["config"].num_epochs
    if "grid" not in plan:
        return [epochs] * seeds
    points = grid.points(table.columns[column])
    counts = [int(p.get("num_epochs", epochs)) for p in points]
    grid_seeds = table.grid_seeds
    return [n for n in counts for _ in range(grid_seeds)] + [max(counts)] * (seeds - grid_seeds)


def finetune_flops(table: AblationTable, row: str, column: str) -> float:
    """FLOPs of one epoch of one seed of one cell (0 for ``lm_ppl`` and cells that do not
    apply); `run_epochs` says how many epochs a cell runs in all."""
    plan = cells.cell_plan(table, row, column)
    if plan["approach"] in ("lm_ppl", "n/a"):
        return 0.0
    config = plan["config"]
    task = config.task.split("+")[0]
    rows = TRAIN_ROWS.get(task)
    if rows is None:
        raise ValueError(f"column {column}: no training-set size known for task {task!r}")
    if config.max_train_examples:
        rows = min(rows, round(config.max_train_examples * QA_WINDOWS_PER_QUESTION.get(task, 1)))
    model = table.pretraining[plan["model_from"]].model
    if plan["approach"] == "features":
        batch, share = table.feature_bilstm.global_batch_size, 1 / 3
    else:
        batch, share = config.global_batch_size, 1.0
    steps = math.ceil(rows / batch)
    return steps * share * model_flops_per_step(model, batch, config.max_seq_length, 0, nsp=False)


def cell_flops(table: AblationTable, row: str, column: str) -> float:
    """FLOPs of every run of one cell (see `run_epochs`)."""
    plan = cells.cell_plan(table, row, column)
    if plan["approach"] == "features":
        epochs = [table.feature_bilstm.num_epochs] * table.finetune_seeds
    else:
        epochs = run_epochs(table, row, column)
    return finetune_flops(table, row, column) * sum(epochs)


def estimate(
    table: AblationTable,
    topology: str,
    mfu: float = 0.45,
    chip_hour_usd: float = 0.0,
    rows: list[str] | None = None,
    columns: list[str] | None = None,
    compile: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The plan of the chosen rows and columns (all by default) on `topology`; with
    `compile`, `progress` (if given) gets `plan.plan`'s lines, each naming its row."""
    topo = hardware.parse_topology(topology)
    chips, peak = topo.num_chips, topo.generation.peak_bf16_flops
    sustained = chips * peak * mfu
    names = rows or list(table.row_order)
    cols = columns or list(table.column_order)
    sources = list(dict.fromkeys(table.row_settings[r].model_from for r in names))
    pretraining = []
    for source in sources:
        flops = cells.pretraining_flops(table.pretraining[source])  # at the planned vocabulary size
        entry = {"row": source, "flops": flops, "seconds": flops / sustained}
        if compile:
            say = None if progress is None else lambda line, row=source: progress(f"{row}: {line.strip()}")
            report = plan.plan(table.pretraining[source], topology, mfu_assumed=mfu, progress=say)
            entry.update(seconds=report.est_total_time_s, hbm_per_chip_bytes=report.hbm_per_chip_bytes,
                         fits=report.fits)  # fmt: skip
        pretraining.append(entry)
    stages = len(table.steps) or 1  # Figure 5 fine-tunes from each stage
    seeds = table.finetune_seeds
    finetuning = []
    for row in names:
        for column in cols:
            flops = cell_flops(table, row, column) * stages
            finetuning.append({"row": row, "column": column, "flops": flops, "seconds": flops / sustained})
    seconds = sum(e["seconds"] for e in pretraining) + sum(e["seconds"] for e in finetuning)
    chip_hours = _hours(seconds) * chips
    return {
        "table": table.table,
        "preset": table.preset,
        "topology": topo.name,
        "chips": chips,
        "peak_flops_per_chip": peak,
        "mfu": mfu,
        "finetune_seeds": seeds,
        "pretraining": pretraining,
        "finetuning": finetuning,
        "total_hours": _hours(seconds),
        "chip_hours": chip_hours,
        "chip_hour_usd": chip_hour_usd,
        "cost_usd": chip_hours * chip_hour_usd if chip_hour_usd else None,
        "method": "compiled pre-training steps" if compile else "FLOPs at the assumed utilisation",
    }


def markdown(p: dict[str, Any]) -> str:
    lines = [
        f"# Plan: {p['table']} ({p['preset']}) on {p['topology']} ({p['chips']} chips, "
        f"{p['mfu']:.0%} of {p['peak_flops_per_chip']:.3g} FLOP/s each; {p['method']})",
        "",
        "| pre-training row | FLOPs | hours |",
        "|---|---:|---:|",
    ]
    lines += [f"| {e['row']} | {e['flops']:.3g} | {_hours(e['seconds']):.2f} |" for e in p["pretraining"]]
    lines += ["", f"| fine-tuning cell ({p['finetune_seeds']} seeds) | FLOPs | hours |", "|---|---:|---:|"]
    lines += [
        f"| {e['row']} / {e['column']} | {e['flops']:.3g} | {_hours(e['seconds']):.2f} |"
        for e in p["finetuning"]
        if e["flops"]
    ]
    cost = f", ${p['cost_usd']:,.0f} at ${p['chip_hour_usd']}/chip-hour" if p["cost_usd"] is not None else ""
    lines += ["", f"Total: {p['total_hours']:.1f} h on the slice, {p['chip_hours']:,.0f} chip-hours{cost}."]
    return "\n".join(lines) + "\n"


def write(p: dict[str, Any], workdir: str) -> str:
    text = markdown(p)
    atomic_files.write_json(os.path.join(workdir, "plan.json"), p, indent=2)
    atomic_files.write_text(os.path.join(workdir, "plan.md"), text)
    return text
