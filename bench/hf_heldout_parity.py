"""Held-out masked-LM parity of a pre-training run and its Hugging Face export.

A run of the ModernBERT family (e.g. `configs/pretrain.py:demo-modernbert`) exports with
`bert-jax convert --dst_format=hf` to a folder that `transformers.ModernBertForMaskedLM`
loads (docs/modernbert.md). This script shows that the exported model scores the run's
held-out data exactly as bert_jax does:

- the held-out batches are bert_jax's own (`Pretraining.eval_batches`: the first
  ``config.eval_steps`` batches of the held-out order, fixed masks drawn on the device by
  the run's masker), built once and fed to both models;
- bert_jax's figures come from `evaluation.evaluate_held_out` (the function pre-training
  prints) on the workdir's latest checkpoint, and from bert_jax's logits at the masked
  positions scored here; `transformers`' from its logits (torch, eval mode, float32)
  scored by the same code: mean cross-entropy over the masked positions
  (``masked_lm_weights`` > 0) and accuracy (the label has the top logit, ties included,
  as `model.ops.softmax_cross_entropy`), also over the *changed* positions only (shown as
  [MASK] or a random token, not the original);
- the figures pre-training printed are the last ``split == "eval"`` row of the workdir's
  ``metrics.jsonl``.

bert_jax pads the vocabulary rows to ``vocab_pad_multiple`` (their logits masked); the
export drops the padding, so bert_jax's logits are compared over the real rows only.
`transformers` unpads sequences only with flash attention; eager and SDPA take the
padded batch with its attention mask.

    .venv/bin/python bench/hf_heldout_parity.py --workdir=/tmp/demo_modernbert \
        --hf_dir=/tmp/demo_modernbert_hf [--config=configs/pretrain.py:demo-modernbert]

Prints four rows of figures (printed, `evaluate_held_out`, bert_jax's logits and
`transformers`' scored here) and their differences from `transformers`', then
``parity: ok`` (loss within ``--loss_tol``, accuracy within one token, the printed
figures of the checkpoint's step) or ``parity: FAILED ...`` (exit status 1).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bert_jax.commands import run_settings

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(ROOT))

KEYS = ("mlm_loss", "mlm_accuracy", "mlm_loss_changed", "mlm_accuracy_changed")


def printed_figures(workdir: str) -> dict[str, float]:
    """The last held-out row of the workdir's metrics.jsonl (what pre-training printed)."""
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
        raise SystemExit(f"{path} does not exist: give --workdir a pre-training workdir")
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    evals = [r for r in rows if r.get("split") == "eval"]
    if not evals:
        raise SystemExit(f"{path} holds no held-out evaluation (split 'eval')")
    return evals[-1]


def latest_step(workdir: str) -> int:
    steps = [int(n) for n in os.listdir(os.path.join(workdir, "checkpoints")) if n.isdigit()]
    if not steps:
        raise SystemExit(f"{workdir}/checkpoints holds no step")
    return max(steps)


def load_run(config_spec: str, workdir: str) -> tuple[Any, Any, Any]:
    """The run (`pretrain.Pretraining` of the config on this host's devices), its final
    phase, and the workdir's latest params placed as the engine holds them."""
    import jax

    from bert_jax import convert
    from bert_jax.pretraining import pretrain
    from bert_jax.training import engine, run_config, sharding

    config = run_config.load_config(config_spec)
    settings = run_settings.pretrain_settings(config)
    run = pretrain.Pretraining(settings, sharding.make_mesh(settings.training.mesh_shape))
    params, saved = convert.load_checkpoint(workdir)
    if saved != run.model_config:
        raise SystemExit(f"{workdir}/bert_config.json is not the model of --config {config_spec}")
    target = run.engine.abstract_state.params
    if jax.tree.structure(params) != jax.tree.structure(target):
        raise SystemExit(f"{workdir}: the checkpoint's parameter tree is not the run's")
    return run, run.run.phases()[-1], engine.place_tree(params, run.engine.state_shardings.params)


def check_vocabulary(run: Any, workdir: str, hf_dir: str) -> int:
    """The run's vocabulary is the workdir's and the HF tokenizer's, id for id; returns its size."""
    from transformers import AutoTokenizer

    from bert_jax.data import run_vocabulary, tokenization

    vocab = list(run_vocabulary.tokenizer_of(run.data).vocab)
    if vocab != tokenization.load_vocab(os.path.join(workdir, "vocab.txt")):
        raise SystemExit(f"{workdir}/vocab.txt is not the vocabulary of the run's config")
    hf = AutoTokenizer.from_pretrained(hf_dir)
    if hf.convert_ids_to_tokens(list(range(len(vocab)))) != vocab or len(hf) != len(vocab):
        raise SystemExit(f"{hf_dir}: its tokenizer's ids are not the run's vocabulary")
    return len(vocab)


