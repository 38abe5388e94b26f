"""The report of an ablation table: ours beside the paper's for every cell, and per column
the rank agreement (Kendall's tau-b) of our row order with the paper's.

``report.json``::

    {"table", "title", "units", "columns": [...], "labels": {col: label},
     "rows": [{"row", "ours": {col: mean|null}, "paper": {col: value|null},
               "seeds": {col: [each restart's figure]}, "std": {col: std|null},
               "config": {...}, "pretraining": {...}}],
     "rank_agreement": {col: tau|null}}

Figures are in the paper's units: accuracy and F1 in percent, perplexity as it is.
``report.md`` is the same as a table, "ours ± std (restarts) | paper" per column, the tau
in the last line, then the pre-training details of each row.
"""

from __future__ import annotations

import math
import os
from typing import Any

from bert_jax.storage import atomic_files


def kendall_tau(xs: list[float], ys: list[float]) -> float | None:
    """Kendall's tau-b (ties in either list counted as such); None with fewer than 2
    pairs or when one list is all ties (the rank order is then undefined)."""
    if len(xs) != len(ys):
        raise ValueError(f"{len(xs)} values against {len(ys)}")
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(xs)):
        for j in range(i + 1, len(xs)):
            dx, dy = xs[i] - xs[j], ys[i] - ys[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    n0 = concordant + discordant
    denominator = math.sqrt((n0 + ties_x) * (n0 + ties_y))
    if len(xs) < 2 or denominator == 0:
        return None
    return (concordant - discordant) / denominator


def mean_std(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (None for one value)."""
    if not values:
        return None, None
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def build(
    table: str,
    title: str,
    columns: list[str],
    labels: dict[str, str],
    rows: list[dict[str, Any]],
) -> dict[str, Any]:
    """`rows`: each ``{"row", "seeds": {col: [...]}, "paper": {col: v}}`` plus any other
    keys (kept); adds ``ours`` (the mean) and ``std``, and the per-column tau."""
    out_rows = []
    for r in rows:
        seeds = {c: list(r.get("seeds", {}).get(c, [])) for c in columns}
        stats = {c: mean_std(seeds[c]) for c in columns}
        entry = {
            "row": r["row"],
            "ours": {c: stats[c][0] for c in columns},
            "paper": {c: r.get("paper", {}).get(c) for c in columns},
            "seeds": seeds,
            "std": {c: stats[c][1] for c in columns},
        }
        entry.update({k: v for k, v in r.items() if k not in entry})
        out_rows.append(entry)
    agreement = {}
    for c in columns:
        both = [(r["ours"][c], r["paper"][c]) for r in out_rows if None not in (r["ours"][c], r["paper"][c])]
        agreement[c] = kendall_tau([a for a, _ in both], [b for _, b in both]) if len(both) >= 2 else None
    return {
        "table": table,
        "title": title,
        "units": "accuracy and F1 in percent, perplexity as it is; ours: the mean over restarts",
        "columns": list(columns),
        "labels": dict(labels),
        "rows": out_rows,
        "rank_agreement": agreement,
    }


def _cell(value: float | None, std: float | None, n: int) -> str:
    if value is None:
        return "—"
    text = f"{value:.2f}"
    if std is not None:
        text += f" ± {std:.2f}"
    return text + (f" ({n})" if n > 1 else "")


def markdown(report: dict[str, Any]) -> str:
    cols = report["columns"]
    head = "| row | " + " | ".join(f"{report['labels'][c]} ours | paper" for c in cols) + " |"
    rule = "|---|" + "---:|---:|" * len(cols)
    lines = [f"# {report['title']}", "", f"`{report['table']}`; {report['units']}.", "", head, rule]
    for r in report["rows"]:
        cells = []
        for c in cols:
            paper = r["paper"][c]
            cells.append(_cell(r["ours"][c], r["std"][c], len(r["seeds"][c])))
            cells.append(
                "—" if paper is None else f"{paper:.2f}" if round(paper, 1) != paper else f"{paper:.1f}"
            )
        lines.append(f"| {r['row']} | " + " | ".join(cells) + " |")
    cells = []
    for c in cols:
        tau = report["rank_agreement"][c]
        cells += ["—" if tau is None else f"{tau:+.2f}", ""]
    lines.append("| Kendall's τ (ours vs paper) | " + " | ".join(cells) + " |")
    details = [r for r in report["rows"] if r.get("pretraining")]
    if details:
        lines += [
            "",
            "## Pre-training",
            "",
            "| row | model from | objective | NSP | L | H | A | mask/same/rnd | steps "
            "| held-out LM acc | on changed tokens | LM loss | NSP acc | train FLOPs |",
            "|---|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in details:
            p = r["pretraining"]
            fmt = lambda k, p=p: "—" if p.get(k) is None else f"{p[k]:.4f}"
            lines.append(
                f"| {r['row']} | {p['model_from']} | {p['objective']} | {'yes' if p['nsp'] else 'no'} | "
                f"{p['layers']} | {p['hidden']} | {p['heads']} | {p['mask/same/rnd']} | {p['steps']} | "
                f"{fmt('lm_accuracy')} | {fmt('lm_accuracy_changed')} | {fmt('lm_loss')} | "
                f"{fmt('nsp_accuracy')} | "
                f"{p.get('pretraining_flops', 0):.2e} |"
            )
        recipes = sorted({r["pretraining"].get("recipe", "") for r in details} - {""})
        if recipes:
            lines += ["", "Pre-training recipe (each row adds its own change): " + " | ".join(recipes)]
        lines += [
            "",
            "Held-out LM accuracy over every masked position, and over the changed ones only "
            "(shown as [MASK] or a random token; a kept original can be copied, so only this "
            "figure compares rows with different masking mixes).",
            "",
            "Pre-training time on a slice: train FLOPs / (chips x peak FLOP/s x utilisation); "
            "`bert-jax plan --config=configs/ablations.py:TABLE.PRESET/ROW --topology=...` compiles "
            "one row's step for a TPU slice and estimates its time and memory.",
        ]
    notes = report.get("notes")
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def write(report: dict[str, Any], workdir: str) -> str:
    """``report.json`` and ``report.md`` in `workdir`; returns the markdown."""
    text = markdown(report)
    atomic_files.write_json(os.path.join(workdir, "report.json"), report, indent=2)
    atomic_files.write_text(os.path.join(workdir, "report.md"), text)
    return text
