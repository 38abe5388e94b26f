"""Tensor names and layouts of `transformers`' ModernBERT against bert_jax's parameters.

`transformers`' modeling_modernbert.py (4.57) fuses what bert_jax keeps apart:

- ``attn.Wqkv`` [3H, H] is viewed as (3, heads, head_dim) on its output axis: rows
  [0, H) are the query, [H, 2H) the key, [2H, 3H) the value, each [N*D, H] → bert_jax's
  ``query``/``key``/``value`` kernels [H, N, D] (transposed, heads split);
- ``mlp.Wi`` [2F, H] is chunked in two on its output axis, ``input, gate = Wi(x).chunk(2)``,
  and the output is ``Wo(act(input) * gate)``: the first half is the activated one, bert_jax's
  ``intermediate_gate`` (``act(x W_gate) * (x W_in)``), the second half ``intermediate``;
- ``attn.Wo`` [H, H] takes the heads-major context → the ``output`` kernel [N, D, H].

Linear weights are [out, in] (bert_jax's kernels [in, out]); LayerNorm ``weight`` is
bert_jax's ``scale``. Layer 0 has no ``attn_norm`` (Identity). Biases exist only where the
config says (``attention_bias``/``mlp_bias``/``classifier_bias`` = `BertConfig.use_bias`,
``norm_bias``). Only the real vocabulary appears here (padding rows are added after a load).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from bert_jax.model.config import BertConfig

Flat = dict[tuple[str, ...], np.ndarray]
Getter = Callable[[str], np.ndarray]


def _t(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x).T)


def _norm_from(get: Getter, name: str, path: tuple[str, ...], c: BertConfig) -> Flat:
    out = {(*path, "scale"): get(f"{name}.weight")}
    if c.norm_bias:
        out[(*path, "bias")] = get(f"{name}.bias")
    return out


def _norm_to(flat: Flat, path: tuple[str, ...], name: str, c: BertConfig) -> dict[str, np.ndarray]:
    out = {f"{name}.weight": flat[(*path, "scale")]}
    if c.norm_bias:
        out[f"{name}.bias"] = flat[(*path, "bias")]
    return out


def _dense_from(get: Getter, name: str, path: tuple[str, ...], bias: bool) -> Flat:
    out = {(*path, "kernel"): _t(get(f"{name}.weight"))}
    if bias:
        out[(*path, "bias")] = get(f"{name}.bias")
    return out


def _dense_to(flat: Flat, path: tuple[str, ...], name: str, bias: bool) -> dict[str, np.ndarray]:
    out = {f"{name}.weight": _t(flat[(*path, "kernel")])}
    if bias:
        out[f"{name}.bias"] = flat[(*path, "bias")]
    return out


def layer_from_hf(get: Getter, i: int, c: BertConfig) -> Flat:
    """Layer `i`'s tensors (``model.layers.{i}.*``) → ``bert/encoder/layer_{i}/...``."""
    hf, jx = f"model.layers.{i}.", ("bert", "encoder", f"layer_{i}")
    n, d, h, f = c.num_attention_heads, c.head_dim, c.hidden_size, c.intermediate_size
    out: Flat = {}
    qkv = get(hf + "attn.Wqkv.weight")  # [3H, H]
    qkv_bias = get(hf + "attn.Wqkv.bias") if c.use_bias else None
    for j, name in enumerate(("query", "key", "value")):
        out[(*jx, "attention", name, "kernel")] = _t(qkv[j * h : (j + 1) * h]).reshape(h, n, d)
        if qkv_bias is not None:
            out[(*jx, "attention", name, "bias")] = qkv_bias[j * h : (j + 1) * h].reshape(n, d)
    out[(*jx, "attention", "output", "kernel")] = _t(get(hf + "attn.Wo.weight")).reshape(n, d, h)
    if c.use_bias:
        out[(*jx, "attention", "output", "bias")] = get(hf + "attn.Wo.bias")
    if i > 0:
        out.update(_norm_from(get, hf + "attn_norm", (*jx, "attention_LayerNorm"), c))
    out.update(_norm_from(get, hf + "mlp_norm", (*jx, "output_LayerNorm"), c))
    wi = get(hf + "mlp.Wi.weight")  # [2F, H]: the activated half first
    out[(*jx, "intermediate_gate", "kernel")] = _t(wi[:f])
    out[(*jx, "intermediate", "kernel")] = _t(wi[f:])
    if c.use_bias:
        wi_bias = get(hf + "mlp.Wi.bias")
        out[(*jx, "intermediate_gate", "bias")], out[(*jx, "intermediate", "bias")] = wi_bias[:f], wi_bias[f:]
    out.update(_dense_from(get, hf + "mlp.Wo", (*jx, "output"), c.use_bias))
    return out


