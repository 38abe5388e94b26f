"""A TPU slice and its bucket, on this machine: what the pod tests and the bucket benches
share.

- The bucket: a GCS API emulator (`gcs_emulator.py`) on localhost, optionally behind the
  fault front (`bucket_front.py`), and its objects read over its JSON API.
- The hosts: `bert-jax pretrain` on 2 processes joined by `jax.distributed` (gloo), started
  directly (`start_pod`), or each under the real restart loop that ``launch/tpu_pod.py
  run`` sends to every worker (`LocalSlice`: a HOME per worker, the job at
  ``$HOME/bert_jax/.venv/bin/bert-jax`` as on a VM).

The waits poll; their timeouts only end a hang, minutes above what the wait needs.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

HELPERS = Path(__file__).resolve().parent
ROOT = HELPERS.parents[1]
BUCKET = "bkt"
HANG_S = 600


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition: Callable[[], bool], timeout: float = HANG_S, every: float = 0.05) -> None:
    """Polls until `condition()`; the timeout only ends a hang, far above the wait's length."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(every)


# --- the bucket ---------------------------------------------------------------------------------


def _serve(cmd: list[str]) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout.readline().strip() == "READY", f"{cmd[1]} did not start"
    return proc


def _end(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


@contextlib.contextmanager
def emulator(data_dir: Path | str) -> Iterator[str]:
    """The emulator's URL, with bucket `BUCKET`; its objects are files under `data_dir`."""
    port = free_port()
    proc = _serve([sys.executable, str(HELPERS / "gcs_emulator.py"), str(port), str(data_dir), BUCKET])
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        _end(proc)


class Front:
    """The fault front (`bucket_front.py`) before `upstream`; `url` is where clients go."""

    def __init__(self, upstream: str, *flags: str, port: int = 0) -> None:
        self.port, self.upstream, self.flags = port or free_port(), upstream, flags
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = self._start()

    def _start(self) -> subprocess.Popen:
        front = HELPERS / "bucket_front.py"
        return _serve([sys.executable, str(front), str(self.port), self.upstream, *self.flags])

    def control(self, what: str = "stats") -> dict:
        with urllib.request.urlopen(f"{self.url}/__front__/{what}", timeout=30) as r:
            return json.load(r)

    def stop(self) -> None:
        _end(self.proc)


@contextlib.contextmanager
def front(upstream: str, *flags: str) -> Iterator[Front]:
    f = Front(upstream, *flags)
    try:
        yield f
    finally:
        f.stop()


def objects(url: str, prefix: str) -> list[str]:
    names, token = [], ""
    while True:
        query = urllib.parse.urlencode({"prefix": prefix, **({"pageToken": token} if token else {})})
        with urllib.request.urlopen(f"{url}/storage/v1/b/{BUCKET}/o?{query}") as r:
            page = json.load(r)
        names += [item["name"] for item in page.get("items", [])]
        if not (token := page.get("nextPageToken", "")):
            return sorted(names)


def read_object(url: str, name: str) -> str:
    return read_object_bytes(url, name).decode()


def read_object_bytes(url: str, name: str) -> bytes:
    quoted = urllib.parse.quote(name, safe="")
    with urllib.request.urlopen(f"{url}/download/storage/v1/b/{BUCKET}/o/{quoted}?alt=media") as r:
        return r.read()


def train_losses(text: str) -> dict[int, float]:
    """`metrics.jsonl`'s training loss at each step (the last row of a step wins)."""
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return {r["step"]: r["loss"] for r in rows if r.get("split", "train") == "train"}


# --- the hosts ----------------------------------------------------------------------------------


def tiny_flags(steps: int, checkpoint_every: int, eval_every: int = 0) -> list[str]:
    """`bert-jax pretrain`'s flags for the tiny model on synthetic data, every step logged."""
    return [
        f"--config={ROOT}/configs/pretrain.py:tiny",
        "--config.data.source=synthetic",
        "--config.model.vocab_size=512",
        "--config.global_batch_size=4",
        "--config.max_seq_length=32",
        "--config.max_predictions_per_seq=5",
        f"--config.num_train_steps={steps}",
        "--config.log_every_steps=1",
        f"--config.checkpoint_every_steps={checkpoint_every}",
        f"--config.eval_every_steps={eval_every}",
        "--config.eval_steps=1",
        "--config.baseline_batches=0",
    ]


def pretrain(workdir: object, *flags: str) -> list[str]:
    return [sys.executable, "-m", "bert_jax", "pretrain", f"--workdir={workdir}", *flags]


def host_flags(port: int, i: int) -> list[str]:
    return [f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2", f"--process_id={i}"]


def environment(bucket_url: str = "", **extra: str) -> dict[str, str]:
    """The hosts' environment: the CPU, this checkout, and the emulator (or front) at `bucket_url`."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT), **extra}
    if bucket_url:
        env["BERT_JAX_GCS_EMULATOR"] = bucket_url
    return env


def start_pod(
    workdir: str, flags: list[str], env: dict[str, str], cwd: Path | str = ROOT
) -> list[subprocess.Popen]:
    """Both hosts of a 2-process run, their output piped."""
    port = free_port()
    return [
        subprocess.Popen(
            pretrain(workdir, *flags, *host_flags(port, i)),
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]


def lines(proc: subprocess.Popen) -> queue.Queue:
    """`proc`'s stdout, line by line as it comes (None at its end)."""
    q: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [*map(q.put, proc.stdout), q.put(None)], daemon=True).start()
    return q


# --- the restart loop of `launch/tpu_pod.py run`, on local workers --------------------------------

LAUNCHER = ROOT / "launch" / "tpu_pod.py"
LAUNCH_BASE = ["--name=bert-pod", "--zone=us-central2-b", "--topology=v4:2x2x4"]
REAL_JOB = """#!{python}
import sys
sys.path.insert(0, "{root}")
from bert_jax.commands.cli import run
run(["bert-jax", *sys.argv[1:]])
"""


def dry_run(*args: str) -> list[list[str]]:
    """The commands `launch/tpu_pod.py ARGS --dry_run` prints, split into words."""
    cmd = [sys.executable, str(LAUNCHER), *LAUNCH_BASE, "--dry_run", *args]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [shlex.split(line) for line in out.strip().splitlines()]


def remote(cmd: list[str]) -> str:
    """What an ``ssh --command=...`` runs on the worker."""
    return next(w for w in cmd if w.startswith("--command=")).removeprefix("--command=")


def on_worker(home: Path, cmd: list[str], env: dict | None = None) -> str:
    """Runs `cmd`'s remote part as a worker whose HOME is `home`; its stdout."""
    env = {**os.environ, **(env or {}), "HOME": str(home)}
    proc = subprocess.run(["bash", "-c", remote(cmd)], env=env, capture_output=True, text=True, timeout=60)
    return proc.stdout.strip()


def make_worker(tmp_path: Path, job_text: str, name: str = "home") -> Path:
    """A worker's HOME with the job (`job_text`, formatted with python and root) where a VM has it."""
    home = tmp_path / name
    job = home / "bert_jax" / ".venv" / "bin" / "bert-jax"
    job.parent.mkdir(parents=True)
    job.write_text(job_text.format(python=sys.executable, root=ROOT))
    job.chmod(0o755)
    return home


def started_by(home: Path, what: str = "") -> list[int]:
    """The processes whose command line names `what` (default: anything under `home`)."""
    out = subprocess.run(["pgrep", "-f", what or str(home)], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


def end_started(home: Path) -> None:
    for pid in started_by(home):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class LocalSlice:
    """Two workers, each running `bert-jax pretrain` (process i of 2) under the real restart
    loop, in HOMEs under `root`; the loop's log (``$HOME/bert_jax.log``) and status file
    (``$HOME/bert_jax.status``) are each worker's."""

    def __init__(self, root: Path, *, max_restarts: int = 8, pause_s: int = 1) -> None:
        self.homes = [make_worker(root, REAL_JOB, f"worker{i}") for i in range(2)]
        self.loop_flags = [f"--max_restarts={max_restarts}", f"--restart_pause_s={pause_s}"]

    def start(self, workdir: str, flags: list[str], env: dict[str, str]) -> None:
        """Both loops, as ``tpu_pod.py run -- pretrain ...`` starts them (a new coordinator port)."""
        port = free_port()
        pod = [f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2"]
        for i, home in enumerate(self.homes):
            (run,) = dry_run(
                *self.loop_flags,
                "run",
                "--",
                "pretrain",
                f"--workdir={workdir}",
                *flags,
                *pod,
                f"--process_id={i}",
            )
            on_worker(home, run, {**env, "BERT_JAX_WORKER": str(i)})

    def log(self, i: int) -> str:
        path = self.homes[i] / "bert_jax.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def status(self, i: int) -> str:
        """The loop's status file: running | exited 0 | failed N (WHY): LINE; ``lost`` when
        it says running and the loop is gone."""
        alive = bool(started_by(self.homes[i], f"bert_jax_loop:{self.homes[i]}"))  # before the read
        path = self.homes[i] / "bert_jax.status"
        status = path.read_text().strip() if path.exists() else ""
        return "lost" if status == "running" and not alive else status

    def job_pids(self, i: int) -> list[int]:
        return started_by(self.homes[i], str(self.homes[i] / "bert_jax" / ".venv" / "bin" / "bert-jax"))

    def wait_ended(self, timeout: float = HANG_S) -> list[str]:
        """Both loops' final statuses, once neither is running."""
        wait_for(lambda: all(self.status(i) not in ("running", "") for i in range(2)), timeout, every=0.5)
        return [self.status(i) for i in range(2)]

    def end(self) -> None:
        for home in self.homes:
            end_started(home)
