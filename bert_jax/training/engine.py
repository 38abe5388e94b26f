"""The training engine: the state, where it lives, batches onto the mesh, the jitted steps.

Every job brings an `Objective` (its loss and metrics, with the model inside) and a
parameter initialiser; the engine owns the mechanics both share:

- `TrainState` and its shardings, derived from the modules' logical axis names and the
  run's rules (`sharding`), so the optimizer state shards like its parameters;
- `place_batch`: host rows → global arrays sharded over the batch axes (one helper);
- `train_step`, a pure function jitted once with explicit in/out shardings and the old
  state donated; gradient accumulation is a `lax.scan` over micro-batches inside it,
  each micro-batch's loss divided by whole-batch totals (`Objective.totals`), so k
  micro-batches give exactly the gradient of the whole batch;
- the run's numerics (`settings.TrainingSettings.numerics`) decided once for the mesh's
  platform (`platform`): dtypes, remat, the weight-gradient form, dropout masks, attention.

The loop that drives it (checkpoints, resume, preemption, logging) is `loop.py`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from bert_jax.training import optimizer, sharding

Batch = dict[str, jax.Array]


@flax.struct.dataclass
class TrainState:
    """Everything a resumed run needs besides the data position (which is `step`)."""

    step: jax.Array
    params: Any
    opt_state: Any
    rng: jax.Array  # raw uint32 key data, so orbax can save it


class Objective(Protocol):
    """What a job supplies: its loss, metrics and evaluation (the model is inside)."""

    def totals(self, batch: Batch) -> Any:
        """Normalisers of the whole batch, from its targets only (e.g. the number of
        masked tokens): each micro-batch's loss is divided by them."""

    def loss(self, params: Any, batch: Batch, *, totals: Any, rng: jax.Array) -> tuple[jax.Array, dict]:
        """(loss, metric *sums*) of a (micro-)batch in training mode (dropout from `rng`)."""

    def finalize(self, sums: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """Means from the sums of a whole batch."""

    def eval_outputs(self, params: Any, batch: Batch) -> Any:
        """Deterministic outputs of one batch (metric sums or the head's outputs)."""


def platform(mesh: Mesh) -> str:
    """The mesh's device platform (not this process's: `plan` lowers for a TPU from a CPU
    process): what a run's "auto" numerics are decided for (`Numerics.for_platform`)."""
    return mesh.devices.flat[0].platform


# Programs run once (the state's initialisation) compiled for compile time, per platform.
# On CPUs, LLVM at -O1: the initialisation (every parameter's random draw expanded in the
# program) compiles in ~60% of the time at -O2, to bitwise the same values.
_RUN_ONCE_OPTIONS: dict[str, dict[str, Any]] = {"cpu": {"xla_backend_optimization_level": 1}}


def run_once(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` as one program compiled for compile time (`_RUN_ONCE_OPTIONS`), for
    work done once on the default device (a task model's fresh head): op by op, a model's
    `init` dispatches every parameter's draw on its own (fine-tuning's start with the
    6-layer MiniLM on this project's CPU: ~12 s, against ~2 s compiled)."""
    return jax.jit(fn, compiler_options=_RUN_ONCE_OPTIONS.get(jax.default_backend()))(*args)


def place_batch(mesh: Mesh, rows: dict[str, Any], *, process_local: bool) -> Batch:
    """Host rows → one global array per feature, sharded over the batch axes.

    ``process_local=True``: `rows` are this process's share of the global batch (each host
    reads only its rows; the global batch is the hosts' shares in process order).
    ``process_local=False``: every process holds the whole batch and contributes the
    rows its devices own.
    """
    specs = {k: sharding.batch_sharding(mesh, np.ndim(v)) for k, v in rows.items()}
    if not process_local:
        return place_tree(rows, specs)
    out = {}
    for k, v in rows.items():
        v = np.asarray(v)
        shape = (v.shape[0] * jax.process_count(), *v.shape[1:])
        out[k] = jax.make_array_from_process_local_data(specs[k], v, shape)
    return out


def place_tree(tree: Any, shardings: Any) -> Any:
    """A host pytree (every process holds all of it) → global arrays in their shards."""

    def one(x: Any, s: Any) -> jax.Array:
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, s, lambda index: x[index])

    return jax.tree.map(one, tree, shardings)


def _split_micro(batch: Batch, accum: int) -> Batch:
    return jax.tree.map(lambda x: x.reshape(accum, x.shape[0] // accum, *x.shape[1:]), batch)


def train_step(
    state: TrainState,
    batch: Batch,
    *,
    objective: Objective,
    tx: optax.GradientTransformation,
    schedule: optax.Schedule,
    grad_accum_steps: int,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """One optimizer step over a global batch (split into `grad_accum_steps` micro-batches)."""
    rng, step_rng = jax.random.split(jax.random.wrap_key_data(state.rng))
    totals = objective.totals(batch)

    def loss_fn(params: Any, micro: Batch, dropout_rng: jax.Array) -> tuple[jax.Array, Any]:
        return objective.loss(params, micro, totals=totals, rng=dropout_rng)

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    if grad_accum_steps == 1:
        (_, sums), grads = grad_fn(state.params, batch, step_rng)
    else:
        micro_batches = _split_micro(batch, grad_accum_steps)
        rngs = jax.random.split(step_rng, grad_accum_steps)

        def accumulate(carry: Any, xs: tuple[Batch, jax.Array]) -> tuple[Any, None]:
            (_, sums), grads = grad_fn(state.params, xs[0], xs[1])
            return jax.tree.map(jnp.add, carry, (grads, sums)), None

        first = jax.tree.map(lambda x: x[0], micro_batches)
        zero_sums = jax.eval_shape(lambda: loss_fn(state.params, first, step_rng)[1])
        zeros = jax.tree.map(jnp.zeros_like, (state.params, zero_sums))
        (grads, sums), _ = jax.lax.scan(accumulate, zeros, (micro_batches, rngs))

    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = objective.finalize(sums)
    metrics["grad_norm"] = optimizer.global_norm(grads)
    metrics["learning_rate"] = schedule(state.step)
    new_state = state.replace(
        step=state.step + 1, params=params, opt_state=opt_state, rng=jax.random.key_data(rng)
    )
    return new_state, metrics


class Engine:
    """The optimizer, abstract state, shardings and jitted steps of one job on one mesh.

    Everything is derived from the arguments; nothing is global. Works on real devices
    and on a TPU topology description (abstract devices) alike.

    `init_params(rng)` returns the model's parameters with their logical-axis boxes
    (``model.init(...)["params"]`` under the rules).
    """

    def __init__(
        self,
        *,
        objective: Objective,
        init_params: Callable[[jax.Array], Any],
        tx: optax.GradientTransformation,
        schedule: optax.Schedule,
        mesh: Mesh,
        rules: Sequence[tuple[str, Any]],
        grad_accum_steps: int = 1,
    ) -> None:
        self.objective, self.tx, self.schedule, self.mesh = objective, tx, schedule, mesh
        self.rules = list(rules)
        self.grad_accum_steps = int(grad_accum_steps)
        self._init_params = init_params
        boxed = jax.eval_shape(self._init_boxed, jax.random.key(0))
        sharding.check_param_sharding(boxed.params, mesh, self.rules)
        self.state_shardings = sharding.logical_sharding(boxed, mesh, self.rules)
        self.abstract_state = jax.tree.map(
            lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
            nn.meta.unbox(boxed),
            self.state_shardings,
        )

    def _init_boxed(self, rng: jax.Array) -> TrainState:
        """State with Partitioned boxes: optax's tree maps keep them, so the optimizer
        state inherits each parameter's logical axes."""
        with nn.logical_axis_rules(self.rules):
            params = self._init_params(rng)
        return self._fresh_state(params, rng)

    def _fresh_state(self, params: Any, rng: jax.Array) -> TrainState:
        """Step 0: `params`, the optimizer state started from them, a dropout key from `rng`."""
        return TrainState(
            step=jnp.zeros((), jnp.int32),
            params=params,
            opt_state=self.tx.init(params),
            rng=jax.random.key_data(jax.random.fold_in(rng, 1)),
        )

    def init_state(self, seed: int, params: Any = None) -> TrainState:
        """Concrete state, created directly in its shards (never whole on one device).

        With `params` (host arrays, e.g. a pre-trained encoder under a fresh head) those
        are the parameters (in the run's parameter dtype); the optimizer state starts from them.
        """
        key = jax.random.key(seed)
        options = _RUN_ONCE_OPTIONS.get(platform(self.mesh))
        with jax.set_mesh(self.mesh):
            if params is None:
                init = lambda rng: nn.meta.unbox(self._init_boxed(rng))
                return jax.jit(init, out_shardings=self.state_shardings, compiler_options=options)(key)
            params = jax.tree.map(lambda x, a: np.asarray(x, a.dtype), params, self.abstract_state.params)
            placed = place_tree(params, self.state_shardings.params)
            # The key an argument, not a constant: every seed runs the same program (a
            # sweep's seeds find it in the persistent cache).
            fresh = jax.jit(self._fresh_state, out_shardings=self.state_shardings, compiler_options=options)
            return fresh(placed, key)

    def place(self, rows: dict[str, Any], *, process_local: bool = True) -> Batch:
        return place_batch(self.mesh, rows, process_local=process_local)

    def _with_rules(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        rules = self.rules

        def call(*args: Any) -> Any:
            with nn.logical_axis_rules(rules):
                return fn(*args)

        return call

    @functools.cached_property
    def train_step(self) -> Callable[[TrainState, Batch], tuple[TrainState, dict]]:
        """`train_step` jitted with the state's shardings in and out (the old one donated)."""
        step = functools.partial(
            train_step,
            objective=self.objective,
            tx=self.tx,
            schedule=self.schedule,
            grad_accum_steps=self.grad_accum_steps,
        )
        jitted = jax.jit(
            self._with_rules(step),
            in_shardings=(self.state_shardings, sharding.batch_sharding(self.mesh, 1)),
            out_shardings=(self.state_shardings, sharding.replicated(self.mesh)),
            donate_argnums=(0,),
        )
        return self._in_mesh(jitted)

    @functools.cached_property
    def eval_step(self) -> Callable[[Any, Batch], Any]:
        """`Objective.eval_outputs` jitted: (params, batch) → replicated outputs."""
        jitted = jax.jit(
            self._with_rules(self.objective.eval_outputs),
            in_shardings=(self.state_shardings.params, sharding.batch_sharding(self.mesh, 1)),
            out_shardings=sharding.replicated(self.mesh),
        )
        return self._in_mesh(jitted)

    def _in_mesh(self, fn: Any) -> Any:
        """Calls under the mesh (the activations' logical constraints need it); the jitted
        function stays reachable as ``.jitted`` (and ``.lower``) for ahead-of-time use."""
        mesh = self.mesh

        def call(*args: Any) -> Any:
            with jax.set_mesh(mesh):
                return fn(*args)

        call.jitted = fn  # type: ignore[attr-defined]
        call.lower = fn.lower  # type: ignore[attr-defined]
        return call

    def compile_train_step(self, abstract_batch: dict[str, jax.ShapeDtypeStruct]) -> Any:
        """The train step compiled ahead of time for abstract inputs (used by `plan`)."""
        with jax.set_mesh(self.mesh):
            return self.train_step.jitted.lower(self.abstract_state, abstract_batch).compile()

    def abstract_batch(self, shapes: dict[str, tuple[tuple[int, ...], Any]]) -> dict[str, Any]:
        """ShapeDtypeStructs with the batch sharding, from {name: (shape, dtype)}."""
        return {
            k: jax.ShapeDtypeStruct(shape, dtype, sharding=sharding.batch_sharding(self.mesh, len(shape)))
            for k, (shape, dtype) in shapes.items()
        }
