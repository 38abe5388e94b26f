"""Fine-tuning against pre-training, per token, for one model shape, measured in one run.

The offline downstream suite's fine-tuning is most of an ablation table's time at the
`cpu` scale, so its step should compute as many tokens per second as the pre-training
step of the same model. Both contenders take the model of an ablation row at
``--preset`` (default `cpu`: L2 H128, the demo's modern recipe, an 8,192-piece
vocabulary) and run in their own subprocess, taking turns for ``--rounds`` rounds (the
best round of each counts, so a neighbour's load does not decide the ratio):

- pre-training: `pretrain.Pretraining`'s train step on the row's config (batch 32 x
  128, MLM + NSP; synthetic masked rows: every position is a real token);
- fine-tuning: the ablation cell's task config (`configs/ablations.py`, the column
  ``--task``, its batch and length at the preset), `finetune.load_inputs` from
  ``--checkpoint`` (a checkpoint of that shape: the demo's by default), then
  `Finetuning.batches` (packed or bucketed, as the run does) into `engine.train_step`
  for ``--steps`` steps after one warm-up step per distinct shape (compiles, reported
  apart, with the number of programs an epoch compiles); then `Finetuning.predict`
  on the dev split (evaluation as the run does it, packed rows for a packed task, and
  beside it the rows one a row, batched by length and cut to the length buckets; padding
  is of the positions computed), and the host's batch preparation alone.

Tokens/s counts real (non-padding) tokens; "padded" counts every position computed.

    .venv/bin/python bench/finetune_vs_pretrain.py [--task rotten_tomatoes] [--steps 60] [--rounds 2]

Prints a line per round and a table, then ``ratio_finetune_vs_pretrain=<x>`` (fine-tuning
training tokens/s over pre-training tokens/s) as its last line.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bert_jax.commands import run_settings

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(ROOT))


def _table(preset: str, task: str):
    from configs import ablations

    return ablations.get_config(f"table5.{preset}+{task}")


def pretrain_worker(preset: str, task: str, steps: int) -> dict:
    """Pre-training steps of the table's first row (BERT: MLM + NSP) on synthetic rows."""
    import jax

    from bench import peers
    from bert_jax.pretraining import pretrain
    from bert_jax.training import sharding

    c = _table(preset, task).rows.bert_base
    batch, seq, preds = int(c.global_batch_size), int(c.max_seq_length), int(c.max_predictions_per_seq)
    mesh = sharding.make_mesh((1, 1, 1), jax.devices()[:1])
    setup = pretrain.Pretraining(run_settings.pretrain_settings(c), mesh)
    data = peers.random_batch(setup.model_config, batch, seq, preds)
    with jax.set_mesh(mesh):
        state = setup.engine.init_state(0)
        placed = setup.global_batch(data)
        start = time.perf_counter()
        state, metrics = setup.train_step(state, placed)
        jax.block_until_ready(metrics)
        warmup = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(steps):
            state, metrics = setup.train_step(state, placed)
        jax.block_until_ready((state, metrics))
        seconds = time.perf_counter() - start
    return {
        "tokens_per_sec": batch * seq * steps / seconds,
        "ms_per_step": 1000 * seconds / steps,
        "warmup_seconds": warmup,
        "shape": [batch, seq],
    }


def _finetuning(preset: str, task: str, checkpoint: str):
    from bert_jax.ablations import cells
    from bert_jax.finetuning import finetune
    from bert_jax.training import resolver

    table = run_settings.ablation_table(_table(preset, task))
    cell = cells.cell_plan(table, "bert_base", task)["config"]  # the cell's typed settings
    settings = resolver.updated(cell, {"init_checkpoint": checkpoint})
    start = time.perf_counter()
    inputs = finetune.load_inputs(settings)
    load = time.perf_counter() - start
    total = finetune.steps_per_epoch(settings, inputs) * settings.num_epochs
    return settings, finetune.Finetuning(settings, inputs, total_steps=total), load


