"""Checkpoints in a bucket: each format `convert` reads loads from ``gs://`` as from its
local folder, through one local copy per machine of what a load reads. The bucket is the
GCS API emulator, reached through the client and path layer a TPU VM's ``gs://`` goes
through (gcsfs under `storage.files`)."""

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bert_jax import convert
from bert_jax.commands import run_settings
from bert_jax.convert import remote_checkpoint
from bert_jax.data import remote_copy, tokenization
from bert_jax.pretraining import model_file
from bert_jax.storage import files
from bert_jax.training import checkpoints, run_config
from bert_jax.training.engine import TrainState
from configs import bbc as bbc_config
from configs import finetune as finetune_configs
from tests.conftest import ROOT, tiny_pretraining
from tests.helpers import prepared_data, task_data

CONFIG = task_data.TINY
_params = task_data.tiny_params


def _with_vocab(folder: str) -> str:
    convert.write_tokenizer_files(folder, tokenization.default_vocab_file(), True, CONFIG)
    return folder


def _workdir(folder: Path) -> str:
    """A pre-training workdir with checkpoints at steps 3 and 7 (7's weights are seed 1's),
    step 3 its best."""
    model_file.write(str(folder), CONFIG, scanned=False)
    ckpt = checkpoints.Checkpointer(str(folder), async_save=False)
    for step, seed, accuracy in ((3, 0, 0.5), (7, 1, 0.4)):
        params = _params(seed)
        rng = jax.random.key_data(jax.random.key(0))
        state = TrainState(jnp.asarray(step), params, optax.sgd(0.1).init(params), rng)
        ckpt.save(step, state)
        ckpt.maybe_save_best(step, state, {"mlm_accuracy": accuracy})
    ckpt.close()
    (folder / "events.out.tfevents.1").write_bytes(b"x" * 100)  # not read by a load
    return _with_vocab(str(folder))


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> dict[str, str]:
    """The local checkpoints of each kind."""
    root = tmp_path_factory.mktemp("checkpoints")
    hf = convert.save_checkpoint(str(root / "hf"), _params(0), CONFIG, "hf")
    (root / "hf" / "pytorch_model.bin").write_bytes(b"not read: model.safetensors is")
    tf = convert.save_checkpoint(str(root / "tf"), _params(0), CONFIG, "tf")
    (root / "tf" / "graph.pbtxt").write_bytes(b"not read")
    export = convert.save_checkpoint(str(root / "export"), _params(0), CONFIG, "bert_jax")
    return {
        "hf": _with_vocab(hf),
        "tf": os.path.join(_with_vocab(tf), "bert_model.ckpt"),
        "bert_jax": _with_vocab(export),
        "workdir": _workdir(root / "workdir"),
    }


def _upload(local: str, url: str) -> None:
    for path in sorted(Path(local).rglob("*")):
        if path.is_file():
            files.write_bytes_remote(f"{url}/{path.relative_to(local)}", path.read_bytes())


