"""`tpu_pod.py supervise` driven by a fake `gcloud` on PATH: the commands are run, and
each answers as the script says (slice states, every worker's job status, log copies,
creates and deletes). Covers re-creation after a preemption, giving up, the worst
worker's status deciding (named in the lines), log copies before every deletion and at
the end, the slice deleted when the job is over (kept with --keep_slice or after a stop
by hand), and a two-slice job whose slices are set up together (the fake device check
waits for the other slice's, so slices set up one after the other would fail)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

SCRIPT = ROOT / "launch" / "tpu_pod.py"
BASE = ["--name=bert-pod", "--zone=us-central2-b", "--project=my-proj", "--topology=v4:2x2x4"]
STAMP = re.compile(r"^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\] ")
SETUP_AND_RUN = ["archive", "scp", "install", "check", "run"]

# Answers, from script.json: "states" (describe), "job" (a status for every worker of the
# node, or one per worker, null for one that does not answer; "job:NODE" for one node),
# "logs" (ok | fail | unreachable), "create", "delete" (exit statuses); "hosts" per slice,
# "slices". Each queue's next answer; the last one repeats.
FAKE = """#!{python}
import fcntl, json, pathlib, sys, time
here = pathlib.Path(__file__).parent
argv = sys.argv[1:]
with open(here / "calls.jsonl", "a") as f:
    f.write(json.dumps([pathlib.Path(sys.argv[0]).name, *argv]) + "\\n")
command = next((a for a in argv if a.startswith("--command=")), "")
node = argv[argv.index("ssh") + 1] if "ssh" in argv else ""
with open(here / "script.lock", "w") as lock:  # the slices' commands run at once
    fcntl.flock(lock, fcntl.LOCK_EX)
    script = json.loads((here / "script.json").read_text())
    def take(key, default=None):
        key = f"{{key}}:{{node}}" if f"{{key}}:{{node}}" in script else key
        queue = script.get(key, [default])
        value = queue.pop(0) if len(queue) > 1 else queue[0]
        (here / "script.json").write_text(json.dumps(script))
        return value
    hosts, slices = script.get("hosts", 1), script.get("slices", 1)
    if "describe" in argv:
        answer = take("states")
    elif "pgrep" in command:
        answer = take("job")
    elif "no log" in command:
        answer = take("logs", "ok")
    elif "create" in argv or "delete" in argv:
        answer = int(take("create" if "create" in argv else "delete", 0))
if "describe" in argv:
    if answer == "NOT_FOUND":
        sys.exit(print("ERROR: (gcloud) NOT_FOUND: Resource not found", file=sys.stderr) or 1)
    print(answer)
elif "pgrep" in command:
    jobs = [answer] * hosts if isinstance(answer, str) else answer
    for w, job in enumerate(jobs):
        if job is not None:
            print(f"{{node}} worker {{w}}: {{job}}")
elif "no log" in command:
    if answer == "unreachable":
        sys.exit(255)
    for w in range(hosts):
        copied = "copied gs://b/run/logs/x.log" if answer == "ok" else "copy failed"
        print(f"{{node}} worker {{w}}: {{copied}}")
elif "install_on_vm.sh check" in command:  # every slice's check at once, as a TPU runtime needs
    mine = len(list(here.glob(f"check-{{node}}-*")))
    (here / f"check-{{node}}-{{mine}}").touch()
    deadline = time.time() + 60
    while len(list(here.glob("check-*"))) < slices * (mine + 1):
        if time.time() > deadline:
            sys.exit(f"error: {{node}}: the other slices' TPU runtimes never started")
        time.sleep(0.02)
elif "create" in argv or "delete" in argv:
    sys.exit(answer)
