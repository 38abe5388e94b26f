"""A run keeps its compiled programs (JAX's persistent compilation cache), so that a restart
compiles nothing anew: `bert_jax.training.compile_cache`.

`bert-jax pretrain` runs in a subprocess with a listener on JAX's own cache events: a start
that stops at step 4 (as a preempted one would), then the same command again, which resumes
and finishes. The second start reads every program it compiles from the workdir's
``compilation_cache`` and writes none: JAX's ``cache_misses`` event (one per program
compiled and written) does not fire, and the folder's files are the same.
"""

import json
import os
import subprocess
import sys

import jax
import pytest

from bert_jax.commands import run_settings
from bert_jax.training import compile_cache
from tests.conftest import ROOT, tiny_pretraining
from tests.helpers import pod

# The CLI with JAX's cache events counted; the counts are its last stderr line.
COUNTED = """
import atexit, collections, json, sys
from jax import monitoring
counts = collections.Counter()
monitoring.register_event_listener(lambda event, **_: counts.update([event.rsplit("/", 1)[-1]]))
atexit.register(lambda: print(json.dumps(counts), file=sys.stderr))
from bert_jax.commands.cli import run
from bert_jax.commands import run_settings
run(["bert-jax", *sys.argv[1:]])
"""
FLAGS = [
    "pretrain",
    "--config=configs/pretrain.py:tiny",
    "--config.data.source=synthetic",
    "--config.model.vocab_size=512",
    "--config.global_batch_size=4",
    "--config.max_seq_length=32",
    "--config.max_predictions_per_seq=5",
    "--config.num_train_steps=8",
    "--config.log_every_steps=2",
    "--config.checkpoint_every_steps=2",
    "--config.eval_every_steps=2",
    "--config.eval_steps=1",
]


def pretrain_counted(*flags: str, **env: str) -> tuple[subprocess.CompletedProcess, dict[str, int]]:
    proc = subprocess.run(
        [sys.executable, "-c", COUNTED, *FLAGS, *flags],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,  # ends a hang only: a start takes seconds
        env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT), **env},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads(proc.stderr.strip().splitlines()[-1])


def test_a_restart_of_the_same_run_compiles_nothing_anew(tmp_path) -> None:
    workdir = tmp_path / "run"
    first, events = pretrain_counted(f"--workdir={workdir}", "--config.stop_after_step=4")
    assert "stopped at step 4" in first.stdout + first.stderr
    cache = workdir / "compilation_cache"
    written = sorted(p.name for p in cache.iterdir())
    assert events["cache_misses"] == len(written) > 0  # each program compiled once, and kept
    assert any(name.startswith("jit_call") for name in written)  # the train and eval steps

    second, events = pretrain_counted(f"--workdir={workdir}")
    assert f"resumed from {workdir}/checkpoints/4" in second.stdout
    assert events.get("cache_misses", 0) == 0, events  # nothing compiled and written anew
    # Read back instead: the first start's programs, but for one a fresh start alone runs.
    assert events["cache_hits"] >= len(written) - 1
    assert sorted(p.name for p in cache.iterdir()) == written


def test_a_cache_folder_can_be_given_or_turned_off(tmp_path) -> None:
    given = tmp_path / "shared_cache"
    _, events = pretrain_counted(f"--workdir={tmp_path / 'a'}", f"--config.compilation_cache_dir={given}")
    assert events["cache_misses"] == len(list(given.iterdir())) > 0
    assert not (tmp_path / "a" / "compilation_cache").exists()
    # Another run of the same programs in another workdir, with the same folder: all read back.
    _, events = pretrain_counted(f"--workdir={tmp_path / 'b'}", f"--config.compilation_cache_dir={given}")
    assert events.get("cache_misses", 0) == 0 and events["cache_hits"] > 0
    _, events = pretrain_counted(f"--workdir={tmp_path / 'c'}", "--config.compilation_cache_dir=none")
    assert "cache_hits" not in events and "cache_misses" not in events
    assert not (tmp_path / "c" / "compilation_cache").exists()


def test_in_process_the_cache_is_the_runs_only(tmp_path) -> None:
    assert jax.config.jax_compilation_cache_dir is None
    before = jax.config.jax_persistent_cache_min_compile_time_secs
    with compile_cache.use("", str(tmp_path)) as folder:
        assert folder == str(tmp_path / "compilation_cache")
        assert jax.config.jax_compilation_cache_dir == folder
        assert jax.config.jax_persistent_cache_min_compile_time_secs == 0
    assert jax.config.jax_compilation_cache_dir is None
    assert jax.config.jax_persistent_cache_min_compile_time_secs == before
    with compile_cache.use("none", str(tmp_path)) as folder:
        assert folder is None and jax.config.jax_compilation_cache_dir is None


def test_a_cache_folder_that_cannot_be_written_is_refused_in_one_line(tmp_path) -> None:
    (tmp_path / "a_file").write_text("")
    config = tiny_pretraining(compilation_cache_dir=str(tmp_path / "a_file"))
    with pytest.raises(OSError, match=r"^--config.compilation_cache_dir .*a_file is a file, not a folder$"):
        run_settings.pretrain(config, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()  # refused before the run writes anything


@pytest.fixture
def gcs(tmp_path):
    """A GCS API emulator on localhost (`tests/helpers/pod.py`) with bucket `bkt`."""
    with pod.emulator(tmp_path / "gcs") as url:
        yield url


def test_a_gs_workdir_keeps_the_cache_in_the_bucket(gcs, tmp_path) -> None:
    workdir, env = "gs://bkt/runs/tiny", {"BERT_JAX_GCS_EMULATOR": gcs}
    _, events = pretrain_counted(f"--workdir={workdir}", "--config.stop_after_step=4", **env)
    written = pod.objects(gcs, "runs/tiny/compilation_cache/")
    assert events["cache_misses"] == len(written) > 0
    _, events = pretrain_counted(f"--workdir={workdir}", **env)
    assert events.get("cache_misses", 0) == 0 and events["cache_hits"] >= len(written) - 1
    assert pod.objects(gcs, "runs/tiny/compilation_cache/") == written