def layer_to_hf(flat: Flat, i: int, c: BertConfig) -> dict[str, np.ndarray]:
    """Inverse of `layer_from_hf`."""
    hf, jx = f"model.layers.{i}.", ("bert", "encoder", f"layer_{i}")
    h = c.hidden_size
    att = lambda name, leaf: flat[(*jx, "attention", name, leaf)]
    out = {
        hf + "attn.Wqkv.weight": np.concatenate(
            [_t(att(q, "kernel").reshape(h, h)) for q in ("query", "key", "value")]
        ),
        hf + "attn.Wo.weight": _t(att("output", "kernel").reshape(h, h)),
        hf + "mlp.Wi.weight": np.concatenate(
            [_t(flat[(*jx, "intermediate_gate", "kernel")]), _t(flat[(*jx, "intermediate", "kernel")])]
        ),
        **_dense_to(flat, (*jx, "output"), hf + "mlp.Wo", c.use_bias),
        **_norm_to(flat, (*jx, "output_LayerNorm"), hf + "mlp_norm", c),
    }
    if c.use_bias:
        out[hf + "attn.Wqkv.bias"] = np.concatenate(
            [att(q, "bias").reshape(h) for q in ("query", "key", "value")]
        )
        out[hf + "attn.Wo.bias"] = att("output", "bias")
        out[hf + "mlp.Wi.bias"] = np.concatenate(
            [flat[(*jx, "intermediate_gate", "bias")], flat[(*jx, "intermediate", "bias")]]
        )
    if i > 0:
        out.update(_norm_to(flat, (*jx, "attention_LayerNorm"), hf + "attn_norm", c))
    return out


def encoder_from_hf(get: Getter, c: BertConfig) -> Flat:
    """The embeddings, every layer and the final norm → ``bert/...``."""
    out: Flat = {
        ("bert", "embeddings", "word_embeddings", "embedding"): get("model.embeddings.tok_embeddings.weight")
    }
    out.update(_norm_from(get, "model.embeddings.norm", ("bert", "embeddings", "LayerNorm"), c))
    for i in range(c.num_hidden_layers):
        out.update(layer_from_hf(get, i, c))
    out.update(_norm_from(get, "model.final_norm", ("bert", "encoder", "final_LayerNorm"), c))
    return out


def encoder_to_hf(flat: Flat, c: BertConfig) -> dict[str, np.ndarray]:
    out = {
        "model.embeddings.tok_embeddings.weight": flat[("bert", "embeddings", "word_embeddings", "embedding")]
    }
    out.update(_norm_to(flat, ("bert", "embeddings", "LayerNorm"), "model.embeddings.norm", c))
    for i in range(c.num_hidden_layers):
        out.update(layer_to_hf(flat, i, c))
    out.update(_norm_to(flat, ("bert", "encoder", "final_LayerNorm"), "model.final_norm", c))
    return out


def head_from_hf(get: Getter, path: tuple[str, ...], norm: str, c: BertConfig) -> Flat:
    """``head.dense`` / ``head.norm`` (ModernBertPredictionHead) → a dense at `path` and
    the LayerNorm `norm` beside it (the MLM transform, or the pooler)."""
    out = _dense_from(get, "head.dense", path, c.use_bias)
    out.update(_norm_from(get, "head.norm", (*path[:-1], norm), c))
    return out


def head_to_hf(flat: Flat, path: tuple[str, ...], norm: str, c: BertConfig) -> dict[str, np.ndarray]:
    out = _dense_to(flat, path, "head.dense", c.use_bias)
    out.update(_norm_to(flat, (*path[:-1], norm), "head.norm", c))
    return out


MLM_HEAD = (("mlm", "transform"), "transform_LayerNorm")
POOLER_HEAD = (("bert", "pooler", "dense"), "LayerNorm")
