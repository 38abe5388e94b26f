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
    tokens: np.ndarray | None  # [CLS] A [SEP] B [SEP], int32, unpadded (None: not built)
    num_a: int  # length of [CLS] A [SEP]: segment 0; the rest is segment 1
    is_random_next: bool
    # Where A (and B) lie in the documents' tokens laid end to end (`token_offsets`):
    # ((start, length), ...), so that storage can keep each document once. Empty for rows
    # that are not spans of the documents (FULL-SENTENCES rows join several).
    pieces: tuple[tuple[int, int], ...] = ()

    @property
    def segment_ids(self) -> np.ndarray:
        return (np.arange(len(self.tokens)) >= self.num_a).astype(np.int32)

    def __len__(self) -> int:
        return (
            sum(n for _, n in self.pieces) + 1 + len(self.pieces) if self.tokens is None else len(self.tokens)
        )


def token_offsets(docs: list[TokenDoc]) -> list[np.ndarray]:
    """For each document, where each of its sentences starts (and, last, where it ends) in
    all the documents' tokens laid end to end, in order."""
    out, base = [], 0
    for doc in docs:
        starts = base + np.concatenate([[0], np.cumsum([len(s) for s in doc])]).astype(np.int64)
        out.append(starts)
        base = int(starts[-1])
    return out


def _truncation(la: int, lb: int, max_tokens: int, rng: np.random.Generator) -> list[int]:
    """How the original trims a pair to `max_tokens`: always the longer segment, from the
    front or the back at random; returns the tokens cut from the front of A, its back, the
    front of B and its back. One draw per removed token, as the original's loop (drawn in
    one call: the same numbers)."""
    excess = la + lb - max_tokens
    cut = [0, 0, 0, 0]
    if excess <= 0:
        return cut
    for r in rng.random(excess).tolist():
        if la > lb:
            cut[0 if r < 0.5 else 1] += 1
            la -= 1
        else:
            cut[2 if r < 0.5 else 3] += 1
            lb -= 1
    return cut


def _random_next(
    num_docs: int, doc_index: int, target: int, lengths: list[list[int]], rng: np.random.Generator
) -> tuple[int, int, int, int]:
    """The NotNext segment as the original draws it: another document, a random first
    sentence, sentences until `target` tokens; (document, first sentence, sentences,
    tokens)."""
    other = doc_index
    while other == doc_index:
        other = int(rng.integers(0, num_docs))
    start = int(rng.integers(0, len(lengths[other])))
    count = total = 0
    for sentence_length in lengths[other][start:]:
        total += sentence_length
        count += 1
        if total >= target:
            break
    return other, start, count, total


def _span(doc: TokenDoc, first: int, count: int, start: int, length: int) -> list[int]:
    """Tokens ``[start, start + length)`` of sentences ``first .. first + count``."""
    return list(chain.from_iterable(doc[first : first + count]))[start : start + length]


def create_instances_from_document(
    docs: list[TokenDoc],
    doc_index: int,
    max_seq_length: int,
    short_seq_prob: float,
    rng: np.random.Generator,
    special: SpecialIds,
    nsp: bool = True,
    offsets: list[np.ndarray] | None = None,
    materialize: bool = True,
    lengths: list[list[int]] | None = None,
) -> list[Instance]:
    """The original `create_instances_from_document`, with an NSP-off mode.

    With ``nsp=False`` (the paper's "No NSP" ablation) each instance is one contiguous
    span ``[CLS] A [SEP]`` of up to ``max_seq_length - 2`` tokens. Every instance has its
    pieces (where A and B lie in `offsets`, the `token_offsets` of `docs`); its tokens
    only with `materialize` (storage needs the pieces alone: the same instances, drawn
    from the same random numbers, without building token lists).
    """
    offsets = token_offsets(docs) if offsets is None else offsets
    document = docs[doc_index]
    lengths = lengths or [np.diff(o).tolist() for o in offsets]  # sentence lengths per document
    doc_lengths = lengths[doc_index]
    max_tokens = max_seq_length - (3 if nsp else 2)
    target = max_tokens
    if rng.random() < short_seq_prob:
        target = int(rng.integers(2, max_tokens + 1))
    instances: list[Instance] = []
    first = 0  # the chunk's first sentence
    length = 0
    i = 0
    while i < len(document):
        length += doc_lengths[i]
        if i == len(document) - 1 or length >= target:
            count = i + 1 - first
            a_start = int(offsets[doc_index][first])
            if not nsp:
                la = min(length, max_tokens)
                tokens = None
                if materialize:
                    tokens = np.array(
                        [special.cls, *_span(document, first, count, 0, la), special.sep], np.int32
                    )
                instances.append(Instance(tokens, la + 2, False, ((a_start, la),)))
            else:
                a_end = int(rng.integers(1, count)) if count >= 2 else 1
                la = sum(doc_lengths[first : first + a_end])
                b_start, lb = a_start + la, 0  # the continuation follows A
                b_doc, b_first, b_count = doc_index, first + a_end, count - a_end
                is_random_next = count == 1 or rng.random() < 0.5
                if is_random_next and len(docs) > 1:
                    b_doc, b_first, b_count, lb = _random_next(
                        len(docs), doc_index, target - la, lengths, rng
                    )
                    b_start = int(offsets[b_doc][b_first])
                    i -= count - a_end  # put the unused sentences back: they are not wasted
                else:
                    is_random_next = False
                    lb = length - la
                cut = _truncation(la, lb, max_tokens, rng)
                la, lb = la - cut[0] - cut[1], lb - cut[2] - cut[3]
                if la and lb:
                    tokens = None
                    if materialize:
                        a = _span(document, first, a_end, cut[0], la)
                        b = _span(docs[b_doc], b_first, b_count, cut[2], lb)
                        tokens = np.array([special.cls, *a, special.sep, *b, special.sep], np.int32)
                    pieces = ((a_start + cut[0], la), (b_start + cut[2], lb))
                    instances.append(Instance(tokens, la + 2, is_random_next, pieces))
            first, length = i + 1, 0
        i += 1
    return instances


def create_instances(
    docs: list[TokenDoc],
    max_seq_length: int,
    short_seq_prob: float,
    rng: np.random.Generator,
    special: SpecialIds,
    nsp: bool = True,
    offsets: list[np.ndarray] | None = None,
    materialize: bool = True,
) -> list[Instance]:
    """One pass over all documents, instances shuffled (see
    `create_instances_from_document` for `offsets` and `materialize`)."""
    out: list[Instance] = []
    offsets = token_offsets(docs) if offsets is None else offsets
    lengths = [np.diff(o).tolist() for o in offsets]
    for d in range(len(docs)):
        out.extend(
            create_instances_from_document(
                docs, d, max_seq_length, short_seq_prob, rng, special, nsp, offsets, materialize, lengths
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
