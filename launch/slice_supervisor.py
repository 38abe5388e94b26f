"""Keep a bert_jax job going on TPU slices that can be preempted, suspended or deleted, and
delete them when the job is over.

The restart loop on the workers (``tpu_pod.py run``) outlives a crash of the job but not
the loss of the VMs: a spot slice is PREEMPTED, a queued resource SUSPENDED, and nothing
on the slice is left to restart anything. This loop runs where ``gcloud`` does. Every
``poll_s`` seconds it reads the slice's state (``tpu-vm describe`` or ``queued-resources
describe``: one state for all slices of a multislice job) and, while it is ready, the
job's status on every worker (`job_status`: the job runs only while every worker runs
it; the worst status wins and its worker is named). A slice that is gone, preempted,
suspended, stopped or failed is deleted and created again; once ready it is set up and
the job started again, and the job resumes from the latest checkpoint of its ``gs://``
workdir. Every recovery (a re-creation, a restart of a job that vanished from a ready
slice, a retry after a failed step) uses one of ``max_recreations``; then the loop gives
up with one line.

When the job ends (exit 0, or a failure a restart cannot fix) or the loop gives up, the
workers' logs are copied to the bucket (as far as the VMs answer) and the slice is
deleted, unless ``keep_slice``; a job stopped by hand (``tpu_pod.py stop``) keeps it. The
logs are copied before every deletion of a lost slice too, and before a job that vanished
is started again. Every step is one line with a UTC time stamp.
"""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
import time

import job_status
from job_status import JobStatus

READY = frozenset({"READY", "ACTIVE"})  # a TPU VM node's / a queued resource's
LOST = frozenset({"PREEMPTED", "TERMINATED", "STOPPED", "SUSPENDED", "FAILED"})
GONE = "GONE"  # describe said NOT_FOUND
# Anything else (CREATING, PROVISIONING, WAITING_FOR_RESOURCES, RESTARTING, SUSPENDING,
# DELETING, ...) is waited out.


@dataclasses.dataclass(frozen=True)
class Together:
    """Commands started at the same time (one per slice of a multislice job); the step
    fails when one of them fails."""

    commands: tuple[list[str], ...]


Step = list[str] | Together  # one command, or several at once


@dataclasses.dataclass(frozen=True)
class SlicePlan:
    """The commands the supervisor runs, built by ``tpu_pod.py`` from its flags."""

    name: str
    describe: list[str]  # prints the state, e.g. READY
    job_status: Step  # every worker prints NODE worker W: STATUS (`job_status`)
    delete: list[Step]
    create: list[Step]
    setup: list[Step]
    start: list[Step]
    stop: list[Step] = dataclasses.field(default_factory=list)
    save_logs: Step | None = None  # every worker copies its log to the bucket now
    num_workers: int = 1  # the workers that answer job_status, all slices together
    logs_to: str = ""  # where save_logs copies to


@dataclasses.dataclass(frozen=True)
class SuperviseSettings:
    max_recreations: int
    poll_s: float
    max_unreachable: int = 3  # status reads in a row that fail before the job counts as lost
    keep_slice: bool = False  # keep the slice when supervision ends
    reach_timeout_s: float = 300.0  # a log copy from VMs that may be gone: at most this long


def log(message: str) -> None:
    print(f"[{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}] {message}", flush=True)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def step_lines(step: Step) -> list[str]:
    """The step's commands, shell-quoted, one a line."""
    if isinstance(step, Together):
        return [shlex.join(cmd) for cmd in step.commands]
    return [shlex.join(step)]


def run_step(step: Step, *, capture: bool = False, timeout: float | None = None) -> tuple[int, str]:
    """Runs the step's commands (a `Together` at once); 0 or the first failing exit status
    (124: ran past `timeout`), and with `capture` their output (else it goes through)."""
    commands = step.commands if isinstance(step, Together) else (step,)
    pipe = subprocess.PIPE if capture else None
    procs = [subprocess.Popen(cmd, stdout=pipe, stderr=pipe, text=True) for cmd in commands]
    deadline = None if timeout is None else time.monotonic() + timeout
    rc, outputs = 0, []
    for proc in procs:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            out, _ = proc.communicate(timeout=left)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            code = 124
        outputs.append(out or "")
        rc = rc or code
    return rc, "".join(outputs)


