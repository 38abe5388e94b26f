"""Subprocess body of the same-weights test: one of 2 processes that loaded a checkpoint.

Each holds weights drawn alike (`same`) or, on process 1, another step's (`other`), and
checks them against process 0's. Prints ``RESULT {json}``: ``ok``, or the error raised.
"""

import os
import sys

os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import jax
import numpy as np

from bert_jax.training import multihost
from tests.helpers import results


def main(process_id: int, port: int, case: str) -> None:
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process_id
    )
    step = 8 if case == "other" and process_id == 1 else 7
    # Another step's: every weight differs (an array larger than the ends compared).
    params = {"bert": {"w": np.full((100_000,), float(step), np.float32), "b": np.zeros(3, np.float32)}}
    try:
        multihost.check_same_weights(params, "gs://bucket/run")
        result = {"ok": True}
    except multihost.HostsDisagreeError as e:
        result = {"error": str(e)}
    results.emit({"process": jax.process_index(), **result})


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
