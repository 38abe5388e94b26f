"""Commands whose output is in a bucket (``gs://``): written there whole, nothing made on
the local disk under the URL's name. The bucket is the GCS API emulator, reached through
the client and path layer a TPU VM's ``gs://`` goes through. (`convert`'s output in a
bucket: tests/convert/test_remote_checkpoint.py.)"""

import os
import subprocess
import sys

import pytest
import sentencepiece as spm

from bert_jax.data import corpora
from bert_jax.storage import files
from tests.conftest import ROOT
from tests.helpers import prepared_data


@pytest.fixture(scope="module")
def gs(tmp_path_factory) -> str:
    with prepared_data.bucket(tmp_path_factory.mktemp("gcs")) as root:
        yield root


def test_a_sentencepiece_vocabulary_is_uploaded_whole(gs, tmp_path) -> None:
    text = tmp_path / "in.txt"
    text.write_text("\n\n".join("\n".join(d) for d in corpora.load_documents("wiki_excerpt")[:4]) + "\n")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    cmd = [sys.executable, "-m", "bert_jax", "build-vocab", "--tokenizer=sentencepiece", "--vocab_size=300"]
    cmd += [f"--input_file={text}", f"--output={gs}/vocab/spm"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {gs}/vocab/spm.model" in proc.stdout, proc.stdout
    assert list(cwd.iterdir()) == []  # no local folder named after the URL
    assert set(files.tree(f"{gs}/vocab")) == {"spm.model", "spm.vocab"}
    model = spm.SentencePieceProcessor(model_proto=files.read_bytes(f"{gs}/vocab/spm.model"))
    assert model.GetPieceSize() == 300 and model.IdToPiece(2) == "[CLS]"
