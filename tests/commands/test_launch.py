"""The TPU launch script's dry run prints exactly the gcloud commands a pod launch needs."""

import shlex
import subprocess
import sys

import pytest

from bert_jax.training.hardware import parse_topology
from tests.conftest import ROOT

SCRIPT = ROOT / "launch" / "tpu_pod.py"
BASE = ["--name=bert-pod", "--zone=us-central2-b", "--project=my-proj", "--topology=v4:2x2x4"]


def dry_run(*args: str) -> list[list[str]]:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *BASE, "--dry_run", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [shlex.split(line) for line in out.strip().splitlines()]


def test_topology_names_map_to_gcloud_accelerator_types() -> None:
    assert parse_topology("v4:2x2x4").accelerator_type == "v4-32"  # 16 chips, 2 cores each
    assert parse_topology("v5e:4x4").accelerator_type == "v5litepod-16"
    assert parse_topology("v5p:4x4x4").accelerator_type == "v5p-128"
    assert parse_topology("v6e:8x8").accelerator_type == "v6e-64"
    assert parse_topology("v4:2x2x4").num_hosts == 4
    with pytest.raises(ValueError, match="v9"):
        parse_topology("v9:2x2")
    with pytest.raises(ValueError, match="form"):
        parse_topology("v4-32")


def test_create_pod() -> None:
    (cmd,) = dry_run("create")
    assert cmd[:5] == ["gcloud", "compute", "tpus", "tpu-vm", "create"]
    assert "bert-pod" in cmd
    assert "--accelerator-type=v4-32" in cmd
    assert "--version=tpu-ubuntu2204-base" in cmd
    assert "--zone=us-central2-b" in cmd and "--project=my-proj" in cmd


def test_queued_spot_create_and_delete() -> None:
    (cmd,) = dry_run("--queued", "--spot", "create")
    assert cmd[3:6] == ["queued-resources", "create", "bert-pod-qr"]
    assert "--node-id=bert-pod" in cmd and "--spot" in cmd
    assert "--runtime-version=tpu-ubuntu2204-base" in cmd
    (delete,) = dry_run("--queued", "delete")
    assert delete[3:6] == ["queued-resources", "delete", "bert-pod-qr"] and "--force" in delete


def test_setup_copies_and_installs_on_every_worker() -> None:
    archive, scp, ssh = dry_run("setup")
    assert archive[:2] == ["git", "archive"]
    assert scp[3:5] == ["tpu-vm", "scp"] and "--worker=all" in scp
    assert ssh[3:5] == ["tpu-vm", "ssh"] and "--worker=all" in ssh
    command = next(w for w in ssh if w.startswith("--command="))
    assert "pip install -q -e '.[tpu]'" in command


def test_run_starts_the_same_command_on_all_workers_with_restarts() -> None:
    (cmd,) = dry_run("run", "--", "pretrain", "--config=configs/pretrain.py:base", "--workdir=gs://b/base")
    assert cmd[3:6] == ["tpu-vm", "ssh", "bert-pod"] and "--worker=all" in cmd
    command = next(w for w in cmd if w.startswith("--command="))
    assert ".venv/bin/bert-jax pretrain --config=configs/pretrain.py:base" in command
    assert "--workdir=gs://b/base" in command
    assert "for i in $(seq 1 100)" in command and "&& break" in command
    assert "BERT_JAX_DISTRIBUTED=1" in command


def test_stop_sends_sigterm_and_logs_stream_worker0() -> None:
    (stop,) = dry_run("stop")
    assert any("pkill -TERM" in w for w in stop) and "--worker=all" in stop
    (logs,) = dry_run("logs")
    assert "--worker=0" in logs and any("tail" in w for w in logs)


def test_run_without_job_is_an_error() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *BASE, "--dry_run", "run"], capture_output=True, text=True
    )
    assert proc.returncode != 0 and "give the bert-jax command" in proc.stderr
