"""A pod run on a bucket that misbehaves, in short forms of the bench scripts
(`bench/bucket_faults.py`, `bench/bucket_soak.py`): 2 `bert-jax pretrain` processes with a
``gs://`` workdir on the GCS emulator, every run's per-step losses compared exactly with
one uninterrupted run's.

- Faults between the run and the bucket (5% of requests answered 503 or 429 or dropped,
  before or after the bucket acted; 2% delayed up to 2 s): the same losses.
- The bucket gone for longer than the retry policy's bound (``BERT_JAX_BUCKET_RETRY``,
  15 s here): the run stops in one line naming the path, exit 74; its committed
  checkpoints stay; with the bucket back, a restart resumes from the last and finishes.
- Kills: the job of a random worker SIGKILLed at a step, then during a checkpoint save,
  each worker under the real restart loop of ``launch/tpu_pod.py run``; both loops restart
  with no hand and end ``exited 0``; nothing is set aside or left uncommitted.

The waits poll; their timeouts only end a hang.
"""

import re

import pytest

from bench import bucket_faults, bucket_soak
from tests.helpers import pod

STEPS, EVERY = 30, 5


@pytest.fixture(scope="module")
def bucket(tmp_path_factory):
    with pod.emulator(tmp_path_factory.mktemp("gcs")) as url:
        yield url


@pytest.fixture(scope="module")
def expected(bucket) -> dict[int, float]:
    """The uninterrupted 2-process run's loss at each step."""
    losses = bucket_faults.reference(bucket, STEPS, EVERY)
    assert sorted(losses) == list(range(1, STEPS + 1))
    return losses


def test_faults_between_the_run_and_the_bucket_change_no_loss(bucket, expected) -> None:
    front = ["--fail=0.05", "--delay_share=0.02", "--max_delay_s=2", "--seed=3"]
    run = bucket_faults.faulty_run(bucket, STEPS, EVERY, front)
    seen = run["stats"]
    assert all(seen.get(k, 0) > 0 for k in ("503", "429", "drop", "drop_reply", "delay")), seen
    assert bucket_faults.differing(run["losses"], expected) == []


def test_a_bucket_gone_past_the_bound_stops_the_run_in_one_line_and_a_restart_resumes(
    bucket, expected
) -> None:
    retry = "within_s=15,first_s=0.5,max_s=4,request_s=10"
    run = bucket_faults.outage_run(bucket, STEPS, EVERY, down_at=10, retry=retry)
    # The host that met the bucket's silence stops with 74; the other loses its peer (75, or
    # 134: JAX's coordination service ends it), as a restart loop expects.
    codes, lines = run["codes"], run["last_lines"]
    assert 74 in codes and set(codes) <= {74, 75, 134}, (codes, run["tails"])
    line = lines[codes.index(74)]  # the job's last line: one line, naming the path
    assert re.fullmatch(
        r"bert-jax pretrain: error: gs://bkt/outage/\S+ cannot be reached \(.+; retried for 15 s, "
        r"BERT_JAX_BUCKET_RETRY\): .+  \[BERT_JAX_DEBUG=1 for the traceback\]",
        line,
    ), line
    # The line above says the 15 s bound stopped it, and it did not then wait for the save
    # in flight (orbax's hosts wait 300 s for each other there; it once ended both hosts
    # with 134 and no line): the bound plus the last request's own limits, with room for a
    # loaded machine; then JAX's heartbeat timeout (100 s) at most for the other host.
    assert run["first_stopped_s"] < 120 and run["stopped_after_s"] < 300, run["tails"]
    assert run["committed_before"] and set(run["committed_before"]) <= set(run["committed_after"])
    assert run["restart_codes"] == [0, 0], run["restart_tail"]
    assert run["resumed_from"] == max(run["committed_after"])
    assert bucket_faults.differing(run["losses"], expected) == []


def test_kills_at_steps_and_saves_restart_through_the_loop_with_the_same_losses(
    bucket, expected, tmp_path
) -> None:
    run = bucket_soak.soak(bucket, tmp_path, expected, cycles=2, steps=STEPS, every=EVERY, seed=0)
    assert run["statuses"] == ["exited 0", "exited 0"], run["tails"]
    assert run["kills"][0]["hit"] == "a step"
    assert run["kills"][1]["hit"] in ("a save (no commit file yet)", "just after a save")
    assert run["restarts"] == [2, 2] and run["not_restarted"] == [0, 0]
    assert run["damaged"] == 0 and run["uncommitted"] == []
    assert run["steps_logged"] == STEPS and run["differing"] == []
