"""The `gcloud compute tpus ...` commands of `tpu_pod.py`, built from its flags.

One slice is one TPU VM node (``--name``), created directly or as a queued resource
(``--queued``). ``--num_slices=N`` (N > 1) is a multislice job: one queued resource
(``NAME-qr``, ``--node-count=N --node-prefix=NAME``) whose nodes are ``NAME-0`` ...
``NAME-(N-1)``; the TPU runtime joins them (the queued resource writes the ``MEGASCALE_*``
variables into every VM's metadata, where libtpu and ``jax.distributed.initialize()``
read them). What runs on the workers runs on every node of the job; steps whose commands
must run at the same time on every slice (the device check: a multislice runtime starts
only when every host of every slice starts it) are `Together` groups.

The workers copy their own log (``~/bert_jax.log``) to the bucket every
``--log_copy_s`` seconds and when the job ends (silently: the log is the job's), as
``LOG_DIR/NODE/worker-W-START.log`` (one object per worker and start of `run`, so a
re-created slice does not overwrite the earlier one's); LOG_DIR is ``--log_dir`` or the
job's ``gs://`` ``--workdir`` plus ``/logs``.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence

from slice_supervisor import SlicePlan, Step, Together
from worker_loop import loop_script

from bert_jax.training.hardware import parse_topology

# On the workers. $HOME is expanded there; the job is started by its absolute path so that
# `stop` finds exactly this checkout's job (`pkill -f` on that path).
REMOTE_DIR = "$HOME/bert_jax"
REMOTE_LOG = "$HOME/bert_jax.log"
REMOTE_STATUS = "$HOME/bert_jax.status"  # running | exited 0 | failed N (WHY): LINE | stopped
REMOTE_LOG_URL = "$HOME/bert_jax.log_url"  # where this start's log is copied to
REMOTE_JOB = f"{REMOTE_DIR}/.venv/bin/bert-jax"
LOOP_MARK = "bert_jax_loop:$HOME"  # the restart loop's $0, what `stop` and `status` look for
TARBALL = "/tmp/bert_jax_src.tar.gz"
# The worker's index in its slice: BERT_JAX_WORKER, else the VM metadata's, else the host name.
WORKER_ID = (
    'W="${BERT_JAX_WORKER:-$(curl -sf -m 2 -H "Metadata-Flavor: Google" '
    "http://metadata.google.internal/computeMetadata/v1/instance/attributes/agent-worker-number "
    '2>/dev/null || hostname)}"'
)
# The log to the bucket: gcloud storage (gsutil where there is no gcloud), at most 120 s a try.
COPY_LOG = (
    f'{{ u=$(cat {REMOTE_LOG_URL} 2>/dev/null); [ -n "$u" ] && if command -v gcloud > /dev/null; '
    f'then timeout 120 gcloud storage cp {REMOTE_LOG} "$u" > /dev/null 2>&1; '
    f'else timeout 120 gsutil -q cp {REMOTE_LOG} "$u" > /dev/null 2>&1; fi; }}'
)


def node_names(args: argparse.Namespace) -> list[str]:
    """The job's TPU VM nodes: ``--name``, or ``NAME-0`` ... for a multislice job."""
    if args.num_slices > 1:
        return [f"{args.name}-{i}" for i in range(args.num_slices)]
    return [args.name]


def queued(args: argparse.Namespace) -> bool:
    """Multislice jobs exist only as queued resources."""
    return args.queued or args.num_slices > 1


def num_workers(args: argparse.Namespace) -> int:
    return parse_topology(args.topology).num_hosts * args.num_slices


def _gcloud(args: argparse.Namespace, *words: str) -> list[str]:
    cmd = ["gcloud", "compute", "tpus", *words, f"--zone={args.zone}"]
    if args.project:
        cmd.append(f"--project={args.project}")
    return cmd


def _ssh(args: argparse.Namespace, node: str, command: str, worker: str = "all") -> list[str]:
    return [*_gcloud(args, "tpu-vm", "ssh", node), f"--worker={worker}", f"--command={command}"]


