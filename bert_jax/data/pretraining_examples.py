"""Pre-training examples as the paper (§3.1, §A.1) and the original script build them.

Documents of tokenized sentences → ``[CLS] A [SEP] B [SEP]`` instances filling
``max_seq_length - 3`` tokens (10% of the time a shorter random target length), where B is
the actual continuation half of the time (IsNext) and a span of a random other document
otherwise (NotNext); the pair is truncated at random from the front or the back. Their masked-LM
targets are drawn later, by `masking` (the rule's one description).

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
    # Where A (and B) lie in the documents' tokens laid end to end (`token_offsets`):
    # ((start, length), ...), so that storage can keep each document once. Empty for rows
    # that are not spans of the documents (FULL-SENTENCES rows join several).
    pieces: tuple[tuple[int, int], ...] = ()

    @property
    def segment_ids(self) -> np.ndarray:
        return (np.arange(len(self.tokens)) >= self.num_a).astype(np.int32)


def token_offsets(docs: list[TokenDoc]) -> list[np.ndarray]:
    """For each document, where each of its sentences starts (and, last, where it ends) in
    all the documents' tokens laid end to end, in order."""
    out, base = [], 0
    for doc in docs:
        starts = base + np.concatenate([[0], np.cumsum([len(s) for s in doc])]).astype(np.int64)
        out.append(starts)
        base = int(starts[-1])
    return out


def _truncate_pair(a: list[int], b: list[int], max_tokens: int, rng: np.random.Generator) -> list[int]:
    """Trim the longer segment, from the front or the back at random (in place); returns
    the tokens cut from the front of a, its back, the front of b and its back.

    One draw per removed token, as the original's loop; drawn in one call (the same
    numbers) and applied as slices."""
    excess = len(a) + len(b) - max_tokens
    if excess <= 0:
        return [0, 0, 0, 0]
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
    return cut


def create_instances_from_document(
    docs: list[TokenDoc],
    doc_index: int,
    max_seq_length: int,
    short_seq_prob: float,
    rng: np.random.Generator,
    special: SpecialIds,
    nsp: bool = True,
    offsets: list[np.ndarray] | None = None,
) -> list[Instance]:
    """The original `create_instances_from_document`, with an NSP-off mode.

    With ``nsp=False`` (the paper's "No NSP" ablation) each instance is one contiguous
    span ``[CLS] A [SEP]`` of up to ``max_seq_length - 2`` tokens. `offsets`
    (`token_offsets` of `docs`) gives each instance its pieces.
    """
    offsets = token_offsets(docs) if offsets is None else offsets
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
                a_start = int(offsets[doc_index][i + 1 - len(chunk)])  # the chunk's first token
                if not nsp:
                    a = list(chain.from_iterable(chunk))[:max_tokens]
                    tokens = [special.cls, *a, special.sep]
                    instance = Instance(np.array(tokens, np.int32), len(tokens), False, ((a_start, len(a)),))
                    instances.append(instance)
                else:
                    a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
                    a = list(chain.from_iterable(chunk[:a_end]))
                    b: list[int] = []
                    b_start = a_start + len(a)  # the continuation follows A
                    is_random_next = len(chunk) == 1 or rng.random() < 0.5
                    if is_random_next and len(docs) > 1:
                        target_b = target - len(a)
                        other = doc_index
                        while other == doc_index:
                            other = int(rng.integers(0, len(docs)))
                        random_doc = docs[other]
                        start = int(rng.integers(0, len(random_doc)))
                        b_start = int(offsets[other][start])
                        for sentence in random_doc[start:]:
                            b.extend(sentence)
                            if len(b) >= target_b:
                                break
                        # Put the unused sentences back: they are not wasted.
                        i -= len(chunk) - a_end
                    else:
                        is_random_next = False
                        b = list(chain.from_iterable(chunk[a_end:]))
                    cut = _truncate_pair(a, b, max_tokens, rng)
                    if a and b:
                        tokens = [special.cls, *a, special.sep, *b, special.sep]
                        pieces = ((a_start + cut[0], len(a)), (b_start + cut[2], len(b)))
                        instance = Instance(np.array(tokens, np.int32), len(a) + 2, is_random_next, pieces)
                        instances.append(instance)
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
    offsets = token_offsets(docs)
    for d in range(len(docs)):
        out.extend(
            create_instances_from_document(
                docs, d, max_seq_length, short_seq_prob, rng, special, nsp, offsets
            )
        )
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
