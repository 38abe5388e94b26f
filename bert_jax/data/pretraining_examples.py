"""Pre-training examples as the paper (§3.1, §A.1) and the original script build them.

Documents of tokenized sentences → ``[CLS] A [SEP] B [SEP]`` instances filling
``max_seq_length - 3`` tokens (10% of the time a shorter random target length), where B is
the actual continuation half of the time (IsNext) and a span of a random other document
otherwise (NotNext); the pair is truncated at random from the front or the back. Then
masked-LM targets: 15% of the non-special tokens (at most ``max_predictions_per_seq``), of
which 80% become [MASK], 10% a random token and 10% stay unchanged (ratios configurable,
the paper's appendix C.2 ablation). Whole-word masking decides once per word for all of
its pieces (the original decides per piece: google-research/bert#910).

RoBERTa's FULL-SENTENCES rows (Liu et al., 2019, §4.2; the packed rows of Cramming and
MosaicBERT) are the alternative without NSP (`create_full_sentence_instances`): the
documents, in a random order, streamed into rows of exactly ``max_seq_length`` tokens
``[CLS] ... [SEP]`` with a [SEP] between documents, no padding but in a shard's last row.

Everything draws from an explicit `np.random.Generator`, so an instance is a function of
(data, seed, epoch): that is what makes the pipeline resumable and host-count independent.
"""

from __future__ import annotations

import dataclasses
from itertools import chain

import numpy as np

from bert_jax.data.tokenization import SpecialIds

TokenDoc = list[list[int]]  # a document: sentences of token ids


@dataclasses.dataclass(frozen=True)
class Instance:
    tokens: np.ndarray  # [CLS] A [SEP] B [SEP], int32, unpadded
    num_a: int  # length of [CLS] A [SEP]: segment 0; the rest is segment 1
    is_random_next: bool

    @property
    def segment_ids(self) -> np.ndarray:
        return (np.arange(len(self.tokens)) >= self.num_a).astype(np.int32)


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    mask_token_prob: float = 0.8
    random_token_prob: float = 0.1  # the rest (0.1) keeps the original token
    whole_word_masking: bool = False
    # "mlm", or "ltr": no masking, position i predicts token i + 1 (with a causal model).
    objective: str = "mlm"

    def __post_init__(self) -> None:
        if self.objective not in ("mlm", "ltr"):
            raise ValueError(f"objective {self.objective!r}: mlm or ltr")
        if self.mask_token_prob + self.random_token_prob > 1 + 1e-9:
            raise ValueError("mask_token_prob + random_token_prob must be at most 1")


def _truncate_pair(a: list[int], b: list[int], max_tokens: int, rng: np.random.Generator) -> None:
    """Trim the longer segment, from the front or the back at random (in place).

    One draw per removed token, as the original's loop; drawn in one call (the same
    numbers) and applied as slices."""
    excess = len(a) + len(b) - max_tokens
    if excess <= 0:
        return
    la, lb = len(a), len(b)
    cut = [0, 0, 0, 0]  # front of a, back of a, front of b, back of b
    for r in rng.random(excess).tolist():
        if la > lb:
            cut[0 if r < 0.5 else 1] += 1
            la -= 1
        else:
            cut[2 if r < 0.5 else 3] += 1
            lb -= 1
    a[:] = a[cut[0] : len(a) - cut[1]]
    b[:] = b[cut[2] : len(b) - cut[3]]


def create_instances_from_document(
    docs: list[TokenDoc],
    doc_index: int,
    max_seq_length: int,
    short_seq_prob: float,
    rng: np.random.Generator,
    special: SpecialIds,
    nsp: bool = True,
) -> list[Instance]:
    """The original `create_instances_from_document`, with an NSP-off mode.

    With ``nsp=False`` (the paper's "No NSP" ablation) each instance is one contiguous
    span ``[CLS] A [SEP]`` of up to ``max_seq_length - 2`` tokens.
    """
    document = docs[doc_index]
    max_tokens = max_seq_length - (3 if nsp else 2)
    target = max_tokens
    if rng.random() < short_seq_prob:
        target = int(rng.integers(2, max_tokens + 1))
    instances: list[Instance] = []
    chunk: list[list[int]] = []
    length = 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target:
            if chunk:
                if not nsp:
                    a = list(chain.from_iterable(chunk))[:max_tokens]
                    tokens = [special.cls, *a, special.sep]
                    instances.append(Instance(np.array(tokens, np.int32), len(tokens), False))
                else:
                    a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
                    a = list(chain.from_iterable(chunk[:a_end]))
                    b: list[int] = []
                    is_random_next = len(chunk) == 1 or rng.random() < 0.5
                    if is_random_next and len(docs) > 1:
                        target_b = target - len(a)
                        other = doc_index
                        while other == doc_index:
                            other = int(rng.integers(0, len(docs)))
                        random_doc = docs[other]
                        start = int(rng.integers(0, len(random_doc)))
                        for sentence in random_doc[start:]:
                            b.extend(sentence)
                            if len(b) >= target_b:
                                break
                        # Put the unused sentences back: they are not wasted.
                        i -= len(chunk) - a_end
                    else:
                        is_random_next = False
                        b = list(chain.from_iterable(chunk[a_end:]))
                    _truncate_pair(a, b, max_tokens, rng)
                    if a and b:
                        tokens = [special.cls, *a, special.sep, *b, special.sep]
                        instances.append(Instance(np.array(tokens, np.int32), len(a) + 2, is_random_next))
            chunk, length = [], 0
        i += 1
    return instances


