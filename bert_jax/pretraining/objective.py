"""The pre-training objective (Devlin et al., 2019, §3.1 and §A.2): loss, metrics, FLOPs.

Loss: masked-LM cross-entropy at the masked positions, weighted by ``masked_lm_weights``
and averaged over the real predictions of the whole batch, plus next-sentence
cross-entropy (left out when ``config.data.nsp`` is False, the paper's "No NSP" ablation).
Metrics: MLM loss and accuracy over every masked position and over the *changed* ones
only (``mlm_loss_changed``, ``mlm_accuracy_changed``: input [MASK] or a random token, not
the kept original, which a model can copy; the figures that compare masking mixes, Table
8), NSP accuracy.
`PretrainingObjective` is what the engine (`engine.py`) trains; `pretrain.py` runs it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax

from bert_jax.model.heads import BertForPreTraining

Batch = dict[str, jax.Array]
BATCH_KEYS = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "masked_lm_weights",
    "next_sentence_labels",
)


def pretraining_loss(
    mlm: tuple[jax.Array, jax.Array],
    nsp_logits: jax.Array,
    batch: Batch,
    *,
    total_mlm_weight: jax.Array,
    batch_size: jax.Array | int,
    nsp: bool,
    causal: bool = False,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Loss normalised by whole-batch totals, so micro-batch losses and grads simply add.

    ``mlm``: the per-prediction cross-entropy and "label is the arg-max", each [B, P]
    (`BertForPreTraining` given ``masked_lm_ids``; `ops.softmax_cross_entropy` of logits).
    Returns the loss and *sums* (not means) of the metrics; `finalize_metrics` divides.
    ``causal``: a left-to-right model predicts the next token, which it never sees, so
    every prediction counts as changed.
    """
    weights = batch["masked_lm_weights"].astype(jnp.float32)
    mlm_ce, mlm_top = mlm
    mlm_correct = mlm_top * weights
    nsp_ce = optax.softmax_cross_entropy_with_integer_labels(nsp_logits, batch["next_sentence_labels"])
    nsp_correct = jnp.argmax(nsp_logits, -1) == batch["next_sentence_labels"]
    # Positions whose input token is not the target ([MASK] or a random token, not a kept
    # SAME token): the model cannot copy them, so their accuracy compares masking mixes.
    changed = weights
    if not causal:
        shown = jnp.take_along_axis(batch["input_ids"], batch["masked_lm_positions"], axis=1)
        changed = weights * (shown != batch["masked_lm_ids"]).astype(jnp.float32)
    mlm_sum = jnp.sum(mlm_ce * weights)
    loss = mlm_sum / total_mlm_weight
    if nsp:
        loss = loss + jnp.sum(nsp_ce) / batch_size
    sums = {
        "mlm_loss_sum": mlm_sum,
        "mlm_correct": jnp.sum(mlm_correct),
        "mlm_weight": jnp.sum(weights),
        "mlm_changed_loss_sum": jnp.sum(mlm_ce * changed),
        "mlm_changed_correct": jnp.sum(mlm_top * changed),
        "mlm_changed_weight": jnp.sum(changed),
        "nsp_loss_sum": jnp.sum(nsp_ce),
        "nsp_correct": jnp.sum(nsp_correct.astype(jnp.float32)),
        "examples": jnp.asarray(nsp_ce.shape[0], jnp.float32),
    }
    return loss, sums


def finalize_metrics(sums: dict[str, jax.Array], nsp: bool) -> dict[str, jax.Array]:
    """Means from sums; the total loss is MLM + NSP as optimised. Without NSP its head is
    untrained and its metrics are noise: they are left out."""
    w = jnp.maximum(sums["mlm_weight"], 1.0)
    n = jnp.maximum(sums["examples"], 1.0)
    changed = jnp.maximum(sums["mlm_changed_weight"], 1.0)
    out = {
        "mlm_loss": sums["mlm_loss_sum"] / w,
        "mlm_accuracy": sums["mlm_correct"] / w,
        "mlm_loss_changed": sums["mlm_changed_loss_sum"] / changed,
        "mlm_accuracy_changed": sums["mlm_changed_correct"] / changed,
    }
    out["loss"] = out["mlm_loss"]
    if nsp:
        out["nsp_loss"] = sums["nsp_loss_sum"] / n
        out["nsp_accuracy"] = sums["nsp_correct"] / n
        out["loss"] = out["loss"] + out["nsp_loss"]
    return out


@dataclasses.dataclass(frozen=True)
class PretrainingObjective:
    """MLM (+ NSP) on `BertForPreTraining` (see `engine.Objective`)."""

    model: BertForPreTraining
    nsp: bool

    def totals(self, batch: Batch) -> dict[str, jax.Array]:
        return {
            "mlm_weight": jnp.maximum(jnp.sum(batch["masked_lm_weights"].astype(jnp.float32)), 1.0),
            "examples": jnp.asarray(batch["input_ids"].shape[0], jnp.float32),
        }

    def _loss(self, params: Any, batch: Batch, totals: Any, **kw: Any) -> tuple[jax.Array, dict]:
        mlm, nsp_logits = self.model.apply(
            {"params": params},
            batch["input_ids"],
            batch["input_mask"],
            batch["segment_ids"],
            batch["masked_lm_positions"],
            masked_lm_ids=batch["masked_lm_ids"],
            **kw,
        )
        return pretraining_loss(
            mlm,
            nsp_logits,
            batch,
            total_mlm_weight=totals["mlm_weight"],
            batch_size=totals["examples"],
            nsp=self.nsp,
            causal=self.model.config.causal_attention,
        )

    def loss(self, params: Any, batch: Batch, *, totals: Any, rng: jax.Array) -> tuple[jax.Array, dict]:
        return self._loss(params, batch, totals, deterministic=False, rngs={"dropout": rng})

    def finalize(self, sums: dict[str, jax.Array]) -> dict[str, jax.Array]:
        return finalize_metrics(sums, self.nsp)

    def eval_outputs(self, params: Any, batch: Batch) -> dict[str, jax.Array]:
        """Metric sums on one eval batch (deterministic: no dropout)."""
        return self._loss(params, batch, self.totals(batch), deterministic=True)[1]

    def init_params(self, rng: jax.Array) -> Any:
        ids = jnp.zeros((1, 8), jnp.int32)
        return self.model.init(rng, ids, ids, ids, jnp.zeros((1, 2), jnp.int32), deterministic=True)["params"]


def batch_shapes(batch_size: int, seq_len: int, predictions: int) -> dict[str, tuple[tuple[int, ...], Any]]:
    """{feature: (shape, dtype)} of a masked pre-training batch."""
    b, s, p = batch_size, seq_len, predictions
    return {
        "input_ids": ((b, s), jnp.int32),
        "input_mask": ((b, s), jnp.int32),
        "segment_ids": ((b, s), jnp.int32),
        "masked_lm_positions": ((b, p), jnp.int32),
        "masked_lm_ids": ((b, p), jnp.int32),
        "masked_lm_weights": ((b, p), jnp.float32),
        "next_sentence_labels": ((b,), jnp.int32),
    }
