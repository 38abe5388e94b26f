"""The ablation runner: pre-train every row of a table, fine-tune each, write the report.

A table config (`configs/ablations.py`) holds one complete pre-training config per row.
Each row pre-trains in ``WORKDIR/<row>/`` (a rerun resumes it, or only re-evaluates a
finished one), then, given a fine-tuning config, fine-tunes from that checkpoint in
``WORKDIR/<row>/finetune/`` (skipped when its ``results.json`` exists). The report
(``WORKDIR/report.md`` and ``report.json``) has one line per row: held-out MLM (or, for
LTR, next-token) accuracy and loss, NSP accuracy where NSP is trained, and the fine-tuning
dev score — the columns of the paper's Tables 5, 6 and 8.
"""

from __future__ import annotations

import json
import os
from typing import Any

import ml_collections


def set_keys(config: ml_collections.ConfigDict, changes: dict[str, Any]) -> ml_collections.ConfigDict:
    """Sets dotted keys (``data.nsp``); a key the config does not have is an error naming it."""
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = config
        for p in parents:
            if p not in node:
                raise KeyError(f"{dotted!r}: the pre-training config has no {p!r}")
            node = node[p]
        if leaf not in node:
            raise KeyError(f"{dotted!r}: the pre-training config has no such key")
        node[leaf] = value
    return config


def run_table(
    table: ml_collections.ConfigDict,
    workdir: str,
    finetune_config: ml_collections.ConfigDict | None = None,
    rows: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Runs the rows (all, or the named ones, in table order); returns the report rows."""
    from bert_jax import finetune, train, trainer

    workdir = os.path.abspath(workdir)
    names = list(table.get("row_order") or table.rows.keys())
    if rows:
        unknown = sorted(set(rows) - set(names))
        if unknown:
            raise ValueError(f"{table.table} has no row(s) {unknown}; rows: {', '.join(names)}")
        names = [n for n in names if n in rows]
    report = []
    for name in names:
        config = table.rows[name]
        row_dir = os.path.join(workdir, name)
        print(f"== {table.table} / {name}: pre-training in {row_dir}", flush=True)
        final = trainer.train_and_evaluate(config, row_dir)
        entry: dict[str, Any] = {
            "row": name,
            "objective": config.data.get("objective", "mlm"),
            "nsp": bool(config.data.nsp),
            "layers": int(config.model.num_hidden_layers),
            "hidden": int(config.model.hidden_size),
            "heads": int(config.model.num_attention_heads),
            "mask/same/rnd": _masking(config),
            "steps": int(config.num_train_steps),
            "lm_accuracy": float(final["mlm_accuracy"]),
            "lm_loss": float(final["mlm_loss"]),
            "nsp_accuracy": float(final["nsp_accuracy"]) if train.uses_nsp(config) else None,
            "workdir": row_dir,
        }
        if finetune_config is not None:
            entry.update(_finetune(finetune, finetune_config, row_dir))
        report.append(entry)
    write_report(table.table, report, workdir)
    return report


def _masking(config: ml_collections.ConfigDict) -> str:
    m, r = float(config.data.mask_token_prob), float(config.data.random_token_prob)
    return f"{round(100 * m)}/{round(100 * (1 - m - r))}/{round(100 * r)}"


def _finetune(finetune: Any, base: ml_collections.ConfigDict, row_dir: str) -> dict[str, Any]:
    out_dir = os.path.join(row_dir, "finetune")
    done = os.path.join(out_dir, "results.json")
    if not os.path.exists(done):
        config = ml_collections.ConfigDict(base.to_dict())
        config.init_checkpoint = row_dir
        finetune.finetune(config, out_dir)
    with open(done) as f:
        results = json.load(f)
    metric = results["main_metric"]
    return {"task": results["task"], "dev_metric": metric, "dev_score": float(results["best"][metric])}


def write_report(table: str, report: list[dict[str, Any]], workdir: str) -> str:
    """``report.json`` and a markdown table ``report.md``; returns the markdown."""
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "report.json"), "w") as f:
        json.dump({"table": table, "rows": report}, f, indent=2)
    has_ft = any("dev_score" in r for r in report)
    head = (
        "| row | objective | NSP | L | H | A | mask/same/rnd | steps | held-out LM acc | LM loss | NSP acc |"
    )
    rule = "|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|"
    if has_ft:
        task = next(r for r in report if "dev_score" in r)
        head += f" {task['task']} dev {task['dev_metric']} |"
        rule += "---:|"
    lines = [f"# Ablation {table}", "", head, rule]
    for r in report:
        nsp_acc = "—" if r["nsp_accuracy"] is None else f"{r['nsp_accuracy']:.4f}"
        line = (
            f"| {r['row']} | {r['objective']} | {'yes' if r['nsp'] else 'no'} | {r['layers']} | "
            f"{r['hidden']} | {r['heads']} | {r['mask/same/rnd']} | {r['steps']} | "
            f"{r['lm_accuracy']:.4f} | {r['lm_loss']:.4f} | {nsp_acc} |"
        )
        if has_ft:
            line += f" {r['dev_score']:.4f} |" if "dev_score" in r else " — |"
        lines.append(line)
    text = "\n".join(lines) + "\n"
    with open(os.path.join(workdir, "report.md"), "w") as f:
        f.write(text)
    return text
