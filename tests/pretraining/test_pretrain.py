"""Pre-training loop end to end on a tiny model: resume, preemption, logging, bad input."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.commands import run_settings
from bert_jax.model import ops
from bert_jax.pretraining import objective
from bert_jax.training import checkpoints, exit_codes, loop
from bert_jax.training.results import JobResult
from configs import pretrain as pretrain_config
from tests.conftest import ROOT, tiny_pretraining
from tests.helpers import processes


def rows(workdir: Path, split: str = "train") -> dict[int, dict]:
    out = {}
    for line in (workdir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row.get("split", "train") == split:
            out[row["step"]] = row
    return out


def test_mlm_accuracy_on_changed_tokens_leaves_out_the_kept_originals() -> None:
    # Targets 5, 6, 7 at positions 1-3, shown as [MASK] (id 3), kept (6) and random (9);
    # a padded fourth prediction (weight 0). The logits get the first two right.
    batch = {
        "input_ids": np.array([[0, 3, 6, 9, 0]]),
        "masked_lm_positions": np.array([[1, 2, 3, 0]]),
        "masked_lm_ids": np.array([[5, 6, 7, 0]]),
        "masked_lm_weights": np.array([[1.0, 1.0, 1.0, 0.0]]),
        "next_sentence_labels": np.array([0]),
    }
    logits = np.full((1, 4, 10), -5.0, np.float32)
    logits[0, 0, 5] = logits[0, 1, 6] = logits[0, 2, 1] = logits[0, 3, 0] = 5.0
    mlm = ops.softmax_cross_entropy(jnp.asarray(logits), jnp.asarray(batch["masked_lm_ids"]))
    _, sums = objective.pretraining_loss(
        mlm, np.zeros((1, 2), np.float32), batch, total_mlm_weight=3.0, batch_size=1, nsp=True
    )
    metrics = objective.finalize_metrics(sums, nsp=True)
    assert float(metrics["mlm_accuracy"]) == pytest.approx(2 / 3)
    assert float(sums["mlm_changed_weight"]) == 2.0  # [MASK] and random; not the kept 6
    assert float(metrics["mlm_accuracy_changed"]) == pytest.approx(1 / 2)
    lse = np.log(np.exp(logits[0]).sum(-1))
    ce = lse - logits[0, np.arange(4), batch["masked_lm_ids"][0]]
    assert float(metrics["mlm_loss_changed"]) == pytest.approx((ce[0] + ce[2]) / 2, rel=1e-5)
    assert float(metrics["mlm_loss"]) == pytest.approx(ce[:3].mean(), rel=1e-5)
    _, sums = objective.pretraining_loss(
        mlm, np.zeros((1, 2), np.float32), batch, total_mlm_weight=3.0, batch_size=1, nsp=True, causal=True
    )
    assert float(sums["mlm_changed_weight"]) == 3.0  # left-to-right: the next token is never seen


def test_resumed_run_matches_uninterrupted_run(tmp_path) -> None:
    full = tmp_path / "full"
    run_settings.pretrain(tiny_pretraining(), str(full))
    parts = tmp_path / "parts"
    stopped = run_settings.pretrain(tiny_pretraining(stop_after_step=3), str(parts))
    assert stopped == JobResult.stopped_at(3)
    assert rows(parts).keys() == {1, 2, 3}
    final = run_settings.pretrain(tiny_pretraining(), str(parts))
    assert final.step == 6 and not final.stopped and final.held_out
    a, b = rows(full), rows(parts)
    assert sorted(a) == sorted(b) == [1, 2, 3, 4, 5, 6]
    for step in a:
        assert b[step]["loss"] == a[step]["loss"], step  # bit-identical, step by step
    assert final.metrics["mlm_accuracy"] == rows(full, "eval")[6]["mlm_accuracy"]
    # Logging contract.
    for key in (
        "step",
        "loss",
        "mlm_accuracy",
        "nsp_accuracy",
        "learning_rate",
        "tokens_per_sec",
        "mfu",
        "grad_norm",
        "mlm_loss",
        "nsp_loss",
    ):
        assert key in a[6], key
    assert rows(full, "eval")[3]["split"] == "eval"
    assert any(f.name.startswith("events.out.tfevents") for f in (full / "tensorboard").iterdir())
    assert (full / "best").is_dir() and (full / "best_metric.json").exists()


def test_checkpoint_of_another_model_size_is_refused(tmp_path) -> None:
    run_settings.pretrain(tiny_pretraining(num_train_steps=2, eval_every_steps=0), str(tmp_path))
    bigger = tiny_pretraining(num_train_steps=4)
    bigger.model.hidden_size = 256
    bigger.model.intermediate_size = 1024
    with pytest.raises(
        checkpoints.CheckpointMismatchError, match="hidden_size: checkpoint 128 vs config 256"
    ):
        run_settings.pretrain(bigger, str(tmp_path))
    # Without the config file the shapes themselves are compared, naming the parameter.
    (tmp_path / "bert_config.json").unlink()
    before = _snapshot(tmp_path)
    with pytest.raises(
        checkpoints.CheckpointMismatchError,
        match=r"word_embeddings/embedding: checkpoint \(30592, 128\) vs model \(30592, 256\)",
    ):
        run_settings.pretrain(bigger, str(tmp_path))
    assert _snapshot(tmp_path) == before  # a refused run leaves the workdir byte-identical
    # ... so the right run is not refused afterwards.
    run_settings.pretrain(tiny_pretraining(num_train_steps=4, eval_every_steps=0), str(tmp_path))
    assert (tmp_path / "checkpoints" / "4").is_dir() and (tmp_path / "bert_config.json").exists()


def test_a_resumed_run_keeps_the_layer_loop_its_checkpoints_hold(tmp_path, capsys) -> None:
    """Scanned checkpoints (a TPU's "auto") resume scanned where "auto" would unroll (here, as
    on a GPU), with one warning line; an explicit "unroll" is refused in one line."""
    scanned = tiny_pretraining(num_train_steps=4, eval_every_steps=0, stop_after_step=2, layer_loop="scan")
    assert run_settings.pretrain(scanned, str(tmp_path)) == JobResult.stopped_at(2)
    assert json.loads((tmp_path / "bert_config.json").read_text())["scan_layers"] is True
    capsys.readouterr()
    before = _snapshot(tmp_path)
    with pytest.raises(checkpoints.CheckpointMismatchError) as refused:
        run_settings.pretrain(tiny_pretraining(num_train_steps=4, layer_loop="unroll"), str(tmp_path))
    message = str(refused.value)
    assert "checkpoints of scanned layers" in message and "--config.layer_loop=scan" in message
    assert "\n" not in message and _snapshot(tmp_path) == before
    final = run_settings.pretrain(tiny_pretraining(num_train_steps=4, eval_every_steps=0), str(tmp_path))
    assert final.step == 4 and sorted(rows(tmp_path)) == [1, 2, 3, 4]
    warnings = [line for line in capsys.readouterr().out.splitlines() if "layer_loop=auto" in line]
    assert len(warnings) == 1 and "keeps them scanned" in warnings[0], warnings


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_run_refused_for_its_data_creates_nothing(tmp_path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    c = tiny_pretraining()
    c.data = pretrain_config.get_config("tiny").data
    c.data.source, c.data.input_files, c.data.cache_dir = "text", str(empty), str(tmp_path / "cache")
    with pytest.raises(ValueError, match=r"empty\.txt is empty"):
        run_settings.pretrain(c, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[int, dict]:
    workdir = tmp_path_factory.mktemp("uninterrupted")
    run_settings.pretrain(tiny_pretraining(eval_every_steps=0), str(workdir))
    return rows(workdir)


def _damage(step_dir: Path, how: str) -> None:
    if how == "truncated data file":
        largest = max((p for p in step_dir.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
        largest.write_bytes(largest.read_bytes()[: largest.stat().st_size // 2])
    elif how == "no _METADATA":
        (step_dir / "default" / "_METADATA").unlink()
    else:
        (step_dir / "default" / "manifest.ocdbt").unlink()


@pytest.mark.parametrize("how", ["truncated data file", "no _METADATA", "no manifest"])
def test_a_damaged_latest_checkpoint_is_set_aside_and_the_previous_one_restored(
    tmp_path, uninterrupted, how, capsys
) -> None:
    config = tiny_pretraining(eval_every_steps=0)
    run_settings.pretrain(tiny_pretraining(eval_every_steps=0, stop_after_step=4), str(tmp_path))
    _damage(tmp_path / "checkpoints" / "4", how)
    capsys.readouterr()
    run_settings.pretrain(config, str(tmp_path))
    out = capsys.readouterr().out
    assert "checkpoint step 4 is damaged" in out and "resumed from" in out and "checkpoints/2" in out
    (aside,) = (tmp_path / "checkpoints_damaged").iterdir()
    assert aside.name.startswith("4-") and any(aside.rglob("*"))  # moved, not deleted
    resumed = rows(tmp_path)
    assert sorted(resumed) == [1, 2, 3, 4, 5, 6]
    for step in resumed:  # steps 3 and 4 redone from step 2: the same losses
        assert resumed[step]["loss"] == uninterrupted[step]["loss"], step


def test_no_intact_checkpoint_is_an_error_not_a_fresh_start(tmp_path) -> None:
    run_settings.pretrain(tiny_pretraining(eval_every_steps=0, stop_after_step=4), str(tmp_path))
    for step in (2, 4):
        _damage(tmp_path / "checkpoints" / str(step), "no manifest")
    with pytest.raises(checkpoints.CheckpointDamagedError, match=r"no checkpoint in .* restores \(step 4: "):
        run_settings.pretrain(tiny_pretraining(eval_every_steps=0), str(tmp_path))
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["2", "4"]
    assert not (tmp_path / "checkpoints_damaged").exists()


def _cli(workdir: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bert_jax",
        "pretrain",
        "--config=configs/pretrain.py:tiny",
        "--config.data.source=synthetic",
        "--config.global_batch_size=4",
        "--config.max_seq_length=32",
        "--config.max_predictions_per_seq=5",
        "--config.eval_steps=1",
        f"--workdir={workdir}",
        *extra,
    ]


def test_unknown_or_mistyped_config_key_fails_naming_it(tmp_path) -> None:
    proc = subprocess.run(
        _cli(tmp_path, "--config.no_such_key=1"), cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0 and "no_such_key" in proc.stderr
    proc = subprocess.run(
        _cli(tmp_path, "--config.learning_rate=fast"), cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0 and "learning_rate" in proc.stderr
    assert not (tmp_path / "checkpoints").exists()


def test_a_removed_setting_name_is_refused_naming_the_one_to_use(tmp_path) -> None:
    """One name per setting: the model block no longer takes the run's compute dtype."""
    proc = subprocess.run(
        _cli(tmp_path, "--config.model.dtype=bfloat16"), cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1 and "set --config.compute_dtype" in proc.stderr, proc.stderr
    c = tiny_pretraining()
    c.model.remat_policy = "full"  # as a config file written for the old layout would
    with pytest.raises(
        ValueError, match=r"config\.model\.remat_policy was removed: set --config\.remat_policy"
    ):
        run_settings.pretrain(c, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_a_batch_that_does_not_split_over_the_mesh_is_refused_naming_it(tmp_path) -> None:
    """Both jobs check batch x mesh x accumulation before anything is built (pre-training
    used to fail inside a reshape)."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    proc = subprocess.run(
        _cli(
            tmp_path,
            "--config.global_batch_size=6",
            "--config.grad_accum_steps=2",
            "--config.mesh_shape=(2,1,1)",
        ),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    line = "config.global_batch_size=6 does not split over 2 batch shards (mesh_shape (2, 1, 1)) x 2 micro"
    assert proc.returncode == 1 and line in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not any(tmp_path.iterdir())


def test_sigterm_saves_then_exits_and_sigkill_mid_save_leaves_a_restorable_checkpoint(tmp_path) -> None:
    ckpts = tmp_path / "checkpoints"
    # Checkpoint every step; a long run so that we interrupt it.
    args = _cli(
        tmp_path,
        "--config.num_train_steps=100000",
        "--config.checkpoint_every_steps=1",
        "--config.eval_every_steps=0",
        "--config.log_every_steps=1",
    )
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # 1. SIGKILL while a save is being written (its temporary directory exists, seen stopped).
    processes.stop_when(
        lambda: (
            any(".orbax-checkpoint-tmp" in p.name for p in ckpts.glob("*"))
            and any(p.name.isdigit() for p in ckpts.glob("*"))
        ),
        proc,
    )
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    leftovers = [p.name for p in ckpts.iterdir() if "tmp" in p.name]
    finished = sorted(int(p.name) for p in ckpts.iterdir() if p.name.isdigit())
    assert leftovers and finished  # killed mid-save, with earlier complete checkpoints

    # 2. The same command resumes from the latest complete checkpoint ...
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out_lines = []
    while True:
        line = proc.stdout.readline()
        out_lines.append(line)
        if line.startswith("step "):
            break
        assert line or proc.poll() is None, "".join(out_lines)
    assert f"resumed from {tmp_path}/checkpoints/{finished[-1]}" in "".join(out_lines)
    # 3. ... and SIGTERM makes it save and exit with 143.
    proc.send_signal(signal.SIGTERM)
    rest = proc.communicate(timeout=120)[0]
    assert proc.returncode == loop.PREEMPTED_EXIT_CODE, rest
    saved = int(rest.split("preempted: saved step ")[1].split()[0])
    assert saved > finished[-1]
    assert (ckpts / str(saved)).is_dir()


def test_relative_workdir(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    final = run_settings.pretrain(tiny_pretraining(num_train_steps=2, eval_every_steps=2), "runs/x")
    assert final.metrics["mlm_accuracy"] >= 0
    assert (tmp_path / "runs" / "x" / "best" / "2").is_dir()
    assert (tmp_path / "runs" / "x" / "checkpoints" / "2").is_dir()


def test_two_phase_schedule_switches_sequence_length_and_resumes(tmp_path) -> None:
    c = tiny_pretraining(
        num_train_steps=4,
        phase2_fraction=0.5,
        phase2_max_seq_length=64,
        phase2_max_predictions_per_seq=8,
        eval_every_steps=0,
        stop_after_step=3,
    )
    run_settings.pretrain(c, str(tmp_path))
    c.stop_after_step = 0
    final = run_settings.pretrain(c, str(tmp_path))  # resumes inside phase 2
    seq = {step: row["max_seq_length"] for step, row in rows(tmp_path).items()}
    assert seq == {1: 32, 2: 32, 3: 64, 4: 64}
    assert final.metrics["num_predictions"] > 0


def test_prepare_data_defaults_hold_out_and_data_without_held_out_trains_without_evaluation(
    tmp_path, capsys
) -> None:
    """`prepare-data` with its defaults holds out a small share, which `pretrain` evaluates
    on; a folder prepared with none trains without evaluation, saying so in one line."""
    from bert_jax.data import corpora, prepare, records

    docs = corpora.load_documents("wiki_excerpt")[:60]
    text = tmp_path / "wiki.txt"
    text.write_text("\n\n".join("\n".join(d) for d in docs) + "\n")
    out = tmp_path / "prepared_defaults"
    cmd = ["prepare-data", f"--input_file={text}", f"--output_dir={out}", "--max_seq_length=64"]
    proc = subprocess.run([sys.executable, "-m", "bert_jax", *cmd], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert records.read_metadata(str(out))["counts"]["eval"] > 0  # the default holds some out

    bare = tmp_path / "prepared_bare"
    opts = prepare.Options(max_seq_length=64, dupe_factor=1, eval_fraction=0.0)
    prepare.prepare(prepare.list_inputs(str(text)), str(bare), opts, progress=False)
    c = pretrain_config.get_config("tiny")
    c.data.source, c.data.input_files = "prepared", str(bare)
    c.num_train_steps, c.eval_every_steps, c.checkpoint_every_steps = 4, 2, 2
    final = run_settings.pretrain(c, str(tmp_path / "run"))
    assert final == JobResult(step=4, metrics={}, stopped=False, held_out=False)
    warnings = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "holds no held-out examples" in warnings[0]
    assert not (tmp_path / "run" / "best").exists() and (tmp_path / "run" / "checkpoints" / "4").exists()
    assert not [r for r in rows(tmp_path / "run", "eval").values()]


def _damage_file(step_dir: Path, which: str) -> str:
    """Cuts one file of a saved step in half (the two largest array data files, the
    metadata, the manifest); returns its path."""
    data = sorted(
        (p for p in (step_dir / "default").rglob("d/*") if p.is_file()), key=lambda p: -p.stat().st_size
    )
    target = {
        "largest array file": data[0],
        "second largest array file": data[1],
        "metadata": step_dir / "default" / "_METADATA",
        "manifest": step_dir / "default" / "manifest.ocdbt",
    }[which]
    target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    return str(target)


def test_a_damaged_checkpoint_is_one_warning_line_and_no_traceback(tmp_path) -> None:
    """The fallback is handled, whichever file is damaged and however often: one warning
    line, and nothing from orbax's failed read path (its logger, its debris)."""
    flags = ["--config.num_train_steps=6", "--config.eval_every_steps=0", "--config.checkpoint_every_steps=2"]
    saved = tmp_path / "saved"
    first = subprocess.run(
        _cli(saved, *flags, "--config.stop_after_step=4"), capture_output=True, text=True, cwd=ROOT
    )
    assert first.returncode == 0, first.stderr[-2000:]
    kinds = ("largest array file", "second largest array file", "metadata", "manifest")
    for which in (*kinds, "largest array file"):
        run = tmp_path / f"run-{which.replace(' ', '_')}-{len(list(tmp_path.iterdir()))}"
        shutil.copytree(saved, run)
        _damage_file(run / "checkpoints" / "4", which)
        proc = subprocess.run(_cli(run, *flags), capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 0, (which, proc.stderr[-2000:])
        warnings = [ln for ln in proc.stdout.splitlines() if ln.startswith("warning:")]
        assert len(warnings) == 1 and "checkpoint step 4 is damaged" in warnings[0], (which, proc.stdout)
        # The reason cut short (at most 200 characters of it), beside where the step went.
        assert len(warnings[0]) < 320 + len(str(run)), warnings[0]
        for noise in ("Traceback", "Event loop is closed", "OUT_OF_RANGE", "raised an exception"):
            assert noise not in proc.stderr, (which, proc.stderr[-3000:])


def test_a_diverging_run_stops_in_one_line_and_saves_nothing_non_finite(tmp_path) -> None:
    flags = ["--config.num_train_steps=40", "--config.learning_rate=1e30", "--config.warmup_steps=1"]
    flags += [
        "--config.checkpoint_every_steps=1",
        "--config.log_every_steps=5",
        "--config.eval_every_steps=2",
    ]
    proc = subprocess.run(_cli(tmp_path, *flags), capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == exit_codes.DIVERGED, proc.stderr[-2000:]  # a restart loop does not restart it
    (line,) = proc.stderr.strip().splitlines()
    assert "training diverged at step" in line and ("is nan" in line or "is inf" in line), line
    bad = int(line.split("diverged at step ")[1].split(":")[0])
    saved = sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit())
    assert saved and max(saved) < bad and f"checkpoints/{max(saved)}" in line
    best = (
        json.loads((tmp_path / "best_metric.json").read_text())
        if (tmp_path / "best_metric.json").exists()
        else {}
    )
    assert all(np.isfinite(v) for v in best.values())


def _training(workdir: Path, checkpoint_every: int) -> subprocess.Popen:
    """A long tiny run, returned once it has logged its first step."""
    args = _cli(workdir, "--config.num_train_steps=100000", "--config.log_every_steps=1")
    args += ["--config.eval_every_steps=0", f"--config.checkpoint_every_steps={checkpoint_every}"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not (line := proc.stdout.readline()).startswith("step "):
        assert line or proc.poll() is None, proc.stderr.read()[-2000:]
    return proc


def test_ctrl_c_saves_the_step_and_exits_130_in_one_line(tmp_path) -> None:
    proc = _training(tmp_path, checkpoint_every=1000)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == loop.INTERRUPTED_EXIT_CODE, err[-2000:]
    saved = int(out.split("interrupted: saved step ")[1].split()[0])
    assert (tmp_path / "checkpoints" / str(saved)).is_dir()
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-2000:]


def test_a_rerun_that_only_re_evaluates_adds_no_rows_and_no_event_file(tmp_path, capsys) -> None:
    config = tiny_pretraining(num_train_steps=4, eval_every_steps=2)
    run_settings.pretrain(config, str(tmp_path))
    before = (tmp_path / "metrics.jsonl").read_text()
    events = sorted(p.name for p in (tmp_path / "tensorboard").iterdir())
    capsys.readouterr()
    run_settings.pretrain(config, str(tmp_path))  # resumes at the last step
    assert (tmp_path / "metrics.jsonl").read_text() == before
    assert sorted(p.name for p in (tmp_path / "tensorboard").iterdir()) == events
    out = capsys.readouterr().out
    assert "the run finished at step 4 (num_train_steps=4): nothing to train" in out
    assert "another config" not in out and "compiling phase" not in out  # no step to check
    # Extended, at another learning rate: trained on, with one line naming what changed.
    longer = tiny_pretraining(num_train_steps=5, eval_every_steps=2, learning_rate=3e-4, log_every_steps=2)
    assert run_settings.pretrain(longer, str(tmp_path)).step == 5
    out = capsys.readouterr().out
    assert "compiling phase 1's step" in out
    assert re.search(
        r"^warning: \S+ started with another config \(learning_rate: 0.0005 there, 0.0003 now; "
        r"num_train_steps: 4 there, 5 now\); resumed at step 4, the run goes on with this one",
        out,
        re.MULTILINE,
    ), out
    assert json.loads((tmp_path / "run_config.json").read_text())["num_train_steps"] == 4  # the first


def test_rows_of_an_interrupted_attempt_after_its_checkpoint_are_logged_once(tmp_path) -> None:
    run_settings.pretrain(tiny_pretraining(eval_every_steps=0, stop_after_step=4), str(tmp_path))
    with (tmp_path / "metrics.jsonl").open("a") as f:  # as if killed after logging step 5
        f.write(json.dumps({"step": 5, "loss": 123.0}) + "\n")
    run_settings.pretrain(tiny_pretraining(eval_every_steps=0), str(tmp_path))
    logged = [json.loads(ln) for ln in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged if r.get("split", "train") == "train"] == [1, 2, 3, 4, 5, 6]
    assert rows(tmp_path)[5]["loss"] != 123.0


def test_a_second_ctrl_c_stops_at_once_without_a_traceback(tmp_path) -> None:
    proc = _training(tmp_path, checkpoint_every=1)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.02)  # however the two land (one handled, both, coalesced), every outcome is checked
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == loop.INTERRUPTED_EXIT_CODE, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-2000:]
    assert "interrupted again: stopping now" in err or "interrupted: saved step" in out
