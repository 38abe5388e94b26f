"""Subprocess body of the multi-host test: one of 2 processes (or the 1-process reference).

Each process feeds only its own rows of every global batch, as a host of a pod would.
Prints the losses of a few train steps as JSON: on synthetic (pre-masked) batches, and on
the Wikipedia excerpt prepared in the cache folder given as the 4th argument (unmasked
rows, masks drawn on the devices), with the masked targets gathered from every host.
"""

import os
import sys

os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import jax

from bert_jax.commands import run_settings
from bert_jax.data import synthetic
from bert_jax.pretraining import evaluation, pretrain
from bert_jax.training import sharding
from configs import pretrain as pretrain_config
from tests.helpers import results


def main(process_id: int, num_processes: int, port: int, cache_dir: str) -> None:
    if num_processes > 1:
        jax.distributed.initialize(
            coordinator_address=f"127.0.0.1:{port}",
            num_processes=num_processes,
            process_id=process_id,
        )
    c = pretrain_config.get_config("tiny")
    c.data.source = "synthetic"
    c.global_batch_size = 8
    c.max_seq_length = 32
    c.max_predictions_per_seq = 5
    mesh = sharding.make_mesh((-1, 1, 1))
    setup = pretrain.Pretraining(run_settings.pretrain_settings(c), mesh)
    losses = []
    with jax.set_mesh(mesh):
        state = setup.engine.init_state(c.seed)
        for local in synthetic.create_iterator(
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
    c.data = pretrain_config.get_config("demo").data
    c.data.cache_dir, c.data.dupe_factor = cache_dir, 1
    setup = pretrain.Pretraining(run_settings.pretrain_settings(c), mesh)
    wiki_losses, targets = [], []
    with jax.set_mesh(mesh):
        state = setup.engine.init_state(c.seed)
        it = pretrain.data_iterator(setup.run, split="train", max_seq_length=32, max_predictions_per_seq=5)
        for _ in range(3):
            local = next(it)
            assert local["input_ids"].shape[0] == 8 // num_processes
            batch = setup.global_batch(local, 5)
            targets.append(int(evaluation.masked_targets(batch).sum()))
            state, metrics = setup.train_step(state, batch)
            wiki_losses.append(float(metrics["loss"]))
    result = {
        "losses": losses,
        "wiki_losses": wiki_losses,
        "wiki_targets": targets,
        "devices": jax.device_count(),
        "process": jax.process_index(),
    }
    results.emit(result)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
