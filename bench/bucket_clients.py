"""Write and read throughput of the two `gs://` clients bert_jax could use, on the GCS emulator.

`etils.epath` (the path layer's, and orbax's) reaches ``gs://`` through `gcsfs`
(``EPATH_USE_TF=false``) or through TensorFlow's own client (`tf.io.gfile`). TensorFlow's
endpoint is fixed (``https://www.googleapis.com``): it reaches the emulator only through
an HTTPS front with a CA of its own (`tests/helpers/bucket_front.py --tls_dir`, with
``https_proxy`` and ``CURL_CA_BUNDLE``). So that both pay the same hop, gcsfs is measured
through the same front (plain HTTP) as well as straight to the emulator.

Each client runs in a process of its own: epath chooses its backend once per process.
After one untimed write (each client's one-time set-up): large objects (``--large_count``
of ``--large_mib`` each) written, then read, in MB/s; small ones (4 KiB, as a run's
metrics and JSON files) written, then read, in objects/s. The median of ``--rounds``.

    .venv/bin/python bench/bucket_clients.py [--large_mib 16] [--large_count 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers import pod  # noqa: E402

SMALL, SMALL_COUNT = 4096, 40


def measure(prefix: str, large_mib: int, large_count: int, rounds: int) -> dict[str, float]:
    """In this process, through epath: MB/s written and read, small objects/s written and read."""
    from etils import epath

    if os.environ.get("BERT_JAX_GCS_EMULATOR"):  # gcsfs: as the path layer sets it up
        from bert_jax.storage import gcs

        gcs.configure()
    epath.Path(f"{prefix}/warm-up").write_bytes(b"")  # one-time set-up (credentials, probes) left out
    data = os.urandom(large_mib << 20)
    small = os.urandom(SMALL)
    figures: dict[str, list[float]] = {
        "write_mb_s": [],
        "read_mb_s": [],
        "small_write_s": [],
        "small_read_s": [],
    }
    for r in range(rounds):
        paths = [epath.Path(f"{prefix}/r{r}/large{i}.bin") for i in range(large_count)]
        start = time.perf_counter()
        for p in paths:
            p.write_bytes(data)
        figures["write_mb_s"].append(len(data) * large_count / 1e6 / (time.perf_counter() - start))
        start = time.perf_counter()
        for p in paths:
            assert len(p.read_bytes()) == len(data)
        figures["read_mb_s"].append(len(data) * large_count / 1e6 / (time.perf_counter() - start))
        names = [epath.Path(f"{prefix}/r{r}/small{i}.json") for i in range(SMALL_COUNT)]
        start = time.perf_counter()
        for p in names:
            p.write_bytes(small)
        figures["small_write_s"].append(SMALL_COUNT / (time.perf_counter() - start))
        start = time.perf_counter()
        for p in names:
            assert p.read_bytes() == small
        figures["small_read_s"].append(SMALL_COUNT / (time.perf_counter() - start))
    backend = type(epath.Path(prefix)._backend).__name__  # which client epath used
    return {"backend": backend, **{k: statistics.median(v) for k, v in figures.items()}}


def run_client(name: str, env: dict[str, str], args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--measure", f"gs://{pod.BUCKET}/bench/{name}"]
    cmd += [f"--large_mib={args.large_mib}", f"--large_count={args.large_count}", f"--rounds={args.rounds}"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--large_mib", type=int, default=16)
    p.add_argument("--large_count", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--measure", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.large_mib, args.large_count, args.rounds)))
        return
    base = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as tmp, pod.emulator(Path(tmp) / "gcs") as url:
        tls = Path(tmp) / "tls"
        with pod.front(url) as plain, pod.front(url, f"--tls_dir={tls}") as https:
            tf_env = {
                **base,
                "https_proxy": https.url,
                "CURL_CA_BUNDLE": str(tls / "ca.pem"),
                "GOOGLE_AUTH_TOKEN_FOR_TESTING": "bench",
                "NO_GCE_CHECK": "true",
            }
            clients = {
                "gcsfs, straight to the emulator": {**base, "BERT_JAX_GCS_EMULATOR": url},
                "gcsfs, through the front": {**base, "BERT_JAX_GCS_EMULATOR": plain.url},
                "tf.io.gfile, through the front (HTTPS)": tf_env,
            }
            print(
                f"{args.large_count} x {args.large_mib} MiB objects, {SMALL_COUNT} x 4 KiB; "
                f"median of {args.rounds} rounds"
            )
            print(
                f"{'client':42s} {'backend':24s} {'write MB/s':>10s} {'read MB/s':>10s} "
                f"{'small w/s':>10s} {'small r/s':>10s}"
            )
            for i, (name, env) in enumerate(clients.items()):
                f = run_client(f"c{i}", env, args)
                print(
                    f"{name:42s} {f['backend']:24s} {f['write_mb_s']:10.1f} {f['read_mb_s']:10.1f} "
                    f"{f['small_write_s']:10.1f} {f['small_read_s']:10.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
