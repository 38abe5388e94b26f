"""Two processes joined by `jax.distributed` (gloo on CPU), each counted as one slice,
train on the hybrid mesh the presets ask for: data parallelism across the two "slices",
fsdp inside each. Their losses are those of one process with the same four devices all on
fsdp. (On TPU the slices come from the devices' ``slice_index``; here from the processes,
`sharding.by_process`.)"""

import socket
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.helpers import results

WORKER = ROOT / "tests" / "helpers" / "multislice_worker.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_as_two_slices_put_data_across_them() -> None:
    port = _free_port()
    runs = [(str(i), "2", str(port)) for i in range(2)] + [("0", "1", "0")]  # the reference last
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for args in runs
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    *slices, reference = [results.parse(out) for out, _ in outs]
    assert reference["mesh"] == {"data": 1, "fsdp": 4, "tensor": 1}
    for s in slices:
        assert s["devices"] == 4 and s["mesh"] == {"data": 2, "fsdp": 2, "tensor": 1}
        assert s["row_processes"] == [[0], [1]]  # each data row is one process ("slice")
        assert s["word_embedding_spec"] == reference["word_embedding_spec"] == ["tensor", "fsdp"]
        assert s["losses"] == pytest.approx(reference["losses"], rel=1e-5)
