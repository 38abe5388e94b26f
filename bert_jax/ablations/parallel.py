"""Independent runs of an ablation table at once, each in its own process on one core
(``--config.processes=N``, N > 1).

A model of the `cpu` scale (L2 H128) does not keep two cores busy: its steps are small,
so one process per core finishes a table sooner than one process on both
(docs/ablations/README.md, "Cost"). The jobs are each pre-training row (once per model,
`runner.pretrain_row`) and each pending fine-tuning run (`cells.pending_runs`: one seed
of one cell; a grid cell's chosen point's seeds once its grid is done). A job starts when
a process slot is free and the model it needs is pre-trained, pre-training first (it
unblocks the most), then the cells in table order. Each runs as ``python -m
bert_jax.ablations.worker`` process pinned to one core (`os.sched_setaffinity`) with
XLA's CPU runtime single-threaded; the workers live as long as the run, so a job does
not pay again for the imports, the task data and the compiled programs of the last one
(a process per job repeated ~24 CPU-seconds of them per run, measured); each job's
output goes to ``WORKDIR/logs/<job>.log``.

Nothing is kept in memory between jobs: what is done is read from disk (``pretraining.json``,
``results.json``) before each scheduling decision, as the sequential runner does, so a
rerun (in either mode) resumes and the figures are those of the same runs. A job that
fails or stops (``stop_after_step``, a preemption) stops new ones from starting; the
running ones finish, then a failure is raised (a user error as its one line, otherwise
naming the log); a stop returns the report, as the sequential runner does.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bert_jax.ablations import cells
from bert_jax.ablations.progress import TableProgress
from bert_jax.ablations.spec import AblationTable

# The worker's exit codes (besides 0).
USER_ERROR, STOPPED = 2, 3
# One thread per worker: XLA's CPU runtime, TensorFlow's input ops, OpenMP.
SINGLE_THREAD_ENV = {
    "TF_NUM_INTRAOP_THREADS": "1",
    "TF_NUM_INTEROP_THREADS": "1",
    "OMP_NUM_THREADS": "1",
}
XLA_SINGLE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def worker_env(base: dict[str, str]) -> dict[str, str]:
    env = {**base, **SINGLE_THREAD_ENV}
    env["XLA_FLAGS"] = f"{base.get('XLA_FLAGS', '')} {XLA_SINGLE_THREAD}".strip()
    return env


def ready_jobs(
    table: AblationTable, workdir: str, names: list[str], cols: list[str]
) -> list[tuple[str, dict[str, Any]]]:
    """Every job that can start now, (key, job), pre-training first then cells in order."""
    sources = list(dict.fromkeys(table.row_settings[r].model_from for r in names))
    jobs = [
        (f"pretrain--{s}", {"kind": "pretrain", "row": s})
        for s in sources
        if not cells.pretrained(table, workdir, s)
    ]
    for row in names:
        source = table.row_settings[row].model_from
        if not cells.pretrained(table, workdir, source):
            continue
        for column in cols:
            cell_dir = os.path.join(workdir, row, column)
            for run in cells.pending_runs(table, row, column, cell_dir):
                key = "--".join([row, *os.path.relpath(run[1], os.path.join(workdir, row)).split(os.sep)])
                job = {
                    "kind": "run",
                    "row": row,
                    "column": column,
                    "run": run,
                    "model_dir": os.path.join(workdir, source),
                    "data_cache": os.path.join(workdir, "data"),
                }
                jobs.append((key, job))
    return jobs


class _Slots:
    """One long-lived worker per slot, slot i pinned to the i-th allowed core: a job is
    handed over as its file's path on the worker's stdin; the worker writes the job's exit
    code beside it (``<job>.rc``) when done. A worker keeps its imports, the task data it
    read and its compiled programs from one job to the next."""

    def __init__(self, processes: int, workdir: str, table: AblationTable) -> None:
        cores = sorted(os.sched_getaffinity(0))
        self.cores = [cores[i % len(cores)] for i in range(processes)]
        self.running: dict[int, tuple[str, str]] = {}  # slot -> (job key, job file)
        self.workdir, self.table = workdir, table
        self.logs = os.path.join(workdir, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.env = worker_env(dict(os.environ))
        self.workers: list[subprocess.Popen | None] = [None] * processes  # started at their first job

    def _worker(self, slot: int) -> subprocess.Popen:
        if self.workers[slot] is None:
            with open(os.path.join(self.logs, f"worker{slot}.out"), "a") as out:
                self.workers[slot] = subprocess.Popen(
                    [sys.executable, "-m", "bert_jax.ablations.worker", str(self.cores[slot])],
                    stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, env=self.env, text=True,
                )  # fmt: skip
        return self.workers[slot]

    def free(self) -> list[int]:
        return [i for i in range(len(self.cores)) if i not in self.running]

    def start(self, slot: int, key: str, job: dict[str, Any]) -> None:
        path = os.path.join(self.logs, f"{key}.job")
        for old in (".rc", ".error"):  # from an earlier attempt
            if os.path.exists(path + old):
                os.remove(path + old)
        with open(path, "wb") as f:
            pickle.dump({**job, "table": self.table, "workdir": self.workdir}, f)
        worker = self._worker(slot)
        worker.stdin.write(path + "\n")
        worker.stdin.flush()
        log = path.removesuffix(".job") + ".log"
        print(f"== {self.table.table}: {key} on core {self.cores[slot]} (log: {log})", flush=True)
        self.running[slot] = (key, path)

    def finished(self) -> list[tuple[str, int, str]]:
        """Waits until at least one job ends; (key, exit code, log) of each that did (a
        worker that died: its exit code)."""
        while True:
            done = []
            for slot, (key, path) in self.running.items():
                code = self.workers[slot].poll()
                if os.path.exists(path + ".rc"):
                    with open(path + ".rc") as f:
                        code = int(f.read())
                if code is not None:
                    done.append((slot, key, code, path.removesuffix(".job") + ".log"))
            if done:
                for slot, *_ in done:
                    del self.running[slot]
                return [(k, rc, log) for _, k, rc, log in done]
            time.sleep(0.5)

    def stop_all(self) -> None:
        """Ends every worker: those with a job get SIGTERM (fine-tuning and pre-training
        save and stop), the idle ones the end of their input; then waits for them."""
        started = [(slot, proc) for slot, proc in enumerate(self.workers) if proc is not None]
        for slot, proc in started:
            if slot in self.running and proc.poll() is None:
                proc.terminate()
            try:
                proc.stdin.close()
            except OSError:  # a worker that has died already
                pass
        for _, proc in started:
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.running.clear()


def _failure(key: str, rc: int, log: str) -> Exception:
    error = log.removesuffix(".log") + ".job.error"
    if rc == USER_ERROR and os.path.exists(error):
        with open(error) as f:
            return ValueError(f.read().strip())
    return RuntimeError(f"{key} failed with exit code {rc}: see {log}")


def run(
    table: AblationTable,
    workdir: str,
    names: list[str],
    cols: list[str],
    write: Callable[[], dict[str, Any]],
    tracker: TableProgress,
) -> dict[str, Any]:
    """Runs every job of the chosen rows and columns on ``table.processes`` cores; the
    report (`write`) is rewritten after each job, the table's progress line (`tracker`)
    printed as jobs start. Returns the last report."""
    slots = _Slots(table.processes, workdir, table)
    failures: list[Exception] = []
    ended: set[str] = set()  # jobs that exited 0: ready again means they left no result
    stopped = False
    try:
        while True:
            if not failures and not stopped:
                running = {key for key, _ in slots.running.values()}
                waiting = [(k, j) for k, j in ready_jobs(table, workdir, names, cols) if k not in running]
                again = [k for k, _ in waiting if k in ended]
                if again:
                    failures.append(RuntimeError(f"{again[0]} ended without its result: see its log"))
                    waiting = []
                starting = list(zip(slots.free(), waiting, strict=False))
                if starting:
                    tracker.report()
                for slot, (key, job) in starting:
                    slots.start(slot, key, job)
                    tracker.started(key, job["kind"])
            if not slots.running:
                break
            for key, rc, log in slots.finished():
                if rc == STOPPED:  # stop_after_step or a preemption: a rerun continues
                    print(f"== {table.table}: {key} stopped before its end; rerun to continue", flush=True)
                    stopped = True
                elif rc:
                    failures.append(_failure(key, rc, log))
                tracker.ended(key, finished=rc == 0)
                ended.add(key)
            write()
    finally:
        slots.stop_all()
    if failures:
        raise failures[0]
    return write()
