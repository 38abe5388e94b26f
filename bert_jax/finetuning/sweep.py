"""The paper's fine-tuning grid (§A.3): batch 16/32 x lr 5e-5/4e-5/3e-5/2e-5 x epochs
2/3/4, several seeds per point, one `finetune.finetune` run each; resumes finished runs.

`bert-jax finetune --sweep` runs it; the ablation runner fine-tunes through the same
`finetune.finetune` entry point. The runs share one persistent compilation cache,
``WORKDIR/compilation_cache`` (`training.compile_cache`; a cache the user set for JAX is
kept): the seeds of a grid point compile the same programs (weights, data and dropout keys
are inputs; the batch size and the schedule are not), so only a point's first seed
compiles them, and a rerun after a stop compiles nothing it compiled before.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from bert_jax.finetuning.finetune import finetune
from bert_jax.finetuning.settings import FinetuneSettings
from bert_jax.tasks.registry import get_task
from bert_jax.training import compile_cache, resolver


def sweep(settings: FinetuneSettings, workdir: str) -> dict[str, Any] | None:
    """The grid of ``config.sweep`` (batch x lr x epochs, several seeds each), one run per
    folder ``bs<B>_lr<LR>_ep<E>_seed<S>``; runs with a ``results.json`` are not repeated.

    Writes ``sweep_runs.tsv`` (one row per run), ``sweep_table.md`` (per grid point: mean,
    std and max over seeds of the best dev score) and ``sweep_best.json`` (the best run).
    Returns the best run, or None when a run stopped early (``stop_after_step``).
    """
    with compile_cache.use("", workdir):
        return _sweep(settings, workdir)


def _sweep(settings: FinetuneSettings, workdir: str) -> dict[str, Any] | None:
    rows = []
    for bs, lr, epochs, seed in settings.sweep.points():
        run = resolver.updated(
            settings,  # one model per grid point would fill the disk: no best model
            {"save_best_model": False, "global_batch_size": bs, "learning_rate": lr, "num_epochs": epochs,
             "seed": seed},
        )  # fmt: skip
        run_dir = os.path.join(workdir, f"bs{bs}_lr{lr:g}_ep{epochs}_seed{seed}")
        done = os.path.join(run_dir, "results.json")
        if os.path.exists(done):
            with open(done) as f:
                results = json.load(f)
            main, best = results["main_metric"], results["best"]
        else:
            result = finetune(run, run_dir)
            if result.stopped:  # stop_after_step: the run resumes when the sweep is rerun
                print(f"{run_dir}: stopped at step {result.step}; rerun the same command to continue")
                return None
            best, main = result.metrics, get_task(settings.task).main_metric
        rows.append({"global_batch_size": bs, "learning_rate": lr, "epochs": epochs, "seed": seed,
                     "score": best[main], "best_epoch": best["epoch"], "dir": run_dir})  # fmt: skip
    return write_sweep_tables(rows, main, workdir)


def write_sweep_tables(rows: list[dict[str, Any]], metric: str, workdir: str) -> dict[str, Any]:
    """The per-run TSV, the per-point markdown table and the best run (see `sweep`)."""
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "sweep_runs.tsv"), "w") as f:
        f.write(f"global_batch_size\tlearning_rate\tepochs\tseed\t{metric}\tbest_epoch\tdir\n")
        for r in rows:
            f.write(
                f"{r['global_batch_size']}\t{r['learning_rate']:g}\t{r['epochs']}\t{r['seed']}\t"
                f"{r['score']:.4f}\t{r['best_epoch']}\t{r['dir']}\n"
            )
    points: dict[tuple[Any, ...], list[float]] = {}
    for r in rows:
        points.setdefault((r["global_batch_size"], r["learning_rate"], r["epochs"]), []).append(r["score"])
    lines = [
        f"| batch | lr | epochs | seeds | mean {metric} | std | max |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (bs, lr, ep), scores in points.items():
        s = np.asarray(scores)
        lines.append(f"| {bs} | {lr:g} | {ep} | {len(s)} | {s.mean():.4f} | {s.std():.4f} | {s.max():.4f} |")
    best = max(rows, key=lambda r: r["score"])
    lines += ["", f"Best dev {metric}: {best['score']:.4f} ({best['dir']}, epoch {best['best_epoch']})"]
    with open(os.path.join(workdir, "sweep_table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(workdir, "sweep_best.json"), "w") as f:
        json.dump({"metric": metric, **best}, f, indent=2)
    return {"metric": metric, **best}
