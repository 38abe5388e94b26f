"""The pod run as documented, on 2 local processes and a GCS API emulator on localhost.

A ``gs://`` workdir (every file through the path layer, orbax's arrays through
tensorstore), SIGTERM to one process (JAX's preemption service: both save the same step
and exit), a restart that resumes with the losses of an uninterrupted run, and nothing
written outside the bucket.
"""

import signal
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.helpers import pod
from tests.helpers import results as worker_results

FLAGS = pod.tiny_flags(120, checkpoint_every=20, eval_every=60)


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    """The emulator's URL; it stores its objects under a temporary folder."""
    with pod.emulator(tmp_path_factory.mktemp("gcs")) as url:
        yield url


def test_gs_workdir_preempting_one_host_then_restart_resumes_exactly(gcs, tmp_path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    workdir, prefix = f"gs://{pod.BUCKET}/runs/pod", "runs/pod/"
    procs = pod.start_pod(workdir, FLAGS, pod.environment(gcs), cwd)
    out0, seen = pod.lines(procs[0]), []
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
    assert f"{prefix}checkpoints/{saved[0]}/commit_success.txt" in pod.objects(gcs, prefix)

    procs = pod.start_pod(workdir, FLAGS, pod.environment(gcs), cwd)
    results = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in results]
    assert f"resumed from {workdir}/checkpoints/{saved[0]}" in results[0][0]

    names = pod.objects(gcs, prefix)
    for expected in ("metrics.jsonl", "bert_config.json", "best_metric.json"):
        assert prefix + expected in names
    assert any(n.startswith(prefix + "best/") for n in names)
    assert any(n.startswith(prefix + "tensorboard/events.out.tfevents") for n in names)
    assert list(cwd.iterdir()) == [], "nothing written outside the bucket (no local gs: folder)"

    reference = subprocess.run(
        pod.pretrain(tmp_path / "local", *FLAGS),
        env=pod.environment(gcs, XLA_FLAGS="--xla_force_host_platform_device_count=2"),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert reference.returncode == 0, reference.stderr[-2000:]
    expected = pod.train_losses((tmp_path / "local" / "metrics.jsonl").read_text())
    resumed = pod.train_losses(pod.read_object(gcs, prefix + "metrics.jsonl"))
    assert sorted(resumed) == list(range(1, 121))
    assert resumed == pytest.approx(expected, rel=1e-5)


def test_an_unreachable_bucket_is_one_line_naming_it(tmp_path) -> None:
    dead = f"http://127.0.0.1:{pod.free_port()}"  # nothing listens: refused, or no answer in 20 s
    proc = subprocess.run(
        pod.pretrain("gs://nowhere/run", *FLAGS),
        env=pod.environment(dead, BERT_JAX_REACH_TIMEOUT_S="20"),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 74  # the bucket did not answer: a restart may succeed
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--workdir gs://nowhere/run cannot be reached" in lines[0], proc.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []


def test_hosts_started_with_different_configs_are_refused_in_one_line(gcs, tmp_path) -> None:
    port = pod.free_port()
    procs = [
        subprocess.Popen(
            [
                *pod.pretrain(tmp_path / "run", *FLAGS),
                f"--config.learning_rate={lr}",
                *pod.host_flags(port, i),
            ],
            env=pod.environment(gcs),
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


def _two_workers(name: str, *args: str) -> list[dict]:
    """What the 2 processes of `tests/helpers/<name>` (process index, coordinator port,
    `args`) print as their result, once both exit 0."""
    worker, port = ROOT / "tests" / "helpers" / name, pod.free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(worker), str(i), str(port), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    return [worker_results.parse(o) for o, _ in outs]


@pytest.mark.parametrize("failing", ["newest", "all"])
def test_a_restore_that_fails_on_one_host_is_failed_on_every_host(tmp_path, failing) -> None:
    results = _two_workers("restore_agreement_worker.py", str(tmp_path / "run"), failing)
    if failing == "newest":  # both resume from step 1; step 2 set aside once, not deleted
        assert [r.get("step") for r in results] == [1, 1], results
        assert [p.name.split("-")[0] for p in (tmp_path / "run" / "checkpoints_damaged").iterdir()] == ["2"]
    else:  # both fail alike, naming every step; nothing moved
        assert all("no checkpoint in" in r.get("error", "") for r in results), results
        assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["1", "2"]


@pytest.mark.parametrize("case", ["same", "other"])
def test_hosts_that_loaded_other_weights_from_one_checkpoint_all_refuse(case) -> None:
    """A checkpoint a run saves to while the hosts read it gives them other steps: every
    host refuses in one line naming it, rather than training one model of two."""
    results = _two_workers("same_weights_worker.py", case)
    if case == "same":
        assert [r.get("ok") for r in results] == [True, True], results
    else:
        assert all(
            r.get("error", "").startswith("hosts [1] read other weights from gs://bucket/run than host 0")
            for r in results
        ), results
