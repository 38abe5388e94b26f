"""What a bert-jax exit status means, and which ones a restart can fix.

One table for the job (`commands/cli.py` exits with these) and for the workers' restart
loop on a TPU slice (`launch/tpu_pod.py run` builds its shell test from `restart_test`):

====  ==============================================================  ===========
code  meaning                                                         restarted?
====  ==============================================================  ===========
0     finished                                                        no
1     a user error (files, flags, config keys, data, checkpoints),    no
      or a bug (a traceback)
2     usage: an unknown subcommand                                    no
3     diverged: a non-finite loss or gradient norm                    no
4     out of memory (XLA's RESOURCE_EXHAUSTED, Python's MemoryError)  no
74    a bucket did not answer within the retry policy's bound         yes
      (EX_IOERR; `storage.gcs`): the last committed checkpoint stays
75    a peer process of a multi-host run was lost (EX_TEMPFAIL)       yes
130   interrupted (Ctrl-C on a single process)                        no
143   preempted (SIGTERM): the job saved its step                     yes
>128  ended by a signal 128+N (137 SIGKILL, 134 SIGABRT, 139 SIGSEGV)  yes
====  ==============================================================  ===========

A bucket that stops answering is retried for ``BERT_JAX_BUCKET_RETRY``'s bound; past it
the run stops with 74 in one line naming the path, at start (the workdir's probe) as
mid-run, and a restart resumes once the bucket answers. A bucket that answers no (no such
bucket, no permission) is a user error (1).

A lost peer ends the surviving hosts one of two ways: a collective that fails (on CPU,
gloo's "Connection reset by peer") raises in Python, and the job exits with 75
(`lost_peer`); or JAX's coordination service, missing the peer's heartbeats, aborts the
process (SIGABRT, 134). Both are restarted. A host killed by the kernel's out-of-memory
killer ends with SIGKILL (137) and is restarted too: a signal does not say who sent it.

No JAX import here: the launcher imports this module where only ``gcloud`` runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

OK = 0
USER_ERROR = 1
USAGE = 2
DIVERGED = 3
OUT_OF_MEMORY = 4
BUCKET_UNREACHABLE = 74
PEER_LOST = 75
INTERRUPTED = 130
PREEMPTED = 143
SIGNALLED = 128  # above this: ended by signal (code - 128)

# What a lost peer's error says, in the messages of JAX's coordination service, XLA's
# collectives and gloo's transport (compared without case).
LOST_PEER_MARKS = (
    "heartbeat",
    "another task died",
    "tasks are unhealthy",
    "coordination service",
    "coordinationservice",
    "barrier timed out",
    "getkeyvalue() timed out",  # a peer that never came up (it failed at start)
    "barrier failed",
    "connection reset by peer",
    "connection closed by peer",
    "broken pipe",
)
OUT_OF_MEMORY_MARKS = ("resource_exhausted", "out of memory")


class PeerLost(RuntimeError):
    """A peer process of a multi-host run is gone: exit with `PEER_LOST`, a restart may help."""


def restartable(code: int) -> bool:
    """Whether a restart (from the latest checkpoint) may end differently: preempted, a
    lost peer, a bucket that did not answer, or ended by a signal other than Ctrl-C's."""
    return code in (BUCKET_UNREACHABLE, PEER_LOST, PREEMPTED) or (code > SIGNALLED and code != INTERRUPTED)


def restart_test(var: str = "rc") -> str:
    """`restartable` as a POSIX shell test on ``$var``."""
    v = f'"${var}"'
    return (
        f"{{ [ {v} -eq {BUCKET_UNREACHABLE} ] || [ {v} -eq {PEER_LOST} ] || [ {v} -eq {PREEMPTED} ] || "
        f"{{ [ {v} -gt {SIGNALLED} ] && [ {v} -ne {INTERRUPTED} ]; }}; }}"
    )


def describe_shell(var: str = "rc") -> str:
    """A shell ``case`` that sets ``$why`` to what the exit status ``$var`` means."""
    return (
        f'case "${var}" in {PREEMPTED}) why=preempted;; {PEER_LOST}) why="lost a peer";; '
        f'{BUCKET_UNREACHABLE}) why="bucket unreachable";; '
        f'{USER_ERROR}) why="a user error or a bug";; {USAGE}) why=usage;; '
        f'{DIVERGED}) why=diverged;; {OUT_OF_MEMORY}) why="out of memory";; '
        f"{INTERRUPTED}) why=interrupted;; "
        f'*) if [ "${var}" -gt {SIGNALLED} ]; then why="signal $((${var} - {SIGNALLED}))"; '
        f'else why="exit ${var}"; fi;; esac'
    )


def _marked(error: BaseException, marks: tuple[str, ...]) -> bool:
    text = f"{type(error).__name__}: {error}".lower()
    return any(mark in text for mark in marks)


def lost_peer(error: BaseException) -> bool:
    """Whether `error`, raised in a multi-host run, says that a peer process is gone."""
    return isinstance(error, PeerLost) or _marked(error, LOST_PEER_MARKS)


def out_of_memory(error: BaseException) -> bool:
    """Whether `error` is a device (XLA RESOURCE_EXHAUSTED) or host (MemoryError) allocation failure."""
    return isinstance(error, MemoryError) or _marked(error, OUT_OF_MEMORY_MARKS)


def first_line(error: BaseException) -> str:
    """The first non-empty line of `error`'s message (XLA's can run to pages), else its type."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


@contextlib.contextmanager
def peers_watched(multihost: bool) -> Iterator[None]:
    """In a multi-host run (`multihost`), an error inside the block that says a peer is gone
    (`lost_peer`) is raised again as `PeerLost`, which the command exits on with `PEER_LOST`."""
    try:
        yield
    except PeerLost:
        raise
    except Exception as e:
        # A file or bucket error (OSError: "connection reset by peer" from a bucket) is never
        # a lost peer: it keeps its own line and code.
        if not multihost or isinstance(e, OSError) or not lost_peer(e):
            raise
        raise PeerLost(
            f"lost a peer process of this multi-host run ({type(e).__name__}: {first_line(e)}); "
            f"exit {PEER_LOST}: a restart resumes from the latest checkpoint"
        ) from e
