"""Pre-training (Devlin et al., 2019, §3.1 and §A.2): the loss, the pure steps, the state.

``train_step(state, batch)`` is a pure function, jitted once with explicit in/out
shardings over the mesh (`make_train_step`); gradient accumulation is a `lax.scan` over
micro-batches inside it, normalised so that k micro-batches give exactly the gradient of
the whole batch. The loop that drives it lives in `trainer.py`.

Loss: masked-LM cross-entropy at the masked positions, weighted by ``masked_lm_weights``
and averaged over the real predictions of the whole batch, plus next-sentence
cross-entropy (left out when ``config.data.nsp`` is False, the paper's "No NSP" ablation).
"""

from __future__ import annotations

import functools
from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding

from bert_jax import ops, optim, sharding
from bert_jax.config import BertConfig
from bert_jax.heads import BertForPreTraining

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


@flax.struct.dataclass
class TrainState:
    """Everything a resumed run needs besides the data position (which is `step`)."""

    step: jax.Array
    params: Any
    opt_state: Any
    rng: jax.Array  # raw uint32 key data, so orbax can save it


def bert_config(config: ml_collections.ConfigDict) -> BertConfig:
    """The model shape of a run config (`config.model`), with the run's compute dtype."""
    model = config.model.to_dict()
    if config.get("compute_dtype"):
        model["dtype"] = config.compute_dtype
    if config.get("remat_policy"):
        model["remat_policy"] = config.remat_policy
    return BertConfig.from_dict(model)


def uses_nsp(config: ml_collections.ConfigDict) -> bool:
    return bool(config.get("data", {}).get("nsp", True))


