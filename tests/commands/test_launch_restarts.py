"""The workers' restart loop restarts only what a restart can fix (`bert_jax.training.exit_codes`).

The loop is the one `launch/tpu_pod.py run` sends to every worker, run here locally in a
fresh HOME with a stand-in job that ends each start as told (an exit status and an error
line, or a signal); then with the real `bert-jax pretrain` on two local processes joined
by `jax.distributed`, one of them killed: the other loses its peer, and both loops start
their job again, which resumes and finishes. No wall-clock assertions: the waits poll,
and their timeouts only end a hang.
"""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bert_jax.commands import cli
from bert_jax.training import exit_codes, loop
from tests.conftest import ROOT
from tests.helpers import fake_bucket, pod

sys.path.insert(0, str(ROOT / "launch"))

import slice_supervisor

SCRIPT = ROOT / "launch" / "tpu_pod.py"
BASE = ["--name=bert-pod", "--zone=us-central2-b", "--topology=v4:2x2x4"]

# Each start takes the next line of $HOME/plan: "exit N [error line]" or "signal NAME".
STAND_IN = """#!{python}
import os, pathlib, signal, sys
home = pathlib.Path(os.environ["HOME"])
with open(home / "starts", "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
plan = (home / "plan").read_text().splitlines()
start = len((home / "starts").read_text().splitlines())
what, _, rest = plan[min(start, len(plan)) - 1].partition(" ")
if what == "signal":
    os.kill(os.getpid(), getattr(signal, rest))
code, _, line = rest.partition(" ")
if line:
    print(line, file=sys.stderr, flush=True)
print("the stand-in's last words", flush=True)  # after the error line, which the status prefers
sys.exit(int(code))
"""


def dry_run(*args: str) -> list[list[str]]:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *BASE, "--dry_run", *args], check=True, capture_output=True, text=True
    ).stdout
    return [shlex.split(line) for line in out.strip().splitlines()]


def remote(cmd: list[str]) -> str:
    return next(w for w in cmd if w.startswith("--command=")).removeprefix("--command=")


def on_worker(home: Path, cmd: list[str], env: dict | None = None) -> str:
    """Runs an ssh line's command as worker 0 in `home`; a status line's status alone."""
    env = {**os.environ, **(env or {}), **fake_bucket.worker_env(home, home.parent / "bucket")}
    proc = subprocess.run(["bash", "-c", remote(cmd)], env=env, capture_output=True, text=True, timeout=60)
    return re.sub(r"^\S+ worker \S+?: ", "", proc.stdout.strip())


