#!/usr/bin/env python3
"""Create, set up, run, watch, supervise and delete Cloud TPU VM slices for bert_jax.

Every action is a list of `gcloud compute tpus ...` commands (`pod_commands`);
``--dry_run`` prints them exactly (one per line, shell-quoted) instead of running them,
so a pod launch can be reviewed — and tested — before it costs anything.

    python launch/tpu_pod.py --name=bert --zone=us-central2-b --topology=v4:2x2x4 create
    python launch/tpu_pod.py ... setup          # ship this checkout, install, check the TPUs
    python launch/tpu_pod.py ... run -- pretrain --config=configs/pretrain.py:base \
        --workdir=gs://BUCKET/runs/base
    python launch/tpu_pod.py ... status         # the slice's state and the job's, every worker
    python launch/tpu_pod.py ... logs           # stream worker 0's log
    python launch/tpu_pod.py ... stop           # SIGTERM: the job checkpoints, then exits
    python launch/tpu_pod.py ... delete
    python launch/tpu_pod.py ... supervise -- pretrain ...   # create/setup/run, again after
                                                             # a preemption; delete at the end

``setup`` runs ``launch/install_on_vm.sh`` on every worker: uv makes a Python >= 3.11
venv (the TPU VM images ship 3.10), installs ``.[tpu]`` into it, and then every worker
must list its TPU chips in ``jax.devices()``. ``run`` starts the same command on all
workers (``--worker=all``) under a restart loop: after a preemption, a lost peer or a
crash by signal the job is started again and resumes from the latest checkpoint in its
workdir (data and checkpoints live on ``gs://``); a user error, a divergence or an
out-of-memory ends it at once (``worker_loop.py``). The workers copy their logs to the
workdir's bucket as they go (``--log_dir``). A preempted or suspended slice takes that
loop with it; ``supervise`` (see ``slice_supervisor.py``) re-creates the slice, sets it
up and starts the job again, and deletes the slice when the job is over
(``--keep_slice`` keeps it). With ``--queued`` the slice is requested as a queued
resource (``--spot`` for spot capacity), the way large pods are obtained;
``--num_slices=N`` makes it a multislice job of N such slices (always queued).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pod_commands as pc
from slice_supervisor import SuperviseSettings, print_plan, run_step, step_lines, supervise

from bert_jax.training.hardware import parse_topology


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", required=True, help="TPU VM (node) name")
    p.add_argument("--zone", required=True)
    p.add_argument("--project", default="")
    p.add_argument(
        "--topology",
        default="v5e:2x2",
        help="e.g. v4:2x2x4, v5e:4x4, v6e:8x8, or an accelerator type (v4-32, v5litepod-16)",
    )
    p.add_argument("--queued", action="store_true", help="use queued resources")
    p.add_argument("--spot", action="store_true", help="spot / preemptible capacity")
    p.add_argument(
        "--num_slices",
        type=int,
        default=1,
        help="slices of --topology in one multislice job (queued resources)",
    )
    p.add_argument(
        "--max_restarts", type=int, default=100, help="job starts per worker, per run (restartable ends only)"
    )
    p.add_argument("--restart_pause_s", type=int, default=30, help="pause before a restart on a worker")
    p.add_argument("--max_recreations", type=int, default=10, help="supervise: recoveries before giving up")
    p.add_argument("--poll_s", type=float, default=60.0, help="supervise: seconds between polls")
    p.add_argument("--keep_slice", action="store_true", help="supervise: keep the slice when the job is over")
    p.add_argument(
        "--log_dir", default="", help="where workers copy their logs (default: the job's gs:// workdir/logs)"
    )
    p.add_argument("--log_copy_s", type=int, default=60, help="seconds between a worker's log copies")
    p.add_argument("--worker", default="0", help="worker whose log `logs` streams")
    p.add_argument("--slice", type=int, default=0, help="slice (node NAME-N) whose worker `logs` streams")
    p.add_argument("--dry_run", action="store_true", help="print the commands, run nothing")
    p.add_argument(
        "action", choices=["create", "setup", "run", "status", "logs", "stop", "delete", "supervise"]
    )
    p.add_argument("job", nargs=argparse.REMAINDER, help="for run/supervise: -- bert-jax arguments")
    return p


def commands_for(args: argparse.Namespace, job: Sequence[str], logs_to: str) -> list:
    return {
        "create": lambda: pc.create_commands(args),
        "setup": lambda: pc.setup_commands(args),
        "run": lambda: pc.run_commands(args, job, logs_to),
        "status": lambda: [pc.describe_command(args), pc.job_status_command(args)],
        "logs": lambda: pc.logs_commands(args),
        "stop": lambda: pc.stop_commands(args),
        "delete": lambda: pc.delete_commands(args),
    }[args.action]()


def check_args(args: argparse.Namespace) -> None:
    """One line naming the flag, for what gcloud would refuse later."""
    try:
        parse_topology(args.topology)
    except ValueError as e:
        raise SystemExit(f"error: --topology: {e}") from None
    if args.num_slices < 1:
        raise SystemExit(f"error: --num_slices={args.num_slices}: must be at least 1")
    if not 0 <= args.slice < args.num_slices:
        raise SystemExit(f"error: --slice={args.slice}: the job's slices are 0 to {args.num_slices - 1}")
    if args.log_dir and not args.log_dir.startswith("gs://"):
        raise SystemExit(f"error: --log_dir={args.log_dir}: must be a gs:// path (the workers copy there)")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    job = [w for w in args.job if w != "--"] if args.job else []
    check_args(args)
    if args.action in ("run", "supervise") and not job:
        raise SystemExit(f"error: {args.action}: give the bert-jax command after `--`, e.g. -- pretrain ...")
    logs_to = ""
    if args.action in ("run", "supervise"):
        logs_to, warning = pc.log_dir(args, job)
        if warning:
            print(warning, file=sys.stderr, flush=True)
    if args.action == "supervise":
        plan = pc.slice_plan(args, job, logs_to)
        settings = SuperviseSettings(
            max_recreations=args.max_recreations, poll_s=args.poll_s, keep_slice=args.keep_slice
        )
        if args.dry_run:
            print_plan(plan, settings)
            return 0
        return supervise(plan, settings)
    for step in commands_for(args, job, logs_to):
        print(*step_lines(step), sep="\n", flush=True)
        if not args.dry_run and (rc := run_step(step)[0]) != 0:
            raise SystemExit(f"error: {args.action}: exit {rc} from: {step_lines(step)[0][:120]} ...")
    return 0


if __name__ == "__main__":
    sys.exit(main())
