"""Whether a vocabulary can belong to a checkpoint: the BERT special tokens present, and
no more tokens than the model's embedding rows (exactly as many, where asked)."""

from __future__ import annotations

from bert_jax.data.tokenization import SPECIAL_TOKENS, Tokenizer


def check_vocab_fits(
    tokenizer: Tokenizer, model_vocab_size: int, checkpoint: str, exact: bool = False
) -> None:
    """Refuses, in one line, a vocabulary that cannot belong to `checkpoint`: more tokens
    than the model's ``vocab_size`` (with `exact`, any other number), or a BERT special
    token missing (both sizes, or the missing tokens, are named)."""
    vocab_file = getattr(tokenizer, "vocab_file", "the vocabulary")
    present = set(tokenizer.vocab)
    missing = [t for t in SPECIAL_TOKENS if t not in present]
    if missing:
        raise ValueError(
            f"{vocab_file} lacks the special token(s) {', '.join(missing)} that a BERT "
            f"checkpoint needs: wrong vocab for {checkpoint}"
        )
    size = len(tokenizer.vocab)
    if size > model_vocab_size or (exact and size != model_vocab_size):
        raise ValueError(
            f"{vocab_file} has {size} tokens but {checkpoint} was trained with "
            f"{model_vocab_size}: wrong vocab for this checkpoint (pass its own vocab_file)"
        )
