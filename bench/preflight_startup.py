"""What the phase preflight adds to a run's start-up: the demo config, a few steps, with the
check and without it (`preflight.check` replaced by a no-op), each run in its own process
and fresh workdir (so its own compilation cache), the two kinds alternating.

    python bench/preflight_startup.py [--rounds 3] [--preset demo] [--phases 2]

``--phases 2``: 2 steps at sequence 64, then 1 at 128 (the paper's two phases, scaled).

Prints one JSON line per run (wall seconds of `run_settings.pretrain`, the check's own
seconds) and the medians. The first run, not counted, prepares the data cache.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
from bert_jax.commands import run_settings
from bert_jax.pretraining import preflight
from bert_jax.training import run_config

preset, mode, workdir, phases = sys.argv[1:5]
spent = []
check = preflight.check
def timed(job, **kw):
    start = time.perf_counter()
    out = check(job, **kw)
    spent.append(time.perf_counter() - start)
    return out
preflight.check = timed if mode == "on" else (lambda job, **kw: job)
c = run_config.load_config(f"configs/pretrain.py:{preset}")
c.num_train_steps, c.eval_every_steps, c.eval_steps = 3, 0, 1
c.checkpoint_every_steps, c.baseline_batches, c.log_every_steps = 0, 0, 1
if phases == "2":  # the paper's two lengths, scaled: 2 steps at 64, then 1 at 128
    c.max_seq_length, c.max_predictions_per_seq, c.phase2_fraction = 64, 20, 0.34
    c.phase2_max_seq_length, c.phase2_max_predictions_per_seq = 128, 40
start = time.perf_counter()
run_settings.pretrain(c, workdir)
print("RESULT " + json.dumps({"mode": mode, "run_s": time.perf_counter() - start, "check_s": sum(spent)}))
"""


def run_once(preset: str, mode: str, phases: int) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3"}
    with tempfile.TemporaryDirectory() as workdir:
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, preset, mode, os.path.join(workdir, "run"), str(phases)],
            capture_output=True, text=True, env=env, check=True,
        )  # fmt: skip
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--phases", type=int, default=1, choices=(1, 2))
    args = parser.parse_args()
    run_once(args.preset, "off", args.phases)  # the data cache
    results: dict[str, list[float]] = {"on": [], "off": []}
    checks = []
    for _ in range(args.rounds):
        for mode in ("on", "off"):
            got = run_once(args.preset, mode, args.phases)
            print(json.dumps(got), flush=True)
            results[mode].append(got["run_s"])
            if mode == "on":
                checks.append(got["check_s"])
    on, off = statistics.median(results["on"]), statistics.median(results["off"])
    summary = {"preset": args.preset, "phases": args.phases, "median_run_s_with_check": round(on, 2),
               "median_run_s_without": round(off, 2), "overhead_s": round(on - off, 2),
               "median_check_s": round(statistics.median(checks), 2)}  # fmt: skip
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