def held_out_batches(run: Any, phase: Any) -> list[dict[str, np.ndarray]]:
    """bert_jax's held-out batches (masked on the device, fixed masks), on the host."""
    import jax

    with jax.set_mesh(run.mesh):
        return [jax.device_get(b) for b in run.eval_batches(phase)]


def bert_jax_logits_fn(run: Any, vocab_size: int) -> Any:
    """(params, batch) → bert_jax's MLM logits at the masked positions, real vocabulary rows."""
    import flax.linen as nn
    import jax

    def logits(params: Any, batch: dict) -> Any:
        with nn.logical_axis_rules(run.engine.rules):
            mlm, _ = run.objective.model.apply(
                {"params": params},
                batch["input_ids"],
                batch["input_mask"],
                batch["segment_ids"],
                batch["masked_lm_positions"],
                deterministic=True,
            )
        return mlm[..., :vocab_size]

    jitted = jax.jit(logits)

    def call(params: Any, batch: dict) -> np.ndarray:
        with jax.set_mesh(run.mesh):
            return np.asarray(jax.device_get(jitted(params, batch)), np.float32)

    return call


def hf_logits_fn(hf_dir: str, attn: str) -> Any:
    """batch → `transformers`' MLM logits at the masked positions (eval mode, float32)."""
    import torch
    from transformers import ModernBertForMaskedLM

    model = ModernBertForMaskedLM.from_pretrained(hf_dir, attn_implementation=attn, dtype=torch.float32)
    model.eval()

    def call(batch: dict) -> np.ndarray:
        mask = np.asarray(batch["input_mask"])
        if mask.max() > 1:
            raise SystemExit("held-out rows are packed (input_mask > 1): a Hugging Face mask cannot say so")
        with torch.no_grad():
            out = model(
                input_ids=torch.from_numpy(np.asarray(batch["input_ids"], np.int64)),
                attention_mask=torch.from_numpy(mask.astype(np.int64)),
            ).logits.numpy()
        positions = np.asarray(batch["masked_lm_positions"])
        return np.take_along_axis(out, positions[..., None], axis=1)

    return call


def score(logits: np.ndarray, batch: dict) -> dict[str, float]:
    """Metric sums of one batch: cross-entropy (float64) and "the label has the top logit"
    at the masked positions, all of them and the changed ones."""
    x = logits.astype(np.float64)
    labels = np.asarray(batch["masked_lm_ids"])
    weights = np.asarray(batch["masked_lm_weights"], np.float64)
    top = x.max(-1)
    lse = top + np.log(np.exp(x - top[..., None]).sum(-1))
    label_logit = np.take_along_axis(x, labels[..., None], axis=-1)[..., 0]
    ce, correct = lse - label_logit, (label_logit >= top).astype(np.float64)
    shown = np.take_along_axis(np.asarray(batch["input_ids"]), np.asarray(batch["masked_lm_positions"]), 1)
    changed = weights * (shown != labels)
    return {
        "loss": float((ce * weights).sum()),
        "correct": float((correct * weights).sum()),
        "weight": float(weights.sum()),
        "loss_changed": float((ce * changed).sum()),
        "correct_changed": float((correct * changed).sum()),
        "weight_changed": float(changed.sum()),
    }


def figures(sums: dict[str, float]) -> dict[str, float]:
    return {
        "mlm_loss": sums["loss"] / sums["weight"],
        "mlm_accuracy": sums["correct"] / sums["weight"],
        "mlm_loss_changed": sums["loss_changed"] / sums["weight_changed"],
        "mlm_accuracy_changed": sums["correct_changed"] / sums["weight_changed"],
        "num_predictions": sums["weight"],
        "num_changed_predictions": sums["weight_changed"],
        "correct": sums["correct"],
        "correct_changed": sums["correct_changed"],
    }


def compare(run: Any, params: Any, batches: list, hf_dir: str, attn: str, vocab_size: int) -> dict:
    """Both models over the same batches: their figures and the largest logit difference."""
    ours, theirs = bert_jax_logits_fn(run, vocab_size), hf_logits_fn(hf_dir, attn)
    totals: dict[str, dict[str, float]] = {"bert_jax": {}, "hf": {}}
    max_diff, seconds = 0.0, {"bert_jax": 0.0, "hf": 0.0}
    for batch in batches:
        start = time.perf_counter()
        a = ours(params, batch)
        seconds["bert_jax"] += time.perf_counter() - start
        start = time.perf_counter()
        b = theirs(batch)
        seconds["hf"] += time.perf_counter() - start
        real = np.asarray(batch["masked_lm_weights"]) > 0
        max_diff = max(max_diff, float(np.abs(a - b)[real].max(initial=0.0)))
        for name, logits in (("bert_jax", a), ("hf", b)):
            for k, v in score(logits, batch).items():
                totals[name][k] = totals[name].get(k, 0.0) + v
    return {
        "bert_jax": figures(totals["bert_jax"]),
        "hf": figures(totals["hf"]),
        "max_abs_logit_diff": max_diff,
        "seconds": seconds,
    }


