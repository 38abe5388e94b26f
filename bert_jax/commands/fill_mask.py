"""`bert-jax fill-mask --checkpoint=PATH --text="Paris is the [MASK] of France." [--input=TEXT]
[--top_k=5] [--output=F.jsonl]`.

What a pre-trained checkpoint's masked-LM head predicts at each mask written in a text
(``[MASK]``, or the mask string of the checkpoint's ``tokenizer.json``): its `top_k` tokens
with their probabilities, and the text with the most likely ones filled in, as
`transformers`' fill-mask pipeline gives them. The texts: each ``--text`` (the flag may be
repeated), then each line of ``--input``. The checkpoint: a pre-training workdir, a
bert_jax export, a `transformers` folder with its MLM head (``BertForPreTraining``,
``BertForMaskedLM``, ``ModernBertForMaskedLM``) or an original TF checkpoint; one without
the head is refused in one line. In Python: ``bert_jax.fill_mask(checkpoint, texts)``.

Printed: each text, then a line per mask (``1. capital 0.912  2. ...``). ``--output``
writes the same as JSON lines (``text``, ``filled``, ``masks``: a list per mask of
``{"token", "id", "score"}``), whole, once every text is done; an existing non-empty one is
refused unless ``--overwrite``. A text without a mask, or whose mask lies past
``--max_seq_length``, is refused in one line naming it (``--text 2``, ``line 7 of F``).
"""

from __future__ import annotations

from absl import flags, logging

from bert_jax.commands import checkpoint_text
from bert_jax.data import masked_text
from bert_jax.data.progress import ProgressLines
from bert_jax.model import fill_mask
from bert_jax.model.numerics import Numerics

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string(
        "checkpoint", None, "Pre-training workdir, or a bert_jax, HF or TF checkpoint with an MLM head."
    )
    flags.DEFINE_integer("top_k", 5, "Tokens shown per mask, most likely first.", lower_bound=1)
    checkpoint_text.define_text_flags("A text with [MASK] in it")
    flags.mark_flags_as_required(["checkpoint"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)
    texts = checkpoint_text.texts_given("with [MASK] in them")
    records = fill(
        FLAGS.checkpoint, texts, FLAGS.top_k, FLAGS.max_seq_length, FLAGS.vocab_file, FLAGS.do_lower_case,
        FLAGS.batch_size, FLAGS.compute_dtype, checkpoint_text.text_named,
    )  # fmt: skip
    for record in records:
        print(record["text"])
        for k, predictions in enumerate(record["masks"]):
            shown = "  ".join(f"{j + 1}. {p['token']} {p['score']:.3f}" for j, p in enumerate(predictions))
            print(f"  mask {k + 1}: {shown}")
        print(f"  filled: {record['filled']}")
    masks = sum(len(r["masks"]) for r in records)
    checkpoint_text.write_records(records, f", {masks} masks")


def fill(
    checkpoint: str,
    texts: list[str],
    top_k: int = 5,
    max_seq_length: int | None = None,
    vocab_file: str | None = None,
    do_lower_case: bool | None = None,
    batch_size: int = 32,
    compute_dtype: str = "float32",
    named=None,
) -> list[dict]:
    """For each text: ``{"text", "filled", "masks"}``, ``masks`` a list per mask (in the
    text's order) of its `top_k` predictions ``{"token", "id", "score"}``, most likely
    first; ``filled`` the text with each mask's first prediction. Each text is one row of
    `max_seq_length` tokens (None: the longest text's, up to the checkpoint's position
    table); a longer one is cut after its last mask, said in a warning line. `named(i)`
    names text i in a refusal (default ``text i+1``). The Python API's ``bert_jax.fill_mask``."""
    if isinstance(texts, str):
        texts = [texts]
    path = checkpoint_text.local_checkpoint(checkpoint)
    params, config = checkpoint_text.load_params(checkpoint, path, vocab_file)
    if "mlm" not in params:
        raise ValueError(
            f"--checkpoint {checkpoint} has no masked-LM head, only what fine-tuning or features "
            "read: fill-mask needs one (a pre-training workdir, a BertForPreTraining, BertForMaskedLM "
            "or ModernBertForMaskedLM folder, an original TF checkpoint)"
        )
    tokenizer = checkpoint_text.tokenizer_for(
        checkpoint, path, config, vocab_file, do_lower_case, max_seq_length
    )
    if top_k > config.vocab_size:
        raise ValueError(f"--top_k={top_k} is more than the vocabulary's {config.vocab_size:,} tokens")
    named = named or (lambda i: f"text {i + 1}")
    table = config.max_position_embeddings
    rows = masked_text.encode(tokenizer, texts, max_seq_length, named)
    if max_seq_length is None and rows.lengths.max() > table:
        rows = masked_text.encode(tokenizer, texts, table, named)
    length = rows.batch["input_ids"].shape[1]
    numerics = Numerics(compute_dtype=compute_dtype)
    checkpoint_text.check_batch_memory(config, numerics, min(batch_size, len(texts)), length, batch_size)
    cut = int((rows.lengths > length).sum())
    if cut:
        print(
            f"warning: {cut:,} of {len(texts):,} texts are longer than --max_seq_length={length} "
            f"and were cut after their last mask (the longest: {rows.lengths.max():,} tokens)",
            flush=True,
        )
    bar = ProgressLines("fill-mask", len(texts), "texts", only_if_long=True)  # a line each 10 s
    ids, probs = fill_mask.top_tokens(
        params, config, rows.batch, rows.positions, top_k, batch_size, numerics, progress=bar.advance
    )
    bar.close()
    marker = masked_text.mask_string(tokenizer)
    records = []
    for i, text in enumerate(texts):
        masks = [
            [
                {"token": masked_text.piece_text(tokenizer.vocab[int(t)]), "id": int(t), "score": float(p)}
                for t, p in zip(ids[i, k], probs[i, k], strict=True)
            ]
            for k in range(int(rows.counts[i]))
        ]
        best = [m[0]["token"] for m in masks]
        records.append({"text": text, "filled": masked_text.filled(text, marker, best), "masks": masks})
    return records
