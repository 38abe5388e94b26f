"""`bert-jax eval-squad --version=1.1|2.0 DATA_FILE PRED_FILE [--na_prob_file=FILE]`.

Prints the JSON the official ``evaluate-v1.1.py`` / ``evaluate-v2.0.py`` print for the
same files (v1.1 on one line, v2.0 indented), computed by `bert_jax.tasks.scorers`. Warnings
(version mismatch, unanswered questions) go to stderr, so stdout is only the JSON.
``--out_file`` writes the metrics there instead; an existing one is refused unless
``--overwrite``.
"""

from __future__ import annotations

import json
import os
import sys

from absl import flags

from bert_jax.data import user_paths
from bert_jax.storage import atomic_files
from bert_jax.tasks import scorers, squad

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_enum("version", "1.1", ["1.1", "2.0"], "SQuAD version of the data file.")
    flags.DEFINE_string("na_prob_file", None, "v2.0: JSON of no-answer probabilities per question.")
    flags.DEFINE_float(
        "na_prob_thresh", 1.0, 'v2.0: predict "" where the no-answer probability exceeds this.'
    )
    flags.DEFINE_string("out_file", None, "Write the metrics JSON here instead of stdout.")
    flags.DEFINE_bool("overwrite", False, "Replace an existing --out_file.")


def _load(path: str, what: str):
    user_paths.input_file(path, what)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{what} {path} is not valid JSON ({e})") from None


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        raise ValueError("usage: bert-jax eval-squad --version=1.1|2.0 DATA_FILE PRED_FILE")

    data_file, pred_file = argv[1], argv[2]
    user_paths.input_file(data_file, "DATA_FILE")
    if FLAGS.out_file:
        user_paths.output_file(FLAGS.out_file, "--out_file", FLAGS.overwrite)
    document = squad.load_json(data_file)  # answers are not checked: the official scripts
    data = document["data"]  # read only their text, and so does scoring here
    predictions = _load(pred_file, "PRED_FILE")
    if not isinstance(predictions, dict):
        raise ValueError(f"PRED_FILE {pred_file} must map question ids to answer strings")
    if next(iter(scorers.questions(data)), None) is None:
        raise ValueError(f'DATA_FILE {data_file} holds no questions (no "qas" in its "data")')
    if FLAGS.version == "1.1":
        version = document.get("version")
        if version != "1.1":
            print(f"Evaluation expects v-1.1, but got dataset with v-{version}", file=sys.stderr)
        result = scorers.squad_v1(data, predictions)
        text = json.dumps(result)
    else:
        na_probs = _load(FLAGS.na_prob_file, "--na_prob_file") if FLAGS.na_prob_file else None
        try:
            result = scorers.squad_v2(data, predictions, na_probs, FLAGS.na_prob_thresh)
        except scorers.MissingNoAnswerProbabilities as e:
            raise ValueError(f"--na_prob_file {FLAGS.na_prob_file}: {e} (of DATA_FILE {data_file})") from None
        except ValueError as e:  # a question without a prediction
            raise ValueError(f"PRED_FILE {pred_file}: {e} (of DATA_FILE {data_file})") from None
        text = json.dumps(result, indent=2)
    if FLAGS.out_file:
        with user_paths.removed_if_failed(os.path.dirname(FLAGS.out_file)):
            atomic_files.write_text(FLAGS.out_file, json.dumps(result))
    else:
        print(text)