def slice_state(plan: SlicePlan) -> str:
    """READY, PREEMPTED, ... as gcloud says; GONE when not found; UNKNOWN when unreadable."""
    proc = subprocess.run(plan.describe, capture_output=True, text=True)
    if proc.returncode == 0:
        return _last_line(proc.stdout).upper() or "UNKNOWN"
    if "NOT_FOUND" in proc.stderr or "not found" in proc.stderr.lower():
        return GONE
    log(f"warning: describe failed (exit {proc.returncode}): {_last_line(proc.stderr)}")
    return "UNKNOWN"


def read_job(plan: SlicePlan) -> JobStatus:
    """The job's status on every worker (those that do not answer: unreachable)."""
    _, out = run_step(plan.job_status, capture=True)
    return job_status.read(out, plan.num_workers)


def run_steps(label: str, commands: list[Step]) -> int:
    """Run one step's commands in order; 0, or the first failing command's exit status."""
    log(label)
    for step in commands:
        for line in step_lines(step):
            log(f"$ {line}")
        rc, _ = run_step(step)
        if rc != 0:
            log(f"{label.split(':')[0]} failed: exit {rc}")
            return rc
    return 0


class Supervisor:
    """One poll at a time (``step``), so that the loop's decisions can be followed; then
    `wind_up` for the slice."""

    def __init__(self, plan: SlicePlan, settings: SuperviseSettings) -> None:
        self.plan, self.settings = plan, settings
        self.recoveries = 0
        self.started: bool | None = None  # None: not known whether a job already runs
        self.unreachable = 0
        self.last_state = ""
        self.last_job = ""
        self.stopped_by_hand = False

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
        if state != GONE:
            self.save_logs(f"from the {state} slice")
            if run_steps("delete: the lost slice", self.plan.delete):
                return None  # the next poll sees the state again
        run_steps("create: the slice again", self.plan.create)
        return None

    def read_job(self) -> JobStatus:
        job = read_job(self.plan)
        summary = job.summary()
        if summary != self.last_job:
            log(f"job: {summary}")
            self.last_job = summary
        return job

    def start(self) -> int | None:
        if self.started is None:
            job = self.read_job()
            answered = set(job.workers.values())
            if job.status == "running" or (job.status == job_status.UNREACHABLE and answered == {"running"}):
                log(f"job already running on {self.plan.name}: watching it")
                self.started = True
                return None
            if "running" in job.workers.values():  # a job on some workers only: end it first
                self.stop_job()
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
        job = self.read_job()
        self.unreachable = self.unreachable + 1 if job.status == job_status.UNREACHABLE else 0
        if 0 < self.unreachable < self.settings.max_unreachable:
            limit = self.settings.max_unreachable
            log(f"warning: {job.worker} unreachable ({self.unreachable} of {limit} status reads in a row)")
            return None
        if job.status == "running":
            return None
        if job.status == "exited 0":
            log(f"job finished: exit 0 on all {len(job.workers)} workers")
            return 0
        if job.status == "stopped":
            log(f"job stopped (tpu_pod.py stop) on {job.worker}; supervision ends")
            self.stopped_by_hand = True
            return 0
        if job.status.startswith("failed "):  # the workers' loop ended it: see `worker_loop`
            log(f"giving up: {job.named()}")
            return 1
        if job.status.startswith("exited "):  # a loop that does not say why
            log(f"giving up: {job.named()} after the workers' own restarts (--max_restarts)")
            return 1
        self.started = False  # lost, none, or unreachable too often: start it again
        gave_up = self.recover(f"{job.worker or 'worker 0'}: job is {job.status or 'unknown'}")
        if gave_up is None:
            self.save_logs("before the job starts again")
            self.stop_job()
        return gave_up

    def stop_job(self) -> None:
        """Ends what is left of a job on every worker, so that it is not started twice."""
        if self.plan.stop and run_steps("stop: end the job on every worker", self.plan.stop):
            log("warning: stop failed on some workers; starting the job again anyway")

    def save_logs(self, when: str) -> None:
        """Every worker's log to the bucket, as far as the VMs answer; one line."""
        if self.plan.save_logs is None:
            return
        _, out = run_step(self.plan.save_logs, capture=True, timeout=self.settings.reach_timeout_s)
        answers = [line.split(": ", 1)[1] for line in out.splitlines() if job_status.WORKER_LINE.match(line)]
        n, where = self.plan.num_workers, self.plan.logs_to
        copied = sum(a.startswith("copied ") for a in answers)
        if copied == n:
            log(f"logs: every worker's log copied to {where}/ ({when})")
            return
        counts = {
            "had no log yet": answers.count("no log"),
            "could not copy it": answers.count("copy failed"),
        }
        counts["did not answer"] = n - len(answers)
        others = ", ".join(f"{k} {what}" for what, k in counts.items() if k > 0)
        log(f"warning: logs: {copied} of {n} workers' logs copied to {where}/ ({when}); {others}")

    def wind_up(self) -> None:
        """After the last poll: the logs to the bucket, then the slice deleted or kept."""
        name = self.plan.name
        if self.stopped_by_hand:
            log(f"keeping slice {name}: the job was stopped by hand (tpu_pod.py delete deletes it)")
            return
        if self.last_state == GONE:
            log(f"slice {name} is gone: nothing to delete")
            return
        self.save_logs("at the end")
        if self.settings.keep_slice:
            log(f"keeping slice {name} (--keep_slice): tpu_pod.py delete deletes it")
            return
        rc = run_steps(f"delete: slice {name}, its job is over (--keep_slice keeps it)", self.plan.delete)
        if rc:
            cmd = " && ".join(line for step in self.plan.delete for line in step_lines(step))
            log(f"warning: slice {name} is NOT deleted (exit {rc}); delete it by hand: {cmd}")
        else:
            log(f"deleted slice {name}")