def _evaluation(ft, params, split, batch_size: int) -> dict:
    """`Finetuning.predict` of `split` timed once compiled: examples/s, real tokens/s and
    the share of the positions computed that are padding."""
    ft.predict(params, split, batch_size)  # compiles
    computed, eval_step = [], ft.engine.eval_step
    ft.engine.__dict__["eval_step"] = lambda p, b: computed.append(b["input_ids"].size) or eval_step(p, b)
    start = time.perf_counter()
    ft.predict(params, split, batch_size)
    seconds = time.perf_counter() - start
    del ft.engine.__dict__["eval_step"]
    real = int((split.arrays["input_mask"] > 0).sum())
    return {
        "eval_examples_per_sec": len(split) / seconds,
        "eval_tokens_per_sec": real / seconds,
        "eval_padding": 1 - real / sum(computed),
    }


def finetune_worker(preset: str, task: str, steps: int, checkpoint: str) -> dict:
    """Fine-tuning steps, then the dev split's evaluation and the host's batches alone."""
    import jax

    config, ft, load = _finetuning(preset, task, checkpoint)
    epoch = [ft.rows(s) for s in range(ft.steps_per_epoch)]
    shapes = [tuple(r["input_ids"].shape) for r in epoch]
    mask = lambda r: r["input_mask"] > 0
    state = ft.engine.init_state(int(config.seed), ft.inputs.params)
    start = time.perf_counter()
    for s in dict.fromkeys(shapes[:steps]).keys():  # one program per distinct shape
        state, metrics = ft.engine.train_step(
            state, ft.engine.place(epoch[shapes.index(s)], process_local=False)
        )
        jax.block_until_ready(metrics)
    warm = len(dict.fromkeys(shapes[:steps]))
    warmup = time.perf_counter() - start
    start = time.perf_counter()
    for batch in itertools.islice(ft.batches(0), steps):
        state, metrics = ft.engine.train_step(state, batch)
    jax.block_until_ready((state, metrics))
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    for s in range(steps):
        jax.block_until_ready(ft.engine.place(ft.rows(s), process_local=False))
    host = time.perf_counter() - start
    dev = ft.inputs.evals[0]
    evaluation = _evaluation(ft, state.params, dev, config.eval_batch)
    packed, ft.packed = ft.packed, False  # the rows one a row, batched by length: the peer
    bucketed = _evaluation(ft, state.params, dev, config.eval_batch)
    ft.packed = packed
    examples = sum(
        int(r["label_weights"].sum()) if "label_weights" in r else len(r["input_ids"]) for r in epoch[:steps]
    )
    return {
        "tokens_per_sec": sum(int(mask(r).sum()) for r in epoch[:steps]) / seconds,
        "padded_tokens_per_sec": sum(int(np.prod(s)) for s in shapes[:steps]) / seconds,
        "examples_per_sec": examples / seconds,
        "ms_per_step": 1000 * seconds / steps,
        "host_ms_per_step": 1000 * host / steps,
        "warmup_seconds": warmup,
        "programs_timed": warm,
        "programs_per_epoch": len(set(shapes)),
        "steps_per_epoch": ft.steps_per_epoch,
        "packed": ft.packed,
        "load_seconds": load,
        **evaluation,
        **{f"bucketed_{k}": v for k, v in bucketed.items()},
        "eval_rows": len(dev),
        "eval_splits": len(ft.inputs.evals),
        "train_rows": len(ft.inputs.train),
        "global_batch_size": ft.batch_size,
        "max_seq_length": int(config.max_seq_length),
        "mean_row_tokens": float(np.mean([(ft.inputs.train.arrays["input_mask"] > 0).sum(-1)])),
    }


def _subprocess(args: list[str]) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, env=env, cwd=ROOT
    )
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not line:
        raise RuntimeError(f"{args[:2]} failed:\n{proc.stderr[-3000:]}")
    return json.loads(line[0][7:])


