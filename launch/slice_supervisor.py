"""Keep a bert_jax job going on a TPU slice that can be preempted, suspended or deleted.

The restart loop on the workers (``tpu_pod.py run``) outlives a crash of the job but not
the loss of the VMs: a spot slice is PREEMPTED, a queued resource SUSPENDED, and nothing
on the slice is left to restart anything. This loop runs where ``gcloud`` does. Every
``poll_s`` seconds it reads the slice's state (``tpu-vm describe`` or ``queued-resources
describe``) and, while the slice is ready, the job's status on worker 0. A slice that is
gone, preempted, suspended, stopped or failed is deleted and created again; once ready it
is set up and the job started again, and the job resumes from the latest checkpoint of
its ``gs://`` workdir. Every recovery (a re-creation, a restart of a job that vanished
from a ready slice, a retry after a failed step) uses one of ``max_recreations``; then
the loop gives up with one line. Every step is one line with a UTC time stamp.
"""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
import time

READY = frozenset({"READY", "ACTIVE"})  # a TPU VM node's / a queued resource's
LOST = frozenset({"PREEMPTED", "TERMINATED", "STOPPED", "SUSPENDED", "FAILED"})
GONE = "GONE"  # describe said NOT_FOUND
# Anything else (CREATING, PROVISIONING, WAITING_FOR_RESOURCES, RESTARTING, SUSPENDING,
# DELETING, ...) is waited out.


@dataclasses.dataclass(frozen=True)
class SlicePlan:
    """The commands the supervisor runs, built by ``tpu_pod.py`` from its flags."""

    name: str
    describe: list[str]  # prints the state, e.g. READY
    job_status: list[str]  # prints running | exited 0 | failed N (WHY): LINE | stopped | lost | none
    delete: list[list[str]]
    create: list[list[str]]
    setup: list[list[str]]
    start: list[list[str]]


@dataclasses.dataclass(frozen=True)
class SuperviseSettings:
    max_recreations: int
    poll_s: float
    max_unreachable: int = 3  # status reads in a row that fail before the job counts as lost


def log(message: str) -> None:
    print(f"[{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}] {message}", flush=True)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def slice_state(plan: SlicePlan) -> str:
    """READY, PREEMPTED, ... as gcloud says; GONE when not found; UNKNOWN when unreadable."""
    proc = subprocess.run(plan.describe, capture_output=True, text=True)
    if proc.returncode == 0:
        return _last_line(proc.stdout).upper() or "UNKNOWN"
    if "NOT_FOUND" in proc.stderr or "not found" in proc.stderr.lower():
        return GONE
    log(f"warning: describe failed (exit {proc.returncode}): {_last_line(proc.stderr)}")
    return "UNKNOWN"


def job_status(plan: SlicePlan) -> str:
    proc = subprocess.run(plan.job_status, capture_output=True, text=True)
    return _last_line(proc.stdout) if proc.returncode == 0 else "unreachable"


def run_steps(label: str, commands: list[list[str]]) -> int:
    """Run one step's commands in order; 0, or the first failing command's exit status."""
    log(label)
    for cmd in commands:
        log(f"$ {shlex.join(cmd)}")
        rc = subprocess.run(cmd).returncode
        if rc != 0:
            log(f"{label.split(':')[0]} failed: exit {rc} from {cmd[0]}")
            return rc
    return 0