def supervise(plan: SlicePlan, settings: SuperviseSettings) -> int:
    """Poll until the job finishes (0), is stopped (0), fails or recoveries run out (1);
    then wind up (the logs, the slice)."""
    log(
        f"supervising {plan.name}: poll every {settings.poll_s:g} s, "
        f"at most {settings.max_recreations} recoveries"
    )
    supervisor = Supervisor(plan, settings)
    while True:
        rc = supervisor.step()
        if rc is not None:
            supervisor.wind_up()
            return rc
        time.sleep(settings.poll_s)


def print_plan(plan: SlicePlan, settings: SuperviseSettings) -> None:
    """The dry run: every command the loop may run, with `#` lines saying when."""
    print(
        f"# supervise {plan.name}: poll every {settings.poll_s:g} s, at most "
        f"{settings.max_recreations} recoveries (--max_recreations)"
    )
    print(
        f"# each poll: the slice's state, then (when READY/ACTIVE) the job's status on all "
        f"{plan.num_workers} workers"
    )
    print(shlex.join(plan.describe))
    print(*step_lines(plan.job_status), sep="\n")
    if plan.save_logs is not None:
        print(
            f"# before a lost slice is deleted, a lost job restarted, or at the end: logs to {plan.logs_to}/"
        )
        print(*step_lines(plan.save_logs), sep="\n")
    print(f"# slice {'/'.join(sorted(LOST))}: delete it, then create it (NOT_FOUND: create)")
    for step in [*plan.delete, *plan.create]:
        print(*step_lines(step), sep="\n")
    print("# a job lost on some workers, or left running on some only: stop it everywhere first")
    for step in plan.stop:
        print(*step_lines(step), sep="\n")
    print("# slice READY/ACTIVE and no job running: setup, then start the job")
    for step in [*plan.setup, *plan.start]:
        print(*step_lines(step), sep="\n")
    ending = "kept (--keep_slice)" if settings.keep_slice else "deleted (the delete above)"
    print(f"# job 'exited 0', 'failed N ...' or recoveries used up: logs, then the slice {ending}")
    print("# 'stopped': supervision ends, the slice kept; lost: start the job again")
