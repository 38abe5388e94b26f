"""A prepared folder in a bucket is read in place from the first batch: nothing is copied
before training reads it; the background copy makes each file local as it lands (index
files first), and a copy that cannot be made leaves the reads in place with one warning
line. The bucket is the GCS API emulator, reached through the client a TPU VM's ``gs://``
goes through (gcsfs under `storage.files`)."""

import os
import shutil
import threading

import numpy as np
import pytest

from bert_jax.data import remote_copy, sources
from bert_jax.data.settings import DataSettings
from bert_jax.storage import files
from tests.helpers import prepared_data


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> str:
    return prepared_data.wiki_prepared(tmp_path_factory.mktemp("prepared"))


@pytest.fixture(scope="module")
def gs(tmp_path_factory) -> str:
    with prepared_data.bucket(tmp_path_factory.mktemp("gcs")) as root:
        yield root


def _batches(input_files: str, cache: str, steps: int = 2, start: int = 0) -> list[dict]:
    c = DataSettings(source="prepared", input_files=input_files, cache_dir=cache)
    it = sources.data_batches(
        c, seed=1, global_batch_size=8, max_seq_length=64, max_predictions_per_seq=10, start_step=start
    )
    out = [next(it) for _ in range(steps)]
    it.close()
    return out


def _same(got: list[dict], want: list[dict]) -> None:
    for g, w in zip(got, want, strict=True):
        for key in w:
            np.testing.assert_array_equal(g[key], w[key], err_msg=key)


@pytest.fixture
def held_copy(monkeypatch) -> threading.Event:
    """The background copy waits until the event is set (as a slow copy would)."""
    release = threading.Event()
    real = remote_copy.copy_folder

    def held(folder, stop=None):
        release.wait(timeout=60)
        return real(folder, stop)

    monkeypatch.setattr(remote_copy, "copy_folder", held)
    yield release
    release.set()
    remote_copy.wait_for_copies()


def test_the_first_batches_are_read_in_place_before_anything_is_copied(
    prepared, gs, tmp_path, held_copy
) -> None:
    url, cache = f"{gs}/in-place", str(tmp_path / "cache")
    prepared_data.upload(prepared, url)
    want = _batches(prepared, str(tmp_path / "unused"), start=3)
    got = _batches(url, cache, start=3)
    _same(got, want)
    folder = remote_copy.open_folder(url, cache)
    assert isinstance(folder, remote_copy.RemoteFolder) and not folder.done
    local = [n for n in os.listdir(folder.local)] if os.path.isdir(folder.local) else []
    assert local == []  # not one byte copied: every read went to the bucket
    held_copy.set()
    remote_copy.wait_for_copies()
    assert {os.path.basename(p) for p in folder.done} == {n for n, _ in folder.files}
    assert sorted(os.listdir(folder.local)) == sorted([n for n, _ in folder.files] + ["metadata.json"])


def test_copied_files_are_read_locally_and_a_rerun_finds_the_whole_copy(
    prepared, gs, tmp_path, monkeypatch
) -> None:
    url, cache = f"{gs}/copied", str(tmp_path / "cache")
    prepared_data.upload(prepared, url)
    want = _batches(prepared, str(tmp_path / "unused"), steps=3)
    first = _batches(url, cache, steps=1)
    remote_copy.wait_for_copies()
    monkeypatch.setattr(files, "read_ranges", lambda *a: pytest.fail("read the bucket"))
    _same(first + _batches(url, cache, steps=3)[1:], want)  # the same folder, local files now
    monkeypatch.setattr(remote_copy, "_FOLDERS", {})  # a new process
    found = remote_copy.open_folder(url, cache)
    assert isinstance(found, str) and os.path.exists(os.path.join(found, "metadata.json"))


def test_index_files_are_copied_first_and_the_copy_says_how_far_it_is(
    prepared, gs, tmp_path, monkeypatch, capsys
) -> None:
    url = f"{gs}/order"
    prepared_data.upload(prepared, url)
    folder = remote_copy.open_folder(url, str(tmp_path / "cache"))
    copied = []
    real = remote_copy.copy_object
    monkeypatch.setattr(
        remote_copy, "copy_object", lambda src, *a, **k: copied.append(src) or real(src, *a, **k)
    )
    monkeypatch.setattr(remote_copy, "BACKGROUND_EVERY_S", 0.0)  # a line at each block
    capsys.readouterr()
    assert remote_copy.copy_folder(folder)
    kinds = [name.rsplit(".", 1)[1] for name in copied]
    assert kinds == sorted(kinds, key=lambda k: k != "index") and "tokens" in kinds
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(f"copying {url}: ")]
    assert len(lines) >= 2 and "eta" in lines[0] and "(100%) in" in lines[-1], lines


def test_too_little_disk_keeps_the_reads_in_place_in_one_line(
    prepared, gs, tmp_path, monkeypatch, capsys
) -> None:
    url, cache = f"{gs}/no-room", str(tmp_path / "cache")
    prepared_data.upload(prepared, url)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=1000))
    got = _batches(url, cache)
    remote_copy.wait_for_copies()
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("warning")]
    assert len(lines) == 1 and "GiB free: reading it from the bucket throughout" in lines[0], lines
    _same(got, _batches(prepared, str(tmp_path / "unused")))
    folder = remote_copy.open_folder(url, cache)
    assert not folder.done and not os.path.exists(os.path.join(folder.local, "metadata.json"))


def test_a_stopped_copy_leaves_no_half_file_and_the_next_copies_only_the_rest(prepared, gs, tmp_path) -> None:
    url = f"{gs}/stopped"
    prepared_data.upload(prepared, url)
    folder = remote_copy.open_folder(url, str(tmp_path / "cache"))
    stop = threading.Event()
    stop.set()
    assert not remote_copy.copy_folder(folder, stop)
    assert os.listdir(folder.local) == []  # the temporary file removed, nothing in place
    first = folder.files[0][0]
    src = f"{url}/{first}"
    told: list[int] = []
    dst, size = os.path.join(folder.local, first), folder.files[0][1]
    assert remote_copy.copy_object(src, dst, size, None, block=max(1, size // 3), advance=told.append)
    assert sum(told) == size and len(told) >= 3  # a long copy's progress within the file
    again = remote_copy.open_folder(url, str(tmp_path / "cache2"))  # another cache: all to copy
    assert not again.done
    shutil.copytree(folder.local, again.local)
    # A fresh process finds the file whole and copies only the others.
    del remote_copy._FOLDERS[url, str(tmp_path / "cache2")]
    resumed = remote_copy.open_folder(url, str(tmp_path / "cache2"))
    assert [os.path.basename(p) for p in resumed.done] == [first]
    assert remote_copy.copy_folder(resumed)
