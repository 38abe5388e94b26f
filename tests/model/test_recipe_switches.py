"""The modern recipe switches of `BertConfig` (pre-LN, GeGLU, rotary / scaled sinusoidal /
ALiBi positions, no biases) against a straightforward NumPy implementation of their
equations, rotary positions against `transformers`' own, ALiBi's slopes against the
paper's, and what stays the paper's model when they are off."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import erf

from bert_jax.model import layers, param_shapes
from bert_jax.model.config import BertConfig
from bert_jax.model.encoder import BertModel
from bert_jax.model.numerics import Numerics

SWITCHES = {
    "paper": {},
    "pre_ln": dict(pre_layer_norm=True),
    "geglu": dict(gated_ffn=True),
    "rotary": dict(position_embedding_type="rotary"),
    "sinusoidal": dict(position_embedding_type="sinusoidal"),
    "alibi": dict(position_embedding_type="alibi"),
    "alibi_pre_ln_scanned": dict(position_embedding_type="alibi", pre_layer_norm=True),
    "no_bias": dict(use_bias=False),
    "all": dict(pre_layer_norm=True, gated_ffn=True, position_embedding_type="rotary", use_bias=False),
    "all_scanned": dict(
        pre_layer_norm=True,
        gated_ffn=True,
        position_embedding_type="rotary",
        use_bias=False,
    ),
}
SCANNED = Numerics(layer_loop="scan")  # the cases named "..._scanned" run their layers scanned


def _config(**switches) -> BertConfig:
    return BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=24,
        max_position_embeddings=16,
        **switches,
    )


def _ln(x, p, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * p["scale"] + p["bias"]


def _gelu(x):
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def _linear(x, p):
    return x @ p["kernel"] + p.get("bias", 0.0)


def _rotate(x, pos, base):
    """x [S, N, D]: pair (i, i + D/2) rotated by pos * base^(-2i/D)."""
    d = x.shape[-1]
    angle = pos[:, None, None] * base ** (-np.arange(0, d, 2) / d)[None, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate(
        [x1 * np.cos(angle) - x2 * np.sin(angle), x2 * np.cos(angle) + x1 * np.sin(angle)], -1
    )


def _attention(h, p, c: BertConfig, pos, mask):
    d = c.head_dim
    proj = lambda q: np.einsum("sh,hnd->snd", h, p[q]["kernel"]) + p[q].get("bias", 0.0)
    q, k, v = proj("query"), proj("key"), proj("value")
    if c.rotary:
        q, k = _rotate(q, pos, c.rotary_base), _rotate(k, pos, c.rotary_base)
    scores = np.einsum("qnd,knd->nqk", q, k) / np.sqrt(d) + np.where(mask[None, None, :] > 0, 0.0, -1e9)
    if c.position_embedding_type == "alibi":  # two heads: slopes 2^-4, 2^-8 (Press et al.)
        slopes = np.array([2.0**-4, 2.0**-8])
        scores = scores - slopes[:, None, None] * np.abs(pos[:, None] - pos[None, :])[None]
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    ctx = np.einsum("nqk,knd->qnd", probs, v)
    return np.einsum("qnd,ndh->qh", ctx, p["output"]["kernel"]) + p["output"].get("bias", 0.0)


def _feed_forward(h, p, c: BertConfig):
    inner = _linear(h, p["intermediate"])
    inner = _gelu(_linear(h, p["intermediate_gate"])) * inner if c.gated_ffn else _gelu(inner)
    return _linear(inner, p["output"])


def reference_encoder(params, c: BertConfig, ids, segments, mask):
    """One row [S] through the encoder, as the equations say (float64)."""
    e = params["embeddings"]
    pos = np.arange(len(ids))
    x = e["word_embeddings"]["embedding"][ids] + e["token_type_embeddings"]["embedding"][segments]
    if c.position_embedding_type == "absolute":
        x = x + e["position_embeddings"]["embedding"][pos]
    if c.position_embedding_type == "sinusoidal":  # sin at even features, cos at odd
        pe = np.zeros((len(ids), c.hidden_size))
        div = np.exp(np.arange(0, c.hidden_size, 2) * (-np.log(10_000.0) / c.hidden_size))
        pe[:, 0::2], pe[:, 1::2] = np.sin(pos[:, None] * div), np.cos(pos[:, None] * div)
        x = x + e["position_scale"] * pe
    x = _ln(x, e["LayerNorm"], c.layer_norm_eps)
    for i in range(c.num_hidden_layers):
        p = params["encoder"][f"layer_{i}"]
        if c.pre_layer_norm:
            x = x + _attention(
                _ln(x, p["attention_LayerNorm"], c.layer_norm_eps), p["attention"], c, pos, mask
            )
            x = x + _feed_forward(_ln(x, p["output_LayerNorm"], c.layer_norm_eps), p, c)
        else:
            x = _ln(
                x + _attention(x, p["attention"], c, pos, mask), p["attention_LayerNorm"], c.layer_norm_eps
            )
            x = _ln(x + _feed_forward(x, p, c), p["output_LayerNorm"], c.layer_norm_eps)
    if c.pre_layer_norm:
        x = _ln(x, params["encoder"]["final_LayerNorm"], c.layer_norm_eps)
    return x


def _random_params(model, ids, seed=0):
    """The model's parameter tree with every leaf random (LayerNorms and biases too)."""
    params = nn.meta.unbox(model.init(jax.random.key(seed), ids)["params"])
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
    return jax.tree.unflatten(
        tree, [0.3 * jax.random.normal(k, x.shape) for k, x in zip(keys, leaves, strict=True)]
    )


