"""Packed fine-tuning rows: the layout, the same logits as each example alone in a padded
row, and the same training step (loss and gradients) as unpacked rows."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from bert_jax.commands import run_settings
from bert_jax.finetuning import finetune, packing
from bert_jax.tasks.base import MODEL_INPUTS
from bert_jax.tasks.registry import get_task
from tests.helpers.task_data import TINY


def _pairs(n: int = 12, seq: int = 64, seed: int = 0, regression: bool = False) -> dict[str, np.ndarray]:
    """Sentence pairs of different lengths, real tokens first, two segments."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 40, n)
    mask = (np.arange(seq)[None] < lengths[:, None]).astype(np.int32)
    segments = ((np.arange(seq)[None] >= (lengths // 2)[:, None]) & (mask > 0)).astype(np.int32)
    labels = rng.random(n).astype(np.float32) * 5 if regression else rng.integers(0, 2, n).astype(np.int32)
    return {
        "input_ids": (rng.integers(1000, 5000, (n, seq)) * mask).astype(np.int32),
        "input_mask": mask,
        "segment_ids": segments,
        "labels": labels,
    }


def test_pack_fills_rows_first_fit_and_keeps_every_example() -> None:
    rows = _pairs()
    packed = packing.pack(rows, 64, row_multiple=4)
    lengths = rows["input_mask"].sum(-1)
    r, k = packed["cls_positions"].shape
    assert r % 4 == 0 and k == packing.slots(64) == 16
    assert r < len(lengths)  # fewer rows than examples
    assert sorted(packed["example_index"][packed["example_index"] >= 0]) == list(range(len(lengths)))
    for row, slot in zip(*np.nonzero(packed["example_index"] >= 0), strict=True):
        i, at = packed["example_index"][row, slot], packed["cls_positions"][row, slot]
        n = lengths[i]
        np.testing.assert_array_equal(packed["input_ids"][row, at : at + n], rows["input_ids"][i, :n])
        np.testing.assert_array_equal(packed["segment_ids"][row, at : at + n], rows["segment_ids"][i, :n])
        np.testing.assert_array_equal(packed["position_ids"][row, at : at + n], np.arange(n))
        assert set(packed["input_mask"][row, at : at + n]) == {slot + 1}
        assert packed["labels"][row, slot] == rows["labels"][i] and packed["label_weights"][row, slot] == 1
    assert packed["label_weights"].sum() == len(lengths)
    assert (packed["input_mask"] > 0).sum() == lengths.sum()  # padding only at rows' tails
    with pytest.raises(ValueError, match="does not fit"):
        packing.pack(rows, 16)


@pytest.mark.parametrize("name", ["sst2", "stsb"])
def test_packed_rows_give_each_example_its_logits_alone(name: str) -> None:
    task = get_task(name)
    rows = _pairs(regression=name == "stsb")
    model = task.model(TINY)
    inputs = [rows[k] for k in MODEL_INPUTS]
    params = model.init(jax.random.key(0), *inputs)["params"]
    alone = np.asarray(model.apply({"params": params}, *inputs))
    packed = packing.pack(rows, 64, row_multiple=2)
    out = model.apply(
        {"params": params},
        *[packed[k] for k in MODEL_INPUTS],
        **{k: packed[k] for k in packing.PACKED_INPUTS},
    )
    assert out.shape == (*packed["cls_positions"].shape, task.spec.num_labels)
    np.testing.assert_allclose(
        packing.unpack(np.asarray(out), packed["example_index"]), alone, rtol=1e-5, atol=1e-5
    )


def test_a_packed_batch_has_the_loss_and_gradients_of_the_unpacked_one() -> None:
    task = get_task("sst2")
    model = task.model(TINY.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    objective = finetune.FinetuningObjective(model, task)
    rows = _pairs(n=16)
    params = model.init(jax.random.key(1), *[rows[k][:1] for k in MODEL_INPUTS])["params"]
    packed = packing.pack(rows, 64, row_multiple=2)
    del packed["example_index"]

    def loss_and_grads(batch: dict) -> tuple:
        totals = objective.totals(batch)
        fn = lambda p: objective.loss(p, batch, totals=totals, rng=jax.random.key(0))[0]
        return jax.value_and_grad(fn)(params)

    assert float(objective.totals(packed)) == float(objective.totals(rows)) == 16.0
    (loss, grads), (loss_p, grads_p) = loss_and_grads(rows), loss_and_grads(packed)
    assert float(loss_p) == pytest.approx(float(loss), rel=1e-5)
    diffs = jax.tree.leaves(jax.tree.map(lambda a, b: float(np.max(np.abs(a - b))), grads, grads_p))
    assert max(diffs) < 1e-5


def test_a_left_to_right_model_classifies_from_the_last_token() -> None:
    """Its [CLS] sees only itself: the logits must follow the last token, not ignore it."""
    model = get_task("sst2").model(TINY.replace(causal_attention=True))
    rows = _pairs(n=4)
    inputs = [rows[k] for k in MODEL_INPUTS]
    params = model.init(jax.random.key(0), *inputs)["params"]
    changed = rows["input_ids"].copy()
    last = rows["input_mask"].sum(-1) - 1
    changed[np.arange(4), last] = 7  # the last real token of every row
    before = np.asarray(model.apply({"params": params}, *inputs))
    after = np.asarray(model.apply({"params": params}, changed, *inputs[1:]))
    assert np.all(np.abs(after - before).max(-1) > 1e-4)


def test_pack_row_multiple_rounds_the_packed_row_count(tmp_path, tiny_checkpoint) -> None:
    """`pack_row_multiple`: every packed batch's row count is a multiple of it (fewer
    compiled shapes); the extra rows are empty and carry no loss."""
    from bert_jax.data import tokenization
    from bert_jax.finetuning import finetune
    from bert_jax.training import run_config
    from configs import glue as glue_config
    from tests.helpers.task_data import write_sst2

    counts, data = {}, str(write_sst2(tmp_path / "glue"))
    for multiple in (1, 4):
        c = run_config.set_keys(
            glue_config.get_config("sst2"),
            {"init_checkpoint": tiny_checkpoint, "data.vocab_file": tokenization.default_vocab_file(),
             "data_dir": data, "max_seq_length": 128, "global_batch_size": 24,
             "pack_row_multiple": multiple},
        )  # fmt: skip
        settings = run_settings.finetune_settings(c)
        inputs = finetune.load_inputs(settings)
        ft = finetune.Finetuning(settings, inputs, total_steps=4)
        rows = [ft.rows(s) for s in range(4)]
        counts[multiple] = [len(r["input_ids"]) for r in rows]
        real = [int((r["input_mask"].sum(-1) > 0).sum()) for r in rows]
        assert all(
            n % multiple == 0 and n - k < multiple for n, k in zip(counts[multiple], real, strict=True)
        )
    assert counts[4] != counts[1] and all(a <= b for a, b in zip(counts[1], counts[4], strict=True))
