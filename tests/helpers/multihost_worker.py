"""Subprocess body of the multi-host test: one of 2 processes (or the 1-process reference).

Each process feeds only its own rows of every global batch, as a host of a pod would.
Prints the losses of a few train steps as JSON.
"""

import json
import os
import sys

os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import jax

from bert_jax import sharding, synthetic_data, train
from configs import pretrain


def main(process_id: int, num_processes: int, port: int) -> None:
    if num_processes > 1:
        jax.distributed.initialize(
            coordinator_address=f"127.0.0.1:{port}",
            num_processes=num_processes,
            process_id=process_id,
        )
    c = pretrain.get_config("tiny")
    c.data.source = "synthetic"
    c.global_batch_size = 8
    c.max_seq_length = 32
    c.max_predictions_per_seq = 5
    mesh = sharding.make_mesh((-1, 1, 1))
    setup = train.Setup(c, mesh)
    losses = []
    with jax.set_mesh(mesh):
        state = setup.init_state(c.seed)
        for local in synthetic_data.create_iterator(
            global_batch_size=8,
            max_seq_length=32,
            max_predictions_per_seq=5,
            vocab_size=c.model.vocab_size,
            seed=c.seed,
            num_batches=3,
            process_index=jax.process_index(),
            process_count=jax.process_count(),
        ):
            assert local["input_ids"].shape[0] == 8 // num_processes
            state, metrics = setup.train_step(state, setup.global_batch(local))
            losses.append(float(metrics["loss"]))
    print(
        "RESULT "
        + json.dumps({"losses": losses, "devices": jax.device_count(), "process": jax.process_index()}),
        flush=True,
    )


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