def line(name: str, f: dict) -> str:
    return (
        f"{name:<36} loss {f['mlm_loss']:.6f}  accuracy {f['mlm_accuracy']:.6f}  "
        f"changed: loss {f['mlm_loss_changed']:.6f}  accuracy {f['mlm_accuracy_changed']:.6f}  "
        f"({int(f['num_predictions'])} masked, {int(f['num_changed_predictions'])} changed)"
    )


def verdict(rows: dict[str, dict], ref: dict, loss_tol: float) -> list[str]:
    """What differs from `ref` beyond the tolerance: loss by more than `loss_tol`,
    accuracy by more than one token (of the masked or of the changed ones)."""
    bad = []
    for name, f in rows.items():
        if int(f["num_predictions"]) != int(ref["num_predictions"]):
            bad.append(
                f"{name}: {int(f['num_predictions'])} masked tokens, HF scored {int(ref['num_predictions'])}"
            )
            continue
        for key, count in (
            ("mlm_accuracy", "num_predictions"),
            ("mlm_accuracy_changed", "num_changed_predictions"),
        ):
            tokens = abs(f[key] - ref[key]) * f[count]
            if tokens > 1.5:
                bad.append(f"{name}: {key} differs by {tokens:.0f} tokens")
        for key in ("mlm_loss", "mlm_loss_changed"):
            if abs(f[key] - ref[key]) > loss_tol:
                bad.append(f"{name}: {key} differs by {abs(f[key] - ref[key]):.2e}")
    return bad


def report(table: dict[str, dict], ref: dict, result: dict) -> None:
    """Each row's figures, its differences from `transformers`', and the logit gap."""
    for name, f in table.items():
        print(line(name, f))
    for name, f in table.items():
        diffs = "  ".join(f"{k} {f[k] - ref[k]:+.2e}" for k in KEYS)
        print(f"{name} - transformers: {diffs}")
    ours = result["bert_jax"]
    print(
        f"correct tokens: bert_jax {int(ours['correct'])} (changed {int(ours['correct_changed'])}), "
        f"transformers {int(ref['correct'])} (changed {int(ref['correct_changed'])})"
    )
    print(f"max |logit difference| at the masked positions: {result['max_abs_logit_diff']:.3e}")
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in result["seconds"].items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True, help="the pre-training workdir")
    parser.add_argument("--hf_dir", required=True, help="its `convert --dst_format=hf` folder")
    parser.add_argument("--config", default="configs/pretrain.py:demo-modernbert", help="the run's config")
    parser.add_argument("--attn_implementation", default="eager", choices=("eager", "sdpa"))
    parser.add_argument("--loss_tol", type=float, default=1e-4)
    args = parser.parse_args()
    for flag, path in (("--workdir", args.workdir), ("--hf_dir", args.hf_dir)):
        if not os.path.isdir(path):
            raise SystemExit(f"{flag} {path} is not a folder")

    from bert_jax.pretraining import evaluation

    printed, step = printed_figures(args.workdir), latest_step(args.workdir)
    run, phase, params = load_run(args.config, args.workdir)
    vocab_size = check_vocabulary(run, args.workdir, args.hf_dir)
    start = time.perf_counter()
    batches = held_out_batches(run, phase)
    built = time.perf_counter() - start
    shape = batches[0]["input_ids"].shape
    padding = sum(int((np.asarray(b["input_mask"]) == 0).sum()) for b in batches)
    print(f"checkpoint step {step}; metrics.jsonl's last eval row: step {printed['step']}")
    print(
        f"held-out: {len(batches)} batches of {shape[0]} x {shape[1]} tokens "
        f"({padding} of them padding), built in {built:.1f} s"
    )
    library, _ = evaluation.evaluate_held_out(run, params, phase)
    result = compare(run, params, batches, args.hf_dir, args.attn_implementation, vocab_size)
    table = {
        "printed at the end of pre-training": printed,
        "bert_jax evaluate_held_out": library,
        "bert_jax logits, scored here": result["bert_jax"],
        f"transformers ({args.attn_implementation})": result["hf"],
    }
    report(table, result["hf"], result)
    bad = verdict(table, result["hf"], args.loss_tol)
    if int(printed["step"]) != step:
        bad.append(f"the printed figures are of step {printed['step']}, the checkpoint of step {step}")
    print("parity: ok" if not bad else "parity: FAILED: " + "; ".join(bad))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
