"""Pre-training batches: determinism across hosts and resumes, held-out eval, bad input."""

import numpy as np
import pytest

from bert_jax import input_pipeline, tokenization


def _it(c, **kw):
    args = dict(global_batch_size=8, max_seq_length=64, max_predictions_per_seq=10, seed=7)
    args.update(kw)
    return input_pipeline.create_pretrain_iterator(c, **args)


def _take(it, n):
    return [next(it) for _ in range(n)]


@pytest.fixture(scope="module")
def wiki_config(tmp_path_factory):
    c = input_pipeline.default_config()
    c.cache_dir = str(tmp_path_factory.mktemp("cache"))
    return c


def test_hosts_assemble_the_same_global_batches_and_resume_on_another_count(wiki_config) -> None:
    one = _take(_it(wiki_config, process_index=0, process_count=1), 6)
    halves = [_take(_it(wiki_config, process_index=p, process_count=2), 6) for p in range(2)]
    for step in range(6):
        for k in one[step]:
            assert np.array_equal(np.concatenate([halves[0][step][k], halves[1][step][k]]), one[step][k])
    # Resume at step 4 with 4 processes: the same batches 4 and 5.
    quarters = [_take(_it(wiki_config, start_step=4, process_index=p, process_count=4), 2) for p in range(4)]
    for i, step in enumerate((4, 5)):
        for k in one[step]:
            assert np.array_equal(np.concatenate([q[i][k] for q in quarters]), one[step][k])
    # Different steps get different masks and examples.
    assert not np.array_equal(one[0]["input_ids"], one[1]["input_ids"])


def test_resume_across_an_epoch_boundary_on_another_process_count(wiki_config) -> None:
    """The train split repeats with a new pairing and new masks; a resume just before the
    end of epoch 0 on 2 hosts continues exactly as one uninterrupted host."""
    batch = 256
    epoch_len = len(input_pipeline._Stream(wiki_config, "train", 7, 64, 10).epoch(0))
    boundary = epoch_len // batch  # the batch that straddles epochs 0 and 1
    one = _take(_it(wiki_config, global_batch_size=batch, process_index=0, process_count=1), boundary + 2)
    kw = dict(global_batch_size=batch, start_step=boundary - 1, process_count=2)
    halves = [_take(_it(wiki_config, process_index=p, **kw), 3) for p in range(2)]
    for i, step in enumerate(range(boundary - 1, boundary + 2)):
        for k in one[step]:
            assert np.array_equal(np.concatenate([halves[0][i][k], halves[1][i][k]]), one[step][k])


def test_dynamic_masking_changes_masks_between_epochs_static_does_not(wiki_config) -> None:
    stream = input_pipeline._Stream(wiki_config, "train", 7, 64, 10)
    assert len(stream.epoch(0)) > 100
    c = wiki_config.copy_and_resolve_references()
    c.dynamic_masking = False
    c.dupe_factor = 2
    static = input_pipeline._Stream(c, "train", 7, 64, 10)
    a, b = static.features(0, 5), static.features(2, 5)  # epochs 0 and 2: the same version
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(stream.features(0, 5)["input_ids"], stream.features(1, 5)["input_ids"])


def test_eval_split_is_held_out_finite_and_fixed(wiki_config) -> None:
    first = list(_it(wiki_config, split="eval", process_index=0, process_count=1))
    again = list(_it(wiki_config, split="eval", seed=99, process_index=0, process_count=1))
    assert 1 <= len(first) == len(again)
    assert all(np.array_equal(x["input_ids"], y["input_ids"]) for x, y in zip(first, again, strict=True))


def test_bad_input_gives_clear_errors(tmp_path) -> None:
    c = input_pipeline.default_config()
    c.cache_dir = str(tmp_path / "cache")
    c.source = "text"
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    c.input_files = str(empty)
    with pytest.raises(ValueError, match=r"empty\.txt is empty"):
        next(_it(c, process_index=0, process_count=1))
    c.input_files = str(tmp_path / "missing*.txt")
    with pytest.raises(FileNotFoundError, match="no input files match"):
        next(_it(c, process_index=0, process_count=1))
    one_sentence_docs = tmp_path / "short.txt"
    one_sentence_docs.write_text("Only one sentence.\n\nAnother lonely one.\n")
    c.input_files = str(one_sentence_docs)
    with pytest.raises(ValueError, match="no usable documents"):
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
    c.input_files = str(messy)
    c.eval_fraction = 0.1
    batch = next(_it(c, process_index=0, process_count=1))
    assert batch["input_ids"].shape == (8, 64) and batch["input_mask"].sum() > 0


def test_vocab_size_is_checked_against_the_model(wiki_config) -> None:
    assert input_pipeline.vocab_size_of(wiki_config) == 30522
    assert tokenization.load_tokenizer().vocab_size == 30522


def test_tfds_source_by_name_works_offline(tmp_path) -> None:
    """`source=tfds`: a TFDS text dataset by name (here `wikipedia/20230601.en`, served by
    `tfds.testing.mock_data` with real Wikipedia text) → documents → masked batches."""
    import tensorflow as tf
    import tensorflow_datasets as tfds

    from bert_jax import corpora

    wiki = corpora.load_documents("wiki_excerpt")[:24]
    # TFDS wikipedia examples: one article per example, paragraphs separated by newlines.
    texts = ["\n".join(" ".join(d[i : i + 3]) for i in range(0, len(d), 3)) for d in wiki]
    texts.append("A one-sentence article is skipped")

    def as_dataset(self, split, **kwargs):
        return tf.data.Dataset.from_tensor_slices(
            {"title": [f"t{i}" for i in range(len(texts))], "text": texts}
        )

    c = input_pipeline.default_config()
    c.source, c.tfds_name, c.cache_dir = "tfds", "wikipedia/20230601.en", str(tmp_path)
    with tfds.testing.mock_data(as_dataset_fn=as_dataset, policy=tfds.testing.MockPolicy.USE_CODE):
        docs = corpora.load_documents("tfds", tfds_name=c.tfds_name)
        assert docs == [[s for p in t.split("\n") for s in corpora.split_sentences(p)] for t in texts[:-1]]
        it = input_pipeline.create_pretrain_iterator(
            c, global_batch_size=8, max_seq_length=64, max_predictions_per_seq=10, seed=0,
            process_index=0, process_count=1,
        )  # fmt: skip
        batch = next(it)
    assert batch["input_ids"].shape == (8, 64) and batch["masked_lm_ids"].shape == (8, 10)
    tok = tokenization.load_tokenizer(tokenization.default_vocab_file())
    assert (batch["input_ids"][:, 0] == tok.special.cls).all()
    assert batch["masked_lm_weights"].sum() > 8
