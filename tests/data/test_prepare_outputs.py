"""A preparation's folder: checked before it is made, resumed only for the same settings,
replaced only when asked, and not left behind (empty) by a refused or failed attempt."""

import dataclasses
from pathlib import Path

import pytest

from bert_jax.data import prepare, prepared_cache, records, tokenization
from bert_jax.data.settings import DataSettings
from tests.helpers import prepared_data

OPTS = prepare.Options(max_seq_length=32, dupe_factor=1, random_seed=3, eval_fraction=0.0)


@pytest.fixture(scope="module")
def texts(tmp_path_factory) -> Path:
    """Two small text files in the original format."""
    return prepared_data.wiki_texts(tmp_path_factory.mktemp("texts"), 6, 2, stem="part")


def _tree(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in sorted(folder.iterdir())}


def _shard_files(stem: str) -> list[str]:
    return [f"{stem}.json"] + [
        f"{stem}.{split}.{kind}" for split in records.SPLITS for kind in ("index", "tokens")
    ]


def test_finished_or_other_settings_are_refused_unless_overwrite(texts, tmp_path, capsys) -> None:
    inputs = prepare.list_inputs(str(texts / "part-*.txt"))
    out = tmp_path / "out"
    meta = prepare.prepare(inputs, str(out), OPTS, progress=False)
    before = _tree(out)
    with pytest.raises(
        ValueError, match=r"--output_dir .*out already holds a finished preparation.*--overwrite"
    ):
        prepare.prepare(inputs, str(out), OPTS, progress=False)
    with pytest.raises(ValueError, match="holds a preparation with other flags"):
        prepare.prepare(inputs, str(out), prepare.Options(max_seq_length=64), progress=False)
    assert _tree(out) == before  # refusals touch nothing
    # --overwrite prepares it anew: the same bytes, newly written.
    again = prepare.prepare(inputs, str(out), OPTS, progress=False, overwrite=True)
    assert again == meta and all(_tree(out)[n] > t for n, t in before.items())
    assert capsys.readouterr().out.count("warning: --output_dir: --overwrite removes") == 1
    # A pod must not use it: its hosts would remove each other's shards.
    with pytest.raises(ValueError, match="--overwrite with --num_tasks=2"):
        prepare.prepare(inputs, str(out), OPTS, task_index=0, num_tasks=2, progress=False, overwrite=True)


def test_an_unfinished_folder_resumes_only_for_the_same_inputs_and_vocabulary(texts, tmp_path) -> None:
    inputs = prepare.list_inputs(str(texts / "part-*.txt"))
    out = tmp_path / "out"
    assert prepare.prepare(inputs, str(out), OPTS, task_index=1, num_tasks=2, progress=False) is None
    kept = _tree(out)
    assert sorted(kept) == sorted(_shard_files("shard-00001-of-00002"))
    # Other inputs (another count, or another file at a shard's place): refused, untouched.
    with pytest.raises(ValueError, match=r"holds shards of another list of inputs .*make 1 shards"):
        prepare.prepare(prepare.list_inputs(str(texts / "part-0.txt")), str(out), OPTS, progress=False)
    swapped = [inputs[0], prepare.Input(str(texts / "part-0.txt"))]
    with pytest.raises(ValueError, match=r"holds a preparation of other inputs \(shard-00001-of-00002\.json"):
        prepare.prepare(swapped, str(out), OPTS, progress=False)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(tokenization.load_vocab(tokenization.default_vocab_file())[:-1]) + "\n")
    other_vocab = dataclasses.replace(OPTS, vocab_file=str(vocab))
    with pytest.raises(ValueError, match="holds a preparation with another vocabulary"):
        prepare.prepare(inputs, str(out), other_vocab, progress=False)
    assert _tree(out) == kept
    # The same settings resume: the finished shard is kept as it is (another host's
    # metadata.json being written is no reason to refuse).
    (out / "metadata.json.tmp-other-host-1").write_text("{")
    meta = prepare.prepare(inputs, str(out), OPTS, progress=False)
    assert len(meta["shards"]) == 2 and {n: _tree(out)[n] for n in kept} == kept


def test_refused_or_failed_preparations_leave_no_folder(texts, tmp_path) -> None:
    inputs = prepare.list_inputs(str(texts / "part-*.txt"))
    binary = tmp_path / "sp.bin"  # binary, under a name that does not say SentencePiece
    binary.write_bytes(bytes([0x0A, 0xBC, 0xFF, 0x00]) * 16)
    bad_vocab = dataclasses.replace(OPTS, vocab_file=str(binary))
    with pytest.raises(
        ValueError, match=r"sp\.bin is not a WordPiece vocab\.txt .*--tokenizer=sentencepiece"
    ):
        prepare.prepare(inputs, str(tmp_path / "a" / "b"), bad_vocab, progress=False)
    short = tmp_path / "short.txt"
    short.write_text("Only one sentence.\n\nAnother lonely one.\n")
    with pytest.raises(prepare.NoUsableDocuments):
        prepare.prepare(prepare.list_inputs(str(short)), str(tmp_path / "a" / "b"), OPTS, progress=False)
    assert not (tmp_path / "a").exists()
    (tmp_path / "sub").mkdir()
    with pytest.raises(IsADirectoryError, match=r"--input_file .*sub is a folder, not a text file"):
        prepare.list_inputs(str(tmp_path / "sub"))
    with pytest.raises(IsADirectoryError, match=r"--input_file: '.*\*' matches .*sub, which is a folder"):
        prepare.list_inputs(str(tmp_path / "*"))


def test_the_cache_keeps_only_a_resumable_preparation(texts, tmp_path) -> None:
    """`pretrain`'s first use of a text source: a failed preparation leaves no empty
    ``prepared-*`` folder (nor an empty cache), one with finished shards is kept."""
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    c = DataSettings(
        cache_dir=str(tmp_path / "cache"),
        source="text",
        dupe_factor=1,
        eval_fraction=0.0,
        input_files=str(empty),
    )
    with pytest.raises(ValueError, match=r"empty\.txt is empty"):
        prepared_cache.prepared_dir(c, 32, seed=0)
    assert not (tmp_path / "cache").exists()
    (tmp_path / "z.txt").write_text("")  # sorted after part-*: the second shard fails
    c = dataclasses.replace(c, input_files=f"{texts}/part-0.txt,{tmp_path}/z.txt")
    with pytest.raises(ValueError, match=r"z\.txt is empty"):
        prepared_cache.prepared_dir(c, 32, seed=0)
    (folder,) = (tmp_path / "cache").iterdir()
    assert folder.name.startswith("prepared-")
    assert sorted(p.name for p in folder.glob("*.json")) == ["shard-00000-of-00002.json"]
    assert not (folder / records.METADATA).exists()
