"""The feature-based BiLSTM (§5.3) as a job of the one training loop.

The frozen encoder and the BiLSTM are one model (`FrozenFeatures`): the encoder's chosen
hidden states, under `jax.lax.stop_gradient`, feed `bilstm.FeatureBiLSTM`. Both sit in
the engine's state, the encoder's parameters frozen by the optimizer (`optax.set_to_zero`
for them, Adam for the BiLSTM), so the engine's step, `loop.TrainingRun`'s checkpoints,
exact resume (batches by step, as fine-tuning's) and SIGTERM save serve it unchanged: a
checkpoint holds the encoder too (a random-init baseline's as well) and resumes exactly.
`FeatureEpochEnd` is the job's hook: the dev scores every epoch, the other eval splits at
an epoch that is the best so far, the history in ``epochs.json`` (a resumed run keeps it).
"""

from __future__ import annotations

import os
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from bert_jax.finetuning.batches import bucket_length, cut_to_length, epoch_batch
from bert_jax.finetuning.finetune import FinetuningObjective
from bert_jax.finetuning.outputs import EpochHistory, EpochScoring
from bert_jax.finetuning.settings import FinetuneSettings
from bert_jax.model.bilstm import FeatureBiLSTM
from bert_jax.model.config import BertConfig
from bert_jax.model.encoder import BertModel
from bert_jax.model.flops import model_flops_per_step
from bert_jax.tasks.base import MODEL_INPUTS, Split, Task
from bert_jax.training import engine, sharding
from bert_jax.training.hooks import StepContext


class FrozenFeatures(nn.Module):
    """The encoder's hidden states `layers` (0 the embeddings) as frozen features into
    `head`, a `FeatureBiLSTM`: [B, S] inputs → the task's outputs (per token or per
    sentence; a span task's start and end logits, each [B, S])."""

    config: BertConfig
    layers: tuple[int, ...]
    head: FeatureBiLSTM
    span: bool = False

    @nn.compact
    def __call__(
        self,
        input_ids: jax.Array,
        input_mask: jax.Array,
        segment_ids: jax.Array,
        *,
        deterministic: bool = True,
    ) -> Any:
        encoder = BertModel(self.config, add_pooler=False, name="bert")
        _, _, hidden = encoder(input_ids, input_mask, segment_ids, output_hidden_states=True)
        feats = jnp.stack([hidden[i].astype(jnp.float32) for i in self.layers], axis=2)
        logits = self.head(jax.lax.stop_gradient(feats), input_mask)
        return (logits[..., 0], logits[..., 1]) if self.span else logits


