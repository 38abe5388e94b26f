"""Fine-tuning throughput: bert_jax vs transformers (PyTorch), same machine, same run.

A full fine-tuning step (forward, backward, AdamW update; dropout 0.1, float32) of the
bundled MiniLM BERT (L6 H384) with a fresh 5-way classifier, on real short sentences: the
BBC News training articles split into sentences (title and body; 34,623 sentences, 26.6
tokens on average), each labelled with its article's topic, tokenized with the bundled
bert-base-uncased vocabulary; batch 32, max_seq_length 128 (the paper's GLUE setting).

- bert_jax runs its real fine-tuning path (`configs/bbc.py`): `finetune.load_inputs` for the
  encoder and the fresh head, a train `Split` holding the sentences, and
  `Finetuning.batches` (the batch's sentences packed into rows of 128, `packing.py`; with
  ``--unpacked``, rows cut to the shortest of ``length_buckets`` holding the batch's
  longest; placed on the mesh) into `engine.train_step`, not waiting for each step (as the
  training loop).
- The peer is `transformers`' `BertForSequenceClassification` from the same weights, as
  its `Trainer` trains it: `DataCollatorWithPadding` (each batch padded to its longest
  row), clipping at 1.0, `torch.optim.AdamW` (fused, the Trainer's default), a linear
  schedule; torch's default number of threads.

Both train on the same sequence of batches (`Finetuning.rows` of steps 0..steps-1: the
first epoch's shuffled order: the same rows at every step for both). Before timing, each
runs one step on the first batch of every shape bert_jax will use (bert_jax compiles one
program per shape: packed, per row count; that warm-up is reported separately). Each contender runs in its own
subprocess, the contenders take turns for ``--rounds`` rounds and each one's best round
counts (a neighbour's load on a shared machine does not decide the ratio). The XLA fp32
matmul peak is measured before each contender's run (printed per round: how loaded the
machine was); the best one is the MFU denominator.

    .venv/bin/python bench/finetune_throughput.py [--steps 40] [--rounds 3] [--unpacked] [--buckets 32,64]

Tokens/s counts real (non-pad) tokens; MFU counts the model FLOPs of the padded shapes
each contender computes. Prints a line per round and a table, then ``ratio_finetune=<x>``
(bert_jax sequences/s over the peer's) as its last line.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bert_jax.commands import run_settings

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the matmul peak below: no TPU plugin probing
sys.path.insert(0, str(ROOT))


def _config(buckets: str | None):
    """`configs/bbc.py`'s config; `buckets` given: unpacked rows cut to those lengths
    ("" for the config's own ``length_buckets``, "none" for none)."""
    from configs import bbc

    c = bbc.get_config()
    if buckets is not None:
        c.pack_examples = False
    if buckets and buckets != "none":
        c.length_buckets = tuple(int(b) for b in buckets.split(",") if b.strip())
    return c


def sentences(examples) -> tuple[list[str], list[int]]:
    """Every sentence of the articles (title, then the body's paragraphs split into
    sentences), each with its article's label."""
    from bert_jax.data.corpora import split_sentences

    texts, labels = [], []
    for e in examples:
        for paragraph in [e.text_a, *(e.text_b or "").split("\n")]:
            for s in split_sentences(paragraph):
                texts.append(s)
                labels.append(int(e.label))
    return texts, labels


def step_rows(n: int, seed: int, batch_size: int, steps: int) -> np.ndarray:
    """Row indices of steps 0..steps-1, as `Finetuning.rows` orders them (epoch 0 is a
    permutation by (seed, 1); each batch's rows sorted). The bert_jax worker checks that
    `Finetuning.rows` gives exactly these rows."""
    per_epoch = n // batch_size
    out = []
    for step in range(steps):
        epoch, s = divmod(step, per_epoch)
        order = np.random.default_rng([seed, epoch + 1]).permutation(n)
        out.append(np.sort(order[s * batch_size : (s + 1) * batch_size]))
    return np.stack(out)


def prepare_data(path: str, steps: int, buckets: str | None) -> None:
    """Worker: tokenizes the sentences and writes them, each step's rows and the warm-up
    steps (the first step of each bucket length) to `path` (.npz)."""
    from bert_jax import convert
    from bert_jax.data import tokenization
    from bert_jax.finetuning import batches, finetune, packing
    from bert_jax.model.flops import model_flops_per_step
    from bert_jax.tasks import bbc

    c = _config(buckets)
    texts, labels = sentences(bbc.read(c.data_dir, "train"))
    checkpoint = c.init_checkpoint or finetune.default_checkpoint()
    tok = tokenization.load_tokenizer(
        c.data.vocab_file or tokenization.vocab_beside(checkpoint), c.data.do_lower_case
    )
    arrays = tok.encode_pairs(texts, None, int(c.max_seq_length))
    arrays["labels"] = np.asarray(labels, np.int32)
    rows = step_rows(len(texts), int(c.seed), int(c.global_batch_size), steps)
    mask, batch, max_len = arrays["input_mask"], int(c.global_batch_size), int(c.max_seq_length)
    if c.pack_examples:  # as `Finetuning.rows` packs them on one device
        pack = lambda r: packing.pack({k: v[r] for k, v in arrays.items()}, max_len)
        shapes = [pack(r)["input_ids"].shape for r in rows]
    else:
        shapes = [(batch, batches.bucket_length(mask[r], tuple(c.length_buckets), max_len)) for r in rows]
    warm = [shapes.index(n) for n in dict.fromkeys(shapes)]
    # Model FLOPs (the encoder's matmuls, forward + backward) on the shapes each computes.
    _, bert_config = convert.load_checkpoint(checkpoint)
    longest = [(batch, int(mask[r].sum(1).max())) for r in rows]  # the peer's padded shapes
    flops = {
        name: sum(model_flops_per_step(bert_config, b, n, 0, nsp=False) for b, n in ns)
        for name, ns in (("bert_jax", shapes), ("torch", longest))
    }
    np.savez(
        path,
        rows=rows,
        step_shapes=np.asarray(shapes),
        warm=np.asarray(warm),
        flops=np.asarray([flops["bert_jax"], flops["torch"]]),
        **arrays,
    )


def _bert_jax(data: dict[str, np.ndarray], steps: int, buckets: str | None) -> dict:
    import dataclasses

    import jax

    from bert_jax.finetuning import finetune, packing
    from bert_jax.tasks.base import Split

    c = _config(buckets)
    c.max_eval_examples = 1  # the dev split is not used here
    settings = run_settings.finetune_settings(c)
    inputs = finetune.load_inputs(settings)
    arrays = {k: data[k] for k in ("input_ids", "input_mask", "segment_ids", "labels")}
    inputs = dataclasses.replace(inputs, train=Split("train", arrays))
    total = finetune.steps_per_epoch(settings, inputs) * settings.num_epochs
    ft = finetune.Finetuning(settings, inputs, total_steps=total)
    for step, idx in enumerate(data["rows"]):  # the same sentences as the peer's
        got, (r, length) = ft.rows(step), data["step_shapes"][step]
        rows = {k: v[idx] for k, v in arrays.items()}
        want = packing.pack(rows, length, ft.row_multiple)["input_ids"] if ft.packed else rows["input_ids"]
        if got["input_ids"].shape != (r, length) or not np.array_equal(got["input_ids"], want[:, :length]):
            raise RuntimeError(f"Finetuning.rows({step}) differs from the benchmark's batch")
    state = ft.engine.init_state(int(c.seed), inputs.params)

    start = time.perf_counter()
    for step in data["warm"]:  # compiles one program per shape
        state, metrics = ft.engine.train_step(state, ft.engine.place(ft.rows(int(step)), process_local=False))
        jax.block_until_ready(metrics)
    warmup = time.perf_counter() - start

    losses = []
    start = time.perf_counter()
    for batch in itertools.islice(ft.batches(0), steps):
        state, metrics = ft.engine.train_step(state, batch)
        losses.append(metrics["loss"])
    jax.block_until_ready((state, losses))
    seconds = time.perf_counter() - start

    start = time.perf_counter()  # host-side batch preparation alone (rows, cut, placement)
    for batch in itertools.islice(ft.batches(0), steps):
        jax.block_until_ready(batch)
    host = time.perf_counter() - start
    return {
        "seconds": seconds,
        "warmup_seconds": warmup,
        "host_seconds": host,
        "padded_tokens": int(np.prod(data["step_shapes"], axis=1).sum()),
        "loss": float(losses[-1]),
        "buckets": list(c.length_buckets),
        "packed": ft.packed,
    }


def _torch(data: dict[str, np.ndarray], steps: int) -> dict:
    import torch

    from bench import peers
    from bert_jax.finetuning import finetune
    from bert_jax.tasks import bbc

    c = _config(None)
    n = len(data["input_ids"])
    total = n // int(c.global_batch_size) * int(c.num_epochs)
    step_fn = peers.torch_classification_step(
        finetune.default_checkpoint(),
        len(bbc.LABELS),
        total_steps=total,
        warmup_steps=int(c.warmup_proportion * total),
        learning_rate=float(c.learning_rate),
    )
    lengths = data["input_mask"].sum(1)

    def features(i: int) -> dict:  # one tokenized row as a datasets row holds it: unpadded lists
        k = int(lengths[i])
        return {
            "input_ids": data["input_ids"][i, :k].tolist(),
            "token_type_ids": data["segment_ids"][i, :k].tolist(),
            "attention_mask": data["input_mask"][i, :k].tolist(),
            "labels": int(data["labels"][i]),
        }

    batches = [[features(int(i)) for i in idx] for idx in data["rows"]]
    start = time.perf_counter()
    for step in data["warm"]:
        step_fn(batches[int(step)])
    warmup = time.perf_counter() - start

    start = time.perf_counter()
    for features_of_step in batches[:steps]:
        loss = step_fn(features_of_step)
    seconds = time.perf_counter() - start

    start = time.perf_counter()  # host-side batch preparation alone (collation)
    for features_of_step in batches[:steps]:
        step_fn.collate(features_of_step)
    host = time.perf_counter() - start
    padded = sum(int(lengths[idx].max()) for idx in data["rows"][:steps]) * int(c.global_batch_size)
    return {
        "seconds": seconds,
        "warmup_seconds": warmup,
        "host_seconds": host,
        "padded_tokens": padded,
        "loss": float(loss),
        "threads": torch.get_num_threads(),
    }


def run_worker(name: str, path: str, steps: int, buckets: str | None) -> dict:
    """Body of one contender's subprocess: its seconds for `steps` steps after warm-up."""
    loaded = np.load(path)
    data = {k: loaded[k] for k in loaded.files}
    data["rows"] = data["rows"][:steps]
    result = _bert_jax(data, steps, buckets) if name == "bert_jax" else _torch(data, steps)
    rows = data["rows"]
    result["sequences"] = int(rows.size)
    result["real_tokens"] = int(data["input_mask"][rows].sum())
    result["flops"] = float(data["flops"][0 if name == "bert_jax" else 1])
    return result


def _cpu_description() -> str:
    from bench.pretrain_throughput import cpu_description

    return cpu_description()


def measure_peak() -> float:
    from bench.pretrain_throughput import measure_peak as peak

    return peak()


def _subprocess(args: list[str], env: dict[str, str], what: str) -> str:
    proc = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, env=env, cwd=ROOT
    )
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not line:
        raise RuntimeError(f"{what} failed:\n{proc.stderr[-3000:]}")
    return line[0][7:]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--buckets", default=None, help="unpacked, with these length_buckets (comma-separated; none: none)"
    )
    parser.add_argument("--unpacked", action="store_true", help="unpacked, with the config's length_buckets")
    parser.add_argument("--worker", nargs=2, metavar=("NAME", "DATA"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        name, path = args.worker
        if name == "data":
            prepare_data(path, args.steps, args.buckets)
            print("RESULT {}", flush=True)
        else:
            print("RESULT " + json.dumps(run_worker(name, path, args.steps, args.buckets)), flush=True)
        return
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3"}
    torch_env = {**env, "USE_TF": "0"}  # the PyTorch peer: no TensorFlow import
    if args.unpacked and args.buckets is None:
        args.buckets = ""
    extra = ["--steps", str(args.steps)] + (["--buckets", args.buckets] if args.buckets is not None else [])
    print(f"cpu: {_cpu_description()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bbc_sentences.npz")
        _subprocess(["--worker", "data", path, *extra], env, "data preparation")
        with np.load(path) as loaded:
            lengths, rows, shapes = loaded["input_mask"].sum(1), loaded["rows"], loaded["step_shapes"]
        results: dict[str, dict] = {}
        peaks = []
        for i in range(args.rounds):
            line = []
            for name in ("bert_jax", "torch"):
                peaks.append(measure_peak())  # before each contender: how loaded the machine is
                result = json.loads(
                    _subprocess(["--worker", name, path, *extra], torch_env if name == "torch" else env, name)
                )
                line.append(
                    f"{name} {1000 * result['seconds'] / args.steps:.0f} ms/step (peak {peaks[-1] / 1e9:.0f})"
                )
                if result["seconds"] < results.get(name, {}).get("seconds", float("inf")):
                    results[name] = result
            print(f"round {i + 1}: {', '.join(line)}", flush=True)
    peak = max(peaks)
    r = results["bert_jax"]
    if r["packed"]:
        n, counts = np.unique(shapes[: args.steps, 0], return_counts=True)
        used = f"bert_jax packs each batch into rows of {shapes[0, 1]}, rows per step: "
    else:
        n, counts = np.unique(shapes[: args.steps, 1], return_counts=True)
        used = f"bert_jax length_buckets {tuple(r['buckets'])}: "
    print(
        f"\nBBC News sentences: {len(lengths):,} ({lengths.mean():.1f} tokens on average), batch "
        f"{rows.shape[1]}, max_seq_length 128; {args.steps} steps, "
        f"{results['bert_jax']['real_tokens']:,} real tokens"
    )
    print(
        used
        + ", ".join(f"{a} x{k}" for a, k in zip(n, counts, strict=True))
        + "; the peer pads each batch to its longest row"
    )
    print(
        f"best of {args.rounds} rounds (torch threads: {results['torch']['threads']}); MFU: model FLOPs on "
        f"the padded shapes over the best matmul peak, {peak / 1e9:.1f} GFLOP/s (fp32, XLA 2048^2)"
    )
    print(
        f"{'':<10}{'seq/s':>8}{'tokens/s':>10}{'ms/step':>9}{'padded len':>12}{'GFLOP/s':>9}{'MFU':>7}"
        f"{'host ms/step':>14}{'warm-up s':>11}{'last loss':>11}"
    )
    for name, r in results.items():
        s = r["seconds"]
        print(
            f"{name:<10}{r['sequences'] / s:>8.1f}{r['real_tokens'] / s:>10,.0f}{1000 * s / args.steps:>9.1f}"
            f"{r['padded_tokens'] / r['sequences']:>12.1f}{r['flops'] / s / 1e9:>9.1f}"
            f"{r['flops'] / s / peak:>7.1%}"
            f"{1000 * r['host_seconds'] / args.steps:>14.2f}{r['warmup_seconds']:>11.1f}{r['loss']:>11.3f}"
        )
    ratio = results["torch"]["seconds"] / results["bert_jax"]["seconds"]  # the same sequences
    print(f"\nratio_finetune={ratio:.2f}")


if __name__ == "__main__":
    main()
