"""Pre-training batches from prepared data: host-count independence, O(1) resume, epochs,
held-out eval, masks on the device, bad input."""

import dataclasses

import numpy as np
import pytest

from bert_jax.data import prepared_cache, records, run_vocabulary, sampler, sources, tokenization
from bert_jax.data.settings import DataSettings
from tests.helpers.masking import mask_rows
from tests.helpers.tfds_mock import prepared_mock_data


def _it(c, **kw):
    args = dict(global_batch_size=8, max_seq_length=64, max_predictions_per_seq=10, seed=7)
    args.update(kw)
    return sources.data_batches(c, **args)


def _take(it, n):
    return [next(it) for _ in range(n)]


def _concat(parts):
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


@pytest.fixture(scope="module")
def wiki_config(tmp_path_factory):
    return DataSettings(cache_dir=str(tmp_path_factory.mktemp("cache")), dupe_factor=2)


def test_hosts_assemble_the_same_global_batches_and_resume_on_another_count(wiki_config) -> None:
    one = _take(_it(wiki_config, process_index=0, process_count=1), 6)
    halves = [_take(_it(wiki_config, process_index=p, process_count=2), 6) for p in range(2)]
    for step in range(6):
        both = _concat([halves[0][step], halves[1][step]])
        assert all(np.array_equal(both[k], one[step][k]) for k in one[step])
    # Resume at step 4 with 4 processes: the same batches 4 and 5.
    quarters = [_take(_it(wiki_config, start_step=4, process_index=p, process_count=4), 2) for p in range(4)]
    for i, step in enumerate((4, 5)):
        merged = _concat([q[i] for q in quarters])
        assert all(np.array_equal(merged[k], one[step][k]) for k in one[step])
    # Masks are a function of the row: masking each host's rows gives the whole batch's masks.
    whole = mask_rows(wiki_config, one[5], 10)
    parts = _concat([mask_rows(wiki_config, q[1], 10) for q in quarters])
    assert all(np.array_equal(parts[k], whole[k]) for k in whole)
    assert not np.array_equal(one[0]["input_ids"], one[1]["input_ids"])


