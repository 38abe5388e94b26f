"""Whether a vocabulary can belong to a checkpoint: the BERT special tokens present, and
no more tokens than the model's embedding rows (exactly as many, where asked).

A Hugging Face ``tokenizer.json`` must have exactly as many tokens as the checkpoint's
``vocab_size`` (ModernBERT's ships with its unused rows as tokens, 50,368 for 50,368); its
special tokens' roles are checked when it is loaded (`tokenizer_json`), whatever their
names (``[CLS]`` or ``<s>``)."""

from __future__ import annotations

from bert_jax.data.tokenization import SPECIAL_TOKENS, Tokenizer
from bert_jax.data.tokenizer_json import TokenizerJson


def check_vocab_fits(
    tokenizer: Tokenizer, model_vocab_size: int, checkpoint: str, exact: bool = False
) -> None:
    """Refuses, in one line, a vocabulary that cannot belong to `checkpoint`: more tokens
    than the model's ``vocab_size`` (with `exact`, or for a tokenizer.json, any other
    number), or a BERT special token missing (both sizes, or the missing tokens, are named)."""
    vocab_file = getattr(tokenizer, "vocab_file", "the vocabulary")
    size = len(tokenizer.vocab)
    if isinstance(tokenizer, TokenizerJson):
        if size != model_vocab_size:
            raise ValueError(
                f"{vocab_file} has {size} tokens but {checkpoint} was trained with "
                f"{model_vocab_size}: wrong tokenizer.json for this checkpoint (pass its own)"
            )
        return
    present = set(tokenizer.vocab)
    missing = [t for t in SPECIAL_TOKENS if t not in present]
    if missing:
        raise ValueError(
            f"{vocab_file} lacks the special token(s) {', '.join(missing)} that a BERT "
            f"checkpoint needs: wrong vocab for {checkpoint}"
        )
    if size > model_vocab_size or (exact and size != model_vocab_size):
        raise ValueError(
            f"{vocab_file} has {size} tokens but {checkpoint} was trained with "
            f"{model_vocab_size}: wrong vocab for this checkpoint (pass its own vocab_file)"
        )