def _on_every_node(args: argparse.Namespace, command: str) -> Step:
    """`command` on every worker of every node: one ssh, or one per slice at once."""
    cmds = [_ssh(args, node, command.replace("{node}", node)) for node in node_names(args)]
    return cmds[0] if len(cmds) == 1 else Together(tuple(cmds))


def create_commands(args: argparse.Namespace) -> list[Step]:
    topo = parse_topology(args.topology)
    gen = topo.generation
    if queued(args):
        cmd = _gcloud(args, "queued-resources", "create", f"{args.name}-qr")
        if args.num_slices > 1:
            cmd += [f"--node-count={args.num_slices}", f"--node-prefix={args.name}"]
        else:
            cmd.append(f"--node-id={args.name}")
        cmd += [f"--accelerator-type={topo.accelerator_type}", f"--runtime-version={gen.runtime_version}"]
    else:
        cmd = _gcloud(args, "tpu-vm", "create", args.name)
        cmd += [f"--accelerator-type={topo.accelerator_type}", f"--version={gen.runtime_version}"]
    if args.spot:
        cmd.append("--spot")
    return [cmd]


def setup_commands(args: argparse.Namespace) -> list[Step]:
    """Ship this checkout (git archive of HEAD) to every worker, install, check the TPUs.

    The check runs on all workers of all slices at once, in its own command: a multi-host
    slice's TPU runtime starts only when every host starts it (and a multislice one only
    when every slice's hosts do)."""
    install = (
        f"mkdir -p {REMOTE_DIR} && tar xzf ~/bert_jax_src.tar.gz -C {REMOTE_DIR} && "
        f"cd {REMOTE_DIR} && bash launch/install_on_vm.sh install"
    )
    check = f"cd {REMOTE_DIR} && BERT_JAX_SLICES={args.num_slices} bash launch/install_on_vm.sh check"
    if args.num_slices == 1:
        check = f"cd {REMOTE_DIR} && bash launch/install_on_vm.sh check"
    scp = [
        [*_gcloud(args, "tpu-vm", "scp", TARBALL, f"{node}:~/bert_jax_src.tar.gz"), "--worker=all"]
        for node in node_names(args)
    ]
    return [
        ["git", "archive", "--format=tar.gz", f"--output={TARBALL}", "HEAD"],
        scp[0] if len(scp) == 1 else Together(tuple(scp)),
        _on_every_node(args, install),
        _on_every_node(args, check),
    ]


def job_workdir(job: Sequence[str]) -> str:
    """The job's ``--workdir`` value ('' when it has none)."""
    for i, word in enumerate(job):
        if word.startswith("--workdir="):
            return word.split("=", 1)[1]
        if word == "--workdir" and i + 1 < len(job):
            return job[i + 1]
    return ""


def log_dir(args: argparse.Namespace, job: Sequence[str]) -> tuple[str, str]:
    """Where the workers' logs go (``gs://...``, or '' for nowhere) and, for nowhere, the
    warning that says so."""
    if args.log_dir:
        return args.log_dir.rstrip("/"), ""
    workdir = job_workdir(job)
    if workdir.startswith("gs://"):
        return f"{workdir.rstrip('/')}/logs", ""
    return "", (
        "warning: the job has no gs:// --workdir, so the workers' logs stay on the VMs "
        "(--log_dir=gs://BUCKET/PATH copies them there)"
    )


def _log_copier(args: argparse.Namespace) -> str:
    """Shell, inside the loop's `bash -c`: copies the log every --log_copy_s seconds while
    the loop runs. Silent: the log is the job's, whose last line the loop reports; a copy
    that fails shows in the supervisor's own copies (`save_logs_command`)."""
    return f"( while kill -0 $$ 2> /dev/null; do sleep {args.log_copy_s}; {COPY_LOG}; done ) & copier=$!; "


