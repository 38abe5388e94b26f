"""``LN(r + dropout(h + b))``, the end of a post-LayerNorm residual block, through the Triton
kernel pair of `triton_norm` (``norm_kernel=triton``; NVIDIA GPUs, interpreted on CPU);
in the ``stream`` form the pre-LayerNorm block's end, the residual stream
``s = r + dropout(h + b)`` and the next sub-layer's input ``LN(s)`` both; in the ``twice``
form the output for two consumers (`FORMS`). The XLA path (`encoder_layer`:
`layers.layer_norm` of the sum) computes the same.

The module holds the LayerNorm's parameters under its own name (``scale``, ``bias``: the
names and shapes of `layers.layer_norm`'s, so checkpoints do not see which ran). ``h`` is
the dense layer's product without its bias, ``b`` that bias (or None): the kernel adds it
and computes its gradient from the gradient rows it holds. ``seeds`` are the block's
`layers.Dropout`'s hash seeds (`Dropout.seeds`, of the dropout layer the XLA path creates
in its place), so both draw the same masks.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.model import attention, triton_norm
from bert_jax.model.config import BertConfig
from bert_jax.model.layers import ones_init, zeros_init
from bert_jax.model.numerics import KERNEL_DROPOUT_RNGS, Numerics

Array = jax.Array


def kernel_refusal(
    config: BertConfig, numerics: Numerics, shape: tuple[int, ...], training: bool
) -> str | None:
    """Why ``norm_kernel=triton`` falls back to XLA for [B, S, H] activations, or None."""
    if numerics.remat_policy != "none":
        return f"remat_policy={numerics.remat_policy} keeps or recomputes the XLA LayerNorm's inputs"
    if training and config.hidden_dropout_prob and numerics.dropout_rng not in KERNEL_DROPOUT_RNGS:
        return f"dropout_rng={numerics.dropout_rng}: the kernel draws the hash masks only"
    platform = attention.target_platform()
    if platform not in ("gpu", "cpu"):
        return f"the Triton LayerNorm runs on NVIDIA GPUs (interpreted on CPU), not on {platform}"
    return triton_norm.refusal(shape[0] * shape[1], shape[2])


def chains_layers(
    config: BertConfig, numerics: Numerics, shape: tuple[int, ...], training: bool, *, plain_loop: bool
) -> bool:
    """Whether the encoder's layers hand each other more than their output, for the
    LayerNorm kernels: a pre-LN layer its last residual add (done in the next LayerNorm's
    kernel: the next layer's attention LayerNorm, the final one after the last layer), a
    post-LN layer its output twice (the next layer's attention input and its residual, so
    that the kernel adds their gradients). So when the kernels run (`kernel_refusal` None,
    ``norm_kernel=triton``) and the layers are called one after another with nothing
    reading their outputs in between (``plain_loop``: unrolled, no hidden states asked
    for, not initialising)."""
    return (
        plain_loop
        and numerics.norm_kernel == "triton"
        and kernel_refusal(config, numerics, shape, training) is None
    )


# Each form's kernel: one output, or two (``stream``: the stream and its LayerNorm;
# ``twice``: the LayerNorm for two consumers).
FORMS = {
    "plain": triton_norm.residual_layer_norm,
    "stream": triton_norm.stream_layer_norm,
    "twice": triton_norm.residual_layer_norm_twice,
}


class ResidualLayerNorm(nn.Module):
    """``LN(r + drop(h + b))`` for [B, S, H] ``h`` and ``r`` in the kernels (`kernel_refusal`
    None), in the compute dtype. ``form`` says what it returns (`FORMS`): ``plain`` the
    output; ``stream`` (s, LN(s)), ``s = r + drop(h + b)``; ``twice`` the output twice, for
    two consumers whose gradients the backward kernel adds
    (`triton_norm.residual_layer_norm_twice`). ``r`` is read in the dtype the XLA path's sum
    has (a float32 stream stays float32)."""

    config: BertConfig
    numerics: Numerics
    form: str = "plain"

    @nn.compact
    def __call__(self, h: Array, b: Array | None, r: Array, rate: float, seeds: Array | None) -> Array:
        c, num = self.config, self.numerics
        width = h.shape[-1]
        scale = self.param("scale", ones_init(("norm",)), (width,), num.params)
        shift = self.param("bias", zeros_init(("norm",)), (width,), num.params) if c.norm_bias else None
        zeros = jnp.zeros((width,), num.params)
        opts = triton_norm.Options(
            eps=c.layer_norm_eps,
            rate=float(rate),
            paired=num.dropout_rng == "hash16",
            interpret=attention.target_platform() == "cpu",
        )
        vectors = (zeros if b is None else b, scale, zeros if shift is None else shift)
        h = h.astype(num.dtype)
        r = r.astype(jnp.result_type(h, r))
        kernel = FORMS[self.form]
        return _kernel_path(h, r, vectors, seeds, opts, kernel, pair=self.form != "plain")


def _kernel_path(
    h: Array, r: Array, vectors: tuple, seeds: Array | None, opts: triton_norm.Options, kernel, pair: bool
) -> Array | tuple[Array, Array]:
    """``kernel`` (one of `triton_norm`'s LayerNorms; ``pair``: returning two arrays) of
    [B, S, H] arrays, on each shard of the batch in a `jax.shard_map` under the context mesh
    (the shard's first row: its part of the masks)."""

    def local(h: Array, r: Array, b: Array, g: Array, beta: Array, seeds: Array) -> Array:
        batch, length, width = h.shape
        first = attention.shard_start(axes, batch) * length
        words = triton_norm.words(first, seeds)
        h, r = (x.reshape(batch * length, width) for x in (h, r))
        out = kernel(h, b, r, g, beta, words, opts)
        return jax.tree.map(lambda y: y.reshape(batch, length, width), out)

    seeds = jnp.zeros((2,), jnp.uint32) if seeds is None else seeds
    mesh = attention.in_context_mesh()
    axes = None if mesh is None else attention.mesh_axes("activation_batch", h.shape[0], mesh)
    fn = local
    if mesh is not None:
        rows = jax.sharding.PartitionSpec(axes, None, None)
        whole = jax.sharding.PartitionSpec()
        specs = (rows, rows) + (whole,) * 4
        out = (rows, rows) if pair else rows
        fn = jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=out, check_vma=False)
    return fn(h, r, *vectors, seeds)
