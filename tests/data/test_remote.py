"""Prepared folders in a bucket: copied once to local disk (in the background) and read
there; a bucket that cannot be read, or an unfinished upload, fails at start naming the
path. TensorFlow's in-memory file system (``ram://``) stands in for ``gs://``, through the
same `tf.io.gfile`. Reading in place before the copy is whole: `test_remote_in_place`."""

import os
import subprocess
import sys

import numpy as np
import pytest

from bert_jax.data import remote_copy as remote
from bert_jax.data import sources
from bert_jax.data.settings import DataSettings
from tests.conftest import ROOT
from tests.helpers import prepared_data


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> str:
    return prepared_data.wiki_prepared(tmp_path_factory.mktemp("prepared"))


def _rows(input_files: str, cache: str) -> dict[str, np.ndarray]:
    c = DataSettings(source="prepared", input_files=input_files, cache_dir=cache)
    it = sources.data_batches(c, seed=1, global_batch_size=8, max_seq_length=64, max_predictions_per_seq=10)
    return next(it)


def test_a_bucket_folder_is_copied_once_and_reads_as_the_local_one(prepared, tmp_path, capsys) -> None:
    prepared_data.upload(prepared, "ram://bucket/prep")
    capsys.readouterr()
    got = _rows("ram://bucket/prep", str(tmp_path / "cache"))
    remote.wait_for_copies()
    assert "copying ram://bucket/prep" in capsys.readouterr().out
    want = _rows(prepared, str(tmp_path / "unused"))
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    _rows("ram://bucket/prep", str(tmp_path / "cache"))  # the copy is found: nothing copied
    assert "copying" not in capsys.readouterr().out
    (local,) = (tmp_path / "cache" / "remote").iterdir()
    expected = {n for n in os.listdir(prepared) if not n.endswith(".json")} | {"metadata.json"}
    assert set(os.listdir(local)) == expected  # the data and the metadata, no shard bookkeeping


def test_unreadable_or_unfinished_bucket_folders_are_refused_naming_them(prepared, tmp_path) -> None:
    with pytest.raises(remote.RemoteReadError, match=r"cannot read ram://bucket/nothing: no such folder"):
        _rows("ram://bucket/nothing", str(tmp_path))
    prepared_data.upload(prepared, "ram://bucket/half", metadata=False)
    with pytest.raises(remote.RemoteReadError, match=r"ram://bucket/half: unfinished preparation or upload"):
        _rows("ram://bucket/half", str(tmp_path))
    assert not (tmp_path / "remote").exists()  # nothing copied from an unfinished folder


def test_a_bucket_without_network_or_credentials_fails_at_start_in_one_line(tmp_path) -> None:
    cmd = [sys.executable, "-m", "bert_jax", "pretrain", "--config=configs/pretrain.py:tiny"]
    cmd += [f"--workdir={tmp_path / 'run'}", "--config.data.source=prepared"]
    cmd += [
        "--config.data.input_files=gs://bert-jax-no-such-bucket/prep128",
        f"--config.data.cache_dir={tmp_path}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot read gs://bert-jax-no-such-bucket/prep128" in lines[0], proc.stderr
    assert not (tmp_path / "run").exists()