@pytest.mark.parametrize("name", sorted(SWITCHES))
def test_encoder_matches_the_equations(name) -> None:
    from bert_jax.model.encoder import unstack_layers

    c = _config(**SWITCHES[name])
    ids = jnp.array([[3, 7, 9, 11, 4, 2, 0, 0], [5, 6, 8, 10, 12, 14, 16, 18]])
    segments = jnp.array([[0, 0, 0, 1, 1, 1, 0, 0], [0] * 8])
    mask = jnp.array([[1, 1, 1, 1, 1, 1, 0, 0], [1] * 8])
    model = BertModel(c, SCANNED) if name.endswith("_scanned") else BertModel(c)
    params = _random_params(model, ids)
    assert ("layers" in params["encoder"]) == name.endswith("_scanned")
    out, _, hidden = model.apply({"params": params}, ids, mask, segments, output_hidden_states=True)
    flat = jax.tree.map(lambda x: np.asarray(x, np.float64), unstack_layers(params, c.num_hidden_layers))
    for row in range(2):
        want = reference_encoder(
            flat, c, np.asarray(ids[row]), np.asarray(segments[row]), np.asarray(mask[row])
        )
        real = np.asarray(mask[row]) > 0
        np.testing.assert_allclose(np.asarray(out[row])[real], want[real], atol=2e-4, rtol=1e-4)
    np.testing.assert_array_equal(np.asarray(hidden[-1]), np.asarray(out))  # last hidden state = output
    assert len(hidden) == c.num_hidden_layers + 1


