"""A pod run on a bucket that misbehaves: faults between the run and the bucket, then an outage.

Two `bert-jax pretrain` processes (tiny model, synthetic data) with a ``gs://`` workdir on
the GCS emulator, reached through the fault front (`tests/helpers/bucket_front.py`):

1. *Faults*: the front fails ``--fail`` of the requests (503, 429, a connection dropped
   before the request reaches the bucket, or after it took effect) and delays
   ``--delay_share`` of them by up to ``--max_delay_s``. The run must finish with exactly
   the per-step losses of an uninterrupted run without the front.
2. *Outage*: once a checkpoint is committed past ``--down_at`` steps, the front goes down
   (every request dropped). The run must stop within the retry policy's bound
   (``BERT_JAX_BUCKET_RETRY``, `bert_jax.storage.gcs`) in one line naming the path, with
   exit 74 (or a lost peer's 75/134 on the other host), and keep its last committed
   checkpoint; with the bucket back, a restart resumes from it and finishes with the
   same losses.

    .venv/bin/python bench/bucket_faults.py [--steps 40] [--fail 0.05] [--max_delay_s 10]

`tests/training/test_bucket_runs.py` runs both in a short form.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers import pod  # noqa: E402

HANG_S = 900  # ends a hung run only


def exit_status(proc: subprocess.Popen) -> int:
    """`proc`'s exit status as a shell reports it (a signal N as 128+N)."""
    return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode


def run_to_end(workdir: str, flags: list[str], env: dict[str, str]) -> tuple[list[int], list[str]]:
    """Both hosts of a run, to their end: exit statuses and output (stdout, then stderr)."""
    procs = pod.start_pod(workdir, flags, env)
    outs = [p.communicate(timeout=HANG_S) for p in procs]
    return [exit_status(p) for p in procs], [out + err for out, err in outs]


