"""The TPU launch scripts: the exact gcloud commands of a dry run (one slice, and a
multislice job), the workers' shell pieces (restart loop, status, stop, log copies) run
locally, and the VM install script run locally in a fresh HOME (no TPU). The supervisor's
loop driven by a fake `gcloud`: `test_launch_supervisor.py`."""

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bert_jax.training import hardware
from bert_jax.training.hardware import parse_topology
from tests.conftest import ROOT
from tests.helpers import fake_bucket, pod

SCRIPT = ROOT / "launch" / "tpu_pod.py"
INSTALL = ROOT / "launch" / "install_on_vm.sh"
BASE = ["--name=bert-pod", "--zone=us-central2-b", "--project=my-proj", "--topology=v4:2x2x4"]


def dry_run(*args: str) -> list[list[str]]:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *BASE, "--dry_run", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [shlex.split(line) for line in out.strip().splitlines() if not line.startswith("#")]


def remote(cmd: list[str]) -> str:
    """The shell command an ssh line runs on the workers."""
    return next(w for w in cmd if w.startswith("--command=")).removeprefix("--command=")


def test_topology_names_map_to_gcloud_accelerator_types() -> None:
    assert parse_topology("v4:2x2x4").accelerator_type == "v4-32"  # 16 chips, 2 cores each
    assert parse_topology("v5e:4x4").accelerator_type == "v5litepod-16"
    assert parse_topology("v5p:4x4x4").accelerator_type == "v5p-128"
    assert parse_topology("v6e:8x8").accelerator_type == "v6e-64"
    assert parse_topology("v4:2x2x4").num_hosts == 4
    with pytest.raises(ValueError, match="v9"):
        parse_topology("v9:2x2")
    with pytest.raises(ValueError, match="form"):
        parse_topology("v4:32")


def test_gcloud_accelerator_types_name_the_slices_gcloud_makes_of_them() -> None:
    """An accelerator type as gcloud names it (v4 and v5p count TensorCores, v5e and v6e
    chips) is the slice gcloud creates for it, named GEN:AxB[xC]; each maps back."""
    for text, name in [
        ("v5litepod-16", "v5e:4x4"),
        ("v5e-8", "v5e:2x4"),
        ("v6e-64", "v6e:8x8"),
        ("v4-8", "v4:2x2x1"),
        ("v4-32", "v4:2x2x4"),
        ("v5p-128", "v5p:4x4x4"),
    ]:
        topo = parse_topology(text)
        assert topo.name == name and parse_topology(name) == topo, text
    for gen in hardware.TPU_GENERATIONS.values():
        for chips, dims in hardware.slice_shapes(gen).items():
            topo = parse_topology(f"{gen.name}:{dims}")
            assert topo.num_chips == chips and parse_topology(topo.accelerator_type) == topo
    with pytest.raises(ValueError, match=r"'v4-12' is not a slice gcloud makes; it makes v4-8, v4-16, "):
        parse_topology("v4-12")
    with pytest.raises(ValueError, match=r"unknown accelerator type 'v9-8'"):
        parse_topology("v9-8")


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


def test_setup_installs_with_uv_then_checks_the_tpus_on_every_worker() -> None:
    archive, scp, install, check = dry_run("setup")
    assert archive[:2] == ["git", "archive"]
    assert scp[3:5] == ["tpu-vm", "scp"] and "--worker=all" in scp
    for ssh in (install, check):
        assert ssh[3:5] == ["tpu-vm", "ssh"] and "--worker=all" in ssh
    assert remote(install).endswith("bash launch/install_on_vm.sh install")
    assert remote(check).endswith("bash launch/install_on_vm.sh check")
    # What those run on each worker: uv, a Python >= 3.11 venv, `.[tpu]`, jax.devices().
    body = INSTALL.read_text()
    assert "pip install --user -q uv" in body and '"$uv" venv' in body
    assert "sys.version_info < (3, 11)" in body and 'echo "3.11"' in body
    assert 'pip install --python "$VENV/bin/python" -e "${ROOT}[tpu]"' in body
    assert "jax.devices()" in body and 'd.platform == "tpu"' in body


