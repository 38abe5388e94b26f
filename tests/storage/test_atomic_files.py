"""Files written whole (`storage.atomic_files`) get the mode any new file gets under the
umask, also when a library's own writer makes them (safetensors writes a temporary file of
its own, readable by its owner only)."""

import os
import stat

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from bert_jax.storage import atomic_files


def _modes(folder) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}


def test_files_follow_the_umask_also_when_a_library_writes_them(tmp_path) -> None:
    tensors = {"w": np.arange(3, dtype=np.float32)}
    old = os.umask(0o027)
    try:
        save_file(tensors, str(tmp_path / "direct.safetensors"))  # safetensors alone: 0600
        atomic_files.write_with(str(tmp_path / "model.safetensors"), lambda name: save_file(tensors, name))
        atomic_files.write_text(str(tmp_path / "config.json"), "{}")
    finally:
        os.umask(old)
    assert _modes(tmp_path) == {"direct.safetensors": 0o600, "model.safetensors": 0o640, "config.json": 0o640}
    assert load_file(str(tmp_path / "model.safetensors"))["w"].tolist() == [0.0, 1.0, 2.0]


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path) -> None:
    target = tmp_path / "model.safetensors"
    target.write_bytes(b"old")

    def dies(name: str) -> None:
        with open(name, "wb") as f:
            f.write(b"half")
        raise RuntimeError("writer died")

    with pytest.raises(RuntimeError, match="writer died"):
        atomic_files.write_with(str(target), dies)
    assert os.listdir(tmp_path) == ["model.safetensors"] and target.read_bytes() == b"old"
    # A rename that fails (the target is a folder) leaves no temporary file either.
    (tmp_path / "folder").mkdir()
    with pytest.raises(OSError):
        atomic_files.write_text(str(tmp_path / "folder"), "text")
    assert sorted(os.listdir(tmp_path)) == ["folder", "model.safetensors"] and not os.listdir(
        tmp_path / "folder"
    )
