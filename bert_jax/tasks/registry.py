"""The fine-tuning tasks by name: `get_task("sst2")`, `get_task("squad2.0")`, ..."""

from __future__ import annotations

from collections.abc import Callable

from bert_jax.tasks import (
    bbc,
    classification,
    downstream_classification,
    downstream_qa,
    glue,
    ner,
    own_classification,
    own_tagging,
    squad,
    swag,
    with_bilstm,
)
from bert_jax.tasks.base import Task


def get_task(name: str) -> Task:
    """The task called `name` (GLUE names as in TFDS: cola, sst2, mrpc, ...; bbc; squad1.1,
    squad2.0; conll2003; swag; the offline downstream suite: disfl_qa, cpkc, dialog_pairs,
    vitaminc, rotten_tomatoes; classify and tag, a user's own files; any of them + "+bilstm")."""
    registry: dict[str, Callable[[], Task]] = {
        **{n: (lambda s=s: classification.ClassificationTask(s)) for n, s in glue.TASKS.items()},
        "bbc": lambda: classification.ClassificationTask(bbc.TASK),
        "squad1.1": lambda: squad.SquadTask(version_2=False),
        "squad2.0": lambda: squad.SquadTask(version_2=True),
        "conll2003": ner.NerTask,
        own_classification.NAME: own_classification.OwnClassificationTask,
        own_tagging.NAME: own_tagging.OwnTaggingTask,
        "swag": swag.SwagTask,
        **{n: (lambda n=n: downstream_qa.DownstreamSquadTask(n)) for n in downstream_qa.VERSIONS},
        **{
            n: (lambda s=s: classification.ClassificationTask(s))
            for n, s in downstream_classification.TASKS.items()
        },
    }
    if name.endswith(with_bilstm.SUFFIX):  # the task with a BiLSTM under its output layer (Table 5)
        return with_bilstm.BiLSTMTask(get_task(name[: -len(with_bilstm.SUFFIX)]))
    if name not in registry:
        raise ValueError(f"unknown task {name!r}; known: {', '.join(sorted(registry))}")
    return registry[name]()
