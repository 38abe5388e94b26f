"""Commands whose text inputs or outputs are in a bucket (``gs://``): inputs read from one
local copy per machine, outputs written there whole, nothing made on the local disk under
the URL's name. The bucket is the GCS API emulator, reached through the client and path
layer a TPU VM's ``gs://`` goes through. (Checkpoints and vocabularies in a bucket, and
`convert`'s output there: tests/convert/test_remote_checkpoint.py.)"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sentencepiece as spm

from bert_jax.data import prepare, remote_copy, user_paths
from bert_jax.storage import files
from tests.conftest import ROOT
from tests.helpers import prepared_data

OPTS = prepare.Options(max_seq_length=64, dupe_factor=1, random_seed=3, eval_fraction=0.0)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Twelve Wikipedia articles as three text files."""
    return prepared_data.wiki_texts(tmp_path_factory.mktemp("corpus"), 12, 3)


@pytest.fixture(scope="module")
def gs(tmp_path_factory, corpus) -> str:
    with prepared_data.bucket(tmp_path_factory.mktemp("gcs")) as root:
        for path in sorted(corpus.iterdir()):
            files.write_bytes_remote(f"{root}/corpus/{path.name}", path.read_bytes())
        files.write_bytes_remote(f"{root}/corpus/sub/x.txt", b"a folder's file")
        yield root


@pytest.fixture
def copies(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(remote_copy.COPIES_ENV, str(tmp_path / "copies"))
    return tmp_path / "copies"


def test_text_in_a_bucket_prepares_as_the_local_files(corpus, gs, copies, tmp_path) -> None:
    remote = prepare.list_inputs(f"{gs}/corpus/wiki-*.txt")
    assert [Path(i.path).name for i in remote] == ["wiki-0.txt", "wiki-1.txt", "wiki-2.txt"]
    assert all(i.path.startswith(str(copies)) for i in remote)
    prepare.prepare(remote, str(tmp_path / "from_bucket"), OPTS, progress=False)
    prepare.prepare(
        prepare.list_inputs(f"{corpus}/wiki-*.txt"), str(tmp_path / "local"), OPTS, progress=False
    )
    data = sorted(n for n in os.listdir(tmp_path / "local") if not n.endswith(".json"))
    assert data and data == sorted(n for n in os.listdir(tmp_path / "from_bucket") if not n.endswith(".json"))
    for name in data:
        assert (tmp_path / "local" / name).read_bytes() == (tmp_path / "from_bucket" / name).read_bytes(), (
            name
        )
    # Found again: the same copy, nothing copied.
    again = prepare.list_inputs(f"{gs}/corpus/wiki-*.txt")
    assert [i.path for i in again] == [i.path for i in remote] and len(list(copies.iterdir())) == 1


def test_bucket_globs_are_refused_as_local_ones(gs, copies) -> None:
    with pytest.raises(FileNotFoundError, match=rf"^--input_file: no input files match '{gs}/corpus/\*.md'$"):
        user_paths.input_files([f"{gs}/corpus/*.md"], "--input_file")
    with pytest.raises(
        IsADirectoryError, match=rf"matches {gs}/corpus/sub, which is a folder, not a text file"
    ):
        user_paths.input_files([f"{gs}/corpus/*"], "--input_file")
    assert not copies.exists()
    # A folder where a file is wanted, as locally.
    with pytest.raises(IsADirectoryError, match=rf"^--input_file {gs}/corpus is a folder, not a file$"):
        user_paths.input_file(f"{gs}/corpus", "--input_file")
    with pytest.raises(IsADirectoryError, match=rf"^--output {gs}/corpus is a folder: give a file name$"):
        user_paths.output_file(f"{gs}/corpus", "--output", overwrite=True)
    with pytest.raises(FileNotFoundError, match=rf"^--input_file {gs}/corpus/none.txt does not exist$"):
        user_paths.input_file(f"{gs}/corpus/none.txt", "--input_file")


def test_build_vocab_reads_and_writes_a_bucket(gs, tmp_path) -> None:
    """SentencePiece writes local files: its model is trained locally and uploaded whole."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    cmd = [sys.executable, "-m", "bert_jax", "build-vocab", "--tokenizer=sentencepiece", "--vocab_size=300"]
    cmd += [f"--input_file={gs}/corpus/wiki-*.txt", f"--output={gs}/vocab/spm"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), remote_copy.COPIES_ENV: str(tmp_path / "copies")}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {gs}/vocab/spm.model" in proc.stdout, proc.stdout
    assert list(cwd.iterdir()) == []  # no local folder named after the URL
    assert set(files.tree(f"{gs}/vocab")) == {"spm.model", "spm.vocab"}
    model = spm.SentencePieceProcessor(model_proto=files.read_bytes(f"{gs}/vocab/spm.model"))
    assert model.GetPieceSize() == 300 and model.IdToPiece(2) == "[CLS]"
    # The folder named again, without its trailing /: the files go into it, as locally.
    cmd[-1:] = [f"--output={gs}/vocab", "--overwrite"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {gs}/vocab/spm.model" in proc.stdout, proc.stdout
    assert set(files.tree(f"{gs}/vocab")) == {"spm.model", "spm.vocab"}
    assert not files.exists(f"{gs}/vocab.model")
