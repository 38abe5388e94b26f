"""Evaluation batches cut to length buckets or packed (`Finetuning.predict`): the same
outputs as at the full width, in the split's order, for a per-example head
(classification, cut and packed) and a per-token head (SQuAD spans), with fewer positions
computed."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from bert_jax.commands import run_settings
from bert_jax.data import tokenization
from bert_jax.finetuning import finetune
from bert_jax.training import run_config
from configs import glue as glue_config
from configs import squad as squad_config
from tests.helpers.task_data import build_squad, write_sst2


def _predict(config, *variants: dict):
    """Outputs of the first eval split under each variant of the settings (fields
    replaced), from the same parameters, with the shapes of the batches each ran."""
    settings = run_settings.finetune_settings(config)
    inputs = finetune.load_inputs(settings)
    got = []
    for changes in variants:
        run = settings.__class__(**{**settings.__dict__, **changes})
        ft = finetune.Finetuning(run, inputs, total_steps=1)
        shapes = []
        step = ft.engine.eval_step
        ft.engine.__dict__["eval_step"] = lambda p, b, step=step, shapes=shapes: (
            shapes.append(b["input_ids"].shape) or step(p, b)
        )
        state = ft.engine.init_state(0, inputs.params)
        done: list[int] = []  # the rows of each batch, as the progress line counts them
        got.append((ft.predict(state.params, inputs.evals[0], run.eval_batch, done.append), shapes))
        assert len(done) == len(shapes) and sum(done) == len(inputs.evals[0])
    return got


def _predict_both_ways(config, **fixed):
    """With the default buckets and with none (every batch at max_seq_length): outputs and
    the lengths the batches ran at."""
    cut, full = _predict(config, {**fixed}, {**fixed, "length_buckets": ()})
    widths = lambda shapes: [s[-1] for s in shapes]
    return (cut[0], widths(cut[1])), (full[0], widths(full[1])), config.max_seq_length


def _tiny(config, checkpoint, **overrides):
    config.init_checkpoint = checkpoint
    config.data.vocab_file = tokenization.default_vocab_file()
    return run_config.set_keys(config, overrides)


def test_classification_outputs_equal_the_full_width_ones(tmp_path, tiny_checkpoint) -> None:
    c = _tiny(glue_config.get_config("sst2"), tiny_checkpoint, data_dir=str(write_sst2(tmp_path)),
              max_seq_length=64, eval_batch_size=8)  # fmt: skip
    (cut, widths), (full, full_widths), width = _predict_both_ways(c, pack_examples=False)
    assert set(full_widths) == {width} and max(widths) < width  # shorter batches ran
    for a, b in zip(jax.tree.leaves(cut), jax.tree.leaves(full), strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_packed_evaluation_gives_every_example_its_full_width_outputs(tmp_path, tiny_checkpoint) -> None:
    """A packed task's evaluation packs its rows: the outputs of one example a row at the
    full width, in the split's order, from fewer rows in batches of one shape."""
    c = _tiny(glue_config.get_config("sst2"), tiny_checkpoint, data_dir=str(write_sst2(tmp_path)),
              max_seq_length=64, eval_batch_size=4)  # fmt: skip
    (packed, shapes), (full, full_shapes) = _predict(
        c, {"pack_examples": True}, {"pack_examples": False, "length_buckets": ()}
    )
    n = len(jax.tree.leaves(full)[0])
    assert set(shapes) == {(4, 64)} and len(shapes) < len(full_shapes) == -(-n // 4)
    for a, b in zip(jax.tree.leaves(packed), jax.tree.leaves(full), strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_span_outputs_equal_the_full_width_ones_on_every_real_token(tmp_path, tiny_checkpoint) -> None:
    dataset = build_squad(version_2=False, n_articles=3)
    for name in ("train-v1.1.json", "dev-v1.1.json"):
        (tmp_path / name).write_text(json.dumps(dataset))
    c = _tiny(squad_config.get_config("1.1"), tiny_checkpoint, data_dir=str(tmp_path), max_seq_length=128,
              doc_stride=48, max_query_length=24, eval_batch_size=4)  # fmt: skip
    (cut, widths), (full, _), width = _predict_both_ways(c)
    assert min(widths) < width
    settings = run_settings.finetune_settings(c)
    real = finetune.load_inputs(settings).evals[0].arrays["input_mask"] > 0
    for a, b in zip(jax.tree.leaves(cut), jax.tree.leaves(full), strict=True):
        assert a.shape == b.shape == real.shape  # per-token, padded back to the full width
        np.testing.assert_allclose(a[real], b[real], rtol=1e-5, atol=1e-5)
        filled = a < -1e30  # beyond the batch's cut: can win no argmax
        assert filled.any() and not (filled & real).any()


def test_a_length_beyond_the_checkpoints_position_table_is_refused_in_one_line(
    tmp_path, tiny_checkpoint
) -> None:
    """The tiny checkpoint's table holds 128 positions: 192 would read past it (NaN outputs)."""
    c = _tiny(glue_config.get_config("sst2"), tiny_checkpoint, data_dir=str(write_sst2(tmp_path)),
              max_seq_length=192)  # fmt: skip
    with pytest.raises(ValueError) as err:
        finetune.load_inputs(run_settings.finetune_settings(c))
    message = str(err.value)
    assert "config.max_seq_length=192" in message and "max_position_embeddings=128" in message
    assert "\n" not in message
