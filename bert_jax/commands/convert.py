"""`bert-jax convert --src=PATH --dst=PATH --dst_format=bert_jax|hf|tf` (source detected)."""

from __future__ import annotations

from absl import flags, logging

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string(
        "src",
        None,
        "A Hugging Face folder, an original TF checkpoint, or a "
        "bert_jax checkpoint/workdir; the format is detected.",
    )
    flags.DEFINE_string("dst", None, "Where to write (a folder; for tf, a folder or a prefix).")
    flags.DEFINE_enum("dst_format", "bert_jax", ["bert_jax", "hf", "tf"], "Output format.")
    flags.mark_flags_as_required(["src", "dst"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise SystemExit(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)
    from bert_jax import convert

    params, config = convert.load_checkpoint(FLAGS.src)
    convert.save_checkpoint(FLAGS.dst, params, config, FLAGS.dst_format)
    heads = " with MLM/NSP heads" if "mlm" in params else ""
    print(
        f"{convert.detect_format(FLAGS.src)} {FLAGS.src} → {FLAGS.dst_format} {FLAGS.dst} "
        f"(L={config.num_hidden_layers} H={config.hidden_size}{heads})"
    )