@pytest.fixture(scope="module")
def gs(tmp_path_factory, local) -> dict[str, str]:
    """Each checkpoint uploaded to the emulator's bucket: kind → its URL."""
    with prepared_data.bucket(tmp_path_factory.mktemp("gcs")) as root:
        urls = {}
        for kind, path in local.items():
            folder = path if os.path.isdir(path) else os.path.dirname(path)
            _upload(folder, f"{root}/{kind}")
            urls[kind] = f"{root}/{kind}" + (path[len(folder) :] if folder != path else "")
        urls["root"] = root
        yield urls


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty copy cache, nothing remembered by this process."""
    monkeypatch.setenv(remote_copy.COPIES_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(remote_checkpoint, "_COPIES", {})
    return tmp_path / "cache"


def _equal(a: dict, b: dict) -> bool:
    fa, fb = convert.flatten(a), convert.flatten(b)
    return fa.keys() == fb.keys() and all(np.array_equal(fa[k], fb[k]) for k in fa)


@pytest.mark.parametrize("kind", ["hf", "tf", "bert_jax", "workdir"])
def test_a_checkpoint_in_a_bucket_loads_as_its_local_folder(
    kind, local, gs, cache, capsys, monkeypatch
) -> None:
    got, config = convert.load_checkpoint(gs[kind])
    want, _ = convert.load_checkpoint(local[kind])
    assert config == CONFIG and _equal(got, want)
    assert f"copying {gs[kind].removesuffix('/bert_model.ckpt')}" in capsys.readouterr().out
    (copy,) = [p for p in cache.iterdir()]
    names = {str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file()}
    assert "vocab.txt" in names and remote_copy.LISTED_RECORD in names
    assert not {"pytorch_model.bin", "graph.pbtxt", "events.out.tfevents.1"} & names  # not read by a load
    if kind == "workdir":  # the latest step only
        assert {n.split("/")[1] for n in names if n.startswith("checkpoints/")} == {"7"}
        assert _equal(got, _params(1))
    # Found again by a new process: nothing copied, the same weights.
    monkeypatch.setattr(remote_checkpoint, "_COPIES", {})
    again, _ = convert.load_checkpoint(gs[kind])
    assert "copying" not in capsys.readouterr().out and _equal(again, want)


def test_a_checkpoint_written_again_is_copied_again(local, gs, cache, capsys, monkeypatch) -> None:
    url = f"{gs['root']}/rewritten"
    _upload(local["hf"], url)
    first, _ = convert.load_checkpoint(url)
    other = convert.save_checkpoint(str(cache.parent / "other"), _params(5), CONFIG, "hf")
    files.write_bytes_remote(f"{url}/model.safetensors", Path(other, "model.safetensors").read_bytes())
    monkeypatch.setattr(remote_checkpoint, "_COPIES", {})
    capsys.readouterr()
    second, _ = convert.load_checkpoint(url)
    assert f"copying {url}" in capsys.readouterr().out
    assert _equal(first, _params(0)) and _equal(second, _params(5))
    assert len(list(cache.iterdir())) == 1  # the older copy replaced, no half copy left


def test_a_copy_killed_half_way_is_removed_by_the_next(local, gs, cache, capsys, monkeypatch) -> None:
    """The temporary folder a killed copy left (its process gone) is removed when the
    checkpoint is next copied; one whose process still runs is left to it."""
    url = f"{gs['root']}/killed"
    _upload(local["hf"], url)
    copy = Path(convert.local_copy(url))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead, live = (Path(f"{copy}.tmp-{socket.gethostname()}-{pid}") for pid in (gone.pid, os.getppid()))
    for left in (dead, live):
        left.mkdir()
        (left / "model.safetensors").write_bytes(b"half")
    shutil.rmtree(copy)  # copied again below
    monkeypatch.setattr(remote_checkpoint, "_COPIES", {})
    capsys.readouterr()
    params, _ = convert.load_checkpoint(url)
    assert f"removing {dead}, a copy its process left unfinished" in capsys.readouterr().out
    assert _equal(params, _params(0)) and not dead.exists() and live.exists()


def test_what_is_no_checkpoint_in_a_bucket_is_one_line(local, gs, cache) -> None:
    root = gs["root"]
    with pytest.raises(
        remote_copy.RemoteReadError, match=rf"^cannot read {root}/none: no such folder, and no TF"
    ):
        convert.load_checkpoint(f"{root}/none")
    files.write_bytes_remote(f"{root}/texts/a.txt", b"text")
    with pytest.raises(ValueError, match=rf"^{root}/texts is not a checkpoint \(expected a Hugging Face"):
        convert.load_checkpoint(f"{root}/texts")
    for name in ("model/config.json", "model/model.safetensors", "README.md"):  # a package's layout
        files.write_bytes_remote(f"{root}/package/{name}", b"{}")
    with pytest.raises(
        ValueError, match=rf"^{root}/package is not a checkpoint \(.*\): {root}/package/model is one$"
    ):
        convert.load_checkpoint(f"{root}/package")
    assert not cache.exists()  # nothing copied


def test_the_latest_committed_step_is_copied() -> None:
    """On a bucket orbax marks a finished step (``commit_success.txt``): a later step
    without it is still being written."""
    found = {f"checkpoints/{s}/x": [1, 1] for s in (10, 20, 30)}
    found |= {"checkpoints/10/commit_success.txt": [1, 1], "checkpoints/20/commit_success.txt": [1, 1]}
    assert remote_checkpoint._latest_step("gs://b/w", found) == "20"
    assert remote_checkpoint._latest_step("gs://b/w", {f"checkpoints/{s}/x": [1, 1] for s in (9, 10)}) == "10"


def test_a_runs_settings_copy_only_the_config_and_keep_the_url(local, gs, cache) -> None:
    """A run's settings (and so a `plan`) from ``gs://``: the checkpoint's config and
    vocabulary read from a copy of those files alone, no weights copied; the settings and
    the config as written keep the URL."""
    settings = run_settings.pretrain_settings(tiny_pretraining(init_checkpoint=gs["hf"]))
    assert settings.init_checkpoint == settings.config["init_checkpoint"] == gs["hf"]
    assert settings.data.vocab_file.startswith(str(cache)) and settings.data.vocab_file.endswith("vocab.txt")
    assert settings.model.hidden_size == CONFIG.hidden_size
    tuned = finetune_configs.get_config("bbc")
    tuned.init_checkpoint = gs["tf"]
    settings = run_settings.finetune_settings(tuned)
    assert settings.init_checkpoint == settings.config["init_checkpoint"] == gs["tf"]
    assert convert.checkpoint_config(gs["workdir"]) == CONFIG
    assert convert.label_names(gs["bert_jax"]) is None
    copied = {p.name for p in cache.rglob("*") if p.is_file()}
    assert {"config.json", "bert_config.json"} <= copied
    assert not {n for n in copied if n.endswith(".safetensors") or ".data-" in n or n.startswith("ocdbt")}


def test_a_tf_folder_copies_the_checkpoint_the_reader_takes(local, gs, cache) -> None:
    """A TF folder with two checkpoints (and a graph) loads its first, as locally: only
    that one's files are copied."""
    url = f"{gs['root']}/two_tf"
    _upload(os.path.dirname(local["tf"]), url)
    other = convert.save_checkpoint(str(cache.parent / "other" / "zz_model.ckpt"), _params(3), CONFIG, "tf")
    _upload(os.path.dirname(other), url)
    got, _ = convert.load_checkpoint(url)
    assert _equal(got, _params(0))
    (copy,) = [p for p in cache.iterdir()]
    names = {p.name for p in copy.iterdir()}
    assert any(n.startswith("bert_model.ckpt.data-") for n in names) and "bert_model.ckpt.index" in names
    assert not {n for n in names if n.startswith("zz_model") or n == "graph.pbtxt"}


