"""``remat_policy="selective"``: a layer keeps its matmul inputs in the compute dtype for the
backward pass and recomputes the rest (LayerNorm statistics, softmax, dropout masks): the
gradients of no remat, with a fraction of the activations kept between the passes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.model.config import MODERNBERT, BertConfig
from bert_jax.model.encoder import BertModel
from bert_jax.model.numerics import Numerics

_BERT = BertConfig(
    vocab_size=96,
    hidden_size=64,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=128,
    max_position_embeddings=128,
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
)
_MODERNBERT = BertConfig(
    **{
        **MODERNBERT,
        "vocab_size": 96,
        "hidden_size": 64,
        "num_hidden_layers": 10,  # layer 0, then three scanned groups of one global and two local layers
        "num_attention_heads": 4,
        "intermediate_size": 96,
        "max_position_embeddings": 128,
        "local_attention": 16,
    }
)
_BATCH, _SEQ = 4, 128


def _step(config: BertConfig, remat_policy: str, dtype: str = "float32"):
    """(params, jitted gradient of a loss on the encoder's output with dropout on)."""
    model = BertModel(config, Numerics(compute_dtype=dtype, remat_policy=remat_policy, layer_loop="scan"))
    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(1, config.vocab_size, (_BATCH, _SEQ)), jnp.int32)
    mask = jnp.ones_like(ids).at[1, 100:].set(0)  # a padded row
    params = model.init(jax.random.key(0), ids, mask)["params"]
    target = jnp.asarray(rng.standard_normal((_BATCH, _SEQ, config.hidden_size)), jnp.float32)

    def loss(p):
        hidden = model.apply(
            {"params": p}, ids, mask, deterministic=False, rngs={"dropout": jax.random.key(1)}
        )[0]
        return jnp.mean((hidden.astype(jnp.float32) - target) ** 2)

    return params, jax.jit(jax.value_and_grad(loss))


@pytest.mark.parametrize("config", [_BERT, _MODERNBERT], ids=["bert-dropout", "modernbert"])
def test_selective_remat_keeps_the_gradients_and_less_memory(config: BertConfig) -> None:
    params, none = _step(config, "none")
    _, selective = _step(config, "selective")
    none, selective = none.lower(params).compile(), selective.lower(params).compile()
    (loss, grads), (loss_s, grads_s) = none(params), selective(params)
    assert float(loss_s) == pytest.approx(float(loss), rel=1e-6)  # the same dropout masks
    flat, flat_s = jax.tree.leaves(grads), jax.tree.leaves(grads_s)
    for (path, _), g, g_s in zip(jax.tree_util.tree_leaves_with_path(grads), flat, flat_s, strict=True):
        # 1e-9: leaves whose gradient is 0 but for rounding (the key bias: softmax ignores it)
        atol = 1e-5 * float(np.abs(g).max()) + 1e-9
        np.testing.assert_allclose(g_s, g, rtol=0, atol=atol, err_msg=jax.tree_util.keystr(path))
    # What the forward pass keeps for the backward: compiled temporaries.
    kept = {
        policy: step.memory_analysis().temp_size_in_bytes
        for policy, step in (("none", none), ("selective", selective))
    }
    assert kept["selective"] < 0.6 * kept["none"], kept


@pytest.mark.parametrize("kernel", ["triton", "mosaic", "splash"])
def test_selective_remat_runs_a_fused_kernels_forward_once(kernel: str) -> None:
    """A fused kernel's output and softmax statistics are kept: its backward reads them,
    where ``full`` remat runs the kernel's forward again (one more kernel in the step)."""
    config = _BERT.replace(
        num_hidden_layers=2,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0 if kernel == "splash" else 0.1,  # splash takes no dropout
    )
    ids = jnp.ones((2, 128), jnp.int32)
    params = BertModel(config, Numerics(layer_loop="scan")).init(jax.random.key(0), ids)["params"]

    def kernels(remat_policy: str) -> int:
        numerics = Numerics(remat_policy=remat_policy, attention_kernel=kernel, layer_loop="scan")
        model = BertModel(config, numerics)

        def loss(p):
            out = model.apply({"params": p}, ids, deterministic=False, rngs={"dropout": jax.random.key(1)})
            return jnp.sum(out[0] ** 2)

        return str(jax.make_jaxpr(jax.grad(loss))(params)).count("pallas_call[")

    assert kernels("selective") == kernels("none") == kernels("full") - 1
