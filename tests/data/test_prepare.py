"""`prepare-data`: the original's instances, parallel = serial, resumable, pods, refusals."""

import dataclasses
import itertools
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bert_jax.data import corpora, prepare, pretraining_examples, records, sources, tokenization
from bert_jax.data.settings import DataSettings
from bert_jax.storage import atomic_files
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The Wikipedia excerpt as three text files in the original format."""
    folder = tmp_path_factory.mktemp("corpus")
    docs = corpora.load_documents("wiki_excerpt")
    for i in range(3):
        part = docs[i::3]
        (folder / f"wiki-{i}.txt").write_text("\n\n".join("\n".join(d) for d in part) + "\n")
    return folder


OPTS = prepare.Options(max_seq_length=64, dupe_factor=2, random_seed=3, eval_fraction=0.1)


def _bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("shard-*")) if not p.name.endswith(".json")}


def test_instances_are_the_original_pairing_for_the_same_seed(corpus, tmp_path) -> None:
    inputs = prepare.list_inputs(str(corpus / "wiki-*.txt"))
    meta = prepare.prepare(inputs, str(tmp_path), OPTS, progress=False)
    assert meta["counts"]["train"] > 500 and meta["counts"]["eval"] > 10
    tok = tokenization.load_tokenizer()
    train = records.PreparedSet(str(tmp_path), "train")
    shard = 1  # the second file: its own seed stream
    docs = prepare.tokenize_documents(tok, list(corpora.read_text_file(str(corpus / "wiki-1.txt"))))
    kept, held = prepare.split_held_out(docs, 0.1, shard)
    assert len(held) == round(len(docs) * 0.1)
    expected = []
    for pairing in range(2):
        rng = np.random.default_rng([3, shard, pairing])
        expected += pretraining_examples.create_instances(kept, 64, 0.1, rng, tok.special)
    ids = np.arange(train.starts[shard], train.starts[shard + 1])
    rows = train.read(ids)
    assert len(ids) == len(expected)
    for j, inst in enumerate(expected):
        n = len(inst.tokens)
        assert rows["input_ids"][j][:n].tolist() == inst.tokens.tolist()
        assert rows["input_mask"][j].sum() == n and not rows["input_ids"][j][n:].any()
        assert rows["segment_ids"][j][:n].tolist() == inst.segment_ids.tolist()
        assert rows["next_sentence_labels"][j] == int(inst.is_random_next)


def test_parallel_pod_and_resumed_preparations_write_the_same_bytes(corpus, tmp_path) -> None:
    inputs = prepare.list_inputs(str(corpus / "wiki-*.txt"))
    serial = tmp_path / "serial"
    prepare.prepare(inputs, str(serial), OPTS, progress=False)
    parallel = tmp_path / "parallel"
    prepare.prepare(inputs, str(parallel), OPTS, num_workers=2, progress=False)
    assert _bytes(parallel) == _bytes(serial) and len(_bytes(serial)) == 12  # tokens + index per split
    # A pod of two hosts sharing one folder: metadata.json once both are done.
    pod = tmp_path / "pod"
    assert prepare.prepare(inputs, str(pod), OPTS, task_index=1, num_tasks=2, progress=False) is None
    with pytest.raises(records.PreparedDataError, match=r"unfinished preparation \(1 of 3 shards"):
        records.PreparedSet(str(pod))
    assert prepare.prepare(inputs, str(pod), OPTS, task_index=0, num_tasks=2, progress=False)
    assert _bytes(pod) == _bytes(serial)
    # Interrupted: one shard missing. A rerun writes only that one; the others are kept.
    (serial / "shard-00001-of-00003.json").unlink()
    (serial / "shard-00001-of-00003.train.index").unlink()
    (serial / records.METADATA).unlink()
    before = {p.name: p.stat().st_mtime_ns for p in serial.glob("shard-0000[02]*")}
    exited = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    host = socket.gethostname()
    (serial / f"shard-00001-of-00003.train.index.tmp-{host}-{int(exited.stdout)}").write_bytes(b"killed")
    # Temporary files of a process still running (another job preparing the same folder)
    # and of another host (whose processes cannot be seen from here) stay.
    running = subprocess.Popen(["sleep", "120"])
    try:
        kept = [
            f"shard-00001-of-00003.eval.tokens.tmp-{host}-{running.pid}",
            f"shard-00001-of-00003.train.index.tmp-other-host-{int(exited.stdout)}",
        ]
        for name in kept:
            (serial / name).write_bytes(b"being written")
        prepare.prepare(inputs, str(serial), OPTS, progress=False)
        assert sorted(p.name for p in serial.glob("*.tmp*")) == kept
        for name in kept:
            (serial / name).unlink()
    finally:
        running.kill()
        running.wait()
    assert {p.name: p.stat().st_mtime_ns for p in serial.glob("shard-0000[02]*")} == before
    assert _bytes(serial) == _bytes(parallel)
    # The same folder with other flags is refused, not mixed.
    with pytest.raises(ValueError, match="holds a preparation with other flags"):
        prepare.prepare(inputs, str(serial), OPTS.__class__(max_seq_length=128), progress=False)


def test_training_refuses_mismatched_or_damaged_prepared_data(corpus, tmp_path) -> None:
    inputs = prepare.list_inputs(str(corpus / "wiki-0.txt"))
    prepare.prepare(inputs, str(tmp_path), OPTS, progress=False)
    c = DataSettings(source="prepared", input_files=str(tmp_path))

    def first(**kw):
        args = dict(global_batch_size=4, max_seq_length=64, max_predictions_per_seq=8, seed=0)
        args.update(kw)
        return next(sources.data_batches(c, process_index=0, process_count=1, **args))

    assert first()["input_ids"].shape == (4, 64)
    with pytest.raises(records.PreparedDataError, match=r"no prepared folder for max_seq_length=128.*\[64\]"):
        first(max_seq_length=128)
    other_vocab = tmp_path.parent / "vocab-other.txt"
    words = tokenization.load_vocab(tokenization.default_vocab_file())
    other_vocab.write_text("\n".join(words[:-1]) + "\n")
    c = dataclasses.replace(c, vocab_file=str(other_vocab))
    with pytest.raises(records.PreparedDataError, match="prepared with another vocabulary"):
        first()
    c = dataclasses.replace(c, vocab_file="", nsp=False)
    with pytest.raises(records.PreparedDataError, match="prepared with nsp=True"):
        first()
    c = dataclasses.replace(c, nsp=True)
    shard = tmp_path / "shard-00000-of-00001.train.index"
    shard.write_bytes(shard.read_bytes()[:-7])
    with pytest.raises(records.PreparedDataError, match=r"shard-00000-of-00001\.train\.index is truncated"):
        first()
    (tmp_path / records.METADATA).unlink()
    with pytest.raises(records.PreparedDataError, match=r"unfinished preparation \(1 of 1 shards"):
        first()


def test_cli_prepares_with_progress_and_pretrain_streams_it(corpus, tmp_path) -> None:
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    out = tmp_path / "prepared"
    proc = subprocess.run(
        [sys.executable, "-m", "bert_jax", "prepare-data", f"--input_file={corpus}/wiki-*.txt",
         f"--output_dir={out}", "--max_seq_length=64", "--dupe_factor=1", "--eval_fraction=0.2",
         "--num_workers=2"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = [line for line in proc.stdout.splitlines() if line.startswith("prepare-data:")][-1]
    assert "(100%)" in last and "tokens/s in " in last and "3 shards" in proc.stdout
    # The two-phase schedule takes the folder prepared for each phase's sequence length.
    short = tmp_path / "prepared32"
    inputs = prepare.list_inputs(str(corpus / "wiki-*.txt"))
    opts = prepare.Options(max_seq_length=32, dupe_factor=1, eval_fraction=0.2)
    prepare.prepare(inputs, str(short), opts, progress=False)
    work = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "bert_jax", "pretrain", "--config=configs/pretrain.py:tiny",
         "--config.data.source=prepared", f"--config.data.input_files={short},{out}",
         "--config.max_seq_length=32", "--config.phase2_fraction=0.5",
         "--config.phase2_max_seq_length=64", "--config.phase2_max_predictions_per_seq=10",
         "--config.num_train_steps=4", "--config.eval_every_steps=0", "--config.log_every_steps=1",
         "--config.checkpoint_every_steps=4", "--config.global_batch_size=8", f"--workdir={work}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "held-out MLM accuracy" in proc.stdout and (work / "checkpoints" / "4").is_dir()
    logged = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
    lengths = {r["step"]: r["max_seq_length"] for r in logged if r.get("split", "train") == "train"}
    assert lengths == {1: 32, 2: 32, 3: 64, 4: 64}


def test_a_large_file_is_prepared_in_parts_cut_at_documents_whatever_the_workers(corpus, tmp_path) -> None:
    """One big file is split at blank lines: its parts hold exactly its documents, every
    worker can take a part, and the instances do not depend on the number of workers."""
    big = tmp_path / "big.txt"
    big.write_text("".join((corpus / f"wiki-{i}.txt").read_text() + "\n" for i in range(3)))
    parts = prepare.list_inputs(str(big), part_bytes=200_000)
    assert len(parts) >= 5 and parts[0].start == 0 and parts[-1].end == big.stat().st_size
    assert all(a.end == b.start for a, b in itertools.pairwise(parts))
    whole = list(corpora.read_text_file(str(big)))
    assert [d for p in parts for d in corpora.read_text_file(p.path, p.start, p.end)] == whole
    small = str(corpus / "wiki-0.txt")  # below the part size: one input, as it always was
    assert prepare.list_inputs(small, part_bytes=4_000_000) == [prepare.Input(small)]

    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    prepare.prepare(parts, str(serial), OPTS, num_workers=1, progress=False)
    meta = prepare.prepare(parts, str(parallel), OPTS, num_workers=2, progress=False)
    assert _bytes(serial) == _bytes(parallel) and len(meta["shards"]) == len(parts)
    assert "[bytes 0:" in meta["shards"][0]["input"]


def test_documents_are_stored_once_and_format_1_folders_still_read(corpus, tmp_path) -> None:
    """The dupe_factor pairings share their documents' tokens (the index is 24 bytes per
    instance), and a folder of the earlier fixed-width format reads as it did."""
    inputs = prepare.list_inputs(str(corpus / "wiki-0.txt"))
    opts = prepare.Options(max_seq_length=64, dupe_factor=5, random_seed=3, eval_fraction=0.1)
    meta = prepare.prepare(inputs, str(tmp_path / "v2"), opts, progress=False)
    shard = meta["shards"][0]
    assert shard["train_tokens"] + shard["eval_tokens"] == shard["tokens"]  # each token once
    v2_bytes = sum(p.stat().st_size for p in (tmp_path / "v2").glob("shard-*") if p.suffix != ".json")
    v1_bytes = (meta["counts"]["train"] + meta["counts"]["eval"]) * records.record_width(64) * 2
    assert v2_bytes < v1_bytes / 2.5  # 2.85x less here (sequence 64; more at 128)

    v2 = records.PreparedSet(str(tmp_path / "v2"))
    ids = np.arange(v2.size)
    rows = v2.read(ids)
    v1 = tmp_path / "v1"  # the same instances in format 1: one fixed-width record each
    v1.mkdir()
    instances = []
    for i in ids.tolist():
        n = int(rows["input_mask"][i].sum())
        tokens = rows["input_ids"][i][:n]
        num_a = int(n - rows["segment_ids"][i][:n].sum())
        instances.append(pretraining_examples.Instance(tokens, num_a, bool(rows["next_sentence_labels"][i])))
    records.encode(instances, 64, 0, np.dtype("<u2")).tofile(v1 / f"{shard['stem']}.train.bin")
    (v1 / f"{shard['stem']}.eval.bin").write_bytes(b"")
    old = {**meta, "format_version": 1, "shards": [{**shard, "eval": 0}]}
    (v1 / records.METADATA).write_text(json.dumps(old))
    again = records.PreparedSet(str(v1)).read(ids)
    for key in rows:
        np.testing.assert_array_equal(again[key], rows[key], err_msg=key)


def test_a_shard_that_fails_mid_write_leaves_no_temporary_files(tmp_path) -> None:
    prefix = str(tmp_path / "shard-00000-of-00001.train")
    with pytest.raises(RuntimeError, match="tokenizer died"):
        with records.SplitWriter(prefix, np.uint16, atomic_files.temp_path) as writer:
            writer.add_documents([[[5, 6, 7]]])
            raise RuntimeError("tokenizer died")
    assert os.listdir(tmp_path) == []
    with records.SplitWriter(prefix, np.uint16, atomic_files.temp_path) as writer:
        writer.add_documents([[[5, 6, 7]]])
    stem = "shard-00000-of-00001.train"
    assert sorted(os.listdir(tmp_path)) == [f"{stem}.index", f"{stem}.tokens"]
    assert np.fromfile(f"{prefix}.tokens", np.uint16).tolist() == [5, 6, 7]