def ends(procs: list[subprocess.Popen]) -> list[tuple[float, str, str]]:
    """Each process's end: when (monotonic), its stdout and its stderr."""
    done: list = [None] * len(procs)

    def wait(i: int) -> None:
        out, err = procs[i].communicate(timeout=HANG_S)
        done[i] = (time.monotonic(), out, err)

    threads = [threading.Thread(target=wait, args=(i,)) for i in range(len(procs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done


def run_losses(url: str, prefix: str) -> dict[int, float]:
    return pod.train_losses(pod.read_object(url, f"{prefix}metrics.jsonl"))


def reference(url: str, steps: int, every: int, name: str = "reference") -> dict[int, float]:
    """The per-step losses of an uninterrupted 2-process run on the emulator."""
    codes, outs = run_to_end(f"gs://{pod.BUCKET}/{name}", pod.tiny_flags(steps, every), pod.environment(url))
    assert codes == [0, 0], [o[-2000:] for o in outs]
    return run_losses(url, f"{name}/")


def differing(losses: dict[int, float], expected: dict[int, float]) -> list[int]:
    """Steps whose loss is not exactly the expected one (a missing step counts)."""
    return sorted(s for s in expected if losses.get(s) != expected[s]) + sorted(set(losses) - set(expected))


def faulty_run(url: str, steps: int, every: int, front_flags: list[str], retry: str = "") -> dict:
    """A run through a front with `front_flags` (``--fail``, ``--delay_share``...)."""
    with pod.front(url, *front_flags) as front:
        env = pod.environment(front.url, **({"BERT_JAX_BUCKET_RETRY": retry} if retry else {}))
        start = time.monotonic()
        codes, outs = run_to_end(f"gs://{pod.BUCKET}/faulty", pod.tiny_flags(steps, every), env)
        seconds = time.monotonic() - start
        stats = front.control("stats")
    assert codes == [0, 0], [o[-3000:] for o in outs]
    return {"losses": run_losses(url, "faulty/"), "stats": stats, "seconds": seconds}


def committed(url: str, prefix: str) -> list[int]:
    """The checkpoint steps under `prefix`checkpoints/ with their commit file."""
    names = pod.objects(url, f"{prefix}checkpoints/")
    marks = (re.fullmatch(rf"{re.escape(prefix)}checkpoints/(\d+)/commit_success.txt", n) for n in names)
    return sorted(int(m.group(1)) for m in marks if m)


def outage_run(url: str, steps: int, every: int, down_at: int, retry: str) -> dict:
    """A run (workdir ``outage`` in the bucket) whose bucket goes away once a checkpoint at
    or past `down_at` is committed; then a restart with the bucket back. Returns what each
    stage showed."""
    prefix, workdir = "outage/", f"gs://{pod.BUCKET}/outage"
    flags = pod.tiny_flags(steps, every)
    with pod.front(url) as front:
        env = pod.environment(front.url, BERT_JAX_BUCKET_RETRY=retry)
        procs = pod.start_pod(workdir, flags, env)
        pod.wait_for(
            lambda: any(s >= down_at for s in committed(url, prefix)) or procs[0].poll() is not None,
            HANG_S,
            every=0.2,
        )
        before = committed(url, prefix)
        front.control("down")
        down = time.monotonic()
        ended = ends(procs)
        codes = [exit_status(p) for p in procs]
        front.control("up")
        after = committed(url, prefix)
        lines = [err.strip().splitlines()[-1] if err.strip() else "" for _, _, err in ended]
        start = time.monotonic()
        again, again_outs = run_to_end(workdir, flags, env)
        restart_s = time.monotonic() - start
    resumed = re.findall(r"resumed from \S+/checkpoints/(\d+)", again_outs[0])
    return {
        "committed_before": before,
        "committed_after": after,
        "codes": codes,
        "last_lines": lines,
        "tails": [(out + err)[-4000:] for _, out, err in ended],
        "first_stopped_s": min(t for t, _, _ in ended) - down,  # the host that saw it
        "stopped_after_s": max(t for t, _, _ in ended) - down,
        "restart_codes": again,
        "resumed_from": int(resumed[0]) if resumed else None,
        "restart_s": restart_s,
        "restart_tail": [o[-2000:] for o in again_outs],
        "losses": run_losses(url, prefix),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--every", type=int, default=5, help="checkpoint every N steps")
    p.add_argument("--fail", type=float, default=0.05)
    p.add_argument("--delay_share", type=float, default=0.02)
    p.add_argument("--max_delay_s", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--down_at", type=int, default=15)
    p.add_argument("--retry", default="within_s=30,first_s=1,max_s=8,request_s=20")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp, pod.emulator(Path(tmp) / "gcs") as url:
        start = time.monotonic()
        expected = reference(url, args.steps, args.every)
        print(f"uninterrupted run, no front: {args.steps} steps in {time.monotonic() - start:.0f} s")
        front = [
            f"--fail={args.fail}",
            f"--delay_share={args.delay_share}",
            f"--max_delay_s={args.max_delay_s}",
            f"--seed={args.seed}",
        ]
        f = faulty_run(url, args.steps, args.every, front)
        s = f["stats"]
        print(
            f"faults ({' '.join(front)}): {f['seconds']:.0f} s; front saw {s['requests']} requests: "
            f"{s.get('503', 0)} x 503, {s.get('429', 0)} x 429, {s.get('drop', 0)} dropped before, "
            f"{s.get('drop_reply', 0)} dropped after the bucket acted, {s.get('delay', 0)} delayed"
        )
        print(
            f"  logged steps: {len(f['losses'])}; losses differing from the uninterrupted run: "
            f"{len(differing(f['losses'], expected))}"
        )
        o = outage_run(url, args.steps, args.every, args.down_at, args.retry)
        print(
            f"outage ({args.retry}): front down after committed steps {o['committed_before']}; the first "
            f"host ended {o['first_stopped_s']:.0f} s later, both {o['stopped_after_s']:.0f} s later, "
            f"with {o['codes']}"
        )
        for i, line in enumerate(o["last_lines"]):
            print(f"  host {i}: {line}")
        print(f"  committed steps after the outage: {o['committed_after']}")
        print(
            f"  restart: {o['restart_codes']} in {o['restart_s']:.0f} s, resumed from step "
            f"{o['resumed_from']}; losses differing: {len(differing(o['losses'], expected))}"
        )


if __name__ == "__main__":
    main()