def test_resume_is_positioned_not_replayed_and_crosses_epochs(wiki_config) -> None:
    data = prepared_cache.open_prepared(wiki_config, "train", 64, 7)
    batch = 256
    boundary = data.size // batch  # the batch that straddles epochs 0 and 1
    one = _take(_it(wiki_config, global_batch_size=batch, process_index=0, process_count=1), boundary + 2)
    kw = dict(global_batch_size=batch, start_step=boundary - 1, process_count=2)
    halves = [_take(_it(wiki_config, process_index=p, **kw), 3) for p in range(2)]
    for i, step in enumerate(range(boundary - 1, boundary + 2)):
        both = _concat([halves[0][i], halves[1][i]])
        assert all(np.array_equal(both[k], one[step][k]) for k in one[step])
    # Epoch 0 visits every example exactly once; epoch 1 in another order.
    seen = np.concatenate([b["example_id"] for b in one])
    epochs = np.concatenate([b["epoch"] for b in one])
    assert np.array_equal(np.sort(seen[epochs == 0]), np.arange(data.size))
    assert set(epochs.tolist()) == {0, 1}
    # A resume a billion examples in is as immediate as step 0 (no replay): epoch and ids follow.
    far = next(_it(wiki_config, start_step=4_000_000, process_index=0, process_count=1))
    assert (far["epoch"] == 4_000_000 * 8 // data.size).all()


def test_permutation_is_a_bijection_for_any_size() -> None:
    for size in (1, 2, 3, 7, 64, 1000, 12_345):
        ids = sampler.permute(np.arange(size), size, seed=3, epoch=1)
        assert np.array_equal(np.sort(ids), np.arange(size))
    a = sampler.permute(np.arange(1000), 1000, seed=3, epoch=0)
    b = sampler.permute(np.arange(1000), 1000, seed=3, epoch=1)
    assert not np.array_equal(a, b) and not np.array_equal(a, np.arange(1000))


def test_dynamic_masking_changes_masks_between_epochs_static_does_not(wiki_config) -> None:
    rows = next(_it(wiki_config, process_index=0, process_count=1))
    later = dict(rows, epoch=rows["epoch"] + 3)  # the same examples, three epochs later
    a = mask_rows(wiki_config, rows, 10)
    b = mask_rows(wiki_config, later, 10)
    assert not np.array_equal(a["masked_lm_positions"], b["masked_lm_positions"])
    static = dataclasses.replace(wiki_config, dynamic_masking=False)
    data = prepared_cache.open_prepared(static, "train", 64, 7)
    far = next(_it(static, start_step=data.size, process_index=0, process_count=1))  # epoch 8
    assert (far["epoch"] == 0).all()  # the epoch never reaches the masks


def test_eval_split_is_held_out_finite_and_fixed(wiki_config) -> None:
    first = list(_it(wiki_config, split="eval", process_index=0, process_count=1))
    again = list(_it(wiki_config, split="eval", seed=99, process_index=0, process_count=1))
    assert 1 <= len(first) == len(again)
    for x, y in zip(first, again, strict=True):
        assert all(np.array_equal(x[k], y[k]) for k in x)
    train = prepared_cache.open_prepared(wiki_config, "train", 64, 7)
    held = prepared_cache.open_prepared(wiki_config, "eval", 64, 7)
    assert len(first) == held.size // 8 and held.size < train.size / 5


def test_eval_num_batches_takes_the_first_batches_of_the_held_out_order(wiki_config) -> None:
    kw = dict(split="eval", process_index=0, process_count=1)
    full = list(_it(wiki_config, **kw))
    assert len(full) > 2
    first = list(_it(wiki_config, num_batches=2, **kw))
    assert len(first) == 2
    assert all(np.array_equal(x[k], y[k]) for x, y in zip(first, full[:2], strict=True) for k in x)
    assert len(list(_it(wiki_config, num_batches=len(full) + 3, **kw))) == len(full)
    assert len(list(_it(wiki_config, num_batches=2, start_step=1, **kw))) == 1
    # The train split is unbounded whatever num_batches says.
    assert len(_take(_it(wiki_config, num_batches=1, process_index=0, process_count=1), 3)) == 3


def test_tfrecord_eval_num_batches_bounds_the_pass(tmp_path) -> None:
    import tensorflow as tf

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    path = tmp_path / "held_out.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(20):  # 5 batches of 4; record i holds i + 1 in every token
            f = {k: ints([i + 1] * 16) for k in ("input_ids", "input_mask", "segment_ids")}
            f |= {k: ints([i % 16] * 4) for k in ("masked_lm_positions", "masked_lm_ids")}
            f["masked_lm_weights"] = tf.train.Feature(float_list=tf.train.FloatList(value=[1.0] * 4))
            f["next_sentence_labels"] = ints([i % 2])
            writer.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())
    c = DataSettings(source="tfrecord", input_files=str(path), eval_files=str(path))
    kw = dict(split="eval", global_batch_size=4, max_seq_length=16, max_predictions_per_seq=4, seed=1)
    kw |= dict(process_index=0, process_count=1)
    full = list(sources.data_batches(c, **kw))
    assert len(full) == 5
    first = list(sources.data_batches(c, num_batches=3, **kw))
    assert len(first) == 3
    assert all(np.array_equal(x[k], y[k]) for x, y in zip(first, full[:3], strict=True) for k in x)


