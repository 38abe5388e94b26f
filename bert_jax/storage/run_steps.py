"""A saved step of a run, named by its path: ``WORKDIR/best`` (the best evaluation's
checkpoint), ``WORKDIR/checkpoints`` (the latest), or one step in either
(``WORKDIR/checkpoints/4000``). What reads a checkpoint takes these beside the workdir
itself (its latest step); the model's config and vocabulary are the workdir's."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

FOLDERS = ("checkpoints", "best")  # a run's folders of saved steps (`training.checkpoints`)
CONFIG = "bert_config.json"  # beside them, in the workdir


@dataclass(frozen=True)
class RunStep:
    workdir: str
    folder: str  # one of FOLDERS
    step: int | None  # None: the latest in `folder`


def parse(path: str) -> RunStep | None:
    """The run step `path` names (a local path; the step need not be there: its reader
    says which are), or None for any other path."""
    path = os.path.abspath(path.rstrip("/"))
    head, name = os.path.split(path)
    step = None
    if name.isdigit():
        step, (head, name) = int(name), os.path.split(head)
    if name in FOLDERS and os.path.exists(os.path.join(head, CONFIG)):
        return RunStep(head, name, step)
    return None


def workdir_of(path: str) -> str:
    """The workdir of a run step's path (its config and vocabulary are there); `path` itself
    for any other path."""
    found = parse(path) if path and not path.startswith("gs://") else None
    return found.workdir if found else path


def steps(saved: RunStep) -> list[str]:
    """The steps saved in the run folder `saved` names, in order."""
    folder = os.path.join(saved.workdir, saved.folder)
    held = os.listdir(folder) if os.path.isdir(folder) else []
    return [str(n) for n in sorted(int(d) for d in held if d.isdigit())]


def workdir_of_url(url: str) -> str | None:
    """The workdir a bucket URL of a run step would be in (by its name alone: the caller
    looks there for what the URL's own folder lacks), or None."""
    m = re.match(rf"^(.+)/(?:{'|'.join(FOLDERS)})(?:/\d+)?/?$", url)
    return m.group(1) if m else None