def pretraining_loss(
    mlm_logits: jax.Array,
    nsp_logits: jax.Array,
    batch: Batch,
    *,
    total_mlm_weight: jax.Array,
    batch_size: int,
    nsp: bool,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Loss normalised by whole-batch totals, so micro-batch losses and grads simply add.

    Returns the loss and *sums* (not means) of the metrics; `finalize_metrics` divides.
    """
    weights = batch["masked_lm_weights"].astype(jnp.float32)
    # Loss and "label is the top logit" in one pass, with a one-pass gradient (`ops`).
    mlm_ce, mlm_top = ops.softmax_cross_entropy(mlm_logits, batch["masked_lm_ids"])
    mlm_correct = mlm_top * weights
    nsp_ce = optax.softmax_cross_entropy_with_integer_labels(nsp_logits, batch["next_sentence_labels"])
    nsp_correct = jnp.argmax(nsp_logits, -1) == batch["next_sentence_labels"]
    mlm_sum = jnp.sum(mlm_ce * weights)
    loss = mlm_sum / total_mlm_weight
    if nsp:
        loss = loss + jnp.sum(nsp_ce) / batch_size
    sums = {
        "mlm_loss_sum": mlm_sum,
        "mlm_correct": jnp.sum(mlm_correct),
        "mlm_weight": jnp.sum(weights),
        "nsp_loss_sum": jnp.sum(nsp_ce),
        "nsp_correct": jnp.sum(nsp_correct.astype(jnp.float32)),
        "examples": jnp.asarray(nsp_ce.shape[0], jnp.float32),
    }
    return loss, sums


def finalize_metrics(sums: dict[str, jax.Array], nsp: bool) -> dict[str, jax.Array]:
    """Means from sums; the total loss is MLM + NSP as optimised."""
    w = jnp.maximum(sums["mlm_weight"], 1.0)
    n = jnp.maximum(sums["examples"], 1.0)
    out = {
        "mlm_loss": sums["mlm_loss_sum"] / w,
        "mlm_accuracy": sums["mlm_correct"] / w,
        "nsp_loss": sums["nsp_loss_sum"] / n,
        "nsp_accuracy": sums["nsp_correct"] / n,
    }
    out["loss"] = out["mlm_loss"] + (out["nsp_loss"] if nsp else 0.0)
    return out


def _split_micro(batch: Batch, accum: int) -> Batch:
    return jax.tree.map(lambda x: x.reshape(accum, x.shape[0] // accum, *x.shape[1:]), batch)


def train_step(
    state: TrainState,
    batch: Batch,
    *,
    model: BertForPreTraining,
    tx: optax.GradientTransformation,
    schedule: optax.Schedule,
    grad_accum_steps: int,
    nsp: bool,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """One optimizer step over a global batch (split into `grad_accum_steps` micro-batches)."""
    rng, step_rng = jax.random.split(jax.random.wrap_key_data(state.rng))
    total_weight = jnp.maximum(jnp.sum(batch["masked_lm_weights"].astype(jnp.float32)), 1.0)
    batch_size = batch["input_ids"].shape[0]

    def loss_fn(params: Any, micro: Batch, dropout_rng: jax.Array) -> tuple[jax.Array, Any]:
        mlm_logits, nsp_logits = model.apply(
            {"params": params},
            micro["input_ids"],
            micro["input_mask"],
            micro["segment_ids"],
            micro["masked_lm_positions"],
            deterministic=False,
            rngs={"dropout": dropout_rng},
        )
        return pretraining_loss(
            mlm_logits,
            nsp_logits,
            micro,
            total_mlm_weight=total_weight,
            batch_size=batch_size,
            nsp=nsp,
        )

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    if grad_accum_steps == 1:
        (_, sums), grads = grad_fn(state.params, batch, step_rng)
    else:
        micro_batches = _split_micro(batch, grad_accum_steps)
        rngs = jax.random.split(step_rng, grad_accum_steps)

        def accumulate(carry: Any, xs: tuple[Batch, jax.Array]) -> tuple[Any, None]:
            grads_acc, sums_acc = carry
            (_, sums), grads = grad_fn(state.params, xs[0], xs[1])
            return (
                jax.tree.map(jnp.add, grads_acc, grads),
                jax.tree.map(jnp.add, sums_acc, sums),
            ), None

        zeros = jax.tree.map(jnp.zeros_like, state.params)
        zero_sums = jax.tree.map(
            jnp.zeros_like, jax.eval_shape(lambda: grad_fn(state.params, batch, step_rng)[0][1])
        )
        (grads, sums), _ = jax.lax.scan(accumulate, (zeros, zero_sums), (micro_batches, rngs))
        sums["examples"] = jnp.asarray(batch_size, jnp.float32)

    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = finalize_metrics(sums, nsp)
    metrics["grad_norm"] = optax.global_norm(grads)
    metrics["learning_rate"] = schedule(state.step)
    new_state = state.replace(
        step=state.step + 1, params=params, opt_state=opt_state, rng=jax.random.key_data(rng)
    )
    return new_state, metrics


def eval_step(params: Any, batch: Batch, *, model: BertForPreTraining, nsp: bool) -> dict:
    """Metric sums on one eval batch (deterministic: no dropout)."""
    mlm_logits, nsp_logits = model.apply(
        {"params": params},
        batch["input_ids"],
        batch["input_mask"],
        batch["segment_ids"],
        batch["masked_lm_positions"],
        deterministic=True,
    )
    total = jnp.maximum(jnp.sum(batch["masked_lm_weights"].astype(jnp.float32)), 1.0)
    _, sums = pretraining_loss(
        mlm_logits,
        nsp_logits,
        batch,
        total_mlm_weight=total,
        batch_size=batch["input_ids"].shape[0],
        nsp=nsp,
    )
    return sums


# --------------------------------------------------------------------------- state & jit


class Setup:
    """The model, optimizer, abstract state and shardings of one run on one mesh.

    Everything here is derived from (config, mesh); nothing is global. Works on real
    devices and on a TPU topology description (abstract devices) alike.
    """

    def __init__(self, config: ml_collections.ConfigDict, mesh: Mesh) -> None:
        self.config = config
        self.mesh = mesh
        self.rules = list(sharding.LOGICAL_AXIS_RULES)
        self.model_config = bert_config(config)
        # "auto" is resolved for the mesh's devices, not this process's (`plan` lowers
        # for a TPU from a CPU process); the saved config keeps "auto".
        platform = mesh.devices.flat[0].platform
        self.model = BertForPreTraining(self.model_config.for_platform(platform))
        self.tx, self.schedule = optim.create_optimizer(config)
        self.nsp = uses_nsp(config)
        self._maskers: dict[int, Any] = {}
        boxed = jax.eval_shape(self._init_boxed, jax.random.key(0))
        self.state_shardings = sharding.logical_sharding(boxed, mesh, self.rules)
        self.abstract_state = jax.tree.map(
            lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
            nn.meta.unbox(boxed),
            self.state_shardings,
        )

    def _init_boxed(self, rng: jax.Array) -> TrainState:
        """State with Partitioned boxes: optax's tree maps keep them, so the optimizer
        state inherits each parameter's logical axes."""
        seq = 8
        ids = jnp.zeros((1, seq), jnp.int32)
        with nn.logical_axis_rules(self.rules):
            params = self.model.init(rng, ids, ids, ids, jnp.zeros((1, 2), jnp.int32), deterministic=True)[
                "params"
            ]
        opt_state = self.tx.init(params)
        return TrainState(
            step=jnp.zeros((), jnp.int32),
            params=params,
            opt_state=opt_state,
            rng=jax.random.key_data(jax.random.fold_in(rng, 1)),
        )

    def init_state(self, seed: int) -> TrainState:
        """Concrete state, created directly in its shards (never whole on one device)."""
        fn = jax.jit(lambda rng: nn.meta.unbox(self._init_boxed(rng)), out_shardings=self.state_shardings)
        with jax.set_mesh(self.mesh):
            return fn(jax.random.key(seed))

    def batch_shardings(self, batch_like: dict[str, Any]) -> dict[str, NamedSharding]:
        return {k: sharding.batch_sharding(self.mesh, v.ndim) for k, v in batch_like.items()}

    def abstract_batch(
        self, global_batch_size: int, max_seq_length: int, max_predictions: int
    ) -> dict[str, jax.ShapeDtypeStruct]:
        b, s, p = global_batch_size, max_seq_length, max_predictions
        shapes = {
            "input_ids": ((b, s), jnp.int32),
            "input_mask": ((b, s), jnp.int32),
            "segment_ids": ((b, s), jnp.int32),
            "masked_lm_positions": ((b, p), jnp.int32),
            "masked_lm_ids": ((b, p), jnp.int32),
            "masked_lm_weights": ((b, p), jnp.float32),
            "next_sentence_labels": ((b,), jnp.int32),
        }
        structs = {k: jax.ShapeDtypeStruct(shp, dt) for k, (shp, dt) in shapes.items()}
        shard = self.batch_shardings(structs)
        return {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=shard[k]) for k, v in structs.items()}

    @functools.cached_property
    def train_step(self) -> Any:
        """`train_step` jitted with the state's shardings in and out (donated)."""
        step = functools.partial(
            train_step,
            model=self.model,
            tx=self.tx,
            schedule=self.schedule,
            grad_accum_steps=int(self.config.get("grad_accum_steps", 1)),
            nsp=self.nsp,
        )
        batch_spec = sharding.batch_sharding(self.mesh, 1)  # a prefix for every feature
        rules = self.rules

        def step_with_rules(state: TrainState, batch: Batch) -> Any:
            with nn.logical_axis_rules(rules):
                return step(state, batch)

        return jax.jit(
            step_with_rules,
            in_shardings=(self.state_shardings, batch_spec),
            out_shardings=(self.state_shardings, sharding.replicated(self.mesh)),
            donate_argnums=(0,),
        )

    @functools.cached_property
    def eval_step(self) -> Any:
        rules = self.rules
        model, nsp = self.model, self.nsp

        def step(params: Any, batch: Batch) -> Any:
            with nn.logical_axis_rules(rules):
                return eval_step(params, batch, model=model, nsp=nsp)

        return jax.jit(
            step,
            in_shardings=(
                self.state_shardings.params,
                sharding.batch_sharding(self.mesh, 1),
            ),
            out_shardings=sharding.replicated(self.mesh),
        )

    def masker(self, max_predictions: int) -> Any:
        """The data config's masking, jitted over the mesh (one per prediction count)."""
        if max_predictions not in self._maskers:
            from bert_jax import input_pipeline, masking

            spec, table = input_pipeline.masking_spec(self.config.data, max_predictions)
            fn = functools.partial(masking.mask_batch, spec=spec, is_continuation=table)
            self._maskers[max_predictions] = jax.jit(
                fn,
                out_shardings={
                    k: sharding.batch_sharding(self.mesh, 1 if k == "next_sentence_labels" else 2)
                    for k in BATCH_KEYS
                },
            )
        return self._maskers[max_predictions]

    def global_batch(self, local: dict[str, np.ndarray], max_predictions: int | None = None) -> Batch:
        """Host-local numpy rows → one global array per feature, sharded over the batch.

        Unmasked rows (prepared data) are masked on the devices here, for `max_predictions`
        predictions per sequence; already masked rows (TFRecords, synthetic) pass through.
        """
        from bert_jax import masking

        raw = "masked_lm_positions" not in local
        process_count = jax.process_count()
        out = {}
        for k in masking.RAW_KEYS if raw else BATCH_KEYS:
            v = np.asarray(local[k])
            global_shape = (v.shape[0] * process_count, *v.shape[1:])
            out[k] = jax.make_array_from_process_local_data(
                sharding.batch_sharding(self.mesh, v.ndim), v, global_shape
            )
        if not raw:
            return out
        if max_predictions is None:
            raise ValueError("unmasked rows need max_predictions to be masked")
        return self.masker(max_predictions)(out)

    def compile_train_step(self, global_batch_size: int, max_seq_length: int, max_predictions: int) -> Any:
        """Ahead-of-time compiled train step for abstract inputs (used by `plan`)."""
        batch = self.abstract_batch(global_batch_size, max_seq_length, max_predictions)
        with jax.set_mesh(self.mesh):
            return self.train_step.lower(self.abstract_state, batch).compile()


def model_flops_per_step(
    config: BertConfig, batch_size: int, seq_len: int, num_predictions: int, nsp: bool = True
) -> float:
    """Training FLOPs (forward + backward = 3x forward) of the model's matmuls per step.

    Counts the encoder's dense layers and attention over all tokens, the pooler/NSP head,
    and the MLM head (transform + tied decoder) at the `num_predictions` masked positions
    only — the work this implementation actually does.
    """
    h, f, v, n = (
        config.hidden_size,
        config.intermediate_size,
        config.vocab_size,
        config.num_hidden_layers,
    )
    tokens = batch_size * seq_len
    encoder = n * (2 * (4 * h * h + 2 * h * f) * tokens + 2 * 2 * batch_size * seq_len * seq_len * h)
    mlm = 2 * (h * h + h * v) * batch_size * num_predictions
    pooled = 2 * (h * h + 2 * h) * batch_size if nsp else 0
    return 3.0 * (encoder + mlm + pooled)