def wait_for(condition, timeout: float = 600.0, every: float = 0.05) -> None:
    """Polls until `condition()`; the timeout only ends a hang, far above the wait's length."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(every)


def run_loop(tmp_path: Path, plan: list[str], max_restarts: int = 5) -> tuple[Path, str]:
    """Starts the loop with the stand-in job; returns the HOME and the final status."""
    home = pod.make_worker(tmp_path, STAND_IN)
    (home / "plan").write_text("\n".join(plan) + "\n")
    flags = [f"--max_restarts={max_restarts}", "--restart_pause_s=0"]
    (run,) = dry_run(*flags, "run", "--", "pretrain", "--workdir=gs://b/run")
    _, status = dry_run("status")
    try:
        on_worker(home, run)
        wait_for(lambda: on_worker(home, status) not in ("running", ""))
        return home, on_worker(home, status)
    finally:
        pod.end_started(home)


def starts(home: Path) -> int:
    return len((home / "starts").read_text().splitlines())


# --- the exit-code contract -------------------------------------------------------------------


def test_the_contract_and_its_shell_test_agree_on_every_exit_status() -> None:
    assert [c for c in range(256) if exit_codes.restartable(c)] == [74, 75] + [
        c for c in range(129, 256) if c != 130
    ]
    script = f"for rc in $(seq 0 255); do if {exit_codes.restart_test()}; then echo $rc; fi; done"
    shell = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    assert [int(c) for c in shell.split()] == [c for c in range(256) if exit_codes.restartable(c)]
    # The training loop's codes are the contract's.
    assert loop.PREEMPTED_EXIT_CODE == exit_codes.PREEMPTED
    assert loop.INTERRUPTED_EXIT_CODE == exit_codes.INTERRUPTED


def _exit_of(error: BaseException) -> int:
    """The exit status of a command whose main raises `error`."""

    def main(argv):
        raise error

    with pytest.raises(SystemExit) as ended:
        cli.guarded("pretrain", main)(["bert-jax pretrain"])
    return ended.value.code


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ValueError("config.learning_rate=-1: must be a positive number"), exit_codes.USER_ERROR),
        (loop.DivergedError("step 3: the loss is nan"), exit_codes.DIVERGED),
        (RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 9.3G.\nbuffers: ..."), 4),
        (MemoryError(), exit_codes.OUT_OF_MEMORY),
    ],
)
def test_a_command_ends_with_the_code_of_its_error_in_one_line(error, code, capsys) -> None:
    assert _exit_of(error) == code
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("bert-jax pretrain: error: ")


def test_a_bug_keeps_its_traceback() -> None:
    with pytest.raises(RuntimeError, match="a bug"):
        _exit_of(RuntimeError("a bug"))


def test_an_error_that_says_a_peer_is_gone_is_a_lost_peer_only_in_a_multihost_run() -> None:
    gloo = ValueError(
        "UNKNOWN: Gloo AllGather failed: [external/gloo/gloo/transport/tcp/pair.cc:538] "
        "Read error [127.0.0.1]:39136: Connection reset by peer"
    )
    with pytest.raises(exit_codes.PeerLost, match=r"lost a peer process .*Connection reset by peer.*exit 75"):
        with exit_codes.peers_watched(multihost=True):
            raise gloo
    with pytest.raises(ValueError, match="Gloo"):
        with exit_codes.peers_watched(multihost=False):
            raise gloo
    with pytest.raises(ValueError, match="must be"):  # a user error stays one
        with exit_codes.peers_watched(multihost=True):
            raise ValueError("config.learning_rate=-1: must be a positive number")


# --- the loop, with a stand-in job ------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "why"),
    [(1, "a user error or a bug"), (2, "usage"), (3, "diverged"), (4, "out of memory"), (130, "interrupted")],
)
def test_what_a_restart_cannot_fix_runs_once_and_fails_with_its_line(tmp_path, code, why) -> None:
    line = f"bert-jax pretrain: error: the reason for {code}  [BERT_JAX_DEBUG=1 for the traceback]"
    home, status = run_loop(tmp_path, [f"exit {code} {line}", "exit 0"])
    assert starts(home) == 1
    assert status == f"failed {code} ({why}): {line}"
    log = (home / "bert_jax.log").read_text()
    assert line in log and f"bert-jax exited ({code}: {why}); not restarting" in log


def test_a_preempted_job_is_restarted_until_it_finishes(tmp_path) -> None:
    home, status = run_loop(tmp_path, ["exit 143", "exit 143", "exit 0"])
    assert starts(home) == 3 and status == "exited 0"
    log = (home / "bert_jax.log").read_text()
    assert log.count("bert-jax exited (143: preempted); restarting from the latest checkpoint") == 2


@pytest.mark.parametrize(
    ("first", "code", "why"),
    [
        ("signal SIGKILL", 137, "signal 9"),
        ("signal SIGSEGV", 139, "signal 11"),
        ("signal SIGABRT", 134, "signal 6"),  # also how JAX ends a host that missed a peer's heartbeats
        ("exit 75", 75, "lost a peer"),
    ],
)
def test_a_crash_by_signal_or_a_lost_peer_is_restarted(tmp_path, first, code, why) -> None:
    home, status = run_loop(tmp_path, [first, "exit 0"])
    assert starts(home) == 2 and status == "exited 0"
    assert f"bert-jax exited ({code}: {why}); restarting" in (home / "bert_jax.log").read_text()


@pytest.mark.parametrize("line", ["bert-jax pretrain: error: preempted at step 20", ""])
def test_restarts_end_at_max_restarts_with_the_last_line(tmp_path, line) -> None:
    home, status = run_loop(tmp_path, [f"exit 143 {line}".strip()], max_restarts=2)
    assert starts(home) == 2
    last = line or "the stand-in's last words"  # without an error line, the start's last line
    assert status == f"failed 143 (preempted) after 2 starts: {last}"


def test_the_supervisor_gives_up_at_once_on_a_failed_job_naming_its_line(capsys) -> None:
    failed = "failed 3 (diverged): bert-jax pretrain: error: step 7: the loss is nan"
    plan = slice_supervisor.SlicePlan(
        name="bert-pod",
        describe=["echo", "READY"],
        job_status=["echo", failed],
        delete=[],
        create=[],
        setup=[],
        start=[],
    )
    supervisor = slice_supervisor.Supervisor(plan, slice_supervisor.SuperviseSettings(3, 0.0))
    supervisor.started = True
    assert supervisor.step() == 1 and supervisor.recoveries == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith(f"giving up: job {failed}")


# --- the loop on a local 2-process slice, with the real job ------------------------------------


def test_on_two_processes_a_killed_host_and_its_lost_peer_both_restart_and_finish(tmp_path) -> None:
    workdir, hosts = tmp_path / "run", pod.LocalSlice(tmp_path, max_restarts=4, pause_s=1)
    try:
        hosts.start(str(workdir), pod.tiny_flags(60, checkpoint_every=10), pod.environment())
        # Process 0 logs the steps; past the checkpoint at step 10, worker 1's job is killed.
        wait_for(lambda: "step      15/60" in hosts.log(0), every=0.1)
        for pid in hosts.job_pids(1):
            os.kill(pid, signal.SIGKILL)
        assert hosts.wait_ended() == ["exited 0", "exited 0"], hosts.log(0)[-3000:] + hosts.log(1)[-3000:]
    finally:
        hosts.end()
    first0, first1 = hosts.log(0), hosts.log(1)
    assert "bert-jax exited (137: signal 9); restarting from the latest checkpoint" in first1
    # The survivor: its collective failed (75, one line), or JAX aborted it (134); restarted.
    lost = "bert-jax exited (75: lost a peer); restarting" in first0
    assert lost or "bert-jax exited (134: signal 6); restarting" in first0, first0[-3000:]
    if lost:
        assert "bert-jax pretrain: error: lost a peer process of this multi-host run" in first0
    assert "resumed from" in first0
    steps = [json.loads(r)["step"] for r in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert steps[-1] == 60 and max(steps) == 60
