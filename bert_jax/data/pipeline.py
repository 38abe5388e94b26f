"""Prepared records → host-local rows of global batches, streamed (the sources: `sources`).

Global batch ``k`` is stream positions ``[k*B, (k+1)*B)``; `sampler.lookup` maps a
position to (epoch, example id) in O(1), and host ``p`` of ``P`` reads only its rows
``[p*B/P, (p+1)*B/P)`` (one ``pread`` each). So batches depend on the data, the config and
the seed only, never on the number of hosts; a resume at step N starts at once; host
memory does not grow with the corpus. The host feeds unmasked ids with each row's
(example id, epoch, mask seed): masks are drawn on the device (`masking.py`), fresh every
epoch by default, the same every epoch with ``dynamic_masking=False``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import numpy as np

from bert_jax.data import records, sampler


def prefetch(it: Iterator, depth: int = 2) -> Iterator:
    """Runs `it` in a background thread, `depth` items ahead (errors re-raised here)."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def work() -> None:
        try:
            for item in it:
                while not stop.is_set():
                    try:
                        q.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        pass
                if stop.is_set():
                    return
            q.put((done, None))
        except BaseException as e:
            q.put((done, e))

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    try:
        while True:
            item, error = q.get()
            if item is done:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()
        # Let the reader finish its item: a daemon thread still inside NumPy while the
        # interpreter shuts down can abort the process.
        worker.join(timeout=5)


def prepared_batches(
    data: records.PreparedSet,
    *,
    global_batch_size: int,
    seed: int,
    mask_seed: int,
    split: str,
    dynamic_masking: bool,
    start_step: int,
    process_index: int,
    process_count: int,
    num_batches: int | None = None,
) -> Iterator[dict[str, np.ndarray]]:
    """Host-local unmasked rows of global batches start_step, start_step + 1, ...; the
    held-out split ends after one pass (no partial batch), or after its first
    `num_batches` batches when that is set and fewer."""
    train = split == "train"
    if not train and data.size < global_batch_size:
        raise ValueError(
            f"the held-out split has {data.size} examples, fewer than one batch of "
            f"{global_batch_size}: raise eval_fraction or lower eval_batch_size"
        )
    end = data.size // global_batch_size
    if num_batches is not None:
        end = min(end, num_batches)
    step = start_step
    while train or step < end:
        positions = sampler.host_positions(step, global_batch_size, process_index, process_count)
        epochs, ids = sampler.lookup(positions, data.size, seed, shuffle=train)
        rows = data.read(ids)
        rows["example_id"] = ids.astype(np.int32)
        rows["epoch"] = (epochs if dynamic_masking and train else np.zeros_like(epochs)).astype(np.int32)
        rows["mask_seed"] = np.full(len(ids), mask_seed, np.int32)
        yield rows
        step += 1