def test_a_fine_tuning_run_from_a_bucket_checkpoint(gs, cache, tmp_path) -> None:
    """Trained from the checkpoint's copy (its own vocabulary, read from the bucket);
    the results name the URL."""
    c = run_config.set_keys(bbc_config.get_config(), {**task_data.TINY_BBC_RUN, "init_checkpoint": gs["hf"]})
    result = run_settings.finetune(c, str(tmp_path / "run"))
    assert result.step == 2 and not result.stopped
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["config"]["init_checkpoint"] == gs["hf"]
    assert list(cache.glob("checkpoint-*/model.safetensors"))


def _convert(cache: Path, cwd: Path, *flags: str) -> subprocess.CompletedProcess:
    cwd.mkdir(exist_ok=True)
    env = {**os.environ, remote_copy.COPIES_ENV: str(cache), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "bert_jax", "convert", *flags]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def test_the_convert_command_reads_and_writes_buckets(gs, cache, tmp_path, monkeypatch) -> None:
    """``--src`` and ``--dst`` in a bucket: the output is uploaded whole, an earlier one
    is refused or, with --overwrite, replaced (its objects the new output lacks removed),
    and nothing is written on the local disk but the source's copy."""
    out, cwd = f"{gs['root']}/exported", tmp_path / "cwd"
    proc = _convert(cache, cwd, f"--src={gs['tf']}", f"--dst={out}", "--dst_format=hf")
    assert proc.returncode == 0, proc.stderr
    assert f"tf {gs['tf']} → hf {out}" in proc.stdout, proc.stdout
    assert list(cwd.iterdir()) == []  # no local folder named after the URL
    params, config = convert.load_checkpoint(out)
    assert config == CONFIG and _equal(params, _params(0))
    assert {"vocab.txt", "config.json", "model.safetensors"} <= set(files.tree(out))

    proc = _convert(cache, cwd, f"--src={gs['tf']}", f"--dst={out}", "--dst_format=bert_jax")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"--dst {out} already holds an earlier output: pass --overwrite" in proc.stderr
    proc = _convert(cache, cwd, f"--src={gs['tf']}", f"--dst={out}", "--dst_format=bert_jax", "--overwrite")
    assert proc.returncode == 0, proc.stderr
    assert f"--overwrite replaces the earlier output in {out}" in proc.stdout
    names = set(files.tree(out))
    assert "model.safetensors" not in names and "config.json" not in names and "bert_config.json" in names
    monkeypatch.setattr(remote_checkpoint, "_COPIES", {})  # as a new process: the new objects
    params, config = convert.load_checkpoint(out)
    assert config == CONFIG and _equal(params, _params(0))

    files.write_bytes_remote(f"{out}/notes.txt", b"mine")
    proc = _convert(cache, cwd, f"--src={gs['tf']}", f"--dst={out}", "--dst_format=hf", "--overwrite")
    assert proc.returncode == 1 and f"--dst {out} holds files this command does not write" in proc.stderr
    proc = _convert(cache, cwd, f"--src={gs['tf']}", f"--dst={out}/notes.txt", "--dst_format=hf")
    assert proc.returncode == 1, proc.stderr
    assert f"--dst {out}/notes.txt is a file, not a folder" in proc.stderr


