"""Learning a vocabulary of each kind (`build-vocab`, `data.learned_vocab_size`).

- WordPiece (`build_wordpiece_vocab`): a ``vocab.txt``, BERT's rules, SentencePiece's BPE
  trainer for the pieces (why, below).
- SentencePiece (`train_sentencepiece`): a unigram ``.model`` with the BERT special tokens.
- Byte-level BPE (`byte_level_bpe`): a ModernBERT-style Hugging Face ``tokenizer.json``
  (Warner et al., 2024, "Smarter, Better, Faster, Longer"; ModernBERT's tokenizer is
  OLMo's, in turn GPT-NeoX's byte-level BPE), learned with `tokenizers`' `BpeTrainer`:
  NFC (and lower-casing, when asked) as the normaliser, the GPT-2 byte-level
  pre-tokenizer and decoder (no prefix space; every byte is in the vocabulary, so no text
  is unknown), the BERT special tokens ``[PAD] [UNK] [CLS] [SEP] [MASK]`` as ids 0-4
  (``[MASK]`` takes the space before it, as ModernBERT's), and a ``[CLS] A [SEP] B [SEP]``
  post-processor (B's token type 1, as bert_jax's segment ids). A text too small to fill
  `vocab_size` with merges is topped up with ``[unusedN]`` tokens, so the vocabulary has
  exactly the size asked (as ModernBERT's 83 unused tokens). The same text gives the same
  file in every process (tested).
"""

from __future__ import annotations

import collections
import io
from collections.abc import Iterable

import sentencepiece as spm
import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

from bert_jax.data.tokenization import SPECIAL_TOKENS


def train_sentencepiece(
    sentences: list[str], prefix: str, vocab_size: int, do_lower_case: bool = True
) -> str:
    """Trains a unigram SentencePiece model with the BERT special tokens; returns its path."""
    if do_lower_case:
        sentences = [s.lower() for s in sentences]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_prefix=prefix,
        vocab_size=vocab_size,
        pad_id=0,
        pad_piece="[PAD]",
        unk_id=1,
        unk_piece="[UNK]",
        bos_id=-1,
        eos_id=-1,
        user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"],
        character_coverage=0.9995,
        minloglevel=2,
    )
    return prefix + ".model"


def build_wordpiece_vocab(sentences: Iterable[str], vocab_size: int, do_lower_case: bool = True) -> list[str]:
    """A WordPiece vocab of exactly `vocab_size` tokens learnt from text: the special
    tokens, every character seen (alone and as a ``##`` continuation), then learned pieces
    (and, where the text has too few words for more, ``[unusedN]`` rows, as BERT's own).

    The text is normalised and split into words by BERT's rules (Hugging Face
    `tokenizers`' `BertNormalizer` and `BertPreTokenizer`), SentencePiece's BPE trainer
    learns the pieces, and a word-initial piece (``▁the``) is written as ``the``, any other
    as ``##the``. Why not a WordPiece trainer: tensorflow-text's `bert_vocab_from_dataset`
    took 72 s on the 0.5M-token Wikipedia excerpt (this: under 2 s), and `tokenizers`'
    `WordPieceTrainer`, as fast, returns a different vocabulary in each process (ties
    broken in hash order), where every host of a pod must learn the same one. Same text,
    same vocabulary: tested across processes."""
    normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=do_lower_case, lowercase=do_lower_case
    )
    splitter = pre_tokenizers.BertPreTokenizer()
    lines = [
        " ".join(w for w, _ in splitter.pre_tokenize_str(normalizer.normalize_str(s))) for s in sentences
    ]
    lines = [line for line in lines if line]
    chars = collections.Counter(c for line in lines for c in line if c != " ")
    alphabet = sorted(chars, key=lambda c: (-chars[c], c))
    if vocab_size < len(SPECIAL_TOKENS) + 2 * len(alphabet):
        raise ValueError(f"vocab_size={vocab_size} is too small for the text's {len(alphabet)} characters")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        # Its single characters repeat the alphabet: ask for that many more, keep vocab_size.
        vocab_size=vocab_size + len(alphabet),
        model_type="bpe",
        character_coverage=1.0,
        normalization_rule_name="identity",
        split_digits=False,
        hard_vocab_limit=False,
        bos_id=-1,
        eos_id=-1,
        num_threads=1,
        minloglevel=2,
        max_sentence_length=1 << 20,
    )
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
    learned = []
    for i in range(processor.get_piece_size()):
        piece = processor.id_to_piece(i)
        if processor.is_unknown(i) or piece == "\u2581":
            continue
        learned.append(piece[1:] if piece.startswith("\u2581") else "##" + piece)
    vocab = list(SPECIAL_TOKENS) + alphabet + ["##" + c for c in alphabet]
    seen = set(vocab)
    for piece in learned:
        if len(vocab) >= vocab_size:
            break
        if piece not in seen:
            seen.add(piece)
            vocab.append(piece)
    return vocab + [f"[unused{i}]" for i in range(vocab_size - len(vocab))]


BYTES = 256


def byte_level_bpe(
    sentences: Iterable[str], vocab_size: int, do_lower_case: bool = False, min_frequency: int = 2
) -> tokenizers.Tokenizer:
    """A byte-level BPE tokenizer of exactly `vocab_size` tokens learnt from `sentences`."""
    smallest = BYTES + len(SPECIAL_TOKENS)
    if vocab_size < smallest:
        raise ValueError(
            f"vocab_size={vocab_size} is too small for a byte-level BPE: at least {smallest} "
            f"({BYTES} bytes and {len(SPECIAL_TOKENS)} special tokens)"
        )
    tok = tokenizers.Tokenizer(models.BPE())
    steps = [normalizers.NFC(), *([normalizers.Lowercase()] if do_lower_case else [])]
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    specials = [
        tokenizers.AddedToken(t, special=True, normalized=False, lstrip=t == "[MASK]") for t in SPECIAL_TOKENS
    ]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(sentences, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    short = vocab_size - tok.get_vocab_size(with_added_tokens=True)
    if short > 0:
        tok.add_special_tokens(
            [tokenizers.AddedToken(f"[unused{i}]", special=True, normalized=False) for i in range(short)]
        )
    return tok
