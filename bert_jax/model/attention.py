"""Scaled dot-product self-attention behind one function, with the kernel chosen by config.

`AttentionMask` says who may see whom: padding (``input_mask`` 0), the examples of packed
rows (numbered 1, 2, ... in ``input_mask``), left-to-right (causal) attention, a local
window and an optional additive bias (ALiBi). `attend` runs one of five implementations
of the same attention, picked by `choose_kernel` from ``attention_kernel``:

- ``xla``: the encoder's own math (float32 scores plus an additive mask, softmax, the
  probabilities cast to the compute dtype, dropout, the weighted sum). Takes everything,
  attention dropout included (the paper's recipe, Devlin et al., 2019, §A.2).
- ``splash``: Pallas splash attention on TPU (`jax.experimental.pallas.ops.tpu.
  splash_attention`, a block-sparse flash attention): `FullMask`, `CausalMask` or
  `LocalMask` and `SegmentIds`. Padding is its own segment, so no row is fully masked; the
  sequence is padded to a multiple of 128 (the kernel's block unit). On CPU it runs in
  Pallas interpret mode (how it is tested). Under a mesh it runs in `jax.shard_map` over
  the batch and head axes (Mosaic kernels are not partitioned automatically).
- ``cudnn``: `jax.nn.dot_product_attention(implementation="cudnn")` on NVIDIA GPUs
  (bf16/fp16, head size a multiple of 8 up to 128). Plain rows go as their lengths
  (cuDNN's padding mask; rows padded at the end); cuDNN's own window reaches only to the
  left, so a two-sided window (ModernBERT's local layers) and packed rows go as a boolean
  mask.
- ``triton``: `triton_attention`, a Pallas (Triton) flash attention for NVIDIA GPUs that
  applies attention dropout inside the kernel with the XLA path's own masks (the run's
  ``dropout_rng="hash"``), so the paper's recipe need not write the [B, N, S, S]
  probabilities. Under a mesh it runs in `jax.shard_map` like splash.
- ``mosaic``: `mosaic_attention`, the same for TPUs (Pallas on Mosaic): attention dropout
  inside the kernel with the XLA path's masks, a query tile against the whole sequence in
  VMEM (S up to 2,048, padded to a multiple of 128); `plan` compiles it for a TPU
  topology, CPUs run it interpreted.

``auto`` takes the platform's kernel where it applies and XLA elsewhere: splash on TPU,
cuDNN on GPU, and on GPU under attention dropout the Triton kernel (timed on an H200: the
paper's BERT-Base step 1.54x the XLA path's at 512, 1.18x at 128) and for a two-sided
window (ModernBERT's local layers) the Triton kernel too, which skips the tiles outside
the window where cuDNN would compute them all under a mask; whatever a kernel cannot
take (dropout on splash and cuDNN, an additive bias, ...) runs on the XLA path with one
``warning:`` line. ``mosaic`` is asked for by name: it has not been timed on a TPU yet. The window
is ModernBERT's ``local_attention`` (Warner et al., 2024; `transformers`'
modeling_modernbert.py): query i sees key j when |i - j| <= window // 2 (128 → ±64), and
only j <= i when causal as well.

Kernels differ only at padding queries (XLA: they see the row's real tokens; splash: the
padding), whose outputs no loss reads. Shapes: B batch, S sequence, N heads, D head size.
"""

from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct
from jax.experimental.pallas.ops.tpu import splash_attention as splash
from jax.sharding import PartitionSpec

from bert_jax.model import kernel_tiles, mosaic_attention, triton_attention
from bert_jax.model.numerics import ATTENTION_KERNELS as KERNELS

Array = jax.Array

SPLASH_BLOCK = 128  # splash's block sizes are multiples of 128 (the TPU lane width)
CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)
CUDNN_MAX_HEAD_DIM = 128  # 256 on Hopper and later; 128 holds on every GPU cuDNN takes