class FeatureTraining:
    """The model, engine and batches of one feature-based run on the run's mesh.

    `run`: the task's fine-tuning settings (data, lengths, seed, mesh, checkpoints);
    `batch_size` and `learning_rate`: the BiLSTM's (its `FeatureBiLSTMSettings`).
    """

    def __init__(
        self,
        run: FinetuneSettings,
        task: Task,
        train: Split,
        model: FrozenFeatures,
        *,
        batch_size: int,
        learning_rate: float,
    ) -> None:
        self.run, self.task, self.train, self.model = run, task, train, model
        self.batch_size = min(batch_size, len(train))
        self.steps_per_epoch = len(train) // self.batch_size
        self.mesh = sharding.make_mesh(run.training.mesh_shape)
        sizes = {"global_batch_size": self.batch_size, "eval_batch_size": run.eval_batch}
        sharding.check_batches(self.mesh, sizes, {})
        self.sample = [jnp.asarray(train.arrays[k][:1]) for k in MODEL_INPUTS]
        tx = optax.multi_transform(
            {"train": optax.adam(learning_rate), "frozen": optax.set_to_zero()},
            {"bert": "frozen", "head": "train"},
        )
        self.engine = engine.Engine(
            objective=FinetuningObjective(model, task),
            init_params=lambda rng: model.init(rng, *self.sample)["params"],
            tx=tx,
            schedule=optax.constant_schedule(learning_rate),
            mesh=self.mesh,
            rules=sharding.rules_with_overrides(run.training.sharding_rules),
        )

    def initial_params(self, bert: Any) -> dict[str, Any]:
        """The encoder's parameters `bert` (host arrays) and a fresh BiLSTM seeded by the
        run's seed, initialised on the features of the first training row."""
        encoder = BertModel(self.model.config, add_pooler=False)

        def init_head(key: jax.Array, bert: Any, *sample: jax.Array) -> Any:
            _, _, hidden = encoder.apply({"params": bert}, *sample, output_hidden_states=True)
            feats = jnp.stack([hidden[i].astype(jnp.float32) for i in self.model.layers], axis=2)
            return self.model.head.init(key, feats, sample[1])["params"]

        head = engine.run_once(init_head, jax.random.key(self.run.seed), bert, *self.sample)
        return {"bert": bert, "head": jax.device_get(head)}

    def rows(self, step: int) -> dict[str, np.ndarray]:
        """The training rows of global step `step` (0-based), cut to their length bucket:
        epoch e's batches are a permutation by (seed, e), so any step's batch is known."""
        epoch, index = divmod(step, self.steps_per_epoch)
        rows = epoch_batch(self.train, seed=self.run.seed, epoch=epoch + 1, index=index,
                           batch_size=self.batch_size)  # fmt: skip
        return cut_to_length(
            rows, bucket_length(rows["input_mask"], self.run.length_buckets, self.run.max_seq_length)
        )

    def batches(self, start: int) -> Any:
        step = start
        while True:
            yield self.engine.place(self.rows(step), process_local=False)
            step += 1

    def flops(self, batch: dict[str, jax.Array]) -> float:
        """The frozen encoder's forward FLOPs on the batch (a third of its training FLOPs;
        the BiLSTM's, small beside them, are left out)."""
        rows, seq = batch["input_ids"].shape
        return model_flops_per_step(self.model.config, rows, seq, 0, nsp=False) / 3

    def predict(self, params: Any, split: Split) -> Any:
        """The task's outputs for every row of `split` (host arrays, the split's order); the
        last batch is padded so that one compiled shape serves the split."""
        size, n, chunks = self.run.eval_batch, len(split), []
        for start in range(0, n, size):
            batch = {k: split.arrays[k][start : start + size] for k in MODEL_INPUTS}
            pad = size - len(batch["input_ids"])
            if pad:
                batch = {
                    k: np.concatenate([v, np.zeros((pad, *v.shape[1:]), v.dtype)]) for k, v in batch.items()
                }
            out = jax.device_get(self.engine.eval_step(params, self.engine.place(batch, process_local=False)))
            chunks.append(jax.tree.map(lambda x, keep=size - pad: np.asarray(x)[:keep], out))
        return jax.tree.map(lambda *xs: np.concatenate(xs), *chunks)

    def score(self, params: Any, split: Split, out_dir: str) -> dict[str, float]:
        """The task's scores of `split` (its prediction files under ``out_dir/<split>/``)."""
        return self.task.score(self.predict(params, split), split, os.path.join(out_dir, split.name))


class FeatureEpochEnd(EpochScoring):
    """The feature-based run's epoch ends (`outputs.EpochScoring`: dev every epoch, the
    other eval splits at a best epoch) and one console line (`label`: which layers, how
    combined)."""

    def __init__(
        self,
        job: FeatureTraining,
        evals: list[Split],
        history: EpochHistory,
        *,
        workdir: str,
        label: str,
        num_epochs: int,
    ) -> None:
        super().__init__(job.steps_per_epoch, job.task.main_metric, history, workdir)
        self.job, self.evals, self.label, self.num_epochs = job, evals, label, num_epochs

    def score(self, params: Any, out_dir: str, *, first: bool) -> dict[str, float]:
        dev, *others = self.evals
        if first:
            return self.job.score(params, dev, out_dir)
        scores = {}
        for split in others:
            values = self.job.score(params, split, out_dir)
            scores.update({f"{split.name}/{k}": v for k, v in values.items()})
        return scores

    def finish(self, ctx: StepContext, figures: dict[str, Any], scores: dict[str, float], best: bool) -> None:
        if jax.process_index() == 0:
            metric = self.main_metric
            head = f"features {self.label} epoch {figures['epoch']}/{self.num_epochs}"
            print(
                f"{head}: train loss {figures['train_loss']:.4f}  {metric} {scores[metric]:.4f}"
                f"  ({figures['seconds']:.0f}s)",
                flush=True,
            )
