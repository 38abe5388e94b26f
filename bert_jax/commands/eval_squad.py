"""`bert-jax eval-squad --version=1.1|2.0 DATA_FILE PRED_FILE [--na_prob_file=FILE]`.

Prints the JSON the official ``evaluate-v1.1.py`` / ``evaluate-v2.0.py`` print for the
same files (v1.1 on one line, v2.0 indented), computed by `bert_jax.tasks.scorers`. Warnings
(version mismatch, unanswered questions) go to stderr, so stdout is only the JSON.
"""

from __future__ import annotations

import json
import sys

from absl import flags

from bert_jax.tasks import scorers, squad

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_enum("version", "1.1", ["1.1", "2.0"], "SQuAD version of the data file.")
    flags.DEFINE_string("na_prob_file", None, "v2.0: JSON of no-answer probabilities per question.")
    flags.DEFINE_float(
        "na_prob_thresh", 1.0, 'v2.0: predict "" where the no-answer probability exceeds this.'
    )
    flags.DEFINE_string("out_file", None, "Write the metrics JSON here instead of stdout.")


def _load(path: str, what: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise SystemExit(f"eval-squad: {what} {path} does not exist") from None
    except json.JSONDecodeError as e:
        raise SystemExit(f"eval-squad: {what} {path} is not valid JSON ({e})") from None


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        raise SystemExit("usage: bert-jax eval-squad --version=1.1|2.0 DATA_FILE PRED_FILE")

    data_file, pred_file = argv[1], argv[2]
    try:
        document = squad.load_json(data_file)  # answers are not checked: the official
        data = document["data"]  # scripts read only their text, and so does scoring here
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"eval-squad: {e}") from None
    predictions = _load(pred_file, "prediction file")
    if not isinstance(predictions, dict):
        raise SystemExit(f"eval-squad: {pred_file} must map question ids to answer strings")
    try:
        if FLAGS.version == "1.1":
            version = document.get("version")
            if version != "1.1":
                print(f"Evaluation expects v-1.1, but got dataset with v-{version}", file=sys.stderr)
            result = scorers.squad_v1(data, predictions)
            text = json.dumps(result)
        else:
            na_probs = _load(FLAGS.na_prob_file, "no-answer file") if FLAGS.na_prob_file else None
            result = scorers.squad_v2(data, predictions, na_probs, FLAGS.na_prob_thresh)
            text = json.dumps(result, indent=2)
    except ValueError as e:
        raise SystemExit(f"eval-squad: {e}") from None
    if FLAGS.out_file:
        with open(FLAGS.out_file, "w") as f:
            json.dump(result, f)
    else:
        print(text)
