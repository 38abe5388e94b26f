"""`bert-jax predict --checkpoint=DIR --text="..." [--input=TEXT] [--output=F.jsonl]`.

A fine-tuned model on new text, as `transformers`' text-classification and
token-classification pipelines run one: the checkpoint is a fine-tuning run's
``best_model/`` (or a bert_jax export with its head), or a `transformers` folder of a
task class (``...ForSequenceClassification``, ``...ForTokenClassification``,
``...ForQuestionAnswering``, ``...ForMultipleChoice``; BERT or ModernBERT); its labels are
the ones it records (``task.json``, ``id2label``), else ``LABEL_0``, ``LABEL_1``, ....

- A sentence classifier: each text's label and its probability (all labels' in
  ``--output``); a TAB in a text separates sentence A from sentence B (a pair task's
  input). A one-output head (STS-B, a regression on own files) gives its score.
- A token tagger: the text split into words at spaces and punctuation (as BERT's basic
  tokenizer splits, and as CoNLL files are written), each word's tag (its first piece's),
  and the entities its IOB tags make (``Angela Merkel/PER``).
- A multiple-choice model (SWAG): a text is ``CONTEXT<TAB>ENDING<TAB>ENDING...`` (two or
  more endings, as many as each text has); each ending is scored after the context (as
  SWAG's rows are encoded, ``[CLS] context [SEP] ending [SEP]``) and the best one is the
  answer, with its probability among them.
- A question-answering (span) model: a text is ``QUESTION<TAB>PASSAGE``; the answer is
  the passage's best span as SQuAD's evaluation decodes it (windows of
  ``--max_seq_length``, default 384, every ``--doc_stride`` 128 tokens; the question cut
  at 64), with its probability among the n-best spans and the SQuAD 2.0 null-score
  difference (above 0: the model would rather answer nothing).

The texts: each ``--text`` (the flag may be repeated), then each line of ``--input``.
Printed a line per text; ``--output`` writes each as a JSON line, whole, once every text is
done (an existing non-empty one is refused unless ``--overwrite``). A text longer than
``--max_seq_length`` (default: the longest text's, within the checkpoint's position table)
is cut, said in one warning line (a cut tagger's words past the row are tagged ``O``). In
Python: ``bert_jax.predict(checkpoint, texts)`` returns the same records.
"""

from __future__ import annotations

import re

import jax
import numpy as np
from absl import flags, logging

from bert_jax import convert
from bert_jax.commands import checkpoint_text
from bert_jax.convert import layout
from bert_jax.data.progress import ProgressLines
from bert_jax.model import batched, heads
from bert_jax.model.numerics import Numerics
from bert_jax.tasks import ner, scorers, squad_answers, squad_examples, squad_windows

FLAGS = flags.FLAGS

_WORD = re.compile(r"\w+|[^\w\s]")  # a word, or one punctuation mark


