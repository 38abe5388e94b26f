"""How well pre-training went (§3.1): held-out MLM (and NSP) metrics, the unigram model
they are read against, the learning curve, and the end-of-run summary.

Masked-LM accuracy alone flatters a model: 10% of the masked tokens are shown unchanged
(the 80/10/10 rule) and can be copied. So the held-out figures are also reported on the
*changed* tokens only ([MASK] or a random token), beside the unigram model of the training
data (always the most frequent token; its cross-entropy smoothed in its favour), and the
learning curve names the first evaluation a nat under that model's loss.

An evaluation reads the first ``config.eval_steps`` global batches of the held-out order
(the same batches every time, so the curve compares like with like; 0 = the whole split,
which grows with the corpus), keeps its sums on the devices and reads them once.
`PeriodicEval` is the run's evaluation hook (every ``eval_every_steps`` and at the last
step, once), whose last result the end-of-run summary reads.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from bert_jax.pretraining.objective import Batch, finalize_metrics
from bert_jax.storage import files
from bert_jax.training import sharding
from bert_jax.training.hooks import Hook, StepContext


def evaluate_held_out(job: Any, params: Any, phase: Any) -> tuple[dict[str, float], np.ndarray]:
    """Metrics over the held-out batches of `job` (a `pretrain.Pretraining`) at `phase`
    (``config.eval_steps`` of them, or the whole split), and the masked target ids seen,
    in id order (for the unigram baseline).

    The metric sums and a histogram of the targets stay on the devices, compensated sums
    (Neumaier) in float32, and are read to the host once, after the last batch."""
    start, add = _accumulators(job.mesh, int(job.model_config.vocab_size))
    state = None
    for batch in job.eval_batches(phase):
        outputs = job.engine.eval_step(params, batch)
        ids, weights = batch["masked_lm_ids"], batch["masked_lm_weights"]
        state = start(outputs, ids, weights) if state is None else add(state, outputs, ids, weights)
    if state is None:
        raise ValueError("the eval split is empty: no held-out examples to evaluate on")
    (totals, compensation), histogram = jax.device_get(state)
    sums = {k: float(totals[k]) + float(compensation[k]) for k in totals}
    metrics = {k: float(v) for k, v in finalize_metrics(sums, job.nsp).items()}
    metrics["num_predictions"] = sums["mlm_weight"]
    metrics["num_changed_predictions"] = sums["mlm_changed_weight"]
    targets = np.repeat(np.arange(histogram.size, dtype=np.int32), np.asarray(histogram, np.int64))
    return metrics, targets


@functools.lru_cache(maxsize=8)
def _accumulators(mesh: Any, vocab_size: int) -> tuple[Any, Any]:
    """Jitted (first batch, next batch) updates of the on-device evaluation state
    ``((sums, compensations), target histogram)``, replicated over `mesh`."""

    def add(state: Any, outputs: dict, ids: jax.Array, weights: jax.Array) -> Any:
        (totals, compensation), histogram = state
        pairs = {k: _neumaier_add(totals[k], compensation[k], v) for k, v in outputs.items()}
        counts = (weights > 0).astype(jnp.int32).ravel()
        histogram = histogram.at[ids.ravel()].add(counts, mode="drop")
        return ({k: p[0] for k, p in pairs.items()}, {k: p[1] for k, p in pairs.items()}), histogram

    def start(outputs: dict, ids: jax.Array, weights: jax.Array) -> Any:
        zeros = {k: jnp.zeros_like(v, jnp.float32) for k, v in outputs.items()}
        return add(((zeros, zeros), jnp.zeros((vocab_size,), jnp.int32)), outputs, ids, weights)

    out = sharding.replicated(mesh)
    return jax.jit(start, out_shardings=out), jax.jit(add, out_shardings=out, donate_argnums=(0,))


def _neumaier_add(total: jax.Array, compensation: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``total + x`` and the running rounding error it lost (Neumaier's compensated sum)."""
    x = x.astype(jnp.float32)
    new = total + x
    lost = jnp.where(jnp.abs(total) >= jnp.abs(x), (total - new) + x, (x - new) + total)
    return new, compensation + lost


