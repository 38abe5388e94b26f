"""Preemption soak: one pre-training run SIGKILLed at K random moments, resumed each time.

A tiny model on the Wikipedia excerpt (prepared on first use into a fresh cache, so the
first kills can land in the preparation too), checkpoints every 2 steps (async saves, so
many kills land mid-save). After each kill the same command is started again; after K
kills the run is left to finish. Every logged training loss is compared with an
uninterrupted run of the same command. Prints the kills by phase (start-up before the
first step, or during training), the most steps any resume had to redo, and the number of
logged steps whose loss differs from the uninterrupted run (must be 0).

    .venv/bin/python bench/preemption_soak.py [--kills 20] [--workdir /tmp/bert_jax_soak]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
STEPS = 300


def command(workdir: str, cache: str) -> list[str]:
    return [
        sys.executable, "-m", "bert_jax", "pretrain", "--config=configs/pretrain.py:tiny",
        f"--workdir={workdir}", f"--config.data.cache_dir={cache}", "--config.data.dupe_factor=2",
        f"--config.num_train_steps={STEPS}", "--config.log_every_steps=1",
        "--config.checkpoint_every_steps=2", "--config.eval_every_steps=0",
    ]  # fmt: skip


def losses(workdir: str) -> list[tuple[int, float]]:
    """Every logged (step, loss) row, redone steps included, in the order written."""
    rows = []
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if row.get("split", "train") == "train":
                rows.append((row["step"], row["loss"]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--workdir", default="/tmp/bert_jax_soak")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    shutil.rmtree(args.workdir, ignore_errors=True)
    reference, soaked = os.path.join(args.workdir, "reference"), os.path.join(args.workdir, "soaked")
    start = time.perf_counter()
    cache_ref = os.path.join(args.workdir, "cache-reference")
    proc = subprocess.Popen(
        command(reference, cache_ref), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    metrics = os.path.join(reference, "metrics.jsonl")
    while proc.poll() is None and not (os.path.exists(metrics) and os.path.getsize(metrics)):
        time.sleep(0.05)
    startup = time.perf_counter() - start  # to the first logged step (preparation included)
    assert proc.wait() == 0, "the uninterrupted run failed"
    training = time.perf_counter() - start - startup
    print(f"uninterrupted run: {STEPS} steps, {startup:.0f} s to the first step, {training:.0f} s of steps")
    expected = dict(losses(reference))
    rng = random.Random(args.seed)
    cache = os.path.join(args.workdir, "cache-soaked")
    phases = {"start-up": 0, "training": 0}
    redone, log = 0, os.path.join(args.workdir, "soaked.log")
    for kill in range(args.kills):
        before = len(losses(soaked)) if os.path.exists(os.path.join(soaked, "metrics.jsonl")) else 0
        last_before = losses(soaked)[-1][0] if before else 0
        with open(log, "a") as out:
            proc = subprocess.Popen(command(soaked, cache), cwd=ROOT, env=env, stdout=out, stderr=out)
            # Up to a few seconds past start-up: the kills spread over start-up, steps and
            # saves, and the run is still unfinished after K kills.
            time.sleep(rng.uniform(0.3 * startup, startup + 1.5 * training / args.kills))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        rows = losses(soaked) if os.path.exists(os.path.join(soaked, "metrics.jsonl")) else []
        new = rows[before:]
        phases["training" if new else "start-up"] += 1
        if new:
            redone = max(redone, last_before - new[0][0] + 1)
        print(f"kill {kill + 1:2d}: {len(new)} new steps logged (up to step {rows[-1][0] if rows else 0})")
        if rows and rows[-1][0] >= STEPS:
            print("  (the run had finished before this kill)")
    with open(log, "a") as out:
        subprocess.run(command(soaked, cache), cwd=ROOT, env=env, check=True, stdout=out, stderr=out)
    with open(log) as f:
        resumes = re.findall(r"resumed from \S+/checkpoints/(\d+)", f.read())
    rows = losses(soaked)
    differ = [(s, v) for s, v in rows if v != expected.get(s)]
    assert {s for s, _ in rows} == set(range(1, STEPS + 1)), "some steps were never logged"
    print(f"kills: {args.kills} ({phases['start-up']} during start-up, {phases['training']} during training)")
    print(
        f"resumes: {len(resumes)}; logged steps: {len(rows)} for {STEPS} steps; most steps redone: {redone}"
    )
    print(f"logged steps whose loss differs from the uninterrupted run: {len(differ)}")


if __name__ == "__main__":
    main()