def test_run_starts_the_same_command_on_all_workers_with_restarts() -> None:
    (cmd,) = dry_run("run", "--", "pretrain", "--config=configs/pretrain.py:base", "--workdir=gs://b/base")
    assert cmd[3:6] == ["tpu-vm", "ssh", "bert-pod"] and "--worker=all" in cmd
    command = remote(cmd)
    assert '/.venv/bin/bert-jax" pretrain --config=configs/pretrain.py:base' in command
    assert "--workdir=gs://b/base" in command
    assert "for i in $(seq 1 100)" in command and "&& break" in command
    assert "BERT_JAX_DISTRIBUTED=1" in command


def test_stop_reaches_every_worker_and_logs_stream_worker0() -> None:
    (stop,) = dry_run("stop")
    assert stop[3:6] == ["tpu-vm", "ssh", "bert-pod"] and "--worker=all" in stop
    assert 'pkill -TERM -f "$HOME/bert_jax/.venv/bin/bert-jax"' in remote(stop)
    (logs,) = dry_run("logs")
    assert "--worker=0" in logs and any("tail" in w for w in logs)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run"], "give the bert-jax command"),
        (["--topology=v9:2x2", "create"], "error: --topology: "),
        (["--num_slices=0", "create"], "error: --num_slices=0: "),
        (["--slice=2", "--num_slices=2", "logs"], "error: --slice=2: "),
        (["--log_dir=/tmp/x", "run", "--", "pretrain"], "error: --log_dir=/tmp/x: "),
    ],
)
def test_run_without_job_and_bad_topology_are_one_line_errors(args: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *BASE, "--dry_run", *args], capture_output=True, text=True
    )
    assert proc.returncode != 0
    (line,) = proc.stderr.strip().splitlines()
    assert message in line


def test_supervise_dry_run_prints_the_whole_plan() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *BASE, "--dry_run", "--queued", "supervise", "--", "pretrain",
         "--workdir=gs://b/run"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout  # fmt: skip
    cmds = [shlex.split(line) for line in out.splitlines() if not line.startswith("#")]
    assert cmds[0][3:6] == ["queued-resources", "describe", "bert-pod-qr"]
    assert "--format=value(state.state)" in cmds[0]
    # Every worker's status, then every worker's log to the workdir's bucket.
    assert "--worker=all" in cmds[1] and "bert_jax.status" in remote(cmds[1])
    assert remote(cmds[1]).endswith('echo "bert-pod worker $W: $s"')
    assert "--worker=all" in cmds[2] and "gcloud storage cp $HOME/bert_jax.log" in remote(cmds[2])
    verbs = [c[4] if c[0] == "gcloud" else c[1] for c in cmds[3:]]
    assert verbs == ["delete", "create", "ssh", "archive", "scp", "ssh", "ssh", "ssh"]
    assert "echo stopped" in remote(cmds[5])
    assert "install_on_vm.sh check" in remote(cmds[-2]) and "nohup" in remote(cmds[-1])
    assert "logs to gs://b/run/logs/" in out and "the slice deleted" in out


def test_multislice_is_one_queued_resource_whose_slices_are_set_up_and_run_together() -> None:
    multi = ["--topology=v5e:4x4", "--num_slices=2", "--spot"]  # 4 hosts per slice
    (create,) = dry_run(*multi, "create")
    assert create[3:6] == ["queued-resources", "create", "bert-pod-qr"]
    assert "--node-count=2" in create and "--node-prefix=bert-pod" in create and "--spot" in create
    assert "--accelerator-type=v5litepod-16" in create and not any(w.startswith("--node-id") for w in create)
    (delete,) = dry_run(*multi, "delete")
    assert delete[3:6] == ["queued-resources", "delete", "bert-pod-qr"] and "--force" in delete
    archive, *per_slice = dry_run(*multi, "setup")
    assert archive[:2] == ["git", "archive"] and len(per_slice) == 6  # scp, install, check: 2 each
    for i, cmd in enumerate(per_slice):  # the slice's node: scp's target, ssh's node
        assert (cmd[6].split(":")[0] if i < 2 else cmd[5]) == f"bert-pod-{i % 2}" and "--worker=all" in cmd
    for check in per_slice[4:]:
        assert remote(check).endswith("BERT_JAX_SLICES=2 bash launch/install_on_vm.sh check")
    runs = dry_run(*multi, "run", "--", "pretrain", "--workdir=gs://b/run")
    assert [c[5] for c in runs] == ["bert-pod-0", "bert-pod-1"]
    assert "gs://b/run/logs/bert-pod-1/worker-$W-" in remote(runs[1])
    out = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            *BASE,
            *multi,
            "--dry_run",
            "supervise",
            "--",
            "pretrain",
            "--workdir=gs://b",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "# supervise bert-pod-qr" in out and "status on all 8 workers" in out