def masked_targets(batch: Batch) -> np.ndarray:
    """The masked target ids of a global batch (every host gets all of them)."""
    ids, w = (
        np.asarray(multihost_utils.process_allgather(batch[k], tiled=True))
        for k in ("masked_lm_ids", "masked_lm_weights")
    )
    return ids[w > 0]


def unigram_baseline(job: Any, phase: Any, held_out: np.ndarray, batches: int) -> tuple[int, float, float]:
    """The unigram model of the training data's masked targets (`batches` batches) on the
    held-out targets: its most frequent token, the accuracy of always predicting it, and
    its cross-entropy in nats (comparable with the MLM loss; add-k smoothed over the
    vocabulary with the k that suits the held-out targets best, so the baseline is at its
    strongest)."""
    seen = [masked_targets(b) for _, b in zip(range(batches), job.batches(phase, phase.start), strict=False)]
    counts = np.bincount(np.concatenate(seen), minlength=job.model_config.vocab_size).astype(np.float64)
    top = int(np.argmax(counts))
    if not held_out.size:
        return top, 0.0, 0.0
    acc = float(np.mean(held_out == top))
    loss = min(
        float(-np.mean(np.log((counts[held_out] + k) / (counts.sum() + k * counts.size))))
        for k in (1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001)
    )
    return top, acc, loss


class PeriodicEval:
    """Pre-training's evaluation hook: held-out metrics every ``eval_every_steps`` and at
    the last step (at the sequence length of the phase that step belongs to), logged as an
    ``eval`` row and kept as the best checkpoint when they are. `job`: the run's
    `pretrain.Pretraining`. `final` gives the last step's metrics, evaluated once."""

    def __init__(self, job: Any) -> None:
        self.job, self.phases = job, job.run.phases()
        self.last: tuple[int, dict[str, float], np.ndarray] | None = None  # step, metrics, targets

    def hook(self) -> Hook:
        return Hook(self, every=self.job.run.eval_every_steps, also_at=(self.job.run.num_train_steps,))

    def __call__(self, ctx: StepContext) -> None:
        phase = next(p for p in self.phases if p.start < ctx.step <= p.end)
        metrics, targets = evaluate_held_out(self.job, ctx.state.params, phase)
        self.last = (ctx.step, metrics, targets)
        ctx.log(metrics, split="eval")
        ctx.save_best(metrics)

    def final(self, ctx: StepContext) -> tuple[dict[str, float], np.ndarray]:
        """The held-out metrics at `ctx`'s step (the run's last) and the masked targets seen:
        the hook's when it evaluated that step, else evaluated (logged, kept as best) now,
        e.g. for a run resumed after its last step."""
        if self.last is None or self.last[0] != ctx.step:
            self(ctx)
        assert self.last is not None
        return self.last[1], self.last[2]


def learning_curve(workdir: str) -> list[tuple[int, float]]:
    """(step, held-out loss on the changed tokens) of every evaluation in the workdir's
    metrics.jsonl, the latest row per step (a resumed run's evaluations included)."""
    path = files.join(workdir, "metrics.jsonl")
    points: dict[int, float] = {}
    if files.exists(path):
        for line in files.read_text(path).splitlines():
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


def output_lines(shown: str, best: bool = True) -> list[str]:
    """Where the run's outputs are, under the workdir as the user gave it (`shown`)."""
    also = f" (best: {shown}/best)" if best else ""
    return [
        f"checkpoints: {shown}/checkpoints{also}",
        f"TensorBoard: tensorboard --logdir {shown}/tensorboard",
        f"metrics: {shown}/metrics.jsonl",
    ]


def report(final: dict[str, Any], workdir: str, nsp: bool, shown: str | None = None) -> None:
    """The end-of-run summary on the console (process 0); paths under `shown`, the
    workdir as the user gave it (default `workdir`)."""
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
    lines += output_lines(shown or workdir)
    print("\n".join(lines), flush=True)


def report_without_held_out(shown: str, step: int) -> None:
    """The end-of-run summary of a run that had no held-out data (process 0); paths under
    `shown`, the workdir as the user gave it."""
    if jax.process_index() != 0:
        return
    lines = [
        f"trained to step {step} without held-out evaluation (the data holds no held-out examples)",
        *output_lines(shown, best=False),
    ]
    print("\n".join(lines), flush=True)
