"""Figure 5 (Appendix C.1): MNLI-m dev accuracy against pre-training steps, MLM and LTR.

Each row pre-trains in stages (``stop_after_step`` at each of the table's ``steps``),
its checkpoint at every stage fine-tuned like any cell of `ablations`; the report has one
row per (model, steps) and, for every column with figures, its plot against steps
(``figure5_<column>.png`` with matplotlib, else ``.svg``).
"""

from __future__ import annotations

import functools
import os
from typing import Any

from bert_jax.ablations import progress, reports
from bert_jax.ablations.cells import cell_done, cell_values, fill_cell, row_config
from bert_jax.ablations.spec import AblationTable
from bert_jax.pretraining import pretrain
from bert_jax.storage import atomic_files
from bert_jax.training import resolver


def latest_checkpoint_step(row_dir: str) -> int | None:
    folder = os.path.join(row_dir, "checkpoints")
    steps = [int(n) for n in os.listdir(folder) if n.isdigit()] if os.path.isdir(folder) else []
    return max(steps) if steps else None


def work(table: AblationTable, workdir: str, names: list[str], cols: list[str]) -> progress.Work:
    """The figure's jobs, from disk: a pre-training stage per (row, steps), its cells' runs."""
    stages = runs = runs_done = 0
    for row in names:
        latest = latest_checkpoint_step(os.path.join(workdir, row))
        for k in table.steps:
            stage_dir = os.path.join(workdir, row, f"step{k}")
            trained = latest is not None and latest >= k
            stages += trained or all(cell_done(table, row, c, os.path.join(stage_dir, c)) for c in cols)
            for c in cols:
                f, t = progress.cell_runs(table, row, c, os.path.join(stage_dir, c))
                runs_done, runs = runs_done + f, runs + t
    return progress.Work(stages, len(names) * len(table.steps), runs_done, runs)


def run(
    table: AblationTable, workdir: str, names: list[str], cols: list[str], dry_run: bool
) -> dict[str, Any]:
    steps = list(table.steps)

    def report() -> dict[str, Any]:
        out_rows = []
        for row in names:
            for k in steps:
                cells = os.path.join(workdir, row, f"step{k}")
                out_rows.append(
                    {
                        "row": f"{row}@{k}",
                        "objective": table.pretraining[row].data.objective,
                        "step": k,
                        "seeds": {c: cell_values(table, row, c, None, os.path.join(cells, c)) for c in cols},
                        "paper": {},
                        "config": row_config(table, row, cols),
                    }
                )
        labels = {c: table.columns[c].label for c in cols}
        rep = reports.build(table.table, table.title, cols, labels, out_rows)
        rep["notes"] = [
            "The paper publishes Figure 5 as a plot only: MLM overtakes LTR almost at once, "
            "and 1M steps give almost 1.0% more MNLI accuracy than 500k (Appendix C.1).",
        ]
        rep["figures"] = write_figures(rep, workdir)
        rep["notes"] += [f"![{labels[c]} against pre-training steps]({f})" for c, f in rep["figures"].items()]
        reports.write(rep, workdir)
        return rep

    report()
    if dry_run:
        return report()
    count = functools.partial(work, table, workdir, names, cols)
    tracker = progress.TableProgress(table.table, count, pretrainings="pre-training stages")
    job = functools.partial(tracker.job, progress.RUN)
    for row in names:
        settings, row_dir = table.pretraining[row], os.path.join(workdir, row)
        total = table.pretraining[row].num_train_steps  # every step within it (`AblationTable`)
        for k in steps:
            cells = os.path.join(workdir, row, f"step{k}")
            if all(cell_done(table, row, c, os.path.join(cells, c)) for c in cols):
                continue
            latest = latest_checkpoint_step(row_dir)
            if latest is not None and latest > k:
                raise RuntimeError(
                    f"{row_dir} is at step {latest}, past {k}: the model of step {k} is gone; "
                    f"remove {row_dir} to redo it"
                )
            if latest != k:
                staged = resolver.updated(settings, {"stop_after_step": k if k < total else 0})
                with tracker.job(progress.PRETRAINING):
                    print(f"== figure5 / {row}: pre-training to step {k} in {row_dir}", flush=True)
                    pretrain.train_and_evaluate(staged, row_dir)
                if latest_checkpoint_step(row_dir) != k:
                    raise RuntimeError(f"{row_dir}: pre-training did not stop at step {k}")
            for c in cols:
                fill_cell(table, row, c, row_dir, os.path.join(cells, c), os.path.join(workdir, "data"), job)
                report()
    return report()


def write_figures(report: dict[str, Any], workdir: str) -> dict[str, str]:
    """Each column's figures against pre-training steps, one line per objective (columns
    with no figure yet, e.g. those without data here, get no plot); column → file name
    in `workdir`."""
    out = {}
    for col in report["columns"]:
        lines: dict[str, list[tuple[int, float]]] = {}
        for r in report["rows"]:
            if r["ours"][col] is not None:
                lines.setdefault(r["row"].split("@")[0], []).append((r["step"], r["ours"][col]))
        if lines:
            path = _plot(lines, report["labels"][col], os.path.join(workdir, f"figure5_{col}"))
            out[col] = os.path.basename(path)
    return out


def _plot(lines: dict[str, list[tuple[int, float]]], label: str, stem: str) -> str:
    """``stem.png`` with matplotlib, else ``stem.svg``; returns the path."""
    try:
        import matplotlib  # deferred: matplotlib is heavy to import

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # deferred: matplotlib is heavy to import
    except ImportError:
        return _svg(lines, label, f"{stem}.svg")
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name, points in lines.items():
        ax.plot(*zip(*sorted(points), strict=True), marker="o", label=name.upper())
    ax.set_xlabel("pre-training steps")
    ax.set_ylabel(f"{label} (dev)")
    ax.legend()
    fig.tight_layout()
    path = f"{stem}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _svg(lines: dict[str, list[tuple[int, float]]], label: str, path: str) -> str:
    xs = [x for pts in lines.values() for x, _ in pts]
    ys = [y for pts in lines.values() for _, y in pts]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys) if max(ys) > min(ys) else min(ys) + 1
    px = lambda x: 60 + 380 * (x - x0) / (x1 - x0)
    py = lambda y: 260 - 220 * (y - y0) / (y1 - y0)
    colours = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")
    parts = [
        '<svg xmlns="http://www.w3.org/2000/svg" width="480" height="320" font-family="sans-serif" '
        'font-size="11">',
        '<line x1="60" y1="260" x2="440" y2="260" stroke="black"/>',
        '<line x1="60" y1="40" x2="60" y2="260" stroke="black"/>',
        f'<text x="250" y="300" text-anchor="middle">pre-training steps ({x0:g} to {x1:g})</text>',
        f'<text x="15" y="150" transform="rotate(-90 15 150)" text-anchor="middle">{label} (dev)</text>',
        f'<text x="55" y="264" text-anchor="end">{y0:.1f}</text>',
        f'<text x="55" y="44" text-anchor="end">{y1:.1f}</text>',
    ]
    for i, (name, points) in enumerate(lines.items()):
        colour, points = colours[i % len(colours)], sorted(points)
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>' for x, y in points]
        parts.append(
            f'<text x="450" y="{50 + 15 * i}" fill="{colour}" text-anchor="end">{name.upper()}</text>'
        )
    parts.append("</svg>")
    atomic_files.write_text(path, "\n".join(parts) + "\n")
    return path