def test_a_job_without_a_gs_workdir_warns_that_its_logs_stay_on_the_vms() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *BASE, "--dry_run", "run", "--", "pretrain", "--workdir=/tmp/run"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and "gcloud storage" not in proc.stdout
    (line,) = proc.stderr.splitlines()
    assert line.startswith("warning: the job has no gs:// --workdir") and "--log_dir=" in line
    (cmd,) = dry_run("--log_dir=gs://logs/x", "run", "--", "pretrain", "--workdir=/tmp/run")
    assert "gs://logs/x/bert-pod/worker-$W-" in remote(cmd)


# --- the workers' shell pieces, run locally with a fake job ---------------------------------

FAKE_JOB = """#!{python}
import os, pathlib, signal, sys, time
home = pathlib.Path(os.environ["HOME"])
with open(home / "starts", "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
mode = sys.argv[1]
if mode == "flaky":
    sys.exit(0 if len((home / "starts").read_text().splitlines()) > 1 else 143)
if mode == "fail":
    sys.exit(143)
def on_sigterm(*_):
    (home / "terminated").write_text("")
    sys.exit(143)
signal.signal(signal.SIGTERM, on_sigterm)
(home / "waiting").write_text("")
time.sleep(3600)  # until stopped: the test ends whatever it started
"""


def wait_for(condition, timeout: float = 120.0) -> None:
    """Polls until `condition()`; the timeout only ends a hang (the waits take well under a
    second), so load cannot reach it."""
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


def on_worker(home: Path, cmd: list[str]) -> str:
    """Runs an ssh line's command as worker 0 in `home` (log copies land in its bucket)."""
    env = {**os.environ, **fake_bucket.worker_env(home, home.parent / "bucket")}
    proc = subprocess.run(["bash", "-c", remote(cmd)], env=env, capture_output=True, text=True, timeout=30)
    return proc.stdout.strip()


LOG_OBJECT = re.compile(r"^b/run/logs/bert-pod/worker-0-\d{8}T\d{6}Z\.log$")


