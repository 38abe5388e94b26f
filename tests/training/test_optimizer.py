"""The optimizer of the paper: schedule, decay mask, clipping; accumulation equals one batch."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bert_jax.commands import run_settings
from bert_jax.data import synthetic
from bert_jax.pretraining import pretrain
from bert_jax.training import optimizer, resolver, sharding
from bert_jax.training.settings import TrainingSettings
from configs import pretrain as pretrain_config


def test_warmup_then_linear_decay_to_zero() -> None:
    schedule = optimizer.learning_rate_schedule(1e-4, warmup_steps=10, total_steps=110)
    assert float(schedule(0)) == 0.0
    assert float(schedule(5)) == pytest.approx(5e-5)
    assert float(schedule(10)) == pytest.approx(1e-4)
    assert float(schedule(60)) == pytest.approx(5e-5)
    assert float(schedule(110)) == pytest.approx(0.0, abs=1e-12)


def test_no_weight_decay_on_layer_norm_and_biases() -> None:
    params = {
        "bert": {
            "embeddings": {
                "word_embeddings": {"embedding": 1},
                "LayerNorm": {"scale": 1, "bias": 1},
                "position_scale": 1,
            },
            "encoder": {
                "layer_0": {
                    "intermediate": {"kernel": 1, "bias": 1},
                    "output_LayerNorm": {"scale": 1, "bias": 1},
                }
            },
        },
        "mlm": {"bias": 1, "transform_LayerNorm": {"scale": 1, "bias": 1}, "transform": {"kernel": 1}},
    }
    mask = optimizer.decay_mask(params)
    assert mask["bert"]["embeddings"]["word_embeddings"]["embedding"] is True
    assert mask["bert"]["encoder"]["layer_0"]["intermediate"]["kernel"] is True
    assert mask["mlm"]["transform"]["kernel"] is True
    for path in (
        ("bert", "embeddings", "LayerNorm", "scale"),
        ("bert", "embeddings", "position_scale"),
        ("bert", "encoder", "layer_0", "intermediate", "bias"),
        ("bert", "encoder", "layer_0", "output_LayerNorm", "scale"),
        ("mlm", "bias"),
        ("mlm", "transform_LayerNorm", "bias"),
    ):
        node = mask
        for k in path:
            node = node[k]
        assert node is False, path


def test_weight_decay_applies_only_where_masked() -> None:
    config = pretrain_config.get_config("tiny")
    config.grad_clip_norm = 0.0
    config.warmup_steps = 0
    config.learning_rate = 1.0
    tx, _ = resolver.resolve(TrainingSettings, config, partial=True).optimization.build(100)
    params = {"dense": {"kernel": jnp.ones((2,)), "bias": jnp.ones((2,))}}
    zero = jax.tree.map(jnp.zeros_like, params)
    updates, _ = tx.update(zero, tx.init(params), params)
    assert np.allclose(updates["dense"]["kernel"], -0.01)  # lr x wd x param
    assert np.allclose(updates["dense"]["bias"], 0.0)


def _one_step(accum: int) -> tuple[dict, dict]:
    config = pretrain_config.get_config("tiny")
    config.data.source = "synthetic"
    config.grad_accum_steps = accum
    config.model.hidden_dropout_prob = 0.0
    config.model.attention_probs_dropout_prob = 0.0
    mesh = sharding.make_mesh((1, 1, 1))
    setup = pretrain.Pretraining(run_settings.pretrain_settings(config), mesh)
    batch = synthetic.global_batch(
        0,
        seed=0,
        global_batch_size=8,
        max_seq_length=32,
        max_predictions_per_seq=5,
        vocab_size=config.model.vocab_size,
    )
    with jax.set_mesh(mesh):
        state = setup.engine.init_state(0)
        new_state, metrics = setup.train_step(state, setup.global_batch(batch))
    return jax.device_get(new_state.params), jax.device_get(metrics)


def test_gradient_accumulation_equals_one_big_batch() -> None:
    params_1, metrics_1 = _one_step(1)
    params_4, metrics_4 = _one_step(4)
    assert metrics_4["loss"] == pytest.approx(metrics_1["loss"], rel=1e-5)
    assert metrics_4["grad_norm"] == pytest.approx(metrics_1["grad_norm"], rel=1e-4)
    diffs = jax.tree.leaves(jax.tree.map(lambda a, b: float(np.max(np.abs(a - b))), params_1, params_4))
    assert max(diffs) < 1e-6


def test_clipping_is_part_of_the_chain() -> None:
    config = pretrain_config.get_config("tiny")
    config.warmup_steps = 0
    tx, _ = resolver.resolve(TrainingSettings, config, partial=True).optimization.build(100)
    grads = {"w": jnp.full((4,), 100.0)}
    params = {"w": jnp.zeros((4,))}
    # Adam normalises the step size, so check the clip on its input: with clipping the
    # first moment after one step is 0.1 x the clipped gradient (norm 1).
    state = tx.init(params)
    _, state = tx.update(grads, state, params)
    mu = jax.tree.leaves(
        next(s for s in jax.tree.leaves(state, is_leaf=lambda x: hasattr(x, "mu")) if hasattr(s, "mu")).mu
    )[0]
    assert float(jnp.linalg.norm(mu)) == pytest.approx(0.1 * 1.0, rel=1e-4)


@pytest.mark.parametrize("clip", [0.0, 1.0])
def test_fused_adamw_equals_the_optax_chain(clip: float) -> None:
    """`optimizer.fused_adamw` = clip_by_global_norm + optax.adamw (masked decay), step by step
    through warmup and decay, with gradients that do and do not trigger the clip."""
    schedule = optimizer.learning_rate_schedule(1e-2, warmup_steps=3, total_steps=8)
    kw = dict(
        learning_rate=schedule, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01, mask=optimizer.decay_mask
    )
    ours = optimizer.fused_adamw(clip_norm=clip, **kw)
    ref = optax.adamw(**kw)
    if clip:
        ref = optax.chain(optax.clip_by_global_norm(clip), ref)
    keys = jax.random.split(jax.random.key(0), 3)
    params = {"dense": {"kernel": jax.random.normal(keys[0], (4, 3)), "bias": jnp.ones((3,))}}
    p1, p2, s1, s2 = params, params, ours.init(params), ref.init(params)
    for step in range(8):
        scale = 10.0 if step % 2 else 0.05  # above and below the clip
        g = jax.tree.map(lambda x, i=step, c=scale: c * jnp.sin(x * (i + 1)), params)
        u1, s1 = ours.update(g, s1, p1)
        u2, s2 = ref.update(g, s2, p2)
        p1, p2 = optax.apply_updates(p1, u1), optax.apply_updates(p2, u2)
        for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p2), strict=True):
            np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7)


def test_stable_adamw_equals_optimi_and_shrinks_the_step_of_a_gradient_spike() -> None:
    """`optimizer=stable_adamw` = optimi's `StableAdamW` (the implementation ModernBERT
    trains with; weight decay on the kernel only), step by step through warm-up and decay,
    with a gradient 100x its usual size at one step; at that step its update is smaller
    than AdamW's."""
    import optimi  # the test extra's reference
    import torch

    kw = dict(
        name="stable_adamw", learning_rate=1e-2, warmup_steps=3, total_steps=10, weight_decay=0.1,
        b1=0.9, b2=0.98, eps=1e-6, clip_norm=0.0, schedule="wsd",
    )  # fmt: skip
    ours, schedule = optimizer.create_optimizer(**kw)
    adamw, _ = optimizer.create_optimizer(**{**kw, "name": "adamw"})
    keys = jax.random.split(jax.random.key(0), 2)
    params = {"dense": {"kernel": jax.random.normal(keys[0], (4, 3)), "bias": jnp.ones((3,))}}
    theirs = {k: torch.nn.Parameter(torch.tensor(np.asarray(v))) for k, v in params["dense"].items()}
    groups = [{"params": [theirs["kernel"]]}, {"params": [theirs["bias"]], "weight_decay": 0.0}]
    ref = optimi.StableAdamW(
        groups, lr=1e-2, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.1, foreach=False, triton=False
    )
    state, adamw_state, spike = ours.init(params), adamw.init(params), 6
    for step in range(10):
        scale = 100.0 if step == spike else 1.0
        grads = jax.tree.map(lambda x, i=step, c=scale: c * jnp.sin(x * (i + 1)), params)
        for group in ref.param_groups:
            group["lr"] = float(schedule(step))
        for name, p in theirs.items():
            p.grad = torch.tensor(np.asarray(grads["dense"][name]))
        ref.step()
        updates, state = ours.update(grads, state, params)
        adamw_updates, adamw_state = adamw.update(grads, adamw_state, params)
        if step == spike:  # the spike's step: the update is clipped below AdamW's
            for a, b in zip(jax.tree.leaves(updates), jax.tree.leaves(adamw_updates), strict=True):
                assert float(jnp.linalg.norm(a)) < 0.5 * float(jnp.linalg.norm(b))
        params = optax.apply_updates(params, updates)
        for name, p in theirs.items():
            np.testing.assert_allclose(params["dense"][name], p.detach().numpy(), rtol=1e-5, atol=1e-7)


def test_global_norm_equals_optax_with_small_and_large_tensors_in_any_dtype() -> None:
    """`optimizer.global_norm` (the small tensors summed as one vector) = optax's, for trees
    of only small, only large, and mixed tensors, float32 and bfloat16."""
    keys = jax.random.split(jax.random.key(1), 4)
    small = optimizer.SMALL_TENSOR
    trees = [
        {"b": jax.random.normal(keys[0], (7,)), "s": jax.random.normal(keys[1], (small,))},
        {"k": jax.random.normal(keys[2], (small + 1,))},
        {
            "a": {"kernel": jax.random.normal(keys[3], (96, 64)), "bias": jnp.full((64,), 3.0)},
            "n": {"scale": jnp.full((5, 2), -2.0, jnp.bfloat16), "bias": jnp.zeros((3,))},
        },
    ]
    for tree in trees:
        want = float(optax.global_norm(jax.tree.map(lambda x: x.astype(jnp.float32), tree)))
        assert float(optimizer.global_norm(tree)) == pytest.approx(want, rel=1e-6)
    assert float(optimizer.global_norm({})) == 0.0
