"""Prepared folders in a bucket: copied once to local disk (in the background) and read
there; a bucket that cannot be read, or an unfinished upload, fails at start naming the
path. The bucket is the GCS API emulator, reached through the client and path layer a TPU
VM's ``gs://`` goes through (gcsfs under `storage.files`). Reading in place before the copy
is whole: `test_remote_in_place`."""

import os
import subprocess
import sys

import numpy as np
import pytest

from bert_jax.data import remote_copy as remote
from bert_jax.data import sources
from bert_jax.data.settings import DataSettings
from bert_jax.storage import emulator
from bert_jax.training import exit_codes
from tests.conftest import ROOT
from tests.helpers import prepared_data


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> str:
    return prepared_data.wiki_prepared(tmp_path_factory.mktemp("prepared"))


@pytest.fixture(scope="module")
def gs(tmp_path_factory) -> str:
    with prepared_data.bucket(tmp_path_factory.mktemp("gcs")) as root:
        yield root


def _rows(input_files: str, cache: str) -> dict[str, np.ndarray]:
    c = DataSettings(source="prepared", input_files=input_files, cache_dir=cache)
    it = sources.data_batches(c, seed=1, global_batch_size=8, max_seq_length=64, max_predictions_per_seq=10)
    return next(it)


def test_a_bucket_folder_is_copied_once_and_reads_as_the_local_one(prepared, gs, tmp_path, capsys) -> None:
    prepared_data.upload(prepared, f"{gs}/prep")
    capsys.readouterr()
    got = _rows(f"{gs}/prep", str(tmp_path / "cache"))
    remote.wait_for_copies()
    assert f"copying {gs}/prep" in capsys.readouterr().out
    want = _rows(prepared, str(tmp_path / "unused"))
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    _rows(f"{gs}/prep", str(tmp_path / "cache"))  # the copy is found: nothing copied
    assert "copying" not in capsys.readouterr().out
    (local,) = (tmp_path / "cache" / "remote").iterdir()
    expected = {n for n in os.listdir(prepared) if not n.endswith(".json")} | {"metadata.json"}
    assert set(os.listdir(local)) == expected  # the data and the metadata, no shard bookkeeping


def test_unreadable_or_unfinished_bucket_folders_are_refused_naming_them(prepared, gs, tmp_path) -> None:
    with pytest.raises(remote.RemoteReadError, match=rf"cannot read {gs}/nothing: no such folder"):
        _rows(f"{gs}/nothing", str(tmp_path))
    prepared_data.upload(prepared, f"{gs}/half", metadata=False)
    with pytest.raises(remote.RemoteReadError, match=rf"{gs}/half: unfinished preparation or upload"):
        _rows(f"{gs}/half", str(tmp_path))
    assert not (tmp_path / "remote").exists()  # nothing copied from an unfinished folder


def test_a_bucket_without_network_fails_at_start_in_one_line(tmp_path) -> None:
    """No network here: the bucket does not answer within the reach bound, exit 74 (a
    restart may help) in one line naming the path; nothing of the run is made."""
    cmd = [sys.executable, "-m", "bert_jax", "pretrain", "--config=configs/pretrain.py:tiny"]
    cmd += [f"--workdir={tmp_path / 'run'}", "--config.data.source=prepared"]
    cmd += [
        "--config.data.input_files=gs://bert-jax-no-such-bucket/prep128",
        f"--config.data.cache_dir={tmp_path}",
    ]
    env = {k: v for k, v in os.environ.items() if k not in emulator.environment("x")}  # the real GCS
    env.update(BERT_JAX_REACH_TIMEOUT_S="10", BERT_JAX_BUCKET_RETRY="within_s=5,request_s=5")
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == exit_codes.BUCKET_UNREACHABLE, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "prepared data gs://bert-jax-no-such-bucket/prep128 cannot be reached" in lines[0], lines
    assert not (tmp_path / "run").exists()


def test_a_missing_file_among_several_read_is_named() -> None:
    """A read of several files at once that misses one names the missing one; a read of one
    file says only that it is missing (the file is the error's subject already)."""

    def missing(path: str):
        def read():
            raise FileNotFoundError(path)

        return read

    with pytest.raises(
        remote.RemoteReadError, match=r"^cannot read gs://b/p \(2 of its files\): .*no such file: gs://b/p/x$"
    ):
        remote.reading("gs://b/p (2 of its files)", missing("gs://b/p/x"))
    with pytest.raises(
        remote.RemoteReadError, match=r"^cannot read gs://b/p/x: FileNotFoundError: no such file$"
    ):
        remote.reading("gs://b/p/x", missing("gs://b/p/x"))
