"""The pod run as documented, on 2 local processes and a GCS API emulator on localhost.

A ``gs://`` workdir (every file through the path layer, orbax's arrays through
tensorstore), SIGTERM to one process (JAX's preemption service: both save the same step
and exit), a restart that resumes with the losses of an uninterrupted run, and nothing
written outside the bucket.
"""

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.helpers import results as worker_results

BUCKET = "bkt"
EMULATOR = ROOT / "tests" / "helpers" / "gcs_emulator.py"
FLAGS = [
    f"--config={ROOT}/configs/pretrain.py:tiny",
    "--config.data.source=synthetic",
    "--config.model.vocab_size=512",
    "--config.global_batch_size=4",
    "--config.max_seq_length=32",
    "--config.max_predictions_per_seq=5",
    "--config.num_train_steps=120",
    "--config.log_every_steps=1",
    "--config.checkpoint_every_steps=20",
    "--config.eval_every_steps=60",
    "--config.eval_steps=1",
    "--config.baseline_batches=0",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    """The emulator's URL; it stores its objects under a temporary folder."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, str(EMULATOR), str(port), str(tmp_path_factory.mktemp("gcs")), BUCKET],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout.readline().strip() == "READY"
    yield f"http://127.0.0.1:{port}"
    proc.kill()
    proc.wait()


def _objects(url: str, prefix: str) -> list[str]:
    query = urllib.parse.urlencode({"prefix": prefix})
    with urllib.request.urlopen(f"{url}/storage/v1/b/{BUCKET}/o?{query}") as r:
        return sorted(item["name"] for item in json.load(r).get("items", []))


def _read(url: str, name: str) -> str:
    quoted = urllib.parse.quote(name, safe="")
    with urllib.request.urlopen(f"{url}/download/storage/v1/b/{BUCKET}/o/{quoted}?alt=media") as r:
        return r.read().decode()


def _losses(text: str) -> dict[int, float]:
    rows = [json.loads(line) for line in text.splitlines()]
    return {r["step"]: r["loss"] for r in rows if r.get("split", "train") == "train"}


def _env(url: str) -> dict[str, str]:
    return {**os.environ, "BERT_JAX_GCS_EMULATOR": url, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}


def _pretrain(workdir: object) -> list[str]:
    return [sys.executable, "-m", "bert_jax", "pretrain", f"--workdir={workdir}", *FLAGS]


def _pod(port: int, i: int) -> list[str]:
    return [f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2", f"--process_id={i}"]


def _start(url: str, workdir: str, cwd: Path, port: int, *extra: str) -> list[subprocess.Popen]:
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bert_jax",
                "pretrain",
                f"--workdir={workdir}",
                *FLAGS,
                *extra,
                *_pod(port, i),
            ],
            cwd=cwd,
            env=_env(url),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]


def _lines(proc: subprocess.Popen) -> queue.Queue:
    q: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [*map(q.put, proc.stdout), q.put(None)], daemon=True).start()
    return q


def test_gs_workdir_preempting_one_host_then_restart_resumes_exactly(gcs, tmp_path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    workdir, prefix = f"gs://{BUCKET}/runs/pod", "runs/pod/"
    procs = _start(gcs, workdir, cwd, _free_port())
    out0, seen = _lines(procs[0]), []
    # The timeouts here only end a hung run: each is minutes above what its wait takes on a
    # loaded machine. What is checked is that both stop, with 143, at the same step.
    while True:  # SIGTERM to process 1 only, once step 25 is logged
        line = out0.get(timeout=300)
        assert line is not None, procs[0].stderr.read()[-3000:]
        seen.append(line)
        if line.startswith("step") and int(line.split()[1].split("/")[0]) >= 25:
            procs[1].send_signal(signal.SIGTERM)
            break
    results = [("", procs[0].stderr.read()), procs[1].communicate(timeout=300)]
    procs[0].wait(timeout=300)
    while (line := out0.get(timeout=300)) is not None:
        seen.append(line)
    assert [p.returncode for p in procs] == [143, 143], [err[-2000:] for _, err in results]
    saved = [int(t.split("preempted: saved step ")[1].split()[0]) for t in ("".join(seen), results[1][0])]
    assert saved[0] == saved[1] and 25 < saved[0] < 120, saved  # the same step, past step 20's
    assert f"{prefix}checkpoints/{saved[0]}/commit_success.txt" in _objects(gcs, prefix)

    procs = _start(gcs, workdir, cwd, _free_port())
    results = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in results]
    assert f"resumed from {workdir}/checkpoints/{saved[0]}" in results[0][0]

    names = _objects(gcs, prefix)
    for expected in ("metrics.jsonl", "bert_config.json", "best_metric.json"):
        assert prefix + expected in names
    assert any(n.startswith(prefix + "best/") for n in names)
    assert any(n.startswith(prefix + "tensorboard/events.out.tfevents") for n in names)
    assert list(cwd.iterdir()) == [], "nothing written outside the bucket (no local gs: folder)"

    reference = subprocess.run(
        _pretrain(tmp_path / "local"),
        env={**_env(gcs), "XLA_FLAGS": "--xla_force_host_platform_device_count=2"},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert reference.returncode == 0, reference.stderr[-2000:]
    expected = _losses((tmp_path / "local" / "metrics.jsonl").read_text())
    resumed = _losses(_read(gcs, prefix + "metrics.jsonl"))
    assert sorted(resumed) == list(range(1, 121))
    assert resumed == pytest.approx(expected, rel=1e-5)


def test_an_unreachable_bucket_is_one_line_naming_it(tmp_path) -> None:
    dead = f"http://127.0.0.1:{_free_port()}"  # nothing listens: refused, or no answer in 20 s
    proc = subprocess.run(
        _pretrain("gs://nowhere/run"),
        env={**_env(dead), "BERT_JAX_REACH_TIMEOUT_S": "20"},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--workdir gs://nowhere/run cannot be reached" in lines[0], proc.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []


def test_hosts_started_with_different_configs_are_refused_in_one_line(gcs, tmp_path) -> None:
    port = _free_port()
    procs = [
        subprocess.Popen(
            [*_pretrain(tmp_path / "run"), f"--config.learning_rate={lr}", *_pod(port, i)],
            env=_env(gcs),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for i, lr in enumerate(("1e-3", "2e-3"))
    ]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [1, 1], [err[-2000:] for _, err in results]
    for _, err in results:
        (line,) = err.strip().splitlines()
        assert "hosts [1] run another config" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("failing", ["newest", "all"])
def test_a_restore_that_fails_on_one_host_is_failed_on_every_host(tmp_path, failing) -> None:
    worker, port = ROOT / "tests" / "helpers" / "restore_agreement_worker.py", _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(worker), str(i), str(port), str(tmp_path / "run"), failing],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    results = [worker_results.parse(o) for o, _ in outs]
    if failing == "newest":  # both resume from step 1; step 2 set aside once, not deleted
        assert [r.get("step") for r in results] == [1, 1], results
        assert [p.name.split("-")[0] for p in (tmp_path / "run" / "checkpoints_damaged").iterdir()] == ["2"]
    else:  # both fail alike, naming every step; nothing moved
        assert all("no checkpoint in" in r.get("error", "") for r in results), results
        assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["1", "2"]
