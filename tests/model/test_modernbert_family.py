"""The ModernBERT-family switches of `BertConfig`: the presets' parameter counts against
`transformers`' ModernBERT, the parameter tree they leave, scanning in groups of global and
local layers equal to the loop, the local window's reach, the pooling heads, and the one-line
refusals of values out of range. (Numerical parity with `transformers` is in
tests/convert/test_modernbert.py.)"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from bert_jax.commands import run_settings
from bert_jax.convert import modernbert_format
from bert_jax.model import attention, flops, param_shapes, poolers
from bert_jax.model.config import MODEL_PRESETS, MODERNBERT, BertConfig
from bert_jax.model.encoder import BertLayer, BertModel, stack_layers, unstack_layers
from bert_jax.model.heads import BertForMaskedLM
from bert_jax.model.numerics import Numerics
from configs import pretrain


def _family(**overrides) -> BertConfig:
    values = {**MODERNBERT, "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 6}
    values.update(num_attention_heads=4, intermediate_size=48, max_position_embeddings=64, local_attention=8)
    return BertConfig(**{**values, **overrides})


def _shapes(model, *args) -> dict:
    return param_shapes.shapes(jax.eval_shape(lambda: model.init(jax.random.key(0), *args))["params"])


@pytest.mark.parametrize("preset", ["modernbert-base", "modernbert-large"])
def test_presets_have_transformers_parameter_count(preset) -> None:
    c = MODEL_PRESETS[preset]
    hf_config = transformers.ModernBertConfig(**modernbert_format.hf_config(c, "ModernBertForMaskedLM"))
    with torch.device("meta"):  # shapes only: nothing allocated
        reference = transformers.ModernBertForMaskedLM(hf_config)
    want = sum(p.numel() for p in reference.parameters())  # the tied decoder counted once
    ids = jnp.ones((1, 8), jnp.int32)
    ours = sum(int(np.prod(s)) for s in _shapes(BertForMaskedLM(c), ids).values())
    assert ours == want
    assert (c.num_hidden_layers, c.hidden_size, c.intermediate_size, c.vocab_size) == {
        "modernbert-base": (22, 768, 1152, 50_368),
        "modernbert-large": (28, 1024, 2624, 50_368),
    }[preset]


def test_family_parameter_tree() -> None:
    names = set(_shapes(BertModel(_family()), jnp.ones((1, 8), jnp.int32)))
    assert not any("token_type" in n or "position_embeddings" in n for n in names)
    assert "encoder/layer_0/attention_LayerNorm/scale" not in names
    assert "encoder/layer_1/attention_LayerNorm/scale" in names
    assert not any(n.endswith("/bias") for n in names)  # no dense and no LayerNorm biases
    assert {"pooler/dense/kernel", "pooler/LayerNorm/scale", "encoder/final_LayerNorm/scale"} <= names
    untied = set(_shapes(BertForMaskedLM(_family(tie_word_embeddings=False)), jnp.ones((1, 8), jnp.int32)))
    assert "mlm/decoder" in untied and "mlm/decoder" not in _shapes(
        BertForMaskedLM(_family()), jnp.ones((1, 8), jnp.int32)
    )


def test_scanned_groups_equal_the_loop() -> None:
    """6 layers, every third global, layer 0 without attention norm: layer_0 alone, one
    scanned group of (local, local, global), layers 4 and 5 alone."""
    c = _family()
    ids = jnp.asarray(np.random.default_rng(0).integers(3, 64, (2, 24)))
    mask = jnp.ones_like(ids).at[1, 17:].set(0)
    model = BertModel(c)
    params = nn.meta.unbox(model.init(jax.random.key(1), ids))["params"]
    scanned = BertModel(c, Numerics(layer_loop="scan"))
    stacked = stack_layers(params, c.num_hidden_layers, c)
    assert sorted(stacked["encoder"]) == ["final_LayerNorm", "layer_0", "layer_4", "layer_5", "layers"]
    assert sorted(stacked["encoder"]["layers"]) == ["layer_0", "layer_1", "layer_2"]
    init_shapes = _shapes(scanned, ids)
    assert param_shapes.shapes(stacked) == init_shapes  # the layout the scanned model builds
    want, _, want_hidden = model.apply({"params": params}, ids, mask, output_hidden_states=True)
    got, _, got_hidden = scanned.apply({"params": stacked}, ids, mask, output_hidden_states=True)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert len(got_hidden) == len(want_hidden) == c.num_hidden_layers + 1
    for g, w in zip(got_hidden, want_hidden, strict=True):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6)
    back = unstack_layers(stacked, c.num_hidden_layers)
    assert jax.tree.all(jax.tree.map(np.array_equal, back, params))


def test_local_layer_sees_only_its_window() -> None:
    c = _family()
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(1, 24, c.hidden_size)), jnp.float32)
    bump = jnp.asarray(rng.normal(size=(c.hidden_size,)), jnp.float32)  # not a constant: LN keeps it
    bias = jnp.zeros((1, 1, 1, 24), jnp.float32)  # an additive bias: every key visible
    out = {}
    for name, window in (("local", 8), ("global", None)):  # local: query i sees i-4 .. i+4
        layer = BertLayer(c, window=window)
        params = layer.init(jax.random.key(0), x, bias, True)
        run = lambda x, layer=layer, params=params: layer.apply(params, x, bias, True)[0, 10]
        base = run(x)
        out[name] = [float(jnp.abs(run(x.at[0, j].add(bump)) - base).max()) for j in (14, 15, 20)]
    assert out["local"][0] > 1e-4 and out["local"][1] == out["local"][2] == 0.0
    assert min(out["global"]) > 1e-4


def test_mean_pooling_reads_real_tokens_of_each_example() -> None:
    rng = np.random.default_rng(0)
    h = rng.normal(size=(2, 6, 3)).astype(np.float32)
    mask = np.array([[1, 1, 1, 0, 0, 0], [1, 1, 2, 2, 2, 0]])
    got = np.asarray(poolers.masked_mean(jnp.asarray(h), jnp.asarray(mask), None))
    np.testing.assert_allclose(got[0], h[0, :3].mean(0), rtol=1e-6)
    np.testing.assert_allclose(got[1], h[1, :5].mean(0), rtol=1e-6)
    packed = np.asarray(poolers.masked_mean(jnp.asarray(h), jnp.asarray(mask), jnp.array([[0, 0], [0, 2]])))
    np.testing.assert_allclose(packed[1, 0], h[1, :2].mean(0), rtol=1e-6)
    np.testing.assert_allclose(packed[1, 1], h[1, 2:5].mean(0), rtol=1e-6)


@pytest.mark.parametrize(
    ("values", "line"),
    [
        (
            dict(first_layer_attention_norm=False),
            "first_layer_attention_norm=False needs pre_layer_norm=True",
        ),
        (dict(global_attn_every_n_layers=0), "global_attn_every_n_layers=0 must be an integer >= 1"),
        (dict(local_attention=0), "local_attention=0 must be a positive number of tokens"),
        (dict(classifier_pooling="max"), "classifier_pooling='max' not in"),
        (dict(type_vocab_size=-1), "type_vocab_size=-1 must be an integer >= 0"),
    ],
)
def test_out_of_range_values_are_one_line_naming_the_key(values, line) -> None:
    with pytest.raises(ValueError) as e:
        BertConfig.from_dict(values)
    assert line in str(e.value) and "\n" not in str(e.value)


def test_switches_and_run_presets() -> None:
    assert BertConfig().switches_on() == []
    on = MODEL_PRESETS["modernbert-base"].switches_on()
    assert (
        "global_attn_every_n_layers=3" in on and "type_vocab_size=0" in on and "local_attention=128" not in on
    )
    assert "local_attention=64" in _family(local_attention=64).switches_on()
    assert "local_attention=64" not in _family(local_attention=64, global_attn_every_n_layers=1).switches_on()
    for preset, layers in (("modernbert-base", 22), ("modernbert-large", 28)):
        c = pretrain.get_config(preset)
        model = BertConfig.from_dict(c.model)
        assert model.num_hidden_layers == layers and c.max_seq_length == 1024
        assert model.replace(vocab_pad_multiple=1) == MODEL_PRESETS[preset]
        assert c.layer_loop == "auto"  # scanned in groups on a TPU, unrolled on a GPU
    # The demo's recipe in this family is one ModernBERT can hold; the demo itself is not.
    family = run_settings.pretrain_settings(pretrain.get_config("demo-modernbert")).model
    assert modernbert_format.cannot_hold(family) == []
    demo = run_settings.pretrain_settings(pretrain.get_config("demo")).model
    assert [r.split(" ")[0] for r in modernbert_format.cannot_hold(demo)] == [
        "first_layer_attention_norm=True",
        "type_vocab_size=2",
    ]
    assert (
        family.replace(type_vocab_size=2, first_layer_attention_norm=True, classifier_pooling="bert") == demo
    )


def test_encoder_on_the_splash_kernel_equals_the_xla_path(capsys, monkeypatch) -> None:
    """The whole family encoder (padding, global and windowed layers) with
    ``attention_kernel=splash`` (Pallas interpret mode on the CPU) against the XLA path."""
    monkeypatch.setattr(attention, "_WARNED", set())
    c = _family(num_hidden_layers=3, hidden_size=64, num_attention_heads=2, local_attention=32)
    ids = jnp.asarray(np.random.default_rng(0).integers(3, 64, (2, 128)))
    mask = jnp.ones_like(ids).at[1, 90:].set(0)
    params = BertModel(c).init(jax.random.key(0), ids)
    run = lambda kernel: BertModel(c, Numerics(attention_kernel=kernel)).apply(params, ids, mask)[0]
    got, want = run("splash"), run("xla")
    assert "Pallas interpret mode" in capsys.readouterr().out
    real = np.asarray(mask > 0)
    np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], rtol=0, atol=1e-5)


def test_flops_count_local_layers_by_their_window() -> None:
    for s, window in ((32, 8), (10, 4), (5, 128), (64, None)):
        mask = attention.AttentionMask(jnp.ones((1, s), jnp.int32), window=window)
        assert flops.attended_pairs(s, window) == int(
            jnp.broadcast_to(attention.visible(mask), (1, 1, s, s)).sum()
        )
    c = MODEL_PRESETS["modernbert-base"]
    local = flops.model_flops_per_step(c, 8, 8192, 0, nsp=False)
    every_layer_global = flops.model_flops_per_step(
        c.replace(global_attn_every_n_layers=1), 8, 8192, 0, nsp=False
    )
    pairs = 8192 * 8192 - flops.attended_pairs(8192, 128)
    assert every_layer_global - local == 3 * 4 * 8 * 768 * pairs * 14  # 14 of 22 layers are local
