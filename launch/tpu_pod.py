#!/usr/bin/env python3
"""Create, set up, run, watch, supervise and delete a Cloud TPU VM slice for bert_jax.

Every action is a list of `gcloud compute tpus ...` commands; ``--dry_run`` prints them
exactly (one per line, shell-quoted) instead of running them, so a pod launch can be
reviewed — and tested — before it costs anything.

    python launch/tpu_pod.py --name=bert --zone=us-central2-b --topology=v4:2x2x4 create
    python launch/tpu_pod.py ... setup          # ship this checkout, install, check the TPUs
    python launch/tpu_pod.py ... run -- pretrain --config=configs/pretrain.py:base \
        --workdir=gs://BUCKET/runs/base
    python launch/tpu_pod.py ... status         # the slice's state and the job's, worker 0
    python launch/tpu_pod.py ... logs           # stream worker 0's log
    python launch/tpu_pod.py ... stop           # SIGTERM: the job checkpoints, then exits
    python launch/tpu_pod.py ... delete
    python launch/tpu_pod.py ... supervise -- pretrain ...   # create/setup/run, and again
                                                             # after a preemption

``setup`` runs ``launch/install_on_vm.sh`` on every worker: uv makes a Python >= 3.11
venv (the TPU VM images ship 3.10), installs ``.[tpu]`` into it, and then every worker
must list its TPU chips in ``jax.devices()``. ``run`` starts the same command on all
workers (``--worker=all``) under a restart loop: after a preemption, a lost peer or a
crash by signal the job is started again and resumes from the latest checkpoint in its
workdir (data and checkpoints live on ``gs://``); a user error, a divergence or an
out-of-memory ends it at once (``worker_loop.py``). A preempted or suspended slice takes
that loop with it; ``supervise`` (see ``slice_supervisor.py``) re-creates the slice, sets
it up and starts the job again. With ``--queued`` the slice is requested as a queued
resource (``--spot`` for spot capacity), the way large pods are obtained.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from slice_supervisor import SlicePlan, SuperviseSettings, print_plan, supervise
from worker_loop import loop_script

from bert_jax.training.hardware import parse_topology

# On the workers. $HOME is expanded there; the job is started by its absolute path so that
# `stop` finds exactly this checkout's job (`pkill -f` on that path).
REMOTE_DIR = "$HOME/bert_jax"
REMOTE_LOG = "$HOME/bert_jax.log"
REMOTE_STATUS = "$HOME/bert_jax.status"  # running | exited 0 | failed N (WHY): LINE | stopped
REMOTE_JOB = f"{REMOTE_DIR}/.venv/bin/bert-jax"
LOOP_MARK = "bert_jax_loop:$HOME"  # the restart loop's $0, what `stop` and `status` look for
TARBALL = "/tmp/bert_jax_src.tar.gz"


def _gcloud(args: argparse.Namespace, *words: str) -> list[str]:
    cmd = ["gcloud", "compute", "tpus", *words, f"--zone={args.zone}"]
    if args.project:
        cmd.append(f"--project={args.project}")
    return cmd


def _ssh(args: argparse.Namespace, command: str, worker: str = "all") -> list[str]:
    return [
        *_gcloud(args, "tpu-vm", "ssh", args.name),
        f"--worker={worker}",
        f"--command={command}",
    ]


def create_commands(args: argparse.Namespace) -> list[list[str]]:
    topo = parse_topology(args.topology)
    gen = topo.generation
    if args.queued:
        cmd = _gcloud(args, "queued-resources", "create", f"{args.name}-qr")
        cmd += [
            f"--node-id={args.name}",
            f"--accelerator-type={topo.accelerator_type}",
            f"--runtime-version={gen.runtime_version}",
        ]
        if args.spot:
            cmd.append("--spot")
        return [cmd]
    cmd = _gcloud(args, "tpu-vm", "create", args.name)
    cmd += [f"--accelerator-type={topo.accelerator_type}", f"--version={gen.runtime_version}"]
    if args.spot:
        cmd.append("--spot")
    return [cmd]


def setup_commands(args: argparse.Namespace) -> list[list[str]]:
    """Ship this checkout (git archive of HEAD) to every worker, install, check the TPUs.

    The check runs on all workers at once, in its own command: a multi-host slice's TPU
    runtime starts only when every host starts it.
    """
    install = (
        f"mkdir -p {REMOTE_DIR} && tar xzf ~/bert_jax_src.tar.gz -C {REMOTE_DIR} && "
        f"cd {REMOTE_DIR} && bash launch/install_on_vm.sh install"
    )
    return [
        ["git", "archive", "--format=tar.gz", f"--output={TARBALL}", "HEAD"],
        [
            *_gcloud(args, "tpu-vm", "scp", TARBALL, f"{args.name}:~/bert_jax_src.tar.gz"),
            "--worker=all",
        ],
        _ssh(args, install),
        _ssh(args, f"cd {REMOTE_DIR} && bash launch/install_on_vm.sh check"),
    ]


def run_commands(args: argparse.Namespace, job: Sequence[str]) -> list[list[str]]:
    """The same `bert-jax ...` command on every worker, restarted when a restart can help.

    Each host calls ``jax.distributed.initialize()`` with no arguments (the TPU runtime
    tells it its peers); a restart (after a preemption, a lost peer or a crash by signal:
    `worker_loop`) resumes from the workdir's latest checkpoint. The loop writes the job's
    end (``exited 0`` or ``failed N (WHY): LINE``) to the status file that ``status`` and
    ``supervise`` read.
    """
    if not job:
        raise SystemExit("error: run/supervise: give the bert-jax command after `--`, e.g. -- pretrain ...")
    bert = " ".join([f'"{REMOTE_JOB}"', *(shlex.quote(w) for w in job)])
    restarts = loop_script(
        bert,
        max_restarts=args.max_restarts,
        pause_s=args.restart_pause_s,
        log=REMOTE_LOG,
        status_file=REMOTE_STATUS,
    )
    loop = f"cd {REMOTE_DIR} && export BERT_JAX_DISTRIBUTED=1 && {{ {restarts}; }}"
    remote = (
        f"echo running > {REMOTE_STATUS}; "
        f'nohup bash -c {shlex.quote(loop)} "{LOOP_MARK}" > {REMOTE_LOG} 2>&1 < /dev/null &'
    )
    return [_ssh(args, remote)]


def describe_command(args: argparse.Namespace) -> list[str]:
    """Prints the slice's state: READY, PREEMPTED, ... (a queued resource: ACTIVE, SUSPENDED, ...)."""
    if args.queued:
        qr = _gcloud(args, "queued-resources", "describe", f"{args.name}-qr")
        return [*qr, "--format=value(state.state)"]
    return [*_gcloud(args, "tpu-vm", "describe", args.name), "--format=value(state)"]