def test_rotary_matches_transformers() -> None:
    """`layers.apply_rotary` against the rotary embedding of `transformers` (Llama's)."""
    import torch
    from transformers.models.llama import modeling_llama

    b, s, n, d = 2, 7, 3, 8
    x = np.random.default_rng(0).normal(size=(b, s, n, d)).astype(np.float32)
    pos = np.array([np.arange(s), np.arange(s) + 5])
    sin, cos = layers.rotary_tables(jnp.asarray(pos), d, 10_000.0)
    ours = np.asarray(layers.apply_rotary(jnp.asarray(x), sin, cos))

    inv_freq = 1.0 / (10_000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    freqs = torch.tensor(pos, dtype=torch.float32)[..., None] * inv_freq  # [B, S, D/2]
    emb = torch.cat([freqs, freqs], dim=-1)
    xt = torch.tensor(x).transpose(1, 2)  # [B, N, S, D], the layout transformers uses
    theirs, _ = modeling_llama.apply_rotary_pos_emb(xt, xt, emb.cos(), emb.sin())
    np.testing.assert_allclose(ours, theirs.transpose(1, 2).numpy(), atol=1e-5)


def test_rotary_attention_depends_on_relative_positions_only() -> None:
    c = _config(position_embedding_type="rotary")
    model = BertModel(c)
    ids = jnp.array([[3, 7, 9, 11, 4, 2]])
    params = model.init(jax.random.key(0), ids)
    at_zero, _, _ = model.apply(params, ids, position_ids=jnp.arange(6)[None])
    shifted, _, _ = model.apply(params, ids, position_ids=jnp.arange(6)[None] + 9)
    np.testing.assert_allclose(np.asarray(at_zero), np.asarray(shifted), atol=2e-5)
    absolute = BertModel(_config())
    p = absolute.init(jax.random.key(0), ids)
    a, _, _ = absolute.apply(p, ids, position_ids=jnp.arange(6)[None])
    b, _, _ = absolute.apply(p, ids, position_ids=jnp.arange(6)[None] + 9)
    assert np.max(np.abs(np.asarray(a) - np.asarray(b))) > 1e-3  # learned positions do move


def test_alibi_slopes_are_the_papers_and_attention_sees_distances_only() -> None:
    # Press et al. (2022): 8 heads 1/2 ... 1/256; 12 heads: those of 8, then every other
    # slope of 16 (2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5).
    np.testing.assert_allclose(layers.alibi_slopes(8), [2.0**-i for i in range(1, 9)])
    twelve = [2.0**-i for i in range(1, 9)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5]
    np.testing.assert_allclose(layers.alibi_slopes(12), twelve, rtol=1e-6)
    bias = np.asarray(layers.alibi_bias(jnp.array([[0, 1, 2, 0, 1]]), 2))
    assert bias.shape == (1, 2, 5, 5) and bias[0, 0, 2, 0] == bias[0, 0, 0, 2] == -2 * 2.0**-4
    assert bias[0, 1, 3, 0] == 0.0  # packed rows: positions restart, distance 0
    for kind in ("alibi", "sinusoidal"):
        model = BertModel(_config(position_embedding_type=kind))
        ids = jnp.array([[3, 7, 9, 11, 4, 2]])
        params = model.init(jax.random.key(0), ids)
        at_zero, _, _ = model.apply(params, ids, position_ids=jnp.arange(6)[None])
        shifted, _, _ = model.apply(params, ids, position_ids=jnp.arange(6)[None] + 9)
        moved = np.max(np.abs(np.asarray(at_zero) - np.asarray(shifted)))
        assert (moved < 2e-5) if kind == "alibi" else (moved > 1e-3), (kind, moved)


def test_switches_change_the_parameter_tree_as_documented() -> None:
    def names(**switches):
        model = BertModel(_config(**switches))
        params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.ones((1, 4), jnp.int32)))["params"]
        return set(param_shapes.shapes(params))

    paper = names()
    assert "embeddings/position_embeddings/embedding" in paper
    table = {"embeddings/position_embeddings/embedding"}
    assert names(position_embedding_type="rotary") == names(position_embedding_type="alibi") == paper - table
    assert names(position_embedding_type="sinusoidal") == (paper - table) | {"embeddings/position_scale"}
    assert names(pre_layer_norm=True) - paper == {
        "encoder/final_LayerNorm/scale",
        "encoder/final_LayerNorm/bias",
    }
    gated = names(gated_ffn=True) - paper
    assert gated == {f"encoder/layer_{i}/intermediate_gate/{w}" for i in range(2) for w in ("kernel", "bias")}
    no_bias = paper - names(use_bias=False)
    assert no_bias and all("LayerNorm" not in n and n.endswith("bias") for n in no_bias)
    assert not any("pooler" in n for n in no_bias)  # the pooler is a head, it keeps its bias


def test_unknown_switch_values_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="position_embedding_type='relative_key'"):
        BertConfig.from_dict({"position_embedding_type": "relative_key"})
    assert BertConfig.from_dict({"position_embedding_type": "absolute"}) == BertConfig()
    assert BertConfig().switches_on() == []
    assert _config(use_bias=False, pre_layer_norm=True).switches_on() == [
        "pre_layer_norm=True",
        "use_bias=False",
    ]
    from bert_jax.convert import layout

    for kind in ("sinusoidal", "alibi"):  # no Hugging Face BertModel for these either
        with pytest.raises(ValueError, match=f"cannot represent position_embedding_type={kind};"):
            layout.check_exportable(_config(position_embedding_type=kind), "hf")
    with pytest.raises(ValueError, match="even hidden size"):
        BertConfig(hidden_size=9, num_attention_heads=3, position_embedding_type="sinusoidal")