def test_two_processes_of_one_machine_copy_at_once_and_keep_one_copy(gs, cache) -> None:
    """The processes of a pod test on one machine (or two runs started together) copy the
    same checkpoint at once: both load it, one copy is kept, no temporary folder is left."""
    code = (
        "import sys; from bert_jax import convert; "
        "params, config = convert.load_checkpoint(sys.argv[1]); print('layers', config.num_hidden_layers)"
    )
    env = {**os.environ, remote_copy.COPIES_ENV: str(cache), "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, gs["workdir"]], stdout=subprocess.PIPE, text=True, env=env
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0] and all("layers 2" in o for o in outs), outs
    (copy,) = cache.iterdir()
    assert remote_copy.listed_record(str(copy))["source"] == gs["workdir"]


def test_a_vocabulary_in_a_bucket_is_read_from_its_copy(local, gs, cache) -> None:
    """A file, a folder or a TF checkpoint's prefix in a bucket as the vocabulary: its
    tokenizer file (and the casing recorded beside it) copied once, read locally."""
    want = Path(local["hf"], "vocab.txt").read_text()
    for given in (f"{gs['hf']}/vocab.txt", gs["hf"], gs["tf"]):
        path, kind = tokenization.vocab_in_folder(given)
        assert kind == "wordpiece" and path.startswith(str(cache)) and Path(path).read_text() == want, given
        assert Path(path).parent.joinpath(tokenization.CASING_FILE).exists()  # the casing beside it
    assert len(list(cache.iterdir())) == 2  # a copy per folder, none of them the weights
    assert not list(cache.glob("*/model.safetensors"))
    root = gs["root"]
    with pytest.raises(FileNotFoundError, match=rf"^vocab file {root}/none.txt does not exist$"):
        tokenization.vocab_in_folder(f"{root}/none.txt")
    files.write_bytes_remote(f"{root}/notes/a.txt", b"text")
    with pytest.raises(FileNotFoundError, match=rf"^vocab file {root}/notes is a folder holding none of"):
        tokenization.vocab_in_folder(f"{root}/notes")


def test_a_run_whose_vocabulary_is_in_a_bucket_records_its_url(local, gs, cache) -> None:
    """The settings read the copy, the config as written keeps the URL; a folder that is
    the run's checkpoint and its vocabulary is copied as both (neither replaces the other)."""
    settings = run_settings.pretrain_settings(
        tiny_pretraining(**{"data.vocab_file": f"{gs['hf']}/vocab.txt"})
    )
    assert settings.data.vocab_file.startswith(str(cache)) and settings.data.do_lower_case is True
    assert settings.config["data"]["vocab_file"] == f"{gs['hf']}/vocab.txt"
    tuned = finetune_configs.get_config("bbc")
    tuned.init_checkpoint = gs["hf"]
    tuned.data.vocab_file = gs["hf"]
    settings = run_settings.finetune_settings(tuned)
    assert (
        settings.data.vocab_file.startswith(str(cache)) and settings.config["data"]["vocab_file"] == gs["hf"]
    )
    params, _ = convert.load_checkpoint(settings.init_checkpoint)  # the checkpoint's copy is whole
    assert _equal(params, _params(0))