def test_bad_input_gives_clear_errors(tmp_path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    c = DataSettings(cache_dir=str(tmp_path / "cache"), source="text", dupe_factor=1, input_files=str(empty))
    with pytest.raises(ValueError, match=r"empty\.txt is empty"):
        next(_it(c, process_index=0, process_count=1))
    c = dataclasses.replace(c, input_files=str(tmp_path / "missing*.txt"))
    with pytest.raises(FileNotFoundError, match="no input files match"):
        next(_it(c, process_index=0, process_count=1))
    one_sentence_docs = tmp_path / "short.txt"
    one_sentence_docs.write_text("Only one sentence.\n\nAnother lonely one.\n")
    c = dataclasses.replace(c, input_files=str(one_sentence_docs))
    with pytest.raises(ValueError, match="no usable documents"):
        next(_it(c, process_index=0, process_count=1))
    # One document whose sentences are each longer than a row: no pair fits, and the line says why.
    long_sentences = tmp_path / "long.txt"
    long_sentences.write_text("".join(f"{'word ' * 80}end {i}.\n" for i in range(4)))
    c = dataclasses.replace(c, input_files=str(long_sentences))
    no_row = r"the 1 document\(s\) of .*long\.txt make no training row at max_seq_length="
    with pytest.raises(ValueError, match=no_row):
        next(_it(c, process_index=0, process_count=1))
    # Non-UTF-8 bytes and a very long line: replaced and kept, not a crash.
    messy = tmp_path / "messy.txt"
    lines = []
    for d in range(30):
        lines += [
            f"Document {d} sentence one \xff\xfe with bad bytes.".encode("latin-1"),
            ("word " * 3000).encode(),
            f"Final sentence {d}.".encode(),
            b"",
        ]
    messy.write_bytes(b"\n".join(lines))
    c = dataclasses.replace(c, input_files=str(messy), eval_fraction=0.1)
    batch = next(_it(c, process_index=0, process_count=1))
    assert batch["input_ids"].shape == (8, 64) and batch["input_mask"].sum() > 0


def test_vocab_size_is_checked_against_the_model(wiki_config) -> None:
    assert run_vocabulary.vocab_size_of(wiki_config) == 30522
    assert tokenization.load_tokenizer().vocab_size == 30522


def test_tfds_source_by_name_works_offline(tmp_path) -> None:
    """`source=tfds`: a TFDS text dataset by name (here `wikipedia/20230601.en`, served by
    `tfds.testing.mock_data` with real Wikipedia text) → prepared → masked batches."""
    import tensorflow as tf

    from bert_jax.data import corpora

    wiki = corpora.load_documents("wiki_excerpt")[:24]
    # TFDS wikipedia examples: one article per example, paragraphs separated by newlines.
    texts = ["\n".join(" ".join(d[i : i + 3]) for i in range(0, len(d), 3)) for d in wiki]
    texts.append("A one-sentence article is skipped")

    def as_dataset(self, split, **kwargs):
        return tf.data.Dataset.from_tensor_slices(
            {"title": [f"t{i}" for i in range(len(texts))], "text": texts}
        )

    c = DataSettings(
        source="tfds", tfds_name="wikipedia/20230601.en", cache_dir=str(tmp_path),
        tfds_num_shards=1, dupe_factor=2, eval_fraction=0.1,
    )  # fmt: skip
    with prepared_mock_data(as_dataset_fn=as_dataset):
        docs = corpora.load_documents("tfds", tfds_name=c.tfds_name)
        assert docs == [[s for p in t.split("\n") for s in corpora.split_sentences(p)] for t in texts[:-1]]
        rows = next(_it(c, seed=0, process_index=0, process_count=1))
    (folder,) = tmp_path.glob("prepared-*")
    meta = records.read_metadata(str(folder))
    assert meta["counts"]["documents"] == 24 and meta["shards"][0]["input"].startswith("tfds:wikipedia")
    batch = mask_rows(c, rows, 10)
    assert batch["input_ids"].shape == (8, 64) and batch["masked_lm_ids"].shape == (8, 10)
    tok = tokenization.load_tokenizer(tokenization.default_vocab_file())
    assert (batch["input_ids"][:, 0] == tok.special.cls).all()
    assert batch["masked_lm_weights"].sum() > 8
