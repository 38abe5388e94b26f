"""How well pre-training went (§3.1): held-out MLM (and NSP) metrics, the unigram model
they are read against, the learning curve, and the end-of-run summary.

Masked-LM accuracy alone flatters a model: 10% of the masked tokens are shown unchanged
(the 80/10/10 rule) and can be copied. So the held-out figures are also reported on the
*changed* tokens only ([MASK] or a random token), beside the unigram model of the training
data (always the most frequent token; its cross-entropy smoothed in its favour), and the
learning curve names the first evaluation a nat under that model's loss.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

from bert_jax.pretraining.objective import Batch, finalize_metrics


def evaluate_held_out(run: Any, params: Any, phase: Any) -> tuple[dict[str, float], np.ndarray]:
    """Metrics over the held-out split of `run` (a `pretrain.Pretraining`) at `phase`, and
    the masked target ids seen (for the unigram baseline)."""
    sums: dict[str, float] = {}
    targets = []
    for batch in run.eval_batches(phase):
        for k, v in jax.device_get(run.engine.eval_step(params, batch)).items():
            sums[k] = sums.get(k, 0.0) + float(v)
        targets.append(masked_targets(batch))
    if not sums:
        raise ValueError("the eval split is empty: no held-out examples to evaluate on")
    metrics = {k: float(v) for k, v in finalize_metrics(sums, run.nsp).items()}
    metrics["num_predictions"] = sums["mlm_weight"]
    metrics["num_changed_predictions"] = sums["mlm_changed_weight"]
    return metrics, np.concatenate(targets) if targets else np.zeros((0,), np.int32)


def masked_targets(batch: Batch) -> np.ndarray:
    """The masked target ids of a global batch (every host gets all of them)."""
    ids, w = (
        np.asarray(multihost_utils.process_allgather(batch[k], tiled=True))
        for k in ("masked_lm_ids", "masked_lm_weights")
    )
    return ids[w > 0]


def unigram_baseline(run: Any, phase: Any, held_out: np.ndarray, batches: int) -> tuple[int, float, float]:
    """The unigram model of the training data's masked targets (`batches` batches) on the
    held-out targets: its most frequent token, the accuracy of always predicting it, and
    its cross-entropy in nats (comparable with the MLM loss; add-k smoothed over the
    vocabulary with the k that suits the held-out targets best, so the baseline is at its
    strongest)."""
    seen = [masked_targets(b) for _, b in zip(range(batches), run.batches(phase, phase.start), strict=False)]
    counts = np.bincount(np.concatenate(seen), minlength=run.model_config.vocab_size).astype(np.float64)
    top = int(np.argmax(counts))
    if not held_out.size:
        return top, 0.0, 0.0
    acc = float(np.mean(held_out == top))
    loss = min(
        float(-np.mean(np.log((counts[held_out] + k) / (counts.sum() + k * counts.size))))
        for k in (1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001)
    )
    return top, acc, loss


def learning_curve(workdir: str) -> list[tuple[int, float]]:
    """(step, held-out loss on the changed tokens) of every evaluation in the workdir's
    metrics.jsonl, the latest row per step (a resumed run's evaluations included)."""
    path = os.path.join(workdir, "metrics.jsonl")
    points: dict[int, float] = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                if row.get("split") == "eval" and "mlm_loss_changed" in row:
                    points[int(row["step"])] = float(row["mlm_loss_changed"])
    return sorted(points.items())


def curve_line(curve: list[tuple[int, float]], unigram_loss: float) -> str:
    """One line of the held-out learning curve against the unigram model's loss, with the
    first evaluation a nat under it (where the model left the unigram stage)."""
    shown = ", ".join(f"{loss:.2f} at step {step}" for step, loss in curve)
    left = next((step for step, loss in curve if loss <= unigram_loss - 1.0), None)
    verdict = (
        f"1 nat under the unigram loss from step {left}" if left else "never 1 nat under the unigram loss"
    )
    head = f"learning curve (held-out loss on the changed tokens; unigram {unigram_loss:.2f})"
    return f"{head}: {shown}; {verdict}"


def report(final: dict[str, Any], workdir: str, nsp: bool) -> None:
    """The end-of-run summary on the console (process 0)."""
    if jax.process_index() != 0:
        return
    lines = [
        f"held-out MLM accuracy: {final['mlm_accuracy']:.4f}, loss {final['mlm_loss']:.3f} "
        f"({int(final['num_predictions'])} masked tokens)",
    ]
    if final["num_changed_predictions"]:  # none where the data shows every original (synthetic)
        lines.append(
            f"  on the {int(final['num_changed_predictions'])} shown as [MASK] or a random token "
            f"(not the original): accuracy {final['mlm_accuracy_changed']:.4f}, "
            f"loss {final['mlm_loss_changed']:.3f}"
        )
    if "unigram_baseline_accuracy" in final:
        piece = final.get("unigram_baseline_piece")
        always = (
            f"{piece!r} (id {final['unigram_baseline_token']})"
            if piece
            else f"id {final['unigram_baseline_token']}"
        )
        lines.append(
            f"unigram baseline (training-data token frequencies; always {always}): "
            f"accuracy {final['unigram_baseline_accuracy']:.4f}, loss {final['unigram_baseline_loss']:.3f}"
        )
        curve = learning_curve(workdir)
        if curve:
            lines.append(curve_line(curve, final["unigram_baseline_loss"]))
    if nsp:  # without NSP its head is untrained and its accuracy meaningless
        lines.append(f"held-out NSP accuracy: {final['nsp_accuracy']:.4f}")
    lines += [
        f"checkpoints: {workdir}/checkpoints (best: {workdir}/best)",
        f"TensorBoard: tensorboard --logdir {workdir}/tensorboard",
        f"metrics: {workdir}/metrics.jsonl",
    ]
    print("\n".join(lines), flush=True)


def report_without_held_out(workdir: str, step: int) -> None:
    """The end-of-run summary of a run that had no held-out data (process 0)."""
    if jax.process_index() != 0:
        return
    lines = [
        f"trained to step {step} without held-out evaluation (the data holds no held-out examples)",
        f"checkpoints: {workdir}/checkpoints",
        f"TensorBoard: tensorboard --logdir {workdir}/tensorboard",
        f"metrics: {workdir}/metrics.jsonl",
    ]
    print("\n".join(lines), flush=True)
