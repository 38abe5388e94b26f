"""The prepared-data reader with a cold page cache against what a TPU v6e host consumes.

Prepares BBC News repeated `--copies` times (as `bench/pipeline_scale.py` does, reusing
its folder when present), then in a fresh process per run: imports everything, drops the
page cache (``sync; echo 3 > /proc/sys/vm/drop_caches``, root only), opens the folder with
the training-side reader (`sources.data_batches`, source=prepared, batch 256 x 128, one
host) and reads `--batches` batches: the time to the first batch and examples/s over all
of them, counted from the open. Then the same batches again in the same process (warm).
Needs root for the drop; without it the bench refuses to run. ``--no_read_ahead`` turns
off the reader's read-ahead into the page cache (`bert_jax/data/page_cache.py`) to show
what it contributes.

    sudo .venv/bin/python bench/reader_cold_cache.py [--workdir /tmp/bert_jax_scale] [--copies 40]

Demand: a TPU v6e host of 8 chips at 50% MFU on BERT-Base at sequence 128 consumes
~52,000 examples/s (`docs/tpu_pods.md`). Prints ``ratio_cold_read_vs_v6e_demand`` and
``ratio_warm_read_vs_v6e_demand`` (target >= 1.0 for both).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

BATCH, SEQ = 256, 128
V6E_DEMAND = 52_000  # examples/s per v6e host, BERT-Base, sequence 128


def drop_page_cache() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def read_pass(directory: str, batches: int, start_step: int) -> tuple[float, float]:
    """(seconds to the first batch, examples/s over `batches` batches), both from the open."""
    from bert_jax.data import sources
    from bert_jax.data.settings import DataSettings

    c = DataSettings(source="prepared", input_files=directory)
    start = time.perf_counter()
    it = sources.data_batches(
        c, global_batch_size=BATCH, max_seq_length=SEQ, max_predictions_per_seq=20, seed=1,
        start_step=start_step, process_index=0, process_count=1,
    )  # fmt: skip
    next(it)
    first = time.perf_counter() - start
    for _ in range(batches - 1):
        next(it)
    rate = batches * BATCH / (time.perf_counter() - start)
    it.close()
    return first, rate


def child(directory: str, batches: int, start_step: int, read_ahead: bool) -> dict:
    """One cold then one warm pass over the same batches, in this (fresh) process."""
    from bert_jax.data import settings, sources  # noqa: F401  (every import before the drop)

    if not read_ahead:
        from bert_jax.data import page_cache

        page_cache.default_budget = lambda: 0
    drop_page_cache()
    cold_first, cold = read_pass(directory, batches, start_step)
    warm_first, warm = read_pass(directory, batches, start_step)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for thread in threading.enumerate():  # the readers' background threads end before exit
        if thread is not threading.current_thread():
            thread.join(timeout=10)
    return {"cold_first_s": cold_first, "cold": cold, "warm_first_s": warm_first, "warm": warm, "rss_mb": rss}


def folder_bytes(directory: str) -> int:
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", default="/tmp/bert_jax_scale")
    parser.add_argument("--copies", type=int, default=40)
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--start_step", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no_read_ahead", action="store_true", help="the reader without read-ahead")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.batches, args.start_step, not args.no_read_ahead)))
        return
    if os.geteuid() != 0:
        sys.exit("error: dropping the page cache needs root (run this bench with sudo)")
    from bench import pipeline_scale

    out = os.path.join(args.workdir, f"p{args.copies}")
    if not os.path.exists(os.path.join(out, "metadata.json")):
        files = pipeline_scale.build_corpus(os.path.join(args.workdir, "text"), args.copies)
        pipeline_scale.prepare(files, out, 2, args.dupe_factor)
    with open(os.path.join(out, "metadata.json")) as f:
        counts = json.load(f)["counts"]
    print(
        f"CPU: {os.cpu_count()} cores; folder {out}: {folder_bytes(out) / 2**20:,.0f} MiB, "
        f"{counts['tokens'] / 1e6:.1f}M tokens; {args.batches} batches of {BATCH} x {SEQ} "
        f"from step {args.start_step}, one host, read-ahead {'off' if args.no_read_ahead else 'on'}"
    )
    runs = []
    for i in range(args.repeats):
        command = [sys.executable, os.path.abspath(__file__), "--child", out, f"--batches={args.batches}",
                   f"--start_step={args.start_step}"] + ["--no_read_ahead"] * args.no_read_ahead  # fmt: skip
        proc = subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT)
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        runs.append(r)
        print(
            f"run {i + 1}: cold first batch {r['cold_first_s']:.3f} s, {r['cold']:,.0f} examples/s | "
            f"warm first batch {r['warm_first_s']:.3f} s, {r['warm']:,.0f} examples/s | "
            f"peak RSS {r['rss_mb']:.0f} MB"
        )
    cold = sorted(r["cold"] for r in runs)[len(runs) // 2]
    warm = sorted(r["warm"] for r in runs)[len(runs) // 2]
    print(f"median of {len(runs)}: cold {cold:,.0f} examples/s, warm {warm:,.0f} examples/s")
    print(f"ratio_cold_read_vs_v6e_demand={cold / V6E_DEMAND:.3f} (target >= 1.0)")
    print(f"ratio_warm_read_vs_v6e_demand={warm / V6E_DEMAND:.3f} (target >= 1.0)")


if __name__ == "__main__":
    main()
