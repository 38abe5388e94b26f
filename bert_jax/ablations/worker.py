"""A worker of a parallel ablation run (`parallel`): ``python -m bert_jax.ablations.worker
CORE``. Pinned to CPU core CORE (set before JAX starts), it reads job files' paths from
its stdin, one a line, until its end. A job file is a pickled job (the table config, the
workdir, and either a row to pre-train or one fine-tuning run of a cell); its output goes
to the job's log (``<key>.log`` beside ``<key>.job``), and its exit code to ``<key>.job.rc``
when it ends: 0 done, `parallel.USER_ERROR` (the one-line message in ``<key>.job.error``),
`parallel.STOPPED` (stopped before the end, e.g. by SIGTERM; a rerun continues), 1 a
failure (its traceback in the log). The worker keeps its imports, the task data it read
and its compiled programs from one job to the next.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import traceback
from collections.abc import Iterator


@contextlib.contextmanager
def _output_to(log: str) -> Iterator[None]:
    """This process's stdout and stderr (Python's and the C libraries') into `log`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(log, "w") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def run_job(path: str) -> int:
    """Runs the job in file `path`; returns its exit code (see the module docstring)."""
    # Deferred: the core pinning in `main` must come before JAX and TensorFlow start.
    from bert_jax.ablations import cells, compile_cache, parallel, runner

    with open(path, "rb") as f:
        job = pickle.load(f)
    table, workdir = job["table"], job["workdir"]
    try:
        with compile_cache.use(table, workdir):
            if job["kind"] == "pretrain":
                return 0 if runner.pretrain_row(table, job["row"], workdir) else parallel.STOPPED
            cells.run_one(table, job["row"], job["column"], job["model_dir"], job["run"], job["data_cache"])
            return 0
    except (ValueError, OSError) as e:  # a user's input: one line, as the CLI prints it
        with open(f"{path}.error", "w") as f:
            f.write(f"{e}\n")
        return parallel.USER_ERROR
    except SystemExit as e:
        if isinstance(e.code, str):  # fine-tuning stopped (SIGTERM): a rerun continues
            print(e.code, flush=True)
            return parallel.STOPPED
        raise


def _job(path: str) -> int:
    with _output_to(path.removesuffix(".job") + ".log"):
        try:
            return run_job(path)
        except Exception:  # reported in the job's log; the worker goes on
            traceback.print_exc()
            return 1


def main(argv: list[str]) -> int:
    os.sched_setaffinity(0, {int(argv[1])})  # before JAX creates its thread pools
    for line in sys.stdin:
        path = line.strip()
        if not path:
            continue
        code = _job(path)
        with open(f"{path}.rc.tmp", "w") as f:
            f.write(f"{code}\n")
        os.replace(f"{path}.rc.tmp", f"{path}.rc")  # whole, or not there
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
