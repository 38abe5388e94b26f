"""What a training job returns: one typed record for pre-training and fine-tuning.

`pretrain.train_and_evaluate` and `finetune.finetune` both return a `JobResult`: the last
step trained, whether the run stopped before its end (``stop_after_step`` or a SIGTERM:
a rerun of the same command continues it), and the metrics the job reports (pre-training:
the final held-out metrics; fine-tuning: the best epoch's dev scores, and the test split's
as ``test/<key>`` where the task scores one). The files a job writes (``metrics.jsonl``,
``results.json``, ``pretraining.json``) hold more; this is what a caller acts on.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class JobResult:
    step: int  # the last step trained (the stop's step when stopped)
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    stopped: bool = False  # stopped before the end: rerun the same command to continue
    held_out: bool = True  # pre-training: False when the data had no held-out split

    @classmethod
    def stopped_at(cls, step: int) -> JobResult:
        return cls(step=step, stopped=True)
