"""The environment a TPU worker's shell pieces run in locally, in the launch tests.

`gcloud storage cp SRC gs://B/P` and `gsutil -q cp SRC gs://B/P` (what the workers copy
their logs with) copy into a local folder instead, so the copies can be checked without a
bucket or a network (the real tools, where installed, would try to reach one); the
worker's index comes from ``BERT_JAX_WORKER``, as the VM metadata would give it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

FAKE = """#!{python}
import pathlib, shutil, sys
words = [w for w in sys.argv[1:] if not w.startswith("-")]
if len(words) < 2 or "cp" not in words or not words[-1].startswith("gs://"):
    sys.exit(f"fake {{sys.argv[0]}}: only cp SRC gs://... is known")
out = pathlib.Path({bucket!r}) / words[-1].removeprefix("gs://")
out.parent.mkdir(parents=True, exist_ok=True)
shutil.copyfile(words[-2], out)
"""


def worker_env(home: Path, bucket: Path, worker: str = "0") -> dict[str, str]:
    """Variables for a worker's shell in `home`: the stand-in copy tools on PATH (their
    copies land under `bucket`), the worker's index, HOME."""
    tools = home / ".fake_gcloud"
    tools.mkdir(parents=True, exist_ok=True)
    text = FAKE.format(python=sys.executable, bucket=str(bucket))
    for name in ("gcloud", "gsutil"):
        tool = tools / name
        if tool.exists() and tool.read_text() == text:
            continue
        # Written beside and renamed into place: the worker's loop may be running the tool
        # this moment, and writing to a file being executed fails (ETXTBSY).
        part = tools / f".{name}.part"
        part.write_text(text)
        part.chmod(0o755)
        os.replace(part, tool)
    return {"HOME": str(home), "PATH": f"{tools}:{os.environ['PATH']}", "BERT_JAX_WORKER": worker}


def copies(bucket: Path) -> dict[str, str]:
    """Every object copied so far: its gs:// path without the scheme, and its text."""
    if not bucket.exists():
        return {}
    return {str(p.relative_to(bucket)): p.read_text() for p in sorted(bucket.rglob("*")) if p.is_file()}
