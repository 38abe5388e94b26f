"""Subprocess body of the two-"slice" test: one of 2 processes, each with 2 CPU devices and
each standing for one slice (`sharding.by_process`: CPU devices carry no slice index), or
the 1-process reference with 4 devices.

Both build the presets' mesh, ``(1, -1, 1)``: with two "slices" that is data across them
and fsdp inside each, (2, 2, 1); on one process, fsdp over all four, (1, 4, 1). A few train
steps of the tiny model on synthetic batches (each process feeding only its own rows, as a
host of a pod would); prints the mesh, which process each data row lives on, and the
losses as JSON.
"""

import os
import sys

os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import jax

from bert_jax.commands import run_settings
from bert_jax.data import synthetic
from bert_jax.pretraining import pretrain
from bert_jax.training import sharding
from configs import pretrain as pretrain_config
from tests.helpers import results

STEPS, BATCH = 2, 8


def main(process_id: int, num_processes: int, port: int) -> None:
    jax.config.update("jax_num_cpu_devices", 4 // num_processes)
    if num_processes > 1:
        jax.distributed.initialize(
            coordinator_address=f"127.0.0.1:{port}", num_processes=num_processes, process_id=process_id
        )
    c = pretrain_config.get_config("tiny")
    c.data.source = "synthetic"
    c.global_batch_size, c.max_seq_length, c.max_predictions_per_seq = BATCH, 32, 5
    # One small layer, no dropout: a short compile; the mesh is what is tested.
    c.model.update(
        vocab_size=512, num_hidden_layers=1, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
    )
    c.mesh_shape = (1, -1, 1)  # the paper-size presets' mesh
    mesh = sharding.make_mesh(c.mesh_shape, slice_of=sharding.by_process)
    setup = pretrain.Pretraining(run_settings.pretrain_settings(c), mesh)
    losses = []
    with jax.set_mesh(mesh):
        state = setup.engine.init_state(c.seed)
        for local in synthetic.create_iterator(
            global_batch_size=BATCH,
            max_seq_length=32,
            max_predictions_per_seq=5,
            vocab_size=512,
            seed=c.seed,
            num_batches=STEPS,
            process_index=jax.process_index(),
            process_count=jax.process_count(),
        ):
            assert local["input_ids"].shape[0] == BATCH // num_processes
            state, metrics = setup.train_step(state, setup.global_batch(local))
            losses.append(float(metrics["loss"]))
    word = setup.state_shardings.params["bert"]["embeddings"]["word_embeddings"]["embedding"]
    results.emit(
        {
            "mesh": dict(mesh.shape),
            "row_processes": [sorted({d.process_index for d in row.ravel()}) for row in mesh.devices],
            "word_embedding_spec": [str(a) for a in word.spec],
            "losses": losses,
            "devices": jax.device_count(),
        }
    )


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