"""


def call_kind(call: list[str]) -> str:
    if call[0] == "git":
        return "archive"
    command = next((w for w in call if w.startswith("--command=")), "")
    for needle, kind in (
        ("pgrep", "status"),
        ("no log", "save"),
        ("echo stopped", "stop"),
        ("install_on_vm.sh install", "install"),
        ("install_on_vm.sh check", "check"),
        ("nohup", "run"),
    ):
        if needle in command:
            return kind
    return next(w for w in ("describe", "delete", "create", "scp") if w in call)


def supervise(tmp_path: Path, script: dict, *flags: str) -> tuple[subprocess.CompletedProcess, list, list]:
    """Runs `supervise` against the fake; its exit, the gcloud calls made, its lines."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gcloud").write_text(FAKE.format(python=sys.executable))
    (bin_dir / "gcloud").chmod(0o755)
    (bin_dir / "git").symlink_to(bin_dir / "gcloud")
    (bin_dir / "script.json").write_text(json.dumps(script))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    args = [*BASE, "--poll_s=0", *flags, "supervise", "--", "pretrain", "--workdir=gs://b/run"]
    proc = subprocess.run(  # the timeout ends a hung loop: minutes above its few seconds
        [sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300
    )
    lines = (bin_dir / "calls.jsonl").read_text().splitlines()
    out = proc.stdout.splitlines()
    assert all(STAMP.match(line) for line in out), out
    return proc, [json.loads(line) for line in lines], [STAMP.sub("", line) for line in out]


def kinds(calls: list) -> list[str]:
    return [call_kind(c) for c in calls]


def test_a_preempted_slice_is_recreated_and_deleted_when_the_job_exits_0(tmp_path: Path) -> None:
    script = {
        "states": ["READY", "READY", "PREEMPTED", "CREATING", "READY", "READY"],
        "job": ["none", "running", "exited 0"],
        "logs": ["unreachable", "ok"],  # the preempted VMs do not answer; at the end they do
        "create": [0],
        "hosts": 4,
    }
    proc, calls, out = supervise(tmp_path, script, "--spot", "--max_recreations=2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert kinds(calls) == [
        "describe", "status", *SETUP_AND_RUN,  # READY, no job yet: set up and start it
        "describe", "status",  # READY, running
        "describe", "save", "delete", "create",  # PREEMPTED: logs, delete, create again
        "describe",  # CREATING: wait
        "describe", *SETUP_AND_RUN,  # READY: set up and start the job again
        "describe", "status",  # exited 0
        "save", "delete",  # the job is over: logs, then the slice
    ]  # fmt: skip
    create = next(c for c in calls if call_kind(c) == "create")
    assert create[1:5] == ["compute", "tpus", "tpu-vm", "create"] and "--spot" in create
    assert calls[-1][1:6] == ["compute", "tpus", "tpu-vm", "delete", "bert-pod"]
    assert sum("recovery 1 of 2" in line for line in out) == 1
    assert "job: running on all 4 workers" in out
    assert (
        "warning: logs: 0 of 4 workers' logs copied to gs://b/run/logs/ (from the PREEMPTED slice); "
        "4 did not answer"
    ) in out
    i = out.index("job finished: exit 0 on all 4 workers")
    assert out[i + 1] == "logs: every worker's log copied to gs://b/run/logs/ (at the end)"
    assert out[i + 2].startswith("delete: slice bert-pod, its job is over (--keep_slice keeps it)")
    assert out[-1] == "deleted slice bert-pod"


def test_giving_up_after_max_recreations_is_one_line_then_the_slice_is_deleted(tmp_path: Path) -> None:
    script = {"states": ["SUSPENDED"], "job": ["none"], "logs": ["unreachable"], "create": [0]}
    proc, calls, out = supervise(tmp_path, script, "--queued", "--spot", "--max_recreations=1")
    assert proc.returncode == 1
    assert kinds(calls) == ["describe", "save", "delete", "create", "describe", "save", "delete"]
    assert calls[2][3:6] == ["queued-resources", "delete", "bert-pod-qr"] and "--force" in calls[2]
    giving_up = [line for line in out if "giving up" in line]
    assert len(giving_up) == 1 and "SUSPENDED" in giving_up[0] and "--max_recreations" in giving_up[0]
    assert out[-1] == "deleted slice bert-pod"


def test_failed_creates_of_a_missing_slice_are_counted_and_nothing_is_deleted(tmp_path: Path) -> None:
    script = {"states": ["NOT_FOUND"], "job": ["none"], "create": [1]}
    proc, calls, out = supervise(tmp_path, script, "--max_recreations=2")
    assert proc.returncode == 1
    # Not found: nothing to delete; each failed create spends one recovery.
    assert kinds(calls) == ["describe", "create", "describe", "create", "describe"]
    assert any(line.startswith("giving up: slice bert-pod is GONE") for line in out)
    assert out[-1] == "slice bert-pod is gone: nothing to delete"


def test_the_worst_worker_decides_and_is_named(tmp_path: Path) -> None:
    """A job runs only while every worker runs it: one that finished early is waited for,
    one that does not answer is a warning, one whose loop is gone restarts the job (its
    logs first, then what is left of it stopped everywhere). --keep_slice keeps the slice."""
    script = {
        "states": ["READY"],
        "job": [
            "running",  # already running when supervision starts: watched, not started twice
            ["exited 0", "running", "running", "running"],
            ["running", None, "running", "running"],  # worker 1 does not answer
            ["running", "lost", "running", "running"],
            "exited 0",
        ],
        "hosts": 4,
    }
    proc, calls, out = supervise(tmp_path, script, "--keep_slice")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert kinds(calls) == [
        "describe", "status",  # running everywhere: watch it
        "describe", "status",  # one finished, three run: wait
        "describe", "status",  # one unreachable: a warning
        "describe", "status", "save", "stop",  # one lost: its logs, stop the rest
        "describe", *SETUP_AND_RUN,  # and start it again
        "describe", "status",  # exited 0 everywhere
        "save",  # logs; the slice is kept
    ]  # fmt: skip
    assert "job already running on bert-pod: watching it" in out
    assert "job: running on bert-pod worker 1 (of 4 workers, running: 3, exited 0: 1)" in out
    assert "warning: 1 of 4 workers unreachable (1 of 3 status reads in a row)" in out
    assert "bert-pod worker 1: job is lost: recovery 1 of 10" in out
    assert out[-1] == "keeping slice bert-pod (--keep_slice): tpu_pod.py delete deletes it"


def test_a_stop_by_hand_keeps_the_slice_and_a_failed_delete_says_what_to_run(tmp_path: Path) -> None:
    stopped = {"states": ["READY"], "job": ["running", "stopped"], "hosts": 4}
    proc, calls, out = supervise(tmp_path, stopped)
    assert proc.returncode == 0 and kinds(calls) == ["describe", "status", "describe", "status"]
    assert out[-2] == "job stopped (tpu_pod.py stop) on bert-pod worker 0; supervision ends"
    assert out[-1].startswith("keeping slice bert-pod: the job was stopped by hand")

    (tmp_path / "undeletable").mkdir()
    finished = {"states": ["READY"], "job": ["running", "exited 0"], "delete": [1], "hosts": 4}
    proc, calls, out = supervise(tmp_path / "undeletable", finished)
    assert proc.returncode == 0 and kinds(calls)[-2:] == ["save", "delete"]
    assert out[-1] == (
        "warning: slice bert-pod is NOT deleted (exit 1); delete it by hand: gcloud compute tpus "
        "tpu-vm delete bert-pod --zone=us-central2-b --project=my-proj --quiet"
    )


def test_two_slices_are_set_up_together_and_a_failure_on_one_ends_the_job(tmp_path: Path) -> None:
    script = {
        "states": ["NOT_FOUND", "WAITING_FOR_RESOURCES", "ACTIVE"],
        "job:bert-pod-0": ["running"],
        "job:bert-pod-1": [
            "running",
            "failed 3 (diverged): bert-jax pretrain: error: step 7: the loss is nan",
        ],
        "create": [0],
        "hosts": 1,
        "slices": 2,
    }
    proc, calls, out = supervise(tmp_path, script, "--topology=v5e:2x2", "--num_slices=2", "--spot")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert kinds(calls) == [
        "describe", "create",  # NOT_FOUND: one queued resource of two slices
        "describe",  # WAITING_FOR_RESOURCES
        "describe", "archive", "scp", "scp", "install", "install", "check", "check", "run", "run",
        "describe", "status", "status",  # running on both
        "describe", "status", "status",  # failed on one: give up
        "save", "save", "delete",
    ]  # fmt: skip
    create = calls[1]
    assert create[3:6] == ["queued-resources", "create", "bert-pod-qr"]
    assert "--node-count=2" in create and "--node-prefix=bert-pod" in create
    runs = [c for c in calls if call_kind(c) == "run"]
    assert sorted(c[5] for c in runs) == ["bert-pod-0", "bert-pod-1"]
    assert calls[-1][3:6] == ["queued-resources", "delete", "bert-pod-qr"]
    assert "job: running on all 2 workers" in out
    failed = "failed 3 (diverged): bert-jax pretrain: error: step 7: the loss is nan"
    assert f"giving up: bert-pod-1 worker 0: job {failed}" in out
    assert out[-1] == "deleted slice bert-pod-qr"