def job_status_command(args: argparse.Namespace) -> list[str]:
    """Worker 0 prints running | exited 0 | failed N (WHY): LINE | stopped | lost (the loop is
    gone) | none."""
    query = (
        f"s=$(cat {REMOTE_STATUS} 2>/dev/null || echo none); "
        f'if [ "$s" = running ] && ! pgrep -f "{LOOP_MARK}" > /dev/null; then s=lost; fi; echo "$s"'
    )
    return _ssh(args, query, worker="0")


def logs_commands(args: argparse.Namespace) -> list[list[str]]:
    return [_ssh(args, f"tail -n 200 -F {REMOTE_LOG}", worker=args.worker)]


def stop_commands(args: argparse.Namespace) -> list[list[str]]:
    """On every worker: end the restart loop, then SIGTERM the job's python process, as a
    preemption would (the job saves a checkpoint and exits with 143)."""
    remote = (
        f'echo stopped > {REMOTE_STATUS}; pkill -TERM -f "{LOOP_MARK}"; pkill -TERM -f "{REMOTE_JOB}" || true'
    )
    return [_ssh(args, remote)]


def delete_commands(args: argparse.Namespace) -> list[list[str]]:
    if args.queued:
        return [[*_gcloud(args, "queued-resources", "delete", f"{args.name}-qr"), "--force", "--quiet"]]
    return [[*_gcloud(args, "tpu-vm", "delete", args.name), "--quiet"]]


def slice_plan(args: argparse.Namespace, job: Sequence[str]) -> SlicePlan:
    return SlicePlan(
        name=args.name,
        describe=describe_command(args),
        job_status=job_status_command(args),
        delete=delete_commands(args),
        create=create_commands(args),
        setup=setup_commands(args),
        start=run_commands(args, job),
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", required=True, help="TPU VM (node) name")
    p.add_argument("--zone", required=True)
    p.add_argument("--project", default="")
    p.add_argument("--topology", default="v5e:2x2", help="e.g. v4:2x2x4, v5e:4x4, v6e:8x8")
    p.add_argument("--queued", action="store_true", help="use queued resources")
    p.add_argument("--spot", action="store_true", help="spot / preemptible capacity")
    p.add_argument(
        "--max_restarts", type=int, default=100, help="job starts per worker, per run (restartable ends only)"
    )
    p.add_argument("--restart_pause_s", type=int, default=30, help="pause before a restart on a worker")
    p.add_argument("--max_recreations", type=int, default=10, help="supervise: recoveries before giving up")
    p.add_argument("--poll_s", type=float, default=60.0, help="supervise: seconds between polls")
    p.add_argument("--worker", default="0", help="worker whose log `logs` streams")
    p.add_argument("--dry_run", action="store_true", help="print the commands, run nothing")
    p.add_argument(
        "action", choices=["create", "setup", "run", "status", "logs", "stop", "delete", "supervise"]
    )
    p.add_argument("job", nargs=argparse.REMAINDER, help="for run/supervise: -- bert-jax arguments")
    return p


def commands_for(args: argparse.Namespace, job: Sequence[str]) -> list[list[str]]:
    return {
        "create": lambda: create_commands(args),
        "setup": lambda: setup_commands(args),
        "run": lambda: run_commands(args, job),
        "status": lambda: [describe_command(args), job_status_command(args)],
        "logs": lambda: logs_commands(args),
        "stop": lambda: stop_commands(args),
        "delete": lambda: delete_commands(args),
    }[args.action]()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    job = [w for w in args.job if w != "--"] if args.job else []
    try:
        parse_topology(args.topology)
    except ValueError as e:
        raise SystemExit(f"error: --topology: {e}") from None
    if args.action == "supervise":
        plan = slice_plan(args, job)
        settings = SuperviseSettings(max_recreations=args.max_recreations, poll_s=args.poll_s)
        if args.dry_run:
            print_plan(plan, settings)
            return 0
        return supervise(plan, settings)
    for cmd in commands_for(args, job):
        print(shlex.join(cmd), flush=True)
        if not args.dry_run and (rc := subprocess.run(cmd).returncode) != 0:
            raise SystemExit(f"error: exit {rc} from: {shlex.join(cmd[:6])} ...")
    return 0


if __name__ == "__main__":
    sys.exit(main())