def define_flags() -> None:
    flags.DEFINE_string("checkpoint", None, "A fine-tuned best_model/, or a transformers task folder.")
    checkpoint_text.define_text_flags(
        "A text (TAB between a pair's sentences, a question and its passage, a context and its endings)"
    )
    flags.DEFINE_integer(
        "doc_stride", 128, "Question answering: tokens between passage windows.", lower_bound=1
    )
    flags.mark_flags_as_required(["checkpoint"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)
    texts = checkpoint_text.texts_given("to predict")
    records = predict(
        FLAGS.checkpoint, texts, FLAGS.max_seq_length, FLAGS.vocab_file, FLAGS.do_lower_case,
        FLAGS.batch_size, FLAGS.compute_dtype, FLAGS.doc_stride, checkpoint_text.text_named,
    )  # fmt: skip
    for record in records:
        print(shown(record))
    checkpoint_text.write_records(records, "")


def shown(record: dict) -> str:
    """One line: the label (probability) or score, or the tagged words and entities, then
    the text."""
    if "tags" in record:
        words = " ".join(
            w if t == "O" else f"{w}/{t}" for w, t in zip(record["words"], record["tags"], strict=True)
        )
        found = ", ".join(f"{e['text']}/{e['type']}" for e in record["entities"]) or "none"
        return f"{words}\n  entities: {found}"
    if "label" in record:
        return f"{record['label']} ({record['probability']:.3f})\t{record['text']}"
    if "answer" in record:
        answer, null = record["answer"] or "(no span)", record["null_score_diff"]
        return f"{answer} ({record['probability']:.3f}; null {null:+.2f})\t{record['question']}"
    if "ending" in record:
        return f"{record['ending']} ({record['probability']:.3f})\t{record['context']}"
    return f"{record['score']:.4f}\t{record['text']}"


def predict(
    checkpoint: str,
    texts: list[str],
    max_seq_length: int | None = None,
    vocab_file: str | None = None,
    do_lower_case: bool | None = None,
    batch_size: int = 32,
    compute_dtype: str = "float32",
    doc_stride: int = 128,
    named=None,
) -> list[dict]:
    """For each text, a sentence classifier's ``{"text", "label", "probability",
    "probabilities": {label: p}}`` (a one-output head: ``{"text", "score"}``), or a
    tagger's ``{"text", "words", "tags", "entities": [{"text", "type", "start", "end"}]}``
    (``start``/``end`` the entity's first and last word), or a span model's ``{"text",
    "question", "answer", "probability", "null_score_diff"}``, or a multiple-choice model's
    ``{"text", "context", "endings", "choice", "ending", "probability", "probabilities"}``
    (``choice`` the best ending's index, ``probabilities`` one per ending). `named(i)` names text i in a
    refusal (default ``text i+1``). The Python API's ``bert_jax.predict``."""
    if isinstance(texts, str):
        texts = [texts]
    path = checkpoint_text.local_checkpoint(checkpoint)
    params, config = checkpoint_text.load_params(checkpoint, path, vocab_file)
    params, head = convert.split_task_head(params)  # predict runs every kind (`layout.TASK_HEADS`)
    if head is None:
        held = [convert.HEADS[k] for k in convert.HEADS if k in params] or ["the encoder alone"]
        raise ValueError(
            f"--checkpoint {checkpoint} holds {', '.join(held)}: predict runs a fine-tuned sentence "
            "classifier, token tagger, span or multiple-choice model (a run's best_model/, a transformers "
            "...ForSequenceClassification, ...ForTokenClassification, ...ForQuestionAnswering or "
            "...ForMultipleChoice folder)"
        )
    tokenizer = checkpoint_text.tokenizer_for(
        checkpoint, path, config, vocab_file, do_lower_case, max_seq_length
    )
    table = config.max_position_embeddings
    numerics = Numerics(compute_dtype=compute_dtype)
    named = named or (lambda i: f"text {i + 1}")
    kind, tensors = head
    weights = {"bert": params["bert"], layout.head_module_name(kind): tensors}  # the model's names
    if kind == "qa_outputs":
        length = max_seq_length or min(384, table)
        return _answered(texts, weights, config, numerics, tokenizer, length, doc_stride, batch_size, named)
    if kind == "choice_classifier":
        return _chosen(texts, weights, config, numerics, tokenizer, max_seq_length, table, batch_size, named)
    outputs = int(tensors["bias"].shape[0])
    labels = convert.label_names(path) or [f"LABEL_{i}" for i in range(outputs)]
    if len(labels) != outputs:
        raise ValueError(f"--checkpoint {checkpoint} names {len(labels)} labels for its {outputs} outputs")
    if kind == "classifier":
        return _classified(
            texts, weights, config, numerics, tokenizer, labels, max_seq_length, table, batch_size
        )
    return _tagged(texts, weights, config, numerics, tokenizer, labels, max_seq_length, table, batch_size)


def _classified(texts, weights, config, numerics, tokenizer, labels, length, table, batch_size) -> list[dict]:
    parts = [t.split("\t", 1) for t in texts]
    a = [p[0] for p in parts]
    b = [p[1] if len(p) == 2 else None for p in parts] if any(len(p) == 2 for p in parts) else None
    batch, lengths, length = _pairs(tokenizer, a, b, length, table)
    _warn_cut(lengths, length)
    model = heads.BertForSequenceClassification(config, len(labels), numerics)
    (logits,) = _run(model, weights, batch, config, numerics, batch_size)
    if len(labels) == 1:
        return [{"text": t, "score": float(x[0])} for t, x in zip(texts, logits, strict=True)]
    probs = np.asarray(jax.nn.softmax(logits, axis=-1), np.float64)
    return [
        {
            "text": t,
            "label": labels[int(p.argmax())],
            "probability": float(p.max()),
            "probabilities": {name: float(x) for name, x in zip(labels, p, strict=True)},
        }
        for t, p in zip(texts, probs, strict=True)
    ]


def _tagged(texts, weights, config, numerics, tokenizer, labels, length, table, batch_size) -> list[dict]:
    words = [_WORD.findall(t) for t in texts]
    placeholder = "O" if "O" in labels else labels[0]
    sentences = [ner.Sentence(w, [placeholder] * len(w), i + 1) for i, w in enumerate(words)]
    unique = list(dict.fromkeys(x for w in words for x in w))
    pieces = dict(zip(unique, tokenizer.tokenize(unique), strict=True))
    lengths = np.array([2 + sum(max(len(pieces[x]), 1) for x in w) for w in words])  # [CLS] .. [SEP]
    length = length or min(max(int(lengths.max()), 3), table)
    batch, first = ner.featurize(sentences, tokenizer, length, tuple(labels))
    _warn_cut(lengths, length)
    model = heads.BertForTokenClassification(config, len(labels), numerics)
    (logits,) = _run(model, weights, batch, config, numerics, batch_size)
    records = []
    for t, w, tags in zip(texts, words, ner.decode(logits, first, tuple(labels)), strict=True):
        found = [
            {"text": " ".join(w[s : e + 1]), "type": kind, "start": s, "end": e}
            for kind, s, e in scorers.entities(tags)
        ]
        records.append({"text": t, "words": w, "tags": tags, "entities": found})
    return records


def _chosen(texts, weights, config, numerics, tokenizer, length, table, batch_size, named) -> list[dict]:
    contexts, endings = [], []
    for i, text in enumerate(texts):
        context, *options = text.split("\t")
        if len(options) < 2 or not all(o.strip() for o in options):
            raise ValueError(
                f"{named(i)}: a multiple-choice model reads CONTEXT<TAB>ENDING<TAB>ENDING..., two or more "
                f"endings, none empty; it has {sum(bool(o.strip()) for o in options)}"
            )
        contexts.append(context)
        endings.append(options)
    a = [c for c, options in zip(contexts, endings, strict=True) for _ in options]
    b = [o for options in endings for o in options]
    flat, lengths, length = _pairs(tokenizer, a, b, length, table)
    starts = np.cumsum([0] + [len(options) for options in endings[:-1]])  # each text's first pair
    _warn_cut(np.maximum.reduceat(lengths, starts), length)  # a text is cut where any pair is
    # every (context, ending) pair a row of one choice: texts may have different numbers of endings
    batch = {k: v[:, None] for k, v in flat.items()}
    model = heads.BertForMultipleChoice(config, numerics)
    (scores,) = _run(model, weights, batch, config, numerics, batch_size)
    scores, records = np.asarray(scores, np.float64)[:, 0], []
    for text, context, options, at in zip(texts, contexts, endings, starts, strict=True):
        p = np.asarray(jax.nn.softmax(scores[at : at + len(options)]), np.float64)
        best = int(p.argmax())
        records.append(
            {
                "text": text,
                "context": context,
                "endings": options,
                "choice": best,
                "ending": options[best],
                "probability": float(p[best]),
                "probabilities": [float(x) for x in p],
            }
        )
    return records


def _answered(texts, weights, config, numerics, tokenizer, length, stride, batch_size, named) -> list[dict]:
    examples = []
    for i, text in enumerate(texts):
        question, tab, passage = text.partition("\t")
        if not tab or not passage.strip():
            raise ValueError(
                f"{named(i)}: a question-answering model reads QUESTION<TAB>PASSAGE, and it has no passage"
            )
        words = squad_examples.split_words(passage)[0]
        examples.append(squad_examples.SquadExample(str(i), question, words, "", -1, -1, False))
    query = min(64, length - 4)
    arrays, windows = squad_windows.featurize(examples, tokenizer, length, min(stride, length), query)
    model = heads.BertForQuestionAnswering(config, numerics)
    start, end = _run(model, weights, arrays, config, numerics, batch_size)
    lower = getattr(tokenizer, "do_lower_case", True)
    _, null_odds, nbest = squad_answers.predict_answers(
        examples, windows, arrays["input_ids"], start, end, tokenizer.vocab, lower, version_2=True
    )
    records = []
    for ex, text in zip(examples, texts, strict=True):
        best = next((c for c in nbest[ex.qas_id] if c["text"]), {"text": "", "probability": 0.0})
        records.append(
            {
                "text": text,
                "question": ex.question,
                "answer": best["text"],
                "probability": float(best["probability"]),
                "null_score_diff": float(null_odds[ex.qas_id]),
            }
        )
    return records


def _pairs(tokenizer, a: list[str], b: list[str] | None, length: int | None, table: int) -> tuple:
    """The rows of the pairs (a[i], b[i]) at `length` (None: the longest pair's, within the
    position `table`), each pair's own length, and the length used."""
    if not length:
        length = min(int(max(tokenizer.encode_pairs_measured(a, b, 3)[1])), table)
    batch, lengths = tokenizer.encode_pairs_measured(a, b, length)
    return batch, lengths, length


def _run(model, weights: dict, batch: dict, config, numerics: Numerics, batch_size: int) -> tuple:
    """`model`'s outputs on every row of `batch`, `batch_size` rows a pass (refused in one
    line where a pass's activations cannot fit the device)."""
    rows, length = len(batch["input_ids"]), batch["input_ids"].shape[-1]
    checkpoint_text.check_batch_memory(config, numerics, min(batch_size, rows), length, batch_size)

    @jax.jit
    def outputs(w: dict, *x: jax.Array) -> tuple:
        out = model.apply({"params": w}, *x)
        return out if isinstance(out, tuple) else (out,)  # the span head's (start, end)

    inputs = [batch[k] for k in ("input_ids", "input_mask", "segment_ids")]
    bar = ProgressLines("predict", rows, "rows", only_if_long=True)  # a line each 10 s
    out = batched.apply_in_batches(outputs, weights, inputs, batch_size, progress=bar.advance)
    bar.close()
    return out


def _warn_cut(lengths: np.ndarray, length: int) -> None:
    cut = int((lengths > length).sum())
    if cut:
        print(
            f"warning: {cut:,} of {len(lengths):,} texts are longer than --max_seq_length={length} "
            f"and were cut",
            flush=True,
        )
