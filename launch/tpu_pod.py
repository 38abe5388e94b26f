#!/usr/bin/env python3
"""Create, set up, run, watch and delete a Cloud TPU VM slice for bert_jax.

Every action is a list of `gcloud compute tpus ...` commands; ``--dry_run`` prints them
exactly (one per line, shell-quoted) instead of running them, so a pod launch can be
reviewed — and tested — before it costs anything.

    python launch/tpu_pod.py --name=bert --zone=us-central2-b --topology=v4:2x2x4 create
    python launch/tpu_pod.py ... setup          # copy this checkout to every worker, install
    python launch/tpu_pod.py ... run -- pretrain --config=configs/pretrain.py:base \
        --workdir=gs://BUCKET/runs/base
    python launch/tpu_pod.py ... logs           # stream worker 0's log
    python launch/tpu_pod.py ... stop           # SIGTERM: the job checkpoints, then exits
    python launch/tpu_pod.py ... delete

``run`` starts the same command on all workers (``--worker=all``) under a restart loop:
after a preemption or a crash the job is started again and resumes from the latest
checkpoint in its workdir (data and checkpoints live on ``gs://``; tf.data and orbax
read and write it natively). With ``--queued`` the slice is requested as a queued
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

from bert_jax.training.hardware import parse_topology

REMOTE_DIR = "~/bert_jax"
REMOTE_LOG = "~/bert_jax.log"
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
    """Ship this checkout (git archive of HEAD) to every worker and install it there."""
    install = (
        f"mkdir -p {REMOTE_DIR} && tar xzf ~/bert_jax_src.tar.gz -C {REMOTE_DIR} && "
        f"cd {REMOTE_DIR} && python3 -m venv .venv && "
        ".venv/bin/pip install -q --upgrade pip && .venv/bin/pip install -q -e '.[tpu]'"
    )
    return [
        ["git", "archive", "--format=tar.gz", f"--output={TARBALL}", "HEAD"],
        [
            *_gcloud(args, "tpu-vm", "scp", TARBALL, f"{args.name}:~/bert_jax_src.tar.gz"),
            "--worker=all",
        ],
        _ssh(args, install),
    ]


def run_commands(args: argparse.Namespace, job: Sequence[str]) -> list[list[str]]:
    """The same `bert-jax ...` command on every worker, restarted after failures.

    Each host calls ``jax.distributed.initialize()`` with no arguments (the TPU runtime
    tells it its peers); a restart resumes from the workdir's latest checkpoint.
    """
    if not job:
        raise SystemExit("run: give the bert-jax command after `--`, e.g. -- pretrain ...")
    bert = " ".join(shlex.quote(w) for w in [".venv/bin/bert-jax", *job])
    loop = (
        f"cd {REMOTE_DIR} && export BERT_JAX_DISTRIBUTED=1 && "
        f"for i in $(seq 1 {args.max_restarts}); do {bert} && break; "
        'echo "bert-jax exited ($?); restarting from the latest checkpoint"; sleep 30; done'
    )
    remote = f"nohup bash -c {shlex.quote(loop)} > {REMOTE_LOG} 2>&1 &"
    return [_ssh(args, remote)]


def logs_commands(args: argparse.Namespace) -> list[list[str]]:
    return [_ssh(args, f"tail -n 200 -F {REMOTE_LOG}", worker=args.worker)]


def stop_commands(args: argparse.Namespace) -> list[list[str]]:
    """SIGTERM, as a preemption would: the job saves a checkpoint before exiting."""
    return [_ssh(args, "pkill -TERM -f '[b]in/bert-jax' || true")]


def delete_commands(args: argparse.Namespace) -> list[list[str]]:
    if args.queued:
        return [[*_gcloud(args, "queued-resources", "delete", f"{args.name}-qr"), "--force", "--quiet"]]
    return [[*_gcloud(args, "tpu-vm", "delete", args.name), "--quiet"]]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", required=True, help="TPU VM (node) name")
    p.add_argument("--zone", required=True)
    p.add_argument("--project", default="")
    p.add_argument("--topology", default="v5e:2x2", help="e.g. v4:2x2x4, v5e:4x4, v6e:8x8")
    p.add_argument("--queued", action="store_true", help="use queued resources")
    p.add_argument("--spot", action="store_true", help="spot / preemptible capacity")
    p.add_argument("--max_restarts", type=int, default=100)
    p.add_argument("--worker", default="0", help="worker whose log `logs` streams")
    p.add_argument("--dry_run", action="store_true", help="print the commands, run nothing")
    p.add_argument("action", choices=["create", "setup", "run", "logs", "stop", "delete"])
    p.add_argument("job", nargs=argparse.REMAINDER, help="for run: -- bert-jax arguments")
    return p


def commands_for(args: argparse.Namespace) -> list[list[str]]:
    job = [w for w in args.job if w != "--"] if args.job else []
    return {
        "create": lambda: create_commands(args),
        "setup": lambda: setup_commands(args),
        "run": lambda: run_commands(args, job),
        "logs": lambda: logs_commands(args),
        "stop": lambda: stop_commands(args),
        "delete": lambda: delete_commands(args),
    }[args.action]()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for cmd in commands_for(args):
        print(shlex.join(cmd), flush=True)
        if not args.dry_run:
            subprocess.run(cmd, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
