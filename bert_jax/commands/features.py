"""`bert-jax features --checkpoint=PATH --input=TEXT --output=F.npy [--layers=-1]`.

Beside ``F.npy``, ``F.tokens.jsonl`` holds each example's pieces (``[CLS]`` to the last
``[SEP]``), one JSON list a line: what each row of the array is, and where its padding
starts (as the original `extract_features.py` names each feature's token). Examples longer
than ``--max_seq_length`` are cut (the longer segment first), said in one warning line.
An existing non-empty ``--output`` (or its tokens file) is refused unless ``--overwrite``;
both are written whole, once the features are computed (the array last). Refused at start,
in one line naming the flag: an ``--output`` whose folder cannot be made or written, a
``--max_seq_length`` longer than the checkpoint's position table (a model with learned
absolute positions), and sizes whose output or activations cannot fit this host's or
device's memory (`training.memory_fit`).
"""

from __future__ import annotations

import io
import json
import os

import numpy as np
from absl import flags, logging

from bert_jax.commands import checkpoint_text
from bert_jax.data import tokenization, user_paths
from bert_jax.data.progress import ProgressLines
from bert_jax.model import features
from bert_jax.model.config import BertConfig
from bert_jax.model.numerics import DTYPES, Numerics
from bert_jax.storage import atomic_files
from bert_jax.training import memory_fit

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string("checkpoint", None, "HF folder, original TF checkpoint or bert_jax checkpoint.")
    flags.DEFINE_string("input", None, "Text file: one example per line, TAB between A and B.")
    flags.DEFINE_string(
        "output",
        None,
        "Output .npy: [examples, tokens, hidden x layers] (sum: [.., hidden]; stack: [.., layers, hidden]).",
    )
    flags.DEFINE_list("layers", ["-1"], "Layers to extract (-1 = last; 0 = embeddings; 'all' = 1..L).")
    flags.DEFINE_enum(
        "combine", "concat", ["concat", "sum", "stack"], "Combine layers: concat, (weighted) sum, stack."
    )
    flags.DEFINE_list("layer_weights", None, "Weights of --combine=sum, one per layer (default all 1).")
    flags.DEFINE_integer("max_seq_length", 128, "Tokens per example (padded/truncated).")
    flags.register_validator(
        "max_seq_length", lambda v: v >= 3, "must be at least 3 (room for [CLS], a token and [SEP])"
    )
    checkpoint_text.define_vocab_flags()
    flags.DEFINE_integer("batch_size", 32, "Examples per forward pass.", lower_bound=1)
    flags.DEFINE_enum(
        "compute_dtype", "float32", list(DTYPES), "Compute dtype (whatever the checkpoint was trained in)."
    )
    flags.DEFINE_bool("overwrite", False, "Replace an existing --output.")
    flags.mark_flags_as_required(["checkpoint", "input", "output"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)

    checkpoint = checkpoint_text.local_checkpoint(FLAGS.checkpoint)
    user_paths.input_file(FLAGS.input, "--input")
    user_paths.output_file(FLAGS.output, "--output", FLAGS.overwrite)
    user_paths.output_file(tokens_path(FLAGS.output), "--output", FLAGS.overwrite)
    params, config = checkpoint_text.load_params(FLAGS.checkpoint, checkpoint, FLAGS.vocab_file)
    tokenizer = checkpoint_text.tokenizer_for(
        FLAGS.checkpoint, checkpoint, config, FLAGS.vocab_file, FLAGS.do_lower_case, FLAGS.max_seq_length
    )
    texts_a, texts_b = features.read_examples(FLAGS.input)
    try:
        layers = features.parse_layers(FLAGS.layers, config.num_hidden_layers)
    except ValueError as e:  # "layers ... out of range ...": the flag's name
        raise ValueError(f"--{e}") from None
    weights = [float(x) for x in FLAGS.layer_weights] if FLAGS.layer_weights else None
    numerics = Numerics(compute_dtype=FLAGS.compute_dtype)
    check_memory(config, numerics, len(texts_a), len(layers))
    batch, lengths = tokenizer.encode_pairs_measured(texts_a, texts_b, FLAGS.max_seq_length)
    if (cut := int(np.sum(lengths > FLAGS.max_seq_length))) > 0:
        print(
            f"warning: {cut:,} of {len(lengths):,} examples of {FLAGS.input} are longer than "
            f"--max_seq_length={FLAGS.max_seq_length} and were cut (the longest: {lengths.max():,} tokens)",
            flush=True,
        )
    bar = ProgressLines("features", len(texts_a), "examples")
    out = features.extract(
        params["bert"], config, batch, layers, FLAGS.batch_size, FLAGS.combine, weights, numerics,
        progress=bar.advance,
    )  # fmt: skip
    bar.close()
    out = np.asarray(out, np.float32)  # as documented, whatever --compute_dtype
    buffer = io.BytesIO()
    np.save(buffer, out)
    pieces = "".join(json.dumps(row) + "\n" for row in row_pieces(tokenizer, batch))
    with user_paths.removed_if_failed(os.path.dirname(FLAGS.output)):
        atomic_files.write_bytes(tokens_path(FLAGS.output), pieces.encode("utf-8"))
        atomic_files.write_bytes(FLAGS.output, buffer.getvalue())  # local or gs://, written whole
    print(f"wrote {FLAGS.output}: {out.shape} ({FLAGS.combine} of layers {layers}); its pieces: "
          f"{tokens_path(FLAGS.output)}")  # fmt: skip


def tokens_path(output: str) -> str:
    """``F.npy`` → ``F.tokens.jsonl``: each row's pieces, beside the array."""
    return f"{output.removesuffix('.npy')}.tokens.jsonl"


def row_pieces(tokenizer: tokenization.Tokenizer, batch: dict[str, np.ndarray]) -> list[list[str]]:
    """The vocabulary strings of each row's real (unpadded) positions."""
    vocab = tokenizer.vocab
    rows = zip(batch["input_ids"], batch["input_mask"], strict=True)
    return [[vocab[int(i)] for i in ids[mask > 0]] for ids, mask in rows]


def check_memory(config: BertConfig, numerics: Numerics, examples: int, num_layers: int) -> None:
    """The output (and the token ids) on the host, one batch's layer on the device."""
    tokens = FLAGS.max_seq_length
    width = config.hidden_size * (1 if FLAGS.combine == "sum" else num_layers)
    memory_fit.refuse_above(
        f"--max_seq_length={tokens}",
        f"the output for {examples:,} examples of --input ({tokens} tokens x {width} floats each)",
        examples * tokens * (width * 4 + 12),
        memory_fit.HOST,
        "lower --max_seq_length, give fewer --layers or split --input",
    )
    checkpoint_text.check_batch_memory(
        config, numerics, min(FLAGS.batch_size, examples), tokens, FLAGS.batch_size
    )
