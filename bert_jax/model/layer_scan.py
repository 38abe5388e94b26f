"""The encoder's layers, unrolled or scanned (`Numerics.layer_loop`: "scan" compiles one
layer body for all, parameters stacked; much faster compilation for deep models), and
conversion between the scanned and per-layer parameter layouts.

A scanned body must be the same function at every step, so layers that differ are kept
out of the stack or grouped:

- a first layer without an attention LayerNorm (``first_layer_attention_norm=False``) is
  run on its own (``encoder/layer_0``);
- with alternating local/global attention (`BertConfig.global_attn_every_n_layers` = n >
  1) the scan runs over groups of n consecutive layers, each group one step: its layers
  are ``encoder/layers/layer_k`` (k < n) with a leading [groups] axis, and every group has
  the same windows in the same places (layer i's window depends on i mod n only);
- layers left over after whole groups are run on their own (``encoder/layer_i``).

Without either, the stack is the original ``encoder/layers/layer`` with a leading [L] axis.
Models exported from a run always hold per-layer names (`unstack_layers`), whatever it scanned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.model.attention import AttentionMask
from bert_jax.model.config import BertConfig
from bert_jax.model.encoder_layer import BertLayer
from bert_jax.model.numerics import Numerics

Array = jax.Array
# (sin, cos) tables of the global layers and of the local layers (`layers.rotary_tables`).
Ropes = tuple[tuple[Array, Array], tuple[Array, Array]] | None


# What ``remat_policy="selective"`` keeps of a layer for its backward pass (the values
# `encoder_layer` and `self_attention` name with `checkpoint_name`): the inputs of its
# matmuls and of its LayerNorms, in the compute dtype. The rest is recomputed from them:
# LayerNorm statistics, the attention scores (one [S, S] matmul per head), softmax and the
# dropout masks (the "hash" masks cost a few integer operations an element). Selective
# activation recomputation, as Korthikanti et al. (2022) name it: the [B, N, S, S] float32
# probabilities, their compute-dtype copy and the dropout mask are not kept between passes.
SELECTIVE_SAVED = ("attention_qkv", "attention_context", "norm_input", "ffn_hidden", "ffn_activated")
# Primitives whose outputs a fused attention kernel's backward reads (its output and
# softmax statistics; cuDNN's and the Pallas kernels'): kept, or the backward pass would
# run the kernel's forward again.
_FUSED_ATTENTION = frozenset(
    {"dot_product_attention_fwd_wrapper", "dot_product_attention_fwd", "pallas_call"}
)


def _selective(prim: Any, *_: Any, **params: Any) -> bool:
    """The ``selective`` policy: whether `nn.remat` keeps this primitive's outputs."""
    if prim.name == "name":  # a value named by `jax.ad_checkpoint.checkpoint_name`
        return params["name"] in SELECTIVE_SAVED
    return prim.name in _FUSED_ATTENTION


def _remat(policy: str) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Wraps a layer class in `nn.remat` per the run's policy (or not at all)."""
    if policy == "none":
        return lambda cls: cls
    policies = {
        "full": jax.checkpoint_policies.nothing_saveable,
        "dots": jax.checkpoint_policies.checkpoint_dots,
        "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
        "selective": _selective,
    }
    # Argument 3 (deterministic) is a Python bool: static.
    return lambda cls: nn.remat(cls, policy=policies[policy], static_argnums=(3,))


def scan_plan(config: BertConfig) -> tuple[int, int, int]:
    """(layers run before the stack, layers per scanned step, scanned steps)."""
    head = 0 if config.first_layer_attention_norm else 1
    if config.layer_types is not None:
        period = _pattern_period(config, head)
    else:
        period = config.global_attn_every_n_layers if config.has_local_layers else 1
    return head, period, (config.num_hidden_layers - head) // period