def test_the_placeholder_objects_of_a_folder_are_not_files(monkeypatch) -> None:
    """The empty ``name/`` objects the Cloud Console or ``gfile.MakeDirs`` make for a
    folder (which the emulator does not keep) are not listed as files."""

    class Listing:
        def find(self, path: str, detail: bool) -> dict:
            assert path == "bkt/model" and detail
            made = {"type": "file", "size": 0, "generation": "1"}
            return {
                "bkt/model/": made,
                "bkt/model/sub/": made,
                "bkt/model/config.json": {"type": "file", "size": 5, "generation": "7"},
                "bkt/model/sub/a.txt": {"type": "file", "size": 2, "generation": "8"},
            }

    monkeypatch.setattr(files, "_bucket_fs", lambda path: (Listing(), path.removeprefix("gs://")))
    assert files.tree("gs://bkt/model/") == {"config.json": [5, 7], "sub/a.txt": [2, 8]}


def test_a_fine_tuning_runs_data_dir_in_a_bucket_is_read_from_its_copy(gs, cache, tmp_path) -> None:
    """A folder of own classification files in the bucket: copied once per machine (test
    predictions read from it too), the results naming the URL; a folder not there is one
    line."""
    from configs import classify as classify_config

    sentences = task_data.bbc_sentences(40, seed=3)
    rows = [(s, "even" if i % 2 == 0 else "odd") for i, s in enumerate(sentences)]
    url = f"{gs['root']}/data/own"
    files.write_bytes_remote(
        f"{url}/train.tsv", ("text\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in rows[:30])).encode()
    )
    files.write_bytes_remote(
        f"{url}/dev.tsv", ("text\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in rows[30:38])).encode()
    )
    files.write_bytes_remote(
        f"{url}/sub/test.tsv", ("text\n" + "".join(f"{s}\n" for s, _ in rows[38:])).encode()
    )
    files.write_bytes_remote(f"{url}/test.tsv", ("text\n" + "".join(f"{s}\n" for s, _ in rows[38:])).encode())
    keys = {**task_data.TINY_BBC_RUN, "init_checkpoint": gs["hf"], "data_dir": url, "predict_test": True}
    keys.pop("max_train_examples"), keys.pop("max_eval_examples")
    c = run_config.set_keys(classify_config.get_config(), keys)
    result = run_settings.finetune(c, str(tmp_path / "run"))
    assert result.step == 30 // 8 and not result.stopped  # one epoch of 30 rows in batches of 8
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["config"]["data_dir"] == url
    (copy,) = cache.glob("data-*-own")
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*.tsv")) == [
        "dev.tsv", "sub/test.tsv", "test.tsv", "train.tsv"
    ]  # fmt: skip
    assert len((tmp_path / "run" / "test" / "test_predictions.tsv").read_text().splitlines()) == 3
    c = run_config.set_keys(classify_config.get_config(), {**keys, "data_dir": f"{gs['root']}/data/none"})
    with pytest.raises(FileNotFoundError, match=r"data_dir gs://.*/data/none"):
        run_settings.finetune(c, str(tmp_path / "run2"))


def test_a_runs_best_and_kept_steps_in_a_bucket_load_from_their_copies(gs, cache) -> None:
    """``.../best`` and ``.../checkpoints/<step>`` of a workdir in a bucket: the workdir's
    config and vocabulary and that step's folder copied, nothing else of the run."""
    from bert_jax.commands import checkpoint_text

    for where, seed in (("best", 0), ("checkpoints/3", 0), ("checkpoints", 1)):
        url = f"{gs['workdir']}/{where}"
        got, config = convert.load_checkpoint(url)
        assert config == CONFIG and _equal(got, _params(seed)), where
        assert convert.checkpoint_config(url) == CONFIG
        assert tokenization.vocab_beside(url).endswith("vocab.txt")  # the workdir's, copied
        params, _ = checkpoint_text.load_params(url, checkpoint_text.local_checkpoint(url), None)
        assert _equal(params, _params(seed))
    copies = {str(p.relative_to(cache)).split("/", 1)[1] for p in cache.glob("checkpoint-*/*/*")}
    assert {c.split("/")[0] for c in copies} <= {"best", "checkpoints"}
    assert {c for c in copies if c.startswith("checkpoints/")} == {"checkpoints/3", "checkpoints/7"}
    with pytest.raises(
        remote_copy.RemoteReadError, match=r"checkpoints/5 does not exist \(the steps saved there: 3, 7\)"
    ):
        convert.load_checkpoint(f"{gs['workdir']}/checkpoints/5")
