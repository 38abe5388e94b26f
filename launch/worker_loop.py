"""The restart loop every worker of a slice runs its job in (`tpu_pod.py run`), as one shell line.

The job is started again only when a restart can end differently: after a preemption
(143), a lost peer (75), a bucket that did not answer within the retry policy's bound
(74) or a crash by signal (exit status above 128, Ctrl-C's 130 excepted), as
`bert_jax.training.exit_codes` says; each restart resumes from the latest
checkpoint. A user error, a divergence or an out-of-memory ends the loop at once. The
loop writes how the job ended to the status file that ``status`` and ``supervise`` read:

- ``exited 0``: the job finished;
- ``failed N (WHY): LINE``: it ended with N, which a restart cannot fix;
- ``failed N (WHY) after K starts: LINE``: every one of the ``--max_restarts`` starts
  ended with a restartable status.

LINE is the job's own error line from its last start's output (``bert-jax CMD: error:
...``), else that output's last line (a traceback's exception, the shell's ``Killed``);
without output, none (and no colon).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bert_jax.training import exit_codes

LINE_CHARS = 500  # the status file's LINE is cut here: one line for the supervisor's log


def _last_line(log: str) -> str:
    """Shell: sets $line from the log's bytes after offset $off (this start's output)."""
    out = f'tail -c +$((off + 1)) {log} | grep -a -v "^[[:space:]]*$"'
    return (
        f"line=$({out} | grep -a '^bert-jax [a-z-]*: error: ' | tail -n 1); "
        f'[ -n "$line" ] || line=$({out} | tail -n 1); '
        f'line=$(printf "%s" "$line" | cut -c1-{LINE_CHARS})'
    )


def _status(status_file: str) -> str:
    """Shell, after the loop: the job's end, one line, into the status file."""
    return (
        f'if [ "$rc" -eq 0 ]; then s="exited 0"; '
        f'elif {exit_codes.restart_test()}; then s="failed $rc ($why) after $i starts"; '
        f'else s="failed $rc ($why)"; fi; '
        f'[ "$rc" -eq 0 ] || [ -z "$line" ] || s="$s: $line"; printf "%s\\n" "$s" > {status_file}'
    )


def loop_script(job: str, *, max_restarts: int, pause_s: int, log: str, status_file: str) -> str:
    """The shell line: `job` started up to `max_restarts` times, `pause_s` apart, while it
    ends with a restartable status; its end written to `status_file`. `log` is the file
    the loop's own output (and so the job's) goes to."""
    return (
        f'rc=1; i=0; why="not started"; line=; '
        f"for i in $(seq 1 {max_restarts}); do off=$(wc -c < {log}); {job}; rc=$?; "
        "[ $rc -eq 0 ] && break; "
        f"{exit_codes.describe_shell()}; {_last_line(log)}; "
        f"if ! {exit_codes.restart_test()}; then "
        'echo "bert-jax exited ($rc: $why); not restarting: a restart cannot fix it"; break; fi; '
        f'[ "$i" -lt {max_restarts} ] || break; '
        'echo "bert-jax exited ($rc: $why); restarting from the latest checkpoint '
        f'(start $((i + 1)) of {max_restarts})"; sleep {pause_s}; done; {_status(status_file)}'
    )