def create_instances(
    docs: list[TokenDoc],
    max_seq_length: int,
    short_seq_prob: float,
    rng: np.random.Generator,
    special: SpecialIds,
    nsp: bool = True,
) -> list[Instance]:
    """One pass over all documents, instances shuffled."""
    out: list[Instance] = []
    for d in range(len(docs)):
        out.extend(create_instances_from_document(docs, d, max_seq_length, short_seq_prob, rng, special, nsp))
    order = rng.permutation(len(out))
    return [out[i] for i in order]


def create_full_sentence_instances(
    docs: list[TokenDoc], max_seq_length: int, rng: np.random.Generator, special: SpecialIds
) -> list[Instance]:
    """One pass of FULL-SENTENCES rows: the documents in the order of ``rng``, their
    sentences joined, a [SEP] between documents, cut every ``max_seq_length - 2`` tokens
    into ``[CLS] chunk [SEP]``; the rows shuffled. One segment, no NSP label."""
    width = max_seq_length - 2
    stream: list[int] = []
    for d in rng.permutation(len(docs)).tolist():
        if stream:
            stream.append(special.sep)
        stream.extend(chain.from_iterable(docs[d]))
    tokens = np.asarray(stream, np.int32)
    out = []
    for start in range(0, len(tokens), width):
        chunk = tokens[start : start + width]
        if len(chunk) >= 2:  # a last row of one token teaches nothing
            row = np.concatenate([[special.cls], chunk, [special.sep]]).astype(np.int32)
            out.append(Instance(row, len(row), False))
    order = rng.permutation(len(out))
    return [out[i] for i in order]


def mask_tokens(
    tokens: np.ndarray,
    rng: np.random.Generator,
    config: MaskingConfig,
    special: SpecialIds,
    vocab_size: int,
    is_continuation: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(masked tokens, positions, original ids): the masked-LM targets of one instance.

    [CLS], [SEP] and padding are never candidates. With whole-word masking a word's
    pieces (a piece and its following ``##`` pieces) are chosen, and replaced, together.
    """
    specials = {special.cls, special.sep, special.pad}
    candidates = [i for i, t in enumerate(tokens.tolist()) if t not in specials]
    words: list[list[int]] = []
    for i in candidates:
        if (
            config.whole_word_masking
            and words
            and is_continuation is not None
            and is_continuation[tokens[i]]
            and words[-1][-1] == i - 1
        ):
            words[-1].append(i)
        else:
            words.append([i])
    num_to_predict = min(
        config.max_predictions_per_seq, max(1, round(len(candidates) * config.masked_lm_prob))
    )
    order = rng.permutation(len(words))
    output = tokens.copy()
    chosen: list[int] = []
    for w in order:
        word = words[w]
        if len(chosen) + len(word) > num_to_predict:
            continue
        r = rng.random()  # one decision per word (per piece when not whole-word)
        for i in word:
            if r < config.mask_token_prob:
                output[i] = special.mask
            elif r < config.mask_token_prob + config.random_token_prob:
                output[i] = int(rng.integers(0, vocab_size))
            chosen.append(i)
        if len(chosen) >= num_to_predict:
            break
    positions = np.array(sorted(chosen), np.int32)
    return output, positions, tokens[positions]


def to_features(
    instance: Instance,
    rng: np.random.Generator,
    max_seq_length: int,
    masking: MaskingConfig,
    special: SpecialIds,
    vocab_size: int,
    is_continuation: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """One instance → the original feature dict (padded), with fresh masks from `rng`."""
    if masking.objective == "ltr":
        # Left-to-right LM: the hidden state at i (seeing tokens <= i) predicts token i + 1.
        k = min(masking.max_predictions_per_seq, len(instance.tokens) - 1)
        masked, positions = instance.tokens, np.arange(k, dtype=np.int32)
        labels = instance.tokens[1 : k + 1]
    else:
        masked, positions, labels = mask_tokens(
            instance.tokens, rng, masking, special, vocab_size, is_continuation
        )
    n, p = len(masked), masking.max_predictions_per_seq
    out = {
        "input_ids": np.full(max_seq_length, special.pad, np.int32),
        "input_mask": np.zeros(max_seq_length, np.int32),
        "segment_ids": np.zeros(max_seq_length, np.int32),
        "masked_lm_positions": np.zeros(p, np.int32),
        "masked_lm_ids": np.zeros(p, np.int32),
        "masked_lm_weights": np.zeros(p, np.float32),
        "next_sentence_labels": np.array(int(instance.is_random_next), np.int32),
    }
    out["input_ids"][:n] = masked
    out["input_mask"][:n] = 1
    out["segment_ids"][:n] = instance.segment_ids
    out["masked_lm_positions"][: len(positions)] = positions
    out["masked_lm_ids"][: len(positions)] = labels
    out["masked_lm_weights"][: len(positions)] = 1.0
    return out
