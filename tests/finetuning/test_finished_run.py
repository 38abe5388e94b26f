"""A finished fine-tuning run is never trained over silently: run again with the same config
it is read back (nothing written), with another config refused in one line naming the
changed keys, and replaced only with ``--overwrite``."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bert_jax.commands import run_settings
from bert_jax.data import tokenization
from bert_jax.finetuning import finished_run
from bert_jax.training import run_config
from configs import bbc as bbc_config
from tests.conftest import ROOT
from tests.helpers import task_data

TINY_RUN = task_data.TINY_BBC_RUN


def _config(checkpoint: str, **changes):
    c = bbc_config.get_config()
    c.init_checkpoint, c.data.vocab_file = checkpoint, tokenization.default_vocab_file()
    return run_config.set_keys(c, {**TINY_RUN, **changes})


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def _event_files(root: Path) -> list[Path]:
    return sorted((root / "tensorboard").rglob("events.out.tfevents.*"))


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_checkpoint) -> tuple[Path, dict]:
    """A finished run at learning rate 2e-3 and its results."""
    workdir = tmp_path_factory.mktemp("ft") / "run"
    result = run_settings.finetune(_config(tiny_checkpoint), str(workdir))
    assert not result.stopped
    return workdir, json.loads((workdir / "results.json").read_text())


def test_the_same_config_reads_the_finished_run_back(finished, tiny_checkpoint, capsys) -> None:
    workdir, results = finished
    assert results["config"]["learning_rate"] == 2e-3  # the config is kept with the results
    before = _tree(workdir)
    capsys.readouterr()
    # Only how the run is carried out changes (logging, checkpoints): the same run.
    again = run_settings.finetune(_config(tiny_checkpoint, log_every_steps=7), str(workdir))
    assert again.metrics == results["best"] and again.step == results["epochs"][-1]["step"] == 2
    assert capsys.readouterr().out == (
        f"finished run: read back from {workdir}/results.json (--overwrite trains it anew)\n"
    )
    assert _tree(workdir) == before  # nothing written: no new event file, no new rows


def test_another_config_is_refused_naming_the_keys(finished, tiny_checkpoint) -> None:
    workdir, _ = finished
    before = _tree(workdir)
    changed = _config(tiny_checkpoint, learning_rate=1e-3, **{"model.hidden_dropout_prob": 0.0})
    with pytest.raises(ValueError) as refused:
        run_settings.finetune(changed, str(workdir))
    assert str(refused.value) == (
        f"--workdir {workdir} holds a finished run of another config (learning_rate: 0.002 there, "
        "0.001 now; model.hidden_dropout_prob: 0.1 there, 0.0 now): pass --overwrite to train it "
        "anew, or another --workdir"
    )
    # A results.json written before the config was kept there: its own fields are compared.
    legacy = workdir.parent / "legacy"
    legacy.mkdir()
    recorded = {k: v for k, v in json.loads((workdir / "results.json").read_text()).items() if k != "config"}
    (legacy / "results.json").write_text(json.dumps(recorded))
    with pytest.raises(ValueError, match=r"\(learning_rate: 0\.002 there, 0\.001 now\): pass --overwrite"):
        run_settings.finetune(changed, str(legacy))
    assert run_settings.finetune(_config(tiny_checkpoint), str(legacy)).metrics == recorded["best"]
    assert _tree(workdir) == before


def test_overwrite_trains_anew_in_place(tmp_path, tiny_checkpoint, capsys) -> None:
    workdir = tmp_path / "run"
    run_settings.finetune(_config(tiny_checkpoint), str(workdir))
    (workdir / "notes.md").write_text("mine")  # not the run's: kept
    capsys.readouterr()
    result = run_settings.finetune(_config(tiny_checkpoint, learning_rate=1e-3), str(workdir), overwrite=True)
    out = capsys.readouterr().out
    assert out.count(f"warning: --workdir: --overwrite removes the earlier output in {workdir}\n") == 1
    # What the run is doing, as it does it: reading, compiling step 1 (outside the timed
    # steps: step 1's line has no rate and no ETA yet), training, predicting.
    lines = [ln for ln in out.splitlines() if not ln.startswith("warning")]
    assert lines[0] == "reading and tokenizing bbc: train, dev ..."
    cut = "cut at max_seq_length=32"  # BBC News articles, every one longer than 32 pieces
    assert re.fullmatch(rf"  rows: train 16 \(16 {cut}\), dev 8 \(8 {cut}\) \(\d+\.\d s\)", lines[1]), lines[
        1
    ]
    assert lines[2] == "compiling the train step for 8 x 32 tokens ..."
    assert re.fullmatch(r"  compiled and ran step 1 in \d+\.\d s", lines[3]), lines[3]
    assert re.fullmatch(r"step +1/2  loss \S+  eta \?", lines[4]), lines[4]
    assert re.fullmatch(r"step +2/2  loss \S+  tok/s \S+  mfu \S+  eta 0:00:00", lines[5]), lines[5]
    assert lines[6] == "predicting dev: 8 rows ..."
    results = json.loads((workdir / "results.json").read_text())
    assert results["config"]["learning_rate"] == 1e-3 and result.metrics == results["best"]
    assert len(_event_files(workdir)) == 1  # the earlier run's event file went with it
    rows = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2]  # one run's rows, not two
    assert (workdir / "notes.md").read_text() == "mine"
    assert finished_run.earlier_outputs(str(tmp_path / "none")) == []


def bert_jax(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bert_jax", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def test_the_command_reports_or_refuses_a_finished_run(finished, tiny_checkpoint) -> None:
    workdir, results = finished
    before = _tree(workdir)
    args = ["finetune", "--config=configs/bbc.py", f"--workdir={workdir}"]
    args += [f"--config.init_checkpoint={tiny_checkpoint}"]
    args += [f"--config.data.vocab_file={tokenization.default_vocab_file()}"]
    args += [f"--config.{k}={v}" for k, v in TINY_RUN.items()]
    proc = bert_jax(*args, "--config.learning_rate=1e-3")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"bert-jax finetune: error: --workdir {workdir} holds a finished run of another config "
        "(learning_rate: 0.002 there, 0.001 now): pass --overwrite to train it anew, or another "
        "--workdir  [BERT_JAX_DEBUG=1 for the traceback]"
    ]
    proc = bert_jax(*args)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == f"finished run: read back from {workdir}/results.json (--overwrite trains it anew)"
    assert lines[1] == "best dev: " + ", ".join(
        f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in results["best"].items()
    )
    assert _tree(workdir) == before
    proc = bert_jax(*args, "--sweep", "--overwrite")
    assert proc.returncode == 1 and "--overwrite applies to one run, not to --sweep" in proc.stderr