@struct.dataclass
class AttentionMask:
    """Which keys each query sees (a pytree: arrays are leaves, the switches static).

    ``input_mask`` [B, S] int: 0 for padding; otherwise 1 (plain rows) or the number of
    the example the token belongs to (``packed`` rows: 1, 2, ...). A real query sees the
    real keys (of its own example when packed); a padding query sees every real key. With
    ``causal`` a query sees keys at or before it; with ``window`` only keys within
    ``window // 2`` positions. ``extra_bias`` (float32, broadcastable to [B, N, S, S]) is
    added to the scores, e.g. `layers.alibi_bias`.
    """

    input_mask: Array
    packed: bool = struct.field(pytree_node=False, default=False)
    causal: bool = struct.field(pytree_node=False, default=False)
    window: int | None = struct.field(pytree_node=False, default=None)
    extra_bias: Array | None = None

    def __post_init__(self) -> None:
        if self.window is not None and (not isinstance(self.window, int) or self.window < 1):
            raise ValueError(f"attention window must be a positive number of tokens, not {self.window!r}")


def visible(mask: AttentionMask) -> Array:
    """Boolean [B, 1, 1|S, S]: True where query (axis 2) may see key (axis 3)."""
    m = mask.input_mask
    seen = m[:, None, None, :] > 0  # [B, 1, 1, S]
    if mask.packed:
        query = m[:, None, :, None]
        seen = seen & ((query == m[:, None, None, :]) | (query == 0))
    s = m.shape[-1]
    if mask.causal:  # position i sees positions <= i only
        seen = seen & (jnp.arange(s)[None, :] <= jnp.arange(s)[:, None])
    if mask.window is not None:
        distance = jnp.abs(jnp.arange(s)[None, :] - jnp.arange(s)[:, None])
        seen = seen & (distance <= mask.window // 2)
    return seen


def additive_bias(mask: AttentionMask) -> Array:
    """Float32 bias for the scores: 0 where seen, the float32 minimum elsewhere, plus
    ``extra_bias`` (for a window-free mask exactly `encoder.attention_bias` [+ ALiBi])."""
    bias = jnp.where(visible(mask), 0.0, jnp.finfo(jnp.float32).min).astype(jnp.float32)
    if mask.extra_bias is not None:
        bias = bias + mask.extra_bias
    return bias


def _scaled(q: Array) -> Array:
    return q / jnp.sqrt(q.shape[-1]).astype(q.dtype)


def xla_attention(
    q: Array,
    k: Array,
    v: Array,
    mask: AttentionMask,
    *,
    dropout_fn: Callable[[Array], Array] | None = None,
    dtype: jnp.dtype | None = None,
) -> Array:
    """[B, S, N, D] ×3 → [B, S, N, D]: softmax(q k^T / sqrt(D) + bias) v with float32
    scores, the probabilities cast to ``dtype`` (default: q's) and passed through
    ``dropout_fn`` (attention dropout) before the weighted sum."""
    dt = q.dtype if dtype is None else dtype
    scores = jnp.einsum("bqnd,bknd->bnqk", _scaled(q), k, preferred_element_type=jnp.float32)
    scores = scores + additive_bias(mask)  # [B, N, S, S] + [B, 1|N, 1|S, S]
    probs = jax.nn.softmax(scores, axis=-1).astype(dt)
    if dropout_fn is not None:
        probs = dropout_fn(probs)
    return jnp.einsum("bnqk,bknd->bqnd", probs, v)


def segment_ids(mask: AttentionMask) -> Array:
    """[B, S] int32 segments for splash: the example number (packed) or 1, padding 0."""
    m = mask.input_mask.astype(jnp.int32)
    return m if mask.packed else (m > 0).astype(jnp.int32)


def splash_block(seq_len: int) -> int:
    """The largest of 512, 256, 128 that divides ``seq_len`` (a multiple of 128)."""
    return next(b for b in (512, 256, SPLASH_BLOCK) if seq_len % b == 0)


def _splash_kernel(
    seq_len: int, num_heads: int, causal: bool, window: int | None, block: int, interpret: bool
) -> splash.SplashAttentionKernel:
    """The splash kernel for one static mask (built while tracing; splash caches the
    block-mask analysis, so every layer of a model pays it once)."""
    shape = (seq_len, seq_len)
    if window is not None:
        half = window // 2
        base = splash.LocalMask(shape, window_size=(half, 0 if causal else half), offset=0)
    else:
        base = splash.CausalMask(shape) if causal else splash.FullMask(shape)
    sizes = splash.BlockSizes(
        block_q=block,
        block_kv=block,
        block_kv_compute=block,
        block_q_dkv=block,
        block_kv_dkv=block,
        block_kv_dkv_compute=block,
        block_q_dq=block,
        block_kv_dq=block,
    )
    heads = splash.MultiHeadMask([base] * num_heads)
    return splash.make_splash_mha(
        heads, block_sizes=sizes, head_shards=1, q_seq_shards=1, interpret=interpret
    )


def _splash_local(
    q: Array, k: Array, v: Array, seg: Array, *, causal: bool, window: int | None, block: int, interpret: bool
) -> Array:
    """Splash on one device's shard: [b, S, n, D] ×3 and [b, S] segments → [b, S, n, D]."""
    kernel = _splash_kernel(q.shape[1], q.shape[2], causal, window, block, interpret)
    heads_first = lambda x: jnp.swapaxes(x, 1, 2)  # [b, n, S, D]: the kernel's layout

    def one(q: Array, k: Array, v: Array, s: Array) -> Array:
        return kernel(q, k, v, segment_ids=splash.SegmentIds(q=s, kv=s))

    out = jax.vmap(one)(heads_first(q), heads_first(k), heads_first(v), seg)
    return heads_first(out)


def mesh_axes(logical: str, size: int, mesh: jax.sharding.AbstractMesh) -> str | tuple[str, ...] | None:
    """The mesh axes the current logical-axis rules give ``logical``, if they divide ``size``."""
    axes = nn.logical_to_mesh_axes((logical,))[0]
    names = (axes,) if isinstance(axes, str) else tuple(axes or ())
    names = tuple(a for a in names if a in mesh.axis_names)
    count = 1
    for a in names:
        count *= mesh.shape[a]
    if not names or size % count:
        return None
    return names[0] if len(names) == 1 else names


AxisNames = str | tuple[str, ...] | None


def _shard_axes(q: Array, mesh: jax.sharding.AbstractMesh) -> tuple[AxisNames, AxisNames]:
    """The mesh axes of the batch and head axes of [B, S, N, D] under the logical rules."""
    return mesh_axes("activation_batch", q.shape[0], mesh), mesh_axes("activation_heads", q.shape[2], mesh)


def in_context_mesh() -> jax.sharding.AbstractMesh | None:
    """The context mesh where a Pallas kernel needs a `shard_map` (none inside one)."""
    mesh = jax.sharding.get_abstract_mesh()
    return None if mesh.empty or mesh.manual_axes else mesh


def splash_attention(
    q: Array, k: Array, v: Array, mask: AttentionMask, *, interpret: bool = False, block: int | None = None
) -> Array:
    """[B, S, N, D] ×3 → [B, S, N, D] through Pallas splash attention (``interpret``: the
    kernel interpreted, for CPUs). No additive bias; padding is its own segment."""
    s = q.shape[1]
    q, k, v, seg = kernel_tiles.pad_sequence(SPLASH_BLOCK, q, k, v, segment_ids(mask))
    block = block or splash_block(q.shape[1])

    def local(q: Array, k: Array, v: Array, seg: Array, _seeds: Array, _offsets) -> Array:
        return _splash_local(
            q, k, v, seg, causal=mask.causal, window=mask.window, block=block, interpret=interpret
        )

    layout = ("batch", None, "heads", None)
    return _on_shards("splash", local, (_scaled(q), k, v), (layout,) * 3, mask, 0.0, None, seg)[:, :s]


def shard_start(axes: AxisNames, size: int) -> Array | int:
    """The global index of this shard's first element along an axis of local ``size``."""
    return 0 if axes is None else jax.lax.axis_index(axes) * size


def _with_seeds(
    kernel: str,
    local: Callable[..., Array],
    q: Array,
    k: Array,
    v: Array,
    mask: AttentionMask,
    dropout_rate: float,
    dropout_seeds: Array | None,
) -> Array:
    """A dropout kernel's attention: ``local(q, k, v, seg, seeds, offsets)`` on the whole
    arrays, or on each shard in a `jax.shard_map` under the context mesh (``offsets``: the
    shard's first batch row and head, where its part of the global masks starts)."""
    layout = ("batch", None, "heads", None)
    return _on_shards(kernel, local, (_scaled(q), k, v), (layout,) * 3, mask, dropout_rate, dropout_seeds)


def _on_shards(
    kernel: str,
    local: Callable[..., Array],
    arrays: tuple[Array, ...],
    layouts: tuple[tuple[str | None, ...], ...],
    mask: AttentionMask,
    dropout_rate: float,
    dropout_seeds: Array | None,
    seg: Array | None = None,
) -> Array:
    """`_with_seeds` of any ``arrays``, each axis of each named in ``layouts`` ("batch",
    "heads" or None: whole; a batch axis of 1 is not split); the first array's batch and
    head axes are the output's: ``local(*arrays, seg, seeds, offsets)``. ``seg``: the
    segment ids the kernel takes, [B, S'] (default: ``mask``'s)."""
    if mask.extra_bias is not None:
        raise ValueError(
            f"attention_kernel={kernel} takes no additive bias (ALiBi): use attention_kernel=xla"
        )
    if dropout_rate and dropout_seeds is None:
        raise ValueError(f"attention_kernel={kernel} with attention dropout needs the layer's dropout seeds")
    seeds = jnp.zeros((2,), jnp.uint32) if dropout_seeds is None else dropout_seeds
    seg = segment_ids(mask) if seg is None else seg
    mesh = in_context_mesh()
    axes = (None, None) if mesh is None else _shard_axes(arrays[0], mesh)

    def on_shard(*args: Array) -> Array:
        *arrays, seg, seeds = args
        offsets = (shard_start(axes[0], seg.shape[0]), shard_start(axes[1], arrays[0].shape[2]))
        return local(*arrays, seg, seeds, offsets)

    if mesh is None:
        return on_shard(*arrays, seg, seeds)
    named = {"batch": axes[0], "heads": axes[1], None: None}

    def spec(x: Array, layout: tuple[str | None, ...]) -> PartitionSpec:
        return PartitionSpec(
            *(None if n == 1 else named[role] for n, role in zip(x.shape, layout, strict=True))
        )

    specs = (*map(spec, arrays, layouts), PartitionSpec(axes[0], None), PartitionSpec())
    out = PartitionSpec(axes[0], None, axes[1], None)
    fn = jax.shard_map(on_shard, mesh=mesh, in_specs=specs, out_specs=out, check_vma=False)
    return fn(*arrays, seg, seeds)


def _triton_options(
    mask: AttentionMask, shape: tuple[int, ...], dropout_rate: float, **kw
) -> triton_attention.Options:
    """The Triton kernels' options for a [B, S, N, ...] attention under ``mask``."""
    b, s, n = shape[:3]
    return triton_attention.Options(
        causal=mask.causal,
        window=mask.window,
        packed=mask.packed,
        rate=float(dropout_rate),
        narrow=kernel_tiles.narrow_index(b, n, s),
        **kw,
    )


def triton_path(
    q: Array,
    k: Array,
    v: Array,
    mask: AttentionMask,
    *,
    dropout_rate: float = 0.0,
    dropout_seeds: Array | None = None,
    paired_dropout: bool = False,
    interpret: bool = False,
    blocks: triton_attention.Blocks | None = None,
) -> Array:
    """[B, S, N, D] ×3 → [B, S, N, D] through `triton_attention.flash_attention` (NVIDIA
    GPUs), with attention dropout at ``dropout_rate`` under the layer's two hash seeds
    (`layers.Dropout.seeds`): the masks the XLA path draws ("hash16" ones where
    ``paired_dropout``). No additive bias. ``blocks``: the kernels' tiles (default
    `triton_attention.Blocks()`)."""
    s, n = q.shape[1:3]
    opts = _triton_options(
        mask,
        q.shape,
        dropout_rate,
        blocks=blocks or triton_attention.Blocks(),
        interpret=interpret,
        paired=paired_dropout,
    )

    def local(q: Array, k: Array, v: Array, seg: Array, seeds: Array, offsets) -> Array:
        words = kernel_tiles.dropout_words(seeds, (q.shape[0], q.shape[2]), n, s, offsets)
        return triton_attention.flash_attention(q, k, v, seg, words, opts)

    return _with_seeds("triton", local, q, k, v, mask, dropout_rate, dropout_seeds)


def takes_stacked(
    kernel: str,
    mask: AttentionMask,
    head_dim: int,
    dropout_rate: float,
    dtype: jnp.dtype,
    hash_dropout: bool,
    rotary: bool,
    platform: str | None = None,
) -> bool:
    """Whether ``attention_kernel=kernel`` runs the Triton kernel here, which takes the
    query/key/value product whole (`attend_stacked`), and (``rotary``) can rotate a head of
    this size inside."""
    platform = target_platform() if platform is None else platform
    chosen, _ = choose_kernel(kernel, platform, mask, head_dim, dropout_rate, dtype, hash_dropout)
    return _is_stacked(chosen, head_dim, rotary)


def _is_stacked(chosen: str, head_dim: int, rotary: bool) -> bool:
    """Whether the kernel `choose_kernel` chose takes the stacked product (`takes_stacked`)."""
    return chosen == "triton" and not (rotary and triton_attention.rotary_refusal(head_dim))


def attend_stacked(
    qkv: Array,
    bias: Array | None,
    rope: tuple[Array, Array] | None,
    mask: AttentionMask,
    kernel: str = "auto",
    *,
    dropout_rate: float = 0.0,
    dropout_seeds: Callable[[], Array] | None = None,
    paired_dropout: bool = False,
    platform: str | None = None,
) -> Array:
    """`attend` where `takes_stacked`: the product [B, S, N, 3, D] (slots
    `triton_attention.KEY`, ``VALUE``, ``QUERY``) plus ``bias`` [N, 3, D] (or None) →
    [B, S, N, D] through `triton_attention.flash_attention_stacked`, which reads the three
    in place, adds the bias as it loads them and writes their gradients into one; ``rope``
    (sin, cos [B or 1, S, D/2]) rotates queries and keys inside. Dropout as `triton_path`
    draws it."""
    platform = target_platform() if platform is None else platform
    s, n, _, d = qkv.shape[1:]
    hashed, rotary = dropout_seeds is not None, rope is not None
    chosen, warning = choose_kernel(kernel, platform, mask, d, dropout_rate, qkv.dtype, hashed)
    if not _is_stacked(chosen, d, rotary):
        raise ValueError(f"attention_kernel={kernel} does not take the stacked product here: use `attend`")
    if warning:
        warn_once(warning)
    opts = _triton_options(
        mask,
        qkv.shape,
        dropout_rate,
        interpret=platform != "gpu",
        paired=paired_dropout,
        stacked=True,
        rotary=rotary,
        bias=bias is not None,
        scale=1.0 / float(d) ** 0.5,
    )

    def local(qkv: Array, *rest) -> Array:
        *extras, seg, seeds, offsets = rest
        bias = extras.pop() if opts.bias else None
        sin, cos = extras or (None, None)
        words = kernel_tiles.dropout_words(seeds, (qkv.shape[0], qkv.shape[2]), n, s, offsets)
        return triton_attention.flash_attention_stacked(qkv, bias, sin, cos, seg, words, opts)

    arrays = [qkv, *(rope or ())]
    layouts = [("batch", None, "heads", None, None)] + [("batch", None, None)] * len(rope or ())
    if bias is not None:
        arrays.append(bias)
        layouts.append(("heads", None, None))
    seeds = dropout_seeds() if dropout_rate else None
    return _on_shards("triton", local, tuple(arrays), tuple(layouts), mask, dropout_rate, seeds)


def mosaic_path(
    q: Array,
    k: Array,
    v: Array,
    mask: AttentionMask,
    *,
    dropout_rate: float = 0.0,
    dropout_seeds: Array | None = None,
    paired_dropout: bool = False,
    interpret: bool = False,
) -> Array:
    """[B, S, N, D] ×3 → [B, S, N, D] through `mosaic_attention.attention` (TPUs), with
    attention dropout as `triton_path` draws it. No additive bias."""
    opts = mosaic_attention.Options(
        causal=mask.causal,
        window=mask.window,
        packed=mask.packed,
        rate=float(dropout_rate),
        heads=q.shape[2],
        interpret=interpret,
        # The padded length bounds the flat index (padding keys count positions past S).
        narrow=kernel_tiles.narrow_index(
            q.shape[0], q.shape[2], -(-q.shape[1] // mosaic_attention.LANES) * mosaic_attention.LANES
        ),
        paired=paired_dropout,
    )

    def local(q: Array, k: Array, v: Array, seg: Array, seeds: Array, offsets) -> Array:
        return mosaic_attention.attention(q, k, v, seg, mosaic_attention.scalars(seeds, offsets), opts)

    return _with_seeds("mosaic", local, q, k, v, mask, dropout_rate, dropout_seeds)


def cudnn_attention(q: Array, k: Array, v: Array, mask: AttentionMask) -> Array:
    """[B, S, N, D] ×3 → [B, S, N, D] through cuDNN's fused attention (NVIDIA GPUs).

    Plain rows (padding only, causal or not, a causal window) go as each row's length
    (cuDNN's padding mask: no [B, 1, S, S] bias to read, no bias gradient to write, and the
    tiles of padding keys skipped); the rows are padded at the end, as every bert_jax
    tokenizer and pipeline writes them. Packing and a two-sided window (ModernBERT's local
    layers: cuDNN's own window reaches only to the left) go in one boolean [B, 1, S, S]
    mask, which JAX hands cuDNN as an additive bias and whose gradient cuDNN computes.
    Causality and a causal window are cuDNN's own masks (it skips the blocks they hide)."""
    if mask.extra_bias is not None:
        raise ValueError("attention_kernel=cudnn takes no additive bias (ALiBi): use attention_kernel=xla")
    b, s = mask.input_mask.shape
    two_sided = mask.window if not mask.causal else None
    window = (mask.window // 2, 0) if mask.causal and mask.window is not None else None
    if mask.packed or two_sided is not None:
        plain = AttentionMask(mask.input_mask, packed=mask.packed, window=two_sided)
        seen, lengths = jnp.broadcast_to(visible(plain), (b, 1, s, s)), None
    else:
        # Every query (a padding one too, as on the XLA path) sees the row's first `length`
        # keys; a row of padding alone (a batch's filler) sees its first, not none (NaN).
        seen = None
        lengths = jnp.maximum(jnp.sum(mask.input_mask > 0, axis=-1, dtype=jnp.int32), 1)
    return jax.nn.dot_product_attention(
        _scaled(q),
        k,
        v,
        mask=seen,
        scale=1.0,
        is_causal=mask.causal,
        key_value_seq_lengths=lengths,
        local_window_size=window,
        implementation="cudnn",
    )


_PLATFORM_KERNEL = {"tpu": "splash", "gpu": "cudnn"}
# `auto` under attention dropout, where a kernel drawing the XLA path's masks was timed ahead
# of it: on a GPU the Triton kernel (cuDNN draws no masks of ours; BERT-Base's step 1.54x
# the XLA path's at 512 and 1.18x at 128 on an H200, 2026-11-28). Mosaic is not yet timed.
_PLATFORM_DROPOUT_KERNEL = {"gpu": "triton"}
# `auto` for a two-sided window (ModernBERT's local layers), where the platform kernel
# would compute every tile: on a GPU the Triton kernel, which skips the tiles outside the
# window (cuDNN's window reaches only to the left, so the window goes in its mask and cuDNN
# computes all of [S, S]: at 1,024 with a 128 window ~4x the tiles the window needs).
_PLATFORM_WINDOW_KERNEL = {"gpu": "triton"}
_WARNED: set[str] = set()


def warn_once(message: str) -> None:
    """Prints ``warning: message`` the first time this process sees ``message``."""
    if message not in _WARNED:
        _WARNED.add(message)
        print(f"warning: {message}", flush=True)


def target_platform() -> str:
    """The platform attention is compiled for: the context mesh's devices' (an ahead-of-time
    compile for a TPU topology from a CPU host is "tpu"), else JAX's default backend."""
    mesh = jax.sharding.get_abstract_mesh()
    device = None if mesh.empty else getattr(mesh, "abstract_device", None)
    platform = jax.default_backend() if device is None else device.platform
    return "gpu" if platform == "cuda" else platform


def choose_kernel(
    requested: str,
    platform: str,
    mask: AttentionMask,
    head_dim: int,
    dropout_rate: float,
    dtype: jnp.dtype = jnp.float32,
    hash_dropout: bool = True,
) -> tuple[str, str | None]:
    """(kernel to run, warning line or None) for ``attention_kernel=requested``.

    ``auto`` means the platform's kernel (splash on TPU; on GPU cuDNN, or Triton under
    attention dropout or a two-sided window, cuDNN where Triton cannot take the window)
    where it can take the mask, head size, dtype and dropout, else XLA;
    an explicit kernel that cannot is replaced by XLA with a warning. Explicit ``splash``,
    ``triton`` or ``mosaic`` on a CPU runs interpreted. ``hash_dropout``: the run draws its
    dropout masks with ``"hash"`` or ``"hash16"`` (the masks the Triton and Mosaic kernels
    can draw in place)."""
    if requested not in KERNELS:
        raise ValueError(f"attention_kernel={requested!r} is not one of: {', '.join(KERNELS)}")
    candidates = [requested] if requested != "auto" else _auto_candidates(platform, mask, dropout_rate)
    if candidates in ([], ["xla"]):
        return "xla", None
    reasons = [
        _dropout_kernel_refusal(c, platform, mask, head_dim, dropout_rate, hash_dropout)
        if c in ("triton", "mosaic")
        else _refusal(c, platform, mask, head_dim, dropout_rate, dtype)
        for c in candidates
    ]
    candidate = next((c for c, r in zip(candidates, reasons, strict=True) if r is None), None)
    if candidate is None:  # the first candidate's reason: the kernel `auto` wanted most
        return "xla", f"attention_kernel={requested}: {reasons[0]}; using the XLA attention"
    if platform == "cpu" and candidate in ("splash", "triton", "mosaic"):
        return (
            candidate,
            f"attention_kernel={candidate} on {platform}: Pallas interpret mode (slow; for tests)",
        )
    return candidate, None


def _auto_candidates(platform: str, mask: AttentionMask, dropout_rate: float) -> list[str]:
    """The kernels ``auto`` tries on ``platform``, best first (XLA when none can run):
    under attention dropout the platform's dropout kernel; for a two-sided window its
    window kernel; then its own kernel."""
    first = None
    if dropout_rate > 0:
        first = _PLATFORM_DROPOUT_KERNEL.get(platform)
    elif mask.window is not None and not mask.causal:
        first = _PLATFORM_WINDOW_KERNEL.get(platform)
    return [c for c in (first, _PLATFORM_KERNEL.get(platform)) if c is not None]


_DROPOUT_KERNEL_HOME = {"triton": ("gpu", "NVIDIA GPUs"), "mosaic": ("tpu", "TPUs")}


def _dropout_kernel_refusal(
    kernel: str, platform: str, mask: AttentionMask, head_dim: int, dropout_rate: float, hash_dropout: bool
) -> str | None:
    """Why the Triton or Mosaic kernel cannot run this attention, or None."""
    if dropout_rate > 0 and not hash_dropout:
        return f"attention dropout ({dropout_rate}) with dropout_rng=threefry runs on the XLA path only"
    if mask.extra_bias is not None:
        return f"{kernel} takes no additive bias (ALiBi)"
    home, hardware = _DROPOUT_KERNEL_HOME[kernel]
    if platform not in (home, "cpu"):
        return (
            f"the {kernel.capitalize()} attention runs on {hardware} (interpreted on CPU), not on {platform}"
        )
    seq_len = mask.input_mask.shape[-1]
    return (
        triton_attention.refusal(seq_len, head_dim)
        if kernel == "triton"
        else mosaic_attention.refusal(seq_len)
    )


def _refusal(
    kernel: str, platform: str, mask: AttentionMask, head_dim: int, dropout_rate: float, dtype: jnp.dtype
) -> str | None:
    """Why ``kernel`` (splash or cuDNN) cannot run this attention, or None."""
    if dropout_rate > 0:
        where = {"gpu": "the XLA and Triton paths only", "tpu": "the XLA and Mosaic paths only"}.get(
            platform, "the XLA path only"
        )
        return f"attention dropout ({dropout_rate}) runs on {where}"
    if mask.extra_bias is not None:
        return f"{kernel} takes no additive bias (ALiBi)"
    if kernel == "splash":
        ok = platform in ("tpu", "cpu")
        return None if ok else f"splash attention runs on TPU (interpreted on CPU), not on {platform}"
    if platform != "gpu":
        return f"cuDNN attention runs on NVIDIA GPUs, not on {platform}"
    if jnp.dtype(dtype) not in [jnp.dtype(d) for d in CUDNN_DTYPES]:
        return f"cuDNN attention takes bfloat16 or float16, not {jnp.dtype(dtype).name}"
    if head_dim % 8 or head_dim > CUDNN_MAX_HEAD_DIM:
        return f"cuDNN attention takes a head size that is a multiple of 8 up to 128, not {head_dim}"
    if mask.input_mask.shape[-1] % 2:
        return f"cuDNN attention with a mask takes an even sequence length, not {mask.input_mask.shape[-1]}"
    return None


def attend(
    q: Array,
    k: Array,
    v: Array,
    mask: AttentionMask,
    kernel: str = "auto",
    *,
    dropout_rate: float = 0.0,
    dropout_fn: Callable[[Array], Array] | None = None,
    dropout_seeds: Callable[[], Array] | None = None,
    paired_dropout: bool = False,
    dtype: jnp.dtype | None = None,
    platform: str | None = None,
) -> Array:
    """Self-attention [B, S, N, D] ×3 → [B, S, N, D] by the kernel `choose_kernel` picks
    for ``kernel`` (``attention_kernel``) on ``platform`` (default: the context mesh's, else
    JAX's backend). ``dropout_rate`` > 0 (pass 0 when deterministic): the XLA path applies
    ``dropout_fn`` to the probabilities; the Triton and Mosaic kernels draw the same masks
    from ``dropout_seeds()`` (None where the run's masks are neither ``"hash"`` nor
    ``"hash16"``, ``paired_dropout``: XLA then). Splash and cuDNN take no dropout. A
    fallback prints one ``warning:`` line."""
    platform = target_platform() if platform is None else platform
    chosen, warning = choose_kernel(
        kernel, platform, mask, q.shape[-1], dropout_rate, q.dtype, hash_dropout=dropout_seeds is not None
    )
    if warning:
        warn_once(warning)
    if chosen == "splash":
        return splash_attention(q, k, v, mask, interpret=platform != "tpu").astype(q.dtype)
    if chosen == "cudnn":
        return cudnn_attention(q, k, v, mask)
    if chosen in ("triton", "mosaic"):
        seeds = dropout_seeds() if dropout_rate else None
        path = triton_path if chosen == "triton" else mosaic_path
        interpret = platform != _DROPOUT_KERNEL_HOME[chosen][0]
        return path(
            q,
            k,
            v,
            mask,
            dropout_rate=dropout_rate,
            dropout_seeds=seeds,
            paired_dropout=paired_dropout,
            interpret=interpret,
        )
    return xla_attention(q, k, v, mask, dropout_fn=dropout_fn, dtype=dtype)
