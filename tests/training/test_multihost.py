"""Two processes joined by `jax.distributed` (gloo on CPU) train exactly like one."""

import socket
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.helpers import results

WORKER = ROOT / "tests" / "helpers" / "multihost_worker.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _result(out: str) -> dict:
    return results.parse(out)


def test_two_processes_match_one_process(tmp_path) -> None:
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(i), "2", str(port), str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    multi = [_result(out) for out, _ in outs]
    single = subprocess.run(
        [sys.executable, str(WORKER), "0", "1", "0", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert single.returncode == 0, single.stderr[-3000:]
    reference = _result(single.stdout)
    assert [m["devices"] for m in multi] == [2, 2] and reference["devices"] == 1
    assert sorted(m["process"] for m in multi) == [0, 1]
    for m in multi:
        assert m["losses"] == pytest.approx(reference["losses"], rel=1e-5)
        # Prepared data, masked on the devices: every host drew the same masks as one host.
        assert m["wiki_targets"] == reference["wiki_targets"]
        assert m["wiki_losses"] == pytest.approx(reference["wiki_losses"], rel=1e-5)