@pytest.mark.parametrize("mode", ["flaky", "fail", "wait"])
def test_worker_restart_loop_status_and_stop(tmp_path: Path, mode: str) -> None:
    home, bucket = tmp_path / "home", tmp_path / "bucket"
    job = home / "bert_jax" / ".venv" / "bin" / "bert-jax"
    job.parent.mkdir(parents=True)
    job.write_text(FAKE_JOB.format(python=sys.executable))
    job.chmod(0o755)
    flags = ["--max_restarts=2", "--restart_pause_s=0", "--log_copy_s=1"]
    (run,) = dry_run(*flags, "run", "--", mode, "--workdir=gs://b/run")
    _, status = dry_run("status")
    (stop,) = dry_run("stop")
    (save,) = dry_run("--dry_run", "--queued", "supervise", "--", mode, "--workdir=gs://b/run")[2:3]
    worker = "bert-pod worker 0: "
    try:
        assert on_worker(home, status) == worker + "none"
        assert on_worker(home, save) == worker + "no log"  # nothing started: nothing to copy
        on_worker(home, run)  # returns at once: the loop runs in the background
        if mode == "flaky":  # preempted once (exit 143), restarted, exits 0
            wait_for(lambda: on_worker(home, status) == worker + "exited 0")
            assert len((home / "starts").read_text().splitlines()) == 2
            assert "bert-jax exited (143: preempted); restarting" in (home / "bert_jax.log").read_text()
            # The loop's last act: its log to the bucket, one object for this start.
            wait_for(lambda: "restarting" in "".join(fake_bucket.copies(bucket).values()))
            (name,) = fake_bucket.copies(bucket)
            assert LOG_OBJECT.match(name), name
        elif mode == "fail":  # exit 143 on both of its --max_restarts=2 starts
            wait_for(lambda: on_worker(home, status) == worker + "failed 143 (preempted) after 2 starts")
            assert len((home / "starts").read_text().splitlines()) == 2
        else:  # runs until `stop`: SIGTERM to the job, the loop does not restart it
            wait_for(lambda: (home / "waiting").exists())
            assert on_worker(home, status) == worker + "running"
            wait_for(lambda: fake_bucket.copies(bucket))  # copied while it runs (--log_copy_s=1)
            assert all(LOG_OBJECT.match(name) for name in fake_bucket.copies(bucket))
            (home / "bert_jax.log").write_text("the last lines\n")
            assert on_worker(home, save).startswith(worker + "copied gs://b/run/logs/bert-pod/worker-0-")
            assert list(fake_bucket.copies(bucket).values()) == ["the last lines\n"]
            on_worker(home, stop)
            wait_for(lambda: (home / "terminated").exists())
            starts = home / "starts"  # until nothing is left that could restart it, or it did
            wait_for(lambda: not pod.started_by(home) or len(starts.read_text().splitlines()) > 1)
            assert len(starts.read_text().splitlines()) == 1
            assert on_worker(home, status) == worker + "stopped"
            (home / "bert_jax.status").write_text("running\n")  # the loop is gone: lost
            assert on_worker(home, status) == worker + "lost"
    finally:  # end what this test started (its command lines name its own tmp dir)
        pod.end_started(home)


# --- the install script, run locally in a fresh HOME with no TPU ----------------------------


def test_install_script_makes_a_python_311_venv_with_uv_in_a_fresh_home(tmp_path: Path) -> None:
    home, venv = tmp_path / "home", tmp_path / "venv"
    home.mkdir()
    # A python >= 3.11 on PATH (this interpreter's base installation); pip installs uv from PyPI.
    env = {
        "HOME": str(home),
        "PATH": f"{Path(sys.base_prefix) / 'bin'}:/usr/bin:/bin",
        "BERT_JAX_VENV": str(venv),
        "BERT_JAX_WORKER": "5",
        "BERT_JAX_INSTALL_DRY": "1",
    }
    # An older venv is where the new one goes (as the Python 3.10 images' `python3 -m venv` left).
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("version = 3.10.12\n")
    (venv / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")
    (venv / "bin" / "python").chmod(0o755)
    proc = subprocess.run(["bash", str(INSTALL)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (home / ".local" / "bin" / "uv").exists()  # installed into the fresh HOME
    assert sum(line.startswith("warning: worker 5") for line in proc.stdout.splitlines()) == 1
    version = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sys; print(*sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert tuple(int(v) for v in version.split()) >= (3, 11)
    assert re.search(rf"worker 5 .*: Python 3\.1[1-9]\.\d+ in {venv}", proc.stdout)
    assert (
        f"dry run, not running: {home}/.local/bin/uv pip install --python {venv}/bin/python -e "
        in proc.stdout
    )
    assert "[tpu]" in proc.stdout
    again = subprocess.run(["bash", str(INSTALL), "install"], env=env, capture_output=True, text=True)
    assert again.returncode == 0 and f"reusing {venv}" in again.stdout


def test_install_check_fails_loudly_naming_the_worker_without_tpus(tmp_path: Path) -> None:
    env = {
        "HOME": str(tmp_path),
        "PATH": "/usr/bin:/bin",
        "BERT_JAX_VENV": sys.prefix,  # this venv has jax; JAX_PLATFORMS=cpu as on a VM without TPUs
        "BERT_JAX_WORKER": "2",
        "JAX_PLATFORMS": "cpu",
    }
    proc = subprocess.run(
        ["bash", str(INSTALL), "check"], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert re.fullmatch(
        r"error: worker 2 \(.+\): no TPU devices; jax.devices\(\) = \[CpuDevice\(id=0\)\]", line
    )