class Supervisor:
    """One poll at a time (``step``), so that the loop's decisions can be followed."""

    def __init__(self, plan: SlicePlan, settings: SuperviseSettings) -> None:
        self.plan, self.settings = plan, settings
        self.recoveries = 0
        self.started: bool | None = None  # None: not known whether a job already runs
        self.unreachable = 0
        self.last_state = ""

    def recover(self, why: str) -> int | None:
        """Spend one recovery, or give up (exit status 1) when none is left."""
        limit = self.settings.max_recreations
        if self.recoveries >= limit:
            log(f"giving up: {why}, and all {limit} recoveries (--max_recreations) are used")
            return 1
        self.recoveries += 1
        log(f"{why}: recovery {self.recoveries} of {limit}")
        return None

    def step(self) -> int | None:
        """One poll; an exit status when supervision is over, else None."""
        state = slice_state(self.plan)
        if state != self.last_state:
            log(f"slice {self.plan.name}: {state}")
            self.last_state = state
        if state == GONE or state in LOST:
            return self.recreate(state)
        if state not in READY:
            return None
        if not self.started:
            return self.start()
        return self.watch()

    def recreate(self, state: str) -> int | None:
        gave_up = self.recover(f"slice {self.plan.name} is {state}")
        if gave_up is not None:
            return gave_up
        self.started = False
        if state != GONE and run_steps("delete: the lost slice", self.plan.delete):
            return None  # the next poll sees the state again
        run_steps("create: the slice again", self.plan.create)
        return None

    def start(self) -> int | None:
        if self.started is None and job_status(self.plan) == "running":
            log(f"job already running on {self.plan.name}: watching it")
            self.started = True
            return None
        for label, commands in (
            ("setup: ship the checkout, install, check the TPUs", self.plan.setup),
            ("run: start the job on every worker", self.plan.start),
        ):
            rc = run_steps(label, commands)
            if rc:
                self.started = False
                return self.recover(f"{label.split(':')[0]} failed (exit {rc})")
        self.started, self.unreachable = True, 0
        return None

    def watch(self) -> int | None:
        status = job_status(self.plan)
        self.unreachable = self.unreachable + 1 if status == "unreachable" else 0
        if 0 < self.unreachable < self.settings.max_unreachable:
            log(f"warning: worker 0 unreachable ({self.unreachable} of {self.settings.max_unreachable})")
            return None
        if status == "running":
            return None
        if status == "exited 0":
            log("job finished: exit 0")
            return 0
        if status == "stopped":
            log("job stopped (tpu_pod.py stop); supervision ends")
            return 0
        if status.startswith("failed "):  # the workers' loop ended it: see `worker_loop`
            log(f"giving up: job {status}")
            return 1
        if status.startswith("exited "):  # a loop that does not say why
            log(f"giving up: job {status} after the workers' own restarts (--max_restarts)")
            return 1
        self.started = False  # lost, none, or unreachable too often: start it again
        return self.recover(f"job on worker 0 is {status or 'unknown'}")


def supervise(plan: SlicePlan, settings: SuperviseSettings) -> int:
    """Poll until the job finishes (0), is stopped (0), or recoveries run out (1)."""
    log(
        f"supervising {plan.name}: poll every {settings.poll_s:g} s, "
        f"at most {settings.max_recreations} recoveries"
    )
    supervisor = Supervisor(plan, settings)
    while True:
        rc = supervisor.step()
        if rc is not None:
            return rc
        time.sleep(settings.poll_s)


def print_plan(plan: SlicePlan, settings: SuperviseSettings) -> None:
    """The dry run: every command the loop may run, with `#` lines saying when."""
    print(
        f"# supervise {plan.name}: poll every {settings.poll_s:g} s, at most "
        f"{settings.max_recreations} recoveries (--max_recreations)"
    )
    print("# each poll: the slice's state, then (when READY/ACTIVE) the job's status on worker 0")
    print(shlex.join(plan.describe))
    print(shlex.join(plan.job_status))
    print(f"# slice {'/'.join(sorted(LOST))}: delete it, then create it (NOT_FOUND: create)")
    for cmd in [*plan.delete, *plan.create]:
        print(shlex.join(cmd))
    print("# slice READY/ACTIVE and no job running: setup, then start the job")
    for cmd in [*plan.setup, *plan.start]:
        print(shlex.join(cmd))
    print("# job status 'exited 0' or 'stopped': done; 'failed N ...': give up; lost: start it again")