def _epoch_estimate(f: dict) -> str:
    """One epoch as `finetune` runs it: compiles, training steps, every eval split."""
    train = f["steps_per_epoch"] * f["ms_per_step"] / 1000
    evals = f["eval_splits"] * f["eval_rows"] / f["eval_examples_per_sec"]  # the dev split's rate
    compile_s = f["warmup_seconds"] / max(f["programs_timed"], 1) * f["programs_per_epoch"]
    return (
        f"one epoch ~{train + evals + compile_s:.0f} s: training {train:.0f} s, compiling "
        f"{f['programs_per_epoch']} programs ~{compile_s:.0f} s (first epoch only), "
        f"{f['eval_splits']} eval splits ~{evals:.0f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="rotten_tomatoes")
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--checkpoint", default=str(ROOT / "runs" / "demo"))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    common = [args.preset, args.task, args.steps]
    if args.worker == "pretrain":
        print("RESULT " + json.dumps(pretrain_worker(*common)), flush=True)
        return
    if args.worker == "finetune":
        print("RESULT " + json.dumps(finetune_worker(*common, args.checkpoint)), flush=True)
        return
    if not os.path.exists(os.path.join(args.checkpoint, "bert_config.json")):
        raise SystemExit(f"{args.checkpoint}: no checkpoint there; give --checkpoint (the demo's: runs/demo)")
    from bench.pretrain_throughput import cpu_description, measure_peak

    print(f"cpu: {cpu_description()}; load {os.getloadavg()[0]:.1f}", flush=True)
    flags = ["--task", args.task, "--preset", args.preset, "--steps", str(args.steps)]
    best: dict[str, dict] = {}
    for i in range(args.rounds):
        line = []
        for name in ("pretrain", "finetune"):
            peak = measure_peak()
            extra = ["--checkpoint", args.checkpoint] if name == "finetune" else []
            r = _subprocess(["--worker", name, *flags, *extra])
            line.append(f"{name} {r['tokens_per_sec']:,.0f} tokens/s (peak {peak / 1e9:.0f} GFLOP/s)")
            if r["tokens_per_sec"] > best.get(name, {}).get("tokens_per_sec", 0.0):
                best[name] = r
        print(f"round {i + 1}: {', '.join(line)}", flush=True)
    p, f = best["pretrain"], best["finetune"]
    print(
        f"\npre-training: batch {p['shape'][0]} x {p['shape'][1]}: {p['tokens_per_sec']:,.0f} tokens/s, "
        f"{p['ms_per_step']:.0f} ms/step (compile {p['warmup_seconds']:.1f} s)"
    )
    how = "packed rows" if f["packed"] else "length buckets"
    print(
        f"fine-tuning {args.task} ({f['train_rows']:,} rows, {f['mean_row_tokens']:.1f} tokens each; batch "
        f"{f['global_batch_size']}, max_seq_length {f['max_seq_length']}, {how}):\n"
        f"  training {f['examples_per_sec']:,.0f} examples/s, {f['tokens_per_sec']:,.0f} tokens/s "
        f"({f['padded_tokens_per_sec']:,.0f} padded), {f['ms_per_step']:.0f} ms/step, host "
        f"{f['host_ms_per_step']:.1f} ms/step\n"
        f"  compiles: {f['programs_per_epoch']} programs an epoch, {f['warmup_seconds']:.1f} s for the "
        f"{f['programs_timed']} of the timed steps\n"
        f"  evaluation ({how}): {f['eval_examples_per_sec']:,.0f} examples/s, "
        f"{f['eval_tokens_per_sec']:,.0f} real tokens/s ({f['eval_padding']:.0%} padding); "
        f"rows batched by length and cut to the buckets: "
        f"{f['bucketed_eval_examples_per_sec']:,.0f} examples/s ({f['bucketed_eval_padding']:.0%} padding), "
        f"{f['eval_examples_per_sec'] / f['bucketed_eval_examples_per_sec']:.2f}x\n"
        f"  {_epoch_estimate(f)}; loading (tokenizing) {f['load_seconds']:.0f} s"
    )
    print(f"\nratio_finetune_vs_pretrain={f['tokens_per_sec'] / p['tokens_per_sec']:.2f}")


if __name__ == "__main__":
    main()