def _pattern_period(config: BertConfig, head: int) -> int:
    """The shortest group of layers after `head` whose windows repeat over at least two
    groups (an explicit `layer_types` pattern); else every layer in one group."""
    windows = [layer_window(config, i) for i in range(head, config.num_hidden_layers)]
    for period in range(1, len(windows) // 2 + 1):
        whole = len(windows) // period * period
        if all(windows[i] == windows[i % period] for i in range(whole)):
            return period
    return max(len(windows), 1)


def layer_window(config: BertConfig, index: int) -> int | None:
    """Layer `index`'s attention window (None: global attention)."""
    return config.layer_window(index) if config.has_local_layers else None


def run_layer(
    config: BertConfig,
    numerics: Numerics,
    index: int,
    name: str,
    x: Array,
    mask: AttentionMask | Array,
    deterministic: bool,
    ropes: Ropes,
    **deferred: Any,
) -> Any:
    """Layer `index` (its window, attention norm and rotary tables) applied to `x`;
    ``deferred``: `BertLayer`'s ``pending`` and ``defer`` (what chained layers hand each
    other: `encoder_layers`)."""
    window = layer_window(config, index)
    norm = index > 0 or config.first_layer_attention_norm
    layer = _remat(numerics.remat_policy)(BertLayer)(config, numerics, window, norm, name=name)
    rope = None if ropes is None else ropes[0 if window is None else 1]
    return layer(x, mask, deterministic, rope, **deferred)


class _ScannedGroup(nn.Module):
    """`period` consecutive layers from `start` in the (carry, outputs) form of `nn.scan`."""

    config: BertConfig
    numerics: Numerics
    output_hidden_states: bool
    start: int
    period: int

    @nn.compact
    def __call__(
        self, x: Array, mask: AttentionMask | Array, deterministic: bool, ropes: Ropes
    ) -> tuple[Array, Any]:
        outputs = []
        for k in range(self.period):
            name = "layer" if self.period == 1 else f"layer_{k}"
            x = run_layer(self.config, self.numerics, self.start + k, name, x, mask, deterministic, ropes)
            outputs.append(x if self.output_hidden_states else None)
        return x, tuple(outputs)


def encoder_layers(
    config: BertConfig,
    numerics: Numerics,
    x: Array,
    mask: AttentionMask | Array,
    deterministic: bool,
    output_hidden_states: bool,
    ropes: Ropes,
    chained: bool = False,
) -> tuple[Array, list[Array], Array | None]:
    """Every layer of the encoder, in order (scanned as `scan_plan` says when
    ``numerics.scanned``), built in the calling module's scope (call it from the encoder's
    compact ``__call__``); returns the last output, each layer's output and, pre-LN with
    ``chained`` (`residual_norm.chains_layers`: unrolled, no hidden states), the last
    layer's residual add left undone (the output is x + that). Chained, each layer hands
    the next its ``pending`` part (`BertLayer`): pre-LN a residual add, post-LN its output's
    second copy (the last post-LN layer returns its output once)."""
    c, num = config, numerics
    if chained:
        pending = None
        for i in range(c.num_hidden_layers):
            name = f"layer_{i}"
            defer = c.pre_layer_norm or i < c.num_hidden_layers - 1
            out = run_layer(c, num, i, name, x, mask, deterministic, ropes, pending=pending, defer=defer)
            x, pending = out if defer else (out, None)
        return x, [], pending
    head, period, groups = scan_plan(c) if num.scanned else (c.num_hidden_layers, 1, 0)
    outputs = []
    for i in range(head):
        x = run_layer(c, num, i, f"layer_{i}", x, mask, deterministic, ropes)
        outputs.append(x)
    if groups:
        scanned = nn.scan(
            _ScannedGroup,
            variable_axes={"params": 0},
            split_rngs={"params": True, "dropout": True},
            in_axes=(nn.broadcast, nn.broadcast, nn.broadcast),
            length=groups,
            metadata_params={nn.PARTITION_NAME: "layers"},
        )
        x, ys = scanned(c, num, output_hidden_states, head, period, name="layers")(
            x, mask, deterministic, ropes
        )
        if output_hidden_states:
            outputs += [ys[k][g] for g in range(groups) for k in range(period)]
    for i in range(head + groups * period, c.num_hidden_layers):
        x = run_layer(c, num, i, f"layer_{i}", x, mask, deterministic, ropes)
        outputs.append(x)
    return x, outputs, None


def _scanned_names(scanned: dict) -> list[str]:
    return ["layer"] if "layer" in scanned else [f"layer_{k}" for k in range(len(scanned))]


def unstack_layers(params: Any, num_layers: int) -> Any:
    """Scanned encoder params (``encoder/layers/layer[_k]/...`` with a leading axis) →
    per-layer names (``encoder/layer_i/...``); the layout is read from the tree (layers
    run on their own before the stack are ``layer_0`` ...). Anything else passes through."""
    if "encoder" in params and "layers" in params["encoder"]:
        scanned = params["encoder"]["layers"]
        rest = {k: v for k, v in params["encoder"].items() if k != "layers"}
        head = 0
        while f"layer_{head}" in rest:
            head += 1
        names = _scanned_names(scanned)
        groups = jax.tree.leaves(scanned[names[0]])[0].shape[0]
        encoder = {
            f"layer_{head + g * len(names) + k}": jax.tree.map(lambda x, g=g: x[g], scanned[name])
            for g in range(groups)
            for k, name in enumerate(names)
        }
        return {**params, "encoder": {**encoder, **rest}}
    return {k: unstack_layers(v, num_layers) if isinstance(v, dict) else v for k, v in params.items()}


def stack_layers(params: Any, num_layers: int, config: BertConfig | None = None) -> Any:
    """Inverse of `unstack_layers`: per-layer encoder params → the scanned layout of
    `config` (`scan_plan`; without a config, every layer in one ``layers/layer`` stack)."""
    if "encoder" in params and "layer_0" in params["encoder"]:
        head, period, groups = scan_plan(config) if config is not None else (0, 1, num_layers)
        enc = params["encoder"]
        names = ["layer"] if period == 1 else [f"layer_{k}" for k in range(period)]
        scanned = {
            name: jax.tree.map(
                lambda *xs: jnp.stack(xs), *(enc[f"layer_{head + g * period + k}"] for g in range(groups))
            )
            for k, name in enumerate(names)
        }
        taken = {f"layer_{head + i}" for i in range(groups * period)}
        rest = {k: v for k, v in enc.items() if k not in taken}
        return {**params, "encoder": {"layers": scanned, **rest}}
    return {k: stack_layers(v, num_layers, config) if isinstance(v, dict) else v for k, v in params.items()}
