"""Kill soak of a pod run on a bucket: SIGKILL a random host at a random step, again and again.

Two `bert-jax pretrain` processes (tiny model, synthetic data, a ``gs://`` workdir on the
GCS emulator), each under the real restart loop that ``launch/tpu_pod.py run`` sends to
every worker (`launch/worker_loop.py`, in a HOME of its own: `tests.helpers.pod.LocalSlice`).
Each cycle SIGKILLs the job of a random worker, either at a random step or while a
checkpoint is being written (objects of the step in the bucket, its commit file not yet);
the other host loses its peer; both loops restart their jobs with no hand, and they resume
from the last committed checkpoint. After the cycles the run is left to finish.

Checked: both loops end ``exited 0``; every step's logged loss in the bucket's
``metrics.jsonl`` equals an uninterrupted 2-process run's, exactly; no checkpoint was set
aside as damaged (no object a restart trusted wrongly), and no uncommitted step folder is
left at the end.

    .venv/bin/python bench/bucket_soak.py [--cycles 10] [--steps 60] [--every 5] [--seed 0]

`tests/training/test_bucket_runs.py` runs a short form (2 cycles).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import bucket_faults  # noqa: E402
from tests.helpers import pod  # noqa: E402

PREFIX, STEP = "soak/", re.compile(r"^step\s+(\d+)/", re.M)


def _since(text: str, offset: int) -> list[int]:
    return [int(s) for s in STEP.findall(text[offset:])]


def _saving(url: str, step: int) -> bool:
    """Whether step `step`'s checkpoint is being written: objects, and no commit file yet."""
    names = pod.objects(url, f"{PREFIX}checkpoints/{step}/")
    return bool(names) and f"{PREFIX}checkpoints/{step}/commit_success.txt" not in names


def _committed_now(url: str, step: int) -> bool:
    return f"{PREFIX}checkpoints/{step}/commit_success.txt" in pod.objects(
        url, f"{PREFIX}checkpoints/{step}/"
    )


def one_cycle(
    slice_: pod.LocalSlice, url: str, rng: random.Random, mode: str, span: tuple[int, int], every: int
):
    """Kills one worker's job at a step in `span` (``mode`` "step"), or while the first
    checkpoint at or past it is written ("save"). Returns what was hit."""
    offset = len(slice_.log(0))  # this start's output follows
    victim = rng.randrange(2)
    target = rng.randint(*span)
    if mode == "save":
        target = -(-target // every) * every  # the next checkpoint step
        # This start has logged the step (its save follows), and the save is under way:
        # objects of an earlier start's killed save of that step do not count.
        reached = lambda: max(_since(slice_.log(0), offset), default=0) >= target
        pod.wait_for(lambda: reached() and (_saving(url, target) or _committed_now(url, target)), every=0.02)
        hit = "a save (no commit file yet)" if not _committed_now(url, target) else "just after a save"
    else:
        pod.wait_for(lambda: max(_since(slice_.log(0), offset), default=0) >= target, every=0.05)
        hit = "a step"
    pids = slice_.job_pids(victim)
    killed_at = len(slice_.log(0))
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return {"victim": victim, "step": target, "hit": hit, "pids": len(pids), "killed_at": killed_at}


def _restarted(slice_: pod.LocalSlice, offset: int) -> bool:
    """Whether worker 0's loop restarted its job after `offset` of its log and the new start
    trains (a step logged), or the loops have ended."""
    after = slice_.log(0)[offset:]
    restart = after.find("restarting from the latest checkpoint")
    if restart >= 0 and STEP.search(after, restart):
        return True
    return any(s == "exited 0" or s.startswith("failed") for s in map(slice_.status, (0, 1)))


def soak(
    url: str,
    tmp: Path,
    expected: dict[int, float],
    *,
    cycles: int,
    steps: int,
    every: int,
    seed: int,
    log=print,
) -> dict:
    """The soak on the emulator at `url`; `expected`: the uninterrupted run's losses."""
    rng = random.Random(seed)
    slice_ = pod.LocalSlice(tmp / "slice", max_restarts=2 * cycles + 4, pause_s=1)
    start = time.monotonic()
    kills, resumed_at = [], 0
    try:
        slice_.start(f"gs://{pod.BUCKET}/soak", pod.tiny_flags(steps, every), pod.environment(url))
        for c in range(cycles):
            room = max((steps - 1 - resumed_at) // (cycles - c), 1)
            span = (resumed_at + 1, min(resumed_at + room, steps - 1))
            mode = "save" if c % 2 else "step"
            kill = one_cycle(slice_, url, rng, mode, span, every)
            pod.wait_for(lambda k=kill: _restarted(slice_, k["killed_at"]), every=0.2)
            found = re.findall(r"resumed from \S+/checkpoints/(\d+)", slice_.log(0)[kill["killed_at"] :])
            resumed_at = int(found[-1]) if found else 0  # no checkpoint committed yet: afresh
            kill["resumed_from"] = resumed_at
            kills.append(kill)
            log(
                f"cycle {c + 1}: worker {kill['victim']} killed at {kill['hit']}, step {kill['step']}; "
                f"both restarted and resumed from step {resumed_at}"
            )
        statuses = slice_.wait_ended()
    finally:
        slice_.end()
    logs = [slice_.log(i) for i in range(2)]
    losses = bucket_faults.run_losses(url, PREFIX)
    folders = {n.split("/")[2] for n in pod.objects(url, f"{PREFIX}checkpoints/")}
    return {
        "statuses": statuses,
        "kills": kills,
        "seconds": time.monotonic() - start,
        "restarts": [lg.count("restarting from the latest checkpoint") for lg in logs],
        "not_restarted": [lg.count("not restarting") for lg in logs],
        "damaged": sum(lg.count("is damaged") for lg in logs),
        "uncommitted": sorted(int(f) for f in folders if not _committed_now(url, int(f))),
        "steps_logged": len(losses),
        "differing": bucket_faults.differing(losses, expected),
        "tails": [lg[-3000:] for lg in logs],
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--cycles", type=int, default=10)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--every", type=int, default=5, help="checkpoint every N steps")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp, pod.emulator(Path(tmp) / "gcs") as url:
        start = time.monotonic()
        expected = bucket_faults.reference(url, args.steps, args.every)
        print(
            f"uninterrupted 2-process run: {args.steps} steps in {time.monotonic() - start:.0f} s", flush=True
        )
        r = soak(
            url,
            Path(tmp),
            expected,
            cycles=args.cycles,
            steps=args.steps,
            every=args.every,
            seed=args.seed,
            log=lambda line: print(line, flush=True),
        )
        print(f"soak: {args.cycles} kills in {r['seconds']:.0f} s; final statuses {r['statuses']}")
        print(
            f"  restarts by the loops: {r['restarts']} (not restarted: {r['not_restarted']}); "
            f"checkpoints set aside as damaged: {r['damaged']}; uncommitted step folders left: "
            f"{r['uncommitted']}"
        )
        print(
            f"  logged steps: {r['steps_logged']} of {args.steps}; losses differing from the "
            f"uninterrupted run: {len(r['differing'])}"
        )


if __name__ == "__main__":
    main()
