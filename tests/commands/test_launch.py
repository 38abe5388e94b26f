"""The TPU launch scripts: the exact gcloud commands of a dry run, the supervisor's loop
driven by a fake `gcloud`, the workers' shell pieces (restart loop, status, stop) run
locally, and the VM install script run locally in a fresh HOME (no TPU)."""

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bert_jax.training.hardware import parse_topology
from tests.conftest import ROOT

SCRIPT = ROOT / "launch" / "tpu_pod.py"
INSTALL = ROOT / "launch" / "install_on_vm.sh"
BASE = ["--name=bert-pod", "--zone=us-central2-b", "--project=my-proj", "--topology=v4:2x2x4"]
STAMP = re.compile(r"^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\] ")


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
    [(["run"], "give the bert-jax command"), (["--topology=v9:2x2", "create"], "error: --topology: ")],
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
        [sys.executable, str(SCRIPT), *BASE, "--dry_run", "--queued", "supervise", "--", "pretrain"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    cmds = [shlex.split(line) for line in out.splitlines() if not line.startswith("#")]
    assert cmds[0][3:6] == ["queued-resources", "describe", "bert-pod-qr"]
    assert "--format=value(state.state)" in cmds[0]
    assert "--worker=0" in cmds[1] and "bert_jax.status" in remote(cmds[1])
    verbs = [c[4] if c[0] == "gcloud" else c[1] for c in cmds[2:]]
    assert verbs == ["delete", "create", "archive", "scp", "ssh", "ssh", "ssh"]
    assert "install_on_vm.sh check" in remote(cmds[-2]) and "nohup" in remote(cmds[-1])


# --- the supervisor's loop, driven by a fake gcloud -----------------------------------------

FAKE = """#!{python}
import json, pathlib, sys
here = pathlib.Path(__file__).parent
argv = sys.argv[1:]
with open(here / "calls.jsonl", "a") as f:
    f.write(json.dumps([pathlib.Path(sys.argv[0]).name, *argv]) + "\\n")
script = json.loads((here / "script.json").read_text())
def take(key):  # the next scripted answer; the last one repeats
    queue = script[key]
    value = queue.pop(0) if len(queue) > 1 else queue[0]
    (here / "script.json").write_text(json.dumps(script))
    return value
if "describe" in argv:
    state = take("states")
    if state == "NOT_FOUND":
        sys.exit(print("ERROR: (gcloud) NOT_FOUND: Resource not found", file=sys.stderr) or 1)
    print(state)
elif any("pgrep" in a for a in argv):
    print(take("job"))
elif "create" in argv:
    sys.exit(int(take("create")))
"""


def call_kind(call: list[str]) -> str:
    if call[0] == "git":
        return "archive"
    command = next((w for w in call if w.startswith("--command=")), "")
    for needle, kind in (
        ("pgrep", "status"),
        ("install_on_vm.sh install", "install"),
        ("install_on_vm.sh check", "check"),
        ("nohup", "run"),
    ):
        if needle in command:
            return kind
    return next(w for w in ("describe", "delete", "create", "scp") if w in call)


def supervise(tmp_path: Path, script: dict, *flags: str) -> tuple[subprocess.CompletedProcess, list]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gcloud").write_text(FAKE.format(python=sys.executable))
    (bin_dir / "gcloud").chmod(0o755)
    (bin_dir / "git").symlink_to(bin_dir / "gcloud")
    (bin_dir / "script.json").write_text(json.dumps(script))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    args = [*BASE, "--poll_s=0", *flags, "supervise", "--", "pretrain", "--workdir=gs://b/run"]
    proc = subprocess.run(  # the timeout ends a hung loop: minutes above its few seconds
        [sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300
    )
    lines = (bin_dir / "calls.jsonl").read_text().splitlines()
    return proc, [json.loads(line) for line in lines]


def test_supervise_recreates_a_preempted_slice_and_ends_when_the_job_exits_0(tmp_path: Path) -> None:
    script = {
        "states": ["READY", "READY", "PREEMPTED", "CREATING", "READY", "READY"],
        "job": ["none", "running", "exited 0"],
        "create": [0],
    }
    proc, calls = supervise(tmp_path, script, "--spot", "--max_recreations=2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    setup_and_run = ["archive", "scp", "install", "check", "run"]
    assert [call_kind(c) for c in calls] == [
        "describe", "status", *setup_and_run,  # READY, no job yet: set up and start it
        "describe", "status",  # READY, running
        "describe", "delete", "create",  # PREEMPTED: delete, create again
        "describe",  # CREATING: wait
        "describe", *setup_and_run,  # READY: set up and start the job again
        "describe", "status",  # exited 0
    ]  # fmt: skip
    create = next(c for c in calls if call_kind(c) == "create")
    assert create[1:5] == ["compute", "tpus", "tpu-vm", "create"] and "--spot" in create
    out = proc.stdout.splitlines()
    assert all(STAMP.match(line) for line in out), out
    assert sum("recovery 1 of 2" in line for line in out) == 1
    assert out[-1].endswith("job finished: exit 0")


def test_supervise_gives_up_after_max_recreations_with_one_line(tmp_path: Path) -> None:
    script = {"states": ["SUSPENDED"], "job": ["none"], "create": [0]}
    proc, calls = supervise(tmp_path, script, "--queued", "--spot", "--max_recreations=1")
    assert proc.returncode == 1
    assert [call_kind(c) for c in calls] == ["describe", "delete", "create", "describe"]
    assert calls[1][3:6] == ["queued-resources", "delete", "bert-pod-qr"] and "--force" in calls[1]
    giving_up = [line for line in proc.stdout.splitlines() if "giving up" in line]
    assert len(giving_up) == 1 and "SUSPENDED" in giving_up[0] and "--max_recreations" in giving_up[0]


def test_supervise_counts_failed_creates_of_a_missing_slice(tmp_path: Path) -> None:
    script = {"states": ["NOT_FOUND"], "job": ["none"], "create": [1]}
    proc, calls = supervise(tmp_path, script, "--max_recreations=2")
    assert proc.returncode == 1
    # Not found: nothing to delete; each failed create spends one recovery.
    assert [call_kind(c) for c in calls] == ["describe", "create", "describe", "create", "describe"]
    assert "giving up: slice bert-pod is GONE" in proc.stdout


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


def started_by(home: Path) -> list[int]:
    """The processes whose command lines name `home`: the restart loop and the fake job."""
    out = subprocess.run(["pgrep", "-f", str(home)], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


def on_worker(home: Path, cmd: list[str]) -> str:
    env = {**os.environ, "HOME": str(home)}
    proc = subprocess.run(["bash", "-c", remote(cmd)], env=env, capture_output=True, text=True, timeout=30)
    return proc.stdout.strip()


@pytest.mark.parametrize("mode", ["flaky", "fail", "wait"])
def test_worker_restart_loop_status_and_stop(tmp_path: Path, mode: str) -> None:
    home = tmp_path / "home"
    job = home / "bert_jax" / ".venv" / "bin" / "bert-jax"
    job.parent.mkdir(parents=True)
    job.write_text(FAKE_JOB.format(python=sys.executable))
    job.chmod(0o755)
    flags = ["--max_restarts=2", "--restart_pause_s=0"]
    (run,) = dry_run(*flags, "run", "--", mode, "--workdir=gs://b/run")
    _, status = dry_run("status")
    (stop,) = dry_run("stop")
    try:
        on_worker(home, run)  # returns at once: the loop runs in the background
        if mode == "flaky":  # preempted once (exit 143), restarted, exits 0
            wait_for(lambda: on_worker(home, status) == "exited 0")
            assert len((home / "starts").read_text().splitlines()) == 2
            assert "bert-jax exited (143: preempted); restarting" in (home / "bert_jax.log").read_text()
        elif mode == "fail":  # exit 143 on both of its --max_restarts=2 starts
            wait_for(lambda: on_worker(home, status) == "failed 143 (preempted) after 2 starts")
            assert len((home / "starts").read_text().splitlines()) == 2
        else:  # runs until `stop`: SIGTERM to the job, the loop does not restart it
            wait_for(lambda: (home / "waiting").exists())
            assert on_worker(home, status) == "running"
            on_worker(home, stop)
            wait_for(lambda: (home / "terminated").exists())
            starts = home / "starts"  # until nothing is left that could restart it, or it did
            wait_for(lambda: not started_by(home) or len(starts.read_text().splitlines()) > 1)
            assert len(starts.read_text().splitlines()) == 1
            assert on_worker(home, status) == "stopped"
            (home / "bert_jax.status").write_text("running\n")  # the loop is gone: lost
            assert on_worker(home, status) == "lost"
    finally:  # end what this test started (its command lines name its own tmp dir)
        for pid in started_by(home):
            os.kill(pid, 9)


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
