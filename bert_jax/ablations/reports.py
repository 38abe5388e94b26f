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
in the last line; then each row's difference from the first row per column, marked where
it is larger than the spread (the two rows' standard deviations summed); the
hyper-parameters chosen on dev where a column has a grid (``selection`` of each row); the
pre-training details of each row; and the notes (columns not run, what an offline
column stands in for and how it is scored, the baseline row).
"""

from __future__ import annotations

import math
import os
from typing import Any

from bert_jax.ablations import cells
from bert_jax.ablations.spec import AblationTable
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


def differences(report: dict[str, Any]) -> list[str]:
    """Each row's mean minus the first row's, per column, with "> spread" where the
    difference is larger than the two rows' standard deviations summed (a difference
    inside it cannot be told from the restarts' own scatter)."""
    rows, cols = report["rows"], report["columns"]
    if len(rows) < 2:
        return []
    first = rows[0]
    cols = [c for c in cols if first["ours"][c] is not None and first["std"][c] is not None]
    if not cols:
        return []
    lines = [
        "",
        f"## Differences from {first['row']} (ours; * marks a difference larger than the spread, std + std)",
        "",
        "| row | " + " | ".join(report["labels"][c] for c in cols) + " |",
        "|---|" + "---:|" * len(cols),
    ]
    for r in rows[1:]:
        cells = []
        for c in cols:
            if r["ours"][c] is None or r["std"][c] is None:
                cells.append("—")
                continue
            delta, spread = r["ours"][c] - first["ours"][c], r["std"][c] + first["std"][c]
            cells.append(f"{delta:+.2f}{' *' if abs(delta) > spread else ''} (spread {spread:.2f})")
        lines.append(f"| {r['row']} | " + " | ".join(cells) + " |")
    return lines


def selections(report: dict[str, Any]) -> list[str]:
    """The grid points chosen on dev, per row and column, with each point's mean dev figure."""
    lines = []
    for r in report["rows"]:
        for c, sel in (r.get("selection") or {}).items():
            if not any(p["dev"] for p in sel["points"].values()):
                continue
            means = ", ".join(
                f"{name} {sel['scale'] * sum(p['dev']) / len(p['dev']):.2f}" if p["dev"] else f"{name} —"
                for name, p in sel["points"].items()
            )
            chosen = sel["chosen"] or "not yet chosen"
            lines.append(f"| {r['row']} | {report['labels'][c]} | {chosen} | {means} |")
    if not lines:
        return []
    head = [
        "",
        "## Hyper-parameters chosen on dev",
        "",
        "| row | column | chosen | mean dev figure per point (its grid seeds) |",
        "|---|---|---|---|",
    ]
    return head + lines


def column_notes(table: AblationTable, rows: list[str], cols: list[str]) -> list[str]:
    """What the report's notes say of its rows and columns."""
    notes, reasons, labels = [], {}, {c: table.columns[c].label for c in cols}
    for c in cols:
        if table.columns[c].skip:
            reasons.setdefault(table.columns[c].skip, []).append(labels[c])
    notes += [f"Not run ({why}): {', '.join(names)}." for why, names in reasons.items()]
    for c in cols:
        col = table.columns[c]
        grid = dict(col.grid)
        if not grid:
            continue
        stands = table.columns[col.stands_for].label if col.stands_for in table.columns else ""
        grid_text = ", ".join(f"{k} {' / '.join(f'{x:g}' for x in v)}" for k, v in grid.items())
        notes.append(
            f"{labels[c]}: `{col.report_metric}` at the grid point with the best mean dev "
            f"`{col.metric}` ({grid_text}; the epoch also chosen on dev within each run; "
            f"{table.grid_seeds} seed(s) per point, then {table.finetune_seeds} at the chosen one)"
            + (f"; the paper's figure beside it is its {stands}." if stands else ".")
        )
    for row in rows:
        s = table.row_settings[row]
        if s.random_init:
            why = {cells.cell_plan(table, row, c).get("reason") for c in cols if not table.columns[c].skip}
            why.discard(None)
            how = (
                f"the feature-based approach on layers {s.layers} ({s.combine}) of"
                if s.approach == "features"
                else "fine-tuned from"
            )
            notes.append(
                f"{row}: the {s.model_from} row's model shape and vocabulary, {how} freshly "
                "initialised weights (no pre-training): the baseline a pre-trained row has to beat"
                + (f" (cells not run: {'; '.join(sorted(why))})." if why else ".")
            )
    notes.append("ours: mean ± sample standard deviation over the restarts (their number in brackets).")
    return notes


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
    lines += differences(report) + selections(report)
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
