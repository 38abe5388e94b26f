"""`bert-jax create-data` writes original-format TFRecords that train reads back identically."""

import subprocess
import sys

import numpy as np
import tensorflow as tf

from bert_jax.data import corpora, sources
from bert_jax.data.settings import DataSettings
from bert_jax.pretraining.objective import BATCH_KEYS
from tests.conftest import ROOT
from tests.helpers import pod


def _create_data(text, prefix, *flags: str, env=None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "bert_jax", "create-data", f"--input_file={text}", f"--output_file={prefix}"]
    cmd += ["--max_seq_length=64", "--max_predictions_per_seq=10", "--dupe_factor=2", "--random_seed=3"]
    return subprocess.run([*cmd, *flags], capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)


def test_create_data_then_read_on_one_and_two_hosts(tmp_path) -> None:
    docs = corpora.load_documents("wiki_excerpt")[:12]
    text = tmp_path / "corpus.txt"
    text.write_text("\n\n".join("\n".join(d) for d in docs) + "\n")
    prefix = tmp_path / "data"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_jax",
            "create-data",
            f"--input_file={text}",
            f"--output_file={prefix}",
            "--max_seq_length=64",
            "--max_predictions_per_seq=10",
            "--dupe_factor=2",
            "--num_shards=2",
            "--random_seed=3",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    files = sorted(tmp_path.glob("data-*.tfrecord"))
    assert [f.name for f in files] == ["data-00000-of-00002.tfrecord", "data-00001-of-00002.tfrecord"]
    # The original feature names and types.
    record = next(iter(tf.data.TFRecordDataset(str(files[0])).take(1))).numpy()
    example = tf.train.Example.FromString(record)
    feats = example.features.feature
    assert set(feats) == set(BATCH_KEYS)  # the original's feature names
    assert len(feats["input_ids"].int64_list.value) == 64
    assert len(feats["masked_lm_weights"].float_list.value) == 10

    c = DataSettings(source="tfrecord", input_files=str(tmp_path / "data-*.tfrecord"))
    kw = dict(global_batch_size=8, max_seq_length=64, max_predictions_per_seq=10, seed=5)
    one = sources.data_batches(c, **kw, process_index=0, process_count=1)
    one = [next(one) for _ in range(4)]
    halves = [sources.data_batches(c, **kw, start_step=2, process_index=p, process_count=2) for p in range(2)]
    for step in (2, 3):
        parts = [next(h) for h in halves]
        for k in one[step]:
            assert np.array_equal(np.concatenate([parts[0][k], parts[1][k]]), one[step][k])
    assert one[0]["input_ids"].dtype == np.int32 and one[0]["next_sentence_labels"].shape == (8,)
    assert (one[0]["input_ids"][:, 0] == 101).all()  # [CLS] of the bert-base-uncased vocab


def test_a_bucket_prefix_gets_the_same_files_and_overwrite_replaces_them(tmp_path) -> None:
    """Written through the path layer (gcsfs, on the GCS emulator): the bytes of a local
    run's files; --overwrite with another shard count leaves only the new files."""
    text = tmp_path / "corpus.txt"
    text.write_text("\n\n".join("\n".join(d) for d in corpora.load_documents("wiki_excerpt")[:6]) + "\n")
    local = _create_data(text, tmp_path / "local" / "d", "--num_shards=2")
    assert local.returncode == 0, local.stderr[-2000:]
    with pod.emulator(tmp_path / "gcs") as url:
        env = pod.environment(url)
        first = _create_data(text, f"gs://{pod.BUCKET}/tf/d", "--num_shards=2", env=env)
        assert first.returncode == 0, first.stderr[-2000:]
        names = pod.objects(url, "tf/")
        assert names == ["tf/d-00000-of-00002.tfrecord", "tf/d-00001-of-00002.tfrecord"]
        for name in names:
            got = tmp_path / "got" / name
            got.parent.mkdir(parents=True, exist_ok=True)
            got.write_bytes(pod.read_object_bytes(url, name))
            # The same bytes: examples are serialised with their feature map in key order.
            assert got.read_bytes() == (tmp_path / "local" / name.removeprefix("tf/")).read_bytes(), name
        refused = _create_data(text, f"gs://{pod.BUCKET}/tf/d", "--num_shards=3", env=env)
        assert refused.returncode == 1 and "pass --overwrite" in refused.stderr
        again = _create_data(text, f"gs://{pod.BUCKET}/tf/d", "--num_shards=3", "--overwrite", env=env)
        assert again.returncode == 0, again.stderr[-2000:]
        assert pod.objects(url, "tf/") == [f"tf/d-0000{i}-of-00003.tfrecord" for i in range(3)]


def test_a_sentencepiece_model_in_a_folder_writes_its_ids(tmp_path) -> None:
    """`create-data` takes the vocabulary flags `prepare-data` takes: a SentencePiece model
    (here a folder holding ``spm.model``, which selects the kind) gives records of its ids."""
    from bert_jax.data import tokenization, vocab_learning

    docs = corpora.load_documents("wiki_excerpt")[:12]
    text = tmp_path / "corpus.txt"
    text.write_text("\n\n".join("\n".join(d) for d in docs) + "\n")
    (tmp_path / "vocab").mkdir()
    vocab_learning.train_sentencepiece([s for d in docs for s in d], str(tmp_path / "vocab" / "spm"), 500)
    tok = tokenization.load_tokenizer(str(tmp_path / "vocab" / "spm.model"), kind="sentencepiece")
    proc = _create_data(text, tmp_path / "data", f"--vocab_file={tmp_path / 'vocab'}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (file,) = tmp_path.glob("data-*.tfrecord")
    ids = [
        list(tf.train.Example.FromString(r.numpy()).features.feature["input_ids"].int64_list.value)
        for r in tf.data.TFRecordDataset(str(file)).take(20)
    ]
    assert all(row[0] == tok.special.cls and max(row) < tok.vocab_size for row in ids)
    assert sum(i not in vars(tok.special).values() for row in ids for i in row) > 500  # text, not specials
    proc = _create_data(text, tmp_path / "other", f"--vocab_file={tmp_path / 'vocab' / 'spm.model'}",
                        "--tokenizer=sentencepiece")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "other-00000-of-00001.tfrecord").read_bytes() == file.read_bytes()