def run_commands(args: argparse.Namespace, job: Sequence[str], logs_to: str = "") -> list[Step]:
    """The same `bert-jax ...` command on every worker, restarted when a restart can help.

    Each host calls ``jax.distributed.initialize()`` with no arguments (the TPU runtime
    tells it its peers, across slices too); a restart (after a preemption, a lost peer or
    a crash by signal: `worker_loop`) resumes from the workdir's latest checkpoint. The
    loop writes the job's end (``exited 0`` or ``failed N (WHY): LINE``) to the status
    file that ``status`` and ``supervise`` read. With `logs_to`, the workers copy their
    log there as they go and at the end.
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
    copier, last_copy, url = "", "", ": > " + REMOTE_LOG_URL
    if logs_to:
        copier, last_copy = _log_copier(args), f"; kill $copier 2> /dev/null; {COPY_LOG}"
        start = "$(date -u +%Y%m%dT%H%M%SZ)"
        url = f'{WORKER_ID}; echo "{logs_to}/{{node}}/worker-$W-{start}.log" > {REMOTE_LOG_URL}'
    loop = f"cd {REMOTE_DIR} && export BERT_JAX_DISTRIBUTED=1 && {{ {copier}{{ {restarts}; }}{last_copy}; }}"
    remote = (
        f"echo running > {REMOTE_STATUS}; {url}; "
        f'nohup bash -c {shlex.quote(loop)} "{LOOP_MARK}" > {REMOTE_LOG} 2>&1 < /dev/null &'
    )
    return [_on_every_node(args, remote)]


def describe_command(args: argparse.Namespace) -> list[str]:
    """Prints the slice's state: READY, PREEMPTED, ... (a queued resource: ACTIVE, SUSPENDED, ...)."""
    if queued(args):
        qr = _gcloud(args, "queued-resources", "describe", f"{args.name}-qr")
        return [*qr, "--format=value(state.state)"]
    return [*_gcloud(args, "tpu-vm", "describe", args.name), "--format=value(state)"]


def job_status_command(args: argparse.Namespace) -> Step:
    """Every worker prints ``NODE worker W: STATUS``, STATUS one of running | exited 0 |
    failed N (WHY): LINE | stopped | lost (the loop is gone) | none."""
    query = (
        f"{WORKER_ID}; s=$(cat {REMOTE_STATUS} 2>/dev/null || echo none); "
        f'if [ "$s" = running ] && ! pgrep -f "{LOOP_MARK}" > /dev/null; then s=lost; fi; '
        'echo "{node} worker $W: $s"'
    )
    return _on_every_node(args, query)


def save_logs_command(args: argparse.Namespace) -> Step:
    """Every worker copies its log to the bucket now; prints ``NODE worker W: copied URL``
    (or ``no log``, ``copy failed``)."""
    query = (
        f"{WORKER_ID}; if ! [ -s {REMOTE_LOG_URL} ]; then r='no log'; "
        f'elif {COPY_LOG}; then r="copied $u"; else r="copy failed"; fi; echo "{{node}} worker $W: $r"'
    )
    return _on_every_node(args, query)


def logs_commands(args: argparse.Namespace) -> list[Step]:
    return [_ssh(args, node_names(args)[args.slice], f"tail -n 200 -F {REMOTE_LOG}", worker=args.worker)]


def stop_commands(args: argparse.Namespace) -> list[Step]:
    """On every worker: end the restart loop, then SIGTERM the job's python process, as a
    preemption would (the job saves a checkpoint and exits with 143)."""
    remote = (
        f'echo stopped > {REMOTE_STATUS}; pkill -TERM -f "{LOOP_MARK}"; pkill -TERM -f "{REMOTE_JOB}" || true'
    )
    return [_on_every_node(args, remote)]


def delete_commands(args: argparse.Namespace) -> list[Step]:
    if queued(args):
        return [[*_gcloud(args, "queued-resources", "delete", f"{args.name}-qr"), "--force", "--quiet"]]
    return [[*_gcloud(args, "tpu-vm", "delete", args.name), "--quiet"]]


def slice_plan(args: argparse.Namespace, job: Sequence[str], logs_to: str = "") -> SlicePlan:
    return SlicePlan(
        name=f"{args.name}-qr" if args.num_slices > 1 else args.name,
        describe=describe_command(args),
        job_status=job_status_command(args),
        delete=delete_commands(args),
        create=create_commands(args),
        setup=setup_commands(args),
        start=run_commands(args, job, logs_to),
        stop=stop_commands(args),
        save_logs=save_logs_command(args) if logs_to else None,
        num_workers=num_workers(args),
        logs_to=logs_to,
    )
