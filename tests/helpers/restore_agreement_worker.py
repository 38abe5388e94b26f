"""Subprocess body of the restore-agreement test: one of 2 processes sharing a workdir.

Saves steps 1 and 2, then restores with metadata reads that fail on process 1 only (a
transient bucket read): for step 2 (`newest`) or for every step (`all`). Prints the step each
process resumed from, or the error each raised, as ``RESULT {json}``.
"""

import os
import sys

os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from bert_jax.training import checkpoints
from tests.helpers import results


def main(process_id: int, port: int, workdir: str, failing: str) -> None:
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process_id
    )
    mesh = jax.make_mesh((2,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    sharding = NamedSharding(mesh, PartitionSpec())
    value = np.arange(4.0, dtype=np.float32)
    state = {"w": jax.make_array_from_callback(value.shape, sharding, lambda idx: value[idx])}
    abstract = {"w": jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=sharding)}
    ckpt = checkpoints.Checkpointer(workdir, keep=3, async_save=False)
    for step in (1, 2):
        ckpt.save(step, state)
    ckpt.close()

    ckpt = checkpoints.Checkpointer(workdir, keep=3, async_save=False)
    check = ckpt._check  # reads the step's metadata from the workdir

    def flaky(target, step):
        if jax.process_index() == 1 and (failing == "all" or step == 2):
            raise OSError(f"transient read failure of step {step}")
        return check(target, step)

    ckpt._check = flaky
    try:
        _, step = ckpt.restore_latest(abstract)
        result = {"step": step}
    except checkpoints.CheckpointDamagedError as e:
        result = {"error": str(e)}
    ckpt.close()
    results.emit({"process": jax.process_index(), **result})


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
