"""The optimizer of the paper (§A.2): AdamW, linear warmup then linear decay, clipping.

Learning-rate schedules (`SCHEDULES`): ``linear`` (the paper's); ``one_cycle`` (Smith &
Topin, 2019; the budget schedules of Cramming: cosine up to the peak at ``warmup_steps``,
cosine down to ~0 at the last step, optax's `cosine_onecycle_schedule`); ``wsd``
(warm-up, stable, decay: the trapezoid of MiniCPM and ModernBERT: linear warm-up, the
peak held, then linear decay to 0 over the last ``decay_fraction`` of steps).

β1 0.9, β2 0.999, ε 1e-6, weight decay 0.01 on every weight matrix but none on
LayerNorm parameters and biases (as the original `AdamWeightDecayOptimizer`), global-norm
clipping at 1.0. LAMB (You et al., 2020) is the option for large batches. StableAdamW
(Wortsman et al., 2023; ModernBERT's optimizer) is AdamW with AdaFactor's update clipping:
each tensor's step size is divided by max(1, RMS(g / sqrt(v̂))), its gradient measured
against its own second moment, so a tensor whose gradient jumps past what the moments
expect takes a smaller step (weight decay the same as AdamW's, lr × weight_decay a step,
and shrunk with it: optimi's `StableAdamW`, which the tests compare against). Gradient
accumulation is done in the train step (`engine.py`), not with `optax.MultiSteps`, so that
the micro-batch loop stays inside one compiled program.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

SCHEDULES = ("linear", "one_cycle", "wsd")
OPTIMIZERS = ("adamw", "lamb", "stable_adamw")


def learning_rate_schedule(
    peak: float,
    warmup_steps: int,
    total_steps: int,
    end_value: float = 0.0,
    kind: str = "linear",
    decay_fraction: float = 0.2,
) -> optax.Schedule:
    """Linear warmup from 0 to `peak` over `warmup_steps`, then linear decay to `end_value`
    (``kind="linear"``); or the ``one_cycle`` / ``wsd`` shapes of the module docstring."""
    if kind not in SCHEDULES:
        raise ValueError(f"config.lr_schedule={kind!r}: choose one of {', '.join(SCHEDULES)}")
    warmup_steps = max(0, min(int(warmup_steps), int(total_steps)))
    total_steps = int(total_steps)
    if kind == "one_cycle":
        return optax.cosine_onecycle_schedule(
            max(total_steps, 1), peak, pct_start=max(warmup_steps, 1) / max(total_steps, 1), div_factor=1e4
        )
    if kind == "wsd":
        if not 0.0 < decay_fraction <= 1.0:
            raise ValueError(f"config.lr_decay_fraction={decay_fraction}: must be in (0, 1]")
        decay_start = max(warmup_steps, total_steps - round(total_steps * decay_fraction))
        return optax.join_schedules(
            [
                optax.linear_schedule(0.0, peak, max(warmup_steps, 1)),
                optax.constant_schedule(peak),
                optax.linear_schedule(peak, end_value, max(total_steps - decay_start, 1)),
            ],
            boundaries=[warmup_steps, decay_start],
        )
    return optax.join_schedules(
        [
            optax.linear_schedule(0.0, peak, max(warmup_steps, 1)),
            optax.linear_schedule(peak, end_value, max(int(total_steps) - warmup_steps, 1)),
        ],
        boundaries=[warmup_steps],
    )


def decay_mask(params: Any) -> Any:
    """True for parameters that get weight decay: every kernel/embedding, no bias, LayerNorm
    or gain.

    Decided by the leaf's path: a leaf named ``bias`` or living under a module whose name
    contains ``LayerNorm`` is excluded (``scale`` only exists in LayerNorms), as is the
    one learned gain of scaled sinusoidal positions (``position_scale``).
    """

    def decays(path: tuple[Any, ...], _: Any) -> bool:
        # Dict keys only: a Partitioned box adds an attribute key (`.value`) to the path.
        names = [str(k.key) for k in path if hasattr(k, "key")]
        if names[-1] in ("bias", "scale", "position_scale"):
            return False
        return not any("LayerNorm" in n for n in names)

    return jax.tree_util.tree_map_with_path(decays, params)


SMALL_TENSOR = 4096  # values: `global_norm` sums the squares of tensors this size or less as one


def global_norm(tree: Any) -> jax.Array:
    """``optax.global_norm``, with the tensors of at most `SMALL_TENSOR` values (biases,
    LayerNorm parameters: 129 of BERT-Base's 206) squared and summed as one vector.

    Per tensor, XLA launches one reduction kernel each on a GPU; these small ones take
    about as long as a large one's (launch and ramp-up, not bytes), so BERT-Base's step
    launches ~120 fewer kernels (`bench/gpu_compile.py`). The concatenation is fused into
    the reduction (no bytes added). Sums in float32 (optax: in the leaf's dtype); the order
    of the additions differs, the value only by rounding.
    """
    leaves = jax.tree.leaves(tree)
    small = [x.astype(jnp.float32).ravel() for x in leaves if x.size <= SMALL_TENSOR]
    squares = [jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves if x.size > SMALL_TENSOR]
    if small:
        squares.append(jnp.sum(jnp.square(jnp.concatenate(small))))
    return jnp.sqrt(sum(squares, jnp.zeros([], jnp.float32)))


class AdamWState(NamedTuple):
    count: jax.Array  # steps taken
    mu: Any  # first moments
    nu: Any  # second moments


def fused_adamw(
    learning_rate: optax.Schedule,
    b1: float,
    b2: float,
    eps: float,
    weight_decay: float,
    mask: Any,
    clip_norm: float = 0.0,
    update_clipping: bool = False,
) -> optax.GradientTransformation:
    """``clip_by_global_norm(clip_norm)`` then ``optax.adamw``, as one transformation;
    with `update_clipping`, StableAdamW (the module docstring).

    Same arithmetic as the optax chain (tests compare them), written so that XLA emits one
    elementwise pass per parameter for clipping, both moments, bias correction, decay and
    learning rate: in the chain each stage is its own pass over every parameter, which is
    ~10% of a BERT-Base step on CPU (memory-bound). `mask` is a tree of booleans or a
    function of the params giving one (True: decay).
    """

    def init(params: Any) -> AdamWState:
        zeros = jax.tree.map(jnp.zeros_like, params)
        return AdamWState(jnp.zeros([], jnp.int32), zeros, jax.tree.map(jnp.zeros_like, params))

    def update(grads: Any, state: AdamWState, params: Any = None) -> tuple[Any, AdamWState]:
        if params is None:
            raise ValueError("fused_adamw needs the params (weight decay)")
        count = optax.safe_increment(state.count)
        lr = learning_rate(state.count)
        c1 = 1.0 - jnp.asarray(b1, jnp.float32) ** count
        c2 = 1.0 - jnp.asarray(b2, jnp.float32) ** count
        if clip_norm > 0:
            norm = global_norm(grads)
            scale = jnp.where(norm < clip_norm, 1.0, clip_norm / norm)
        else:
            scale = jnp.ones([], jnp.float32)
        decay = mask(params) if callable(mask) else mask

        def one(g: jax.Array, m: jax.Array, v: jax.Array, p: jax.Array, d: bool) -> tuple:
            g = g * scale.astype(g.dtype)
            m = b1 * m + (1.0 - b1) * g
            v = b2 * v + (1.0 - b2) * g * g
            v_hat = v / c2
            u = (m / c1) / (jnp.sqrt(v_hat) + eps)
            if d and weight_decay:
                u = u + weight_decay * p
            step = lr
            if update_clipping:  # this tensor's gradient against its own second moment
                rms = jnp.sqrt(jnp.mean(jnp.square(g) / jnp.maximum(v_hat, eps * eps)))
                step = lr / jnp.maximum(1.0, rms)
            return (-step * u).astype(p.dtype), m, v

        out = jax.tree.map(one, grads, state.mu, state.nu, params, decay)
        is_triple = lambda x: isinstance(x, tuple) and len(x) == 3
        pick = lambda i: jax.tree.map(lambda t: t[i], out, is_leaf=is_triple)
        return pick(0), AdamWState(count, pick(1), pick(2))

    return optax.GradientTransformation(init, update)


def create_optimizer(
    *,
    name: str,
    learning_rate: float,
    warmup_steps: int,
    total_steps: int,
    weight_decay: float,
    b1: float,
    b2: float,
    eps: float,
    clip_norm: float,
    schedule: str = "linear",
    decay_fraction: float = 0.2,
) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """The optimizer and its learning-rate schedule.

    `name` is "adamw" (the fused AdamW above), "stable_adamw" (the same with update
    clipping) or "lamb"; `clip_norm` 0 disables clipping.
    Weight decay skips LayerNorm parameters and biases (`decay_mask`). `schedule`: one of
    `SCHEDULES` (`decay_fraction`: the decay share of ``wsd``).
    """
    schedule = learning_rate_schedule(
        learning_rate, warmup_steps, total_steps, kind=schedule, decay_fraction=decay_fraction
    )
    kwargs = dict(learning_rate=schedule, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=decay_mask)
    if name in ("adamw", "stable_adamw"):
        return fused_adamw(clip_norm=clip_norm, update_clipping=name == "stable_adamw", **kwargs), schedule
    if name != "lamb":
        raise ValueError(f"config.optimizer={name!r}: choose one of {', '.join(OPTIMIZERS)}")
    tx = optax.lamb(**kwargs)
    if clip_norm > 0:
        tx = optax.chain(optax.clip_by_global_norm(clip_norm), tx)
    return tx, schedule
