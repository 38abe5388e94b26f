"""The masked-LM rule (§3.1, Appendix C.2): one description (`MaskingSpec`), drawn on the
device inside `jit` for training (`mask_batch`) and on the host as the reference
(`mask_tokens`, `to_features`: the original's static masks of `bert-jax create-data`,
which the device path is tested against).

On the device the host feeds unmasked token ids; each row's masks are a pure function of
``(mask_seed, epoch, example_id)`` (threefry keys folded in that order), so they are the
same whatever the batch, the mesh or the number of hosts, and a resume reproduces them
exactly. Fresh masks every epoch (dynamic masking, RoBERTa's default) come from the
epoch; static masks (the original's) from passing epoch 0 always.

The rule is the original `create_pretraining_data.py`'s: candidates are all tokens but
[CLS]/[SEP]/[PAD]; ``k = min(max_predictions, max(1, round(n * masked_lm_prob)))``;
words are visited in random order and taken while they fit in ``k`` (a whole-word-masking
word is all of its pieces, skipped if it does not fit); each taken word becomes [MASK]
(80%), a random token (10%) or stays (10%), one decision per word (ratios configurable:
the paper's Appendix C.2 ablation). Whole-word masking decides once per word for all of
its pieces (the original decides per piece: google-research/bert#910).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.data import pretraining_examples
from bert_jax.data.tokenization import SpecialIds

# What the host feeds when masks are drawn on the device.
RAW_KEYS = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "next_sentence_labels",
    "example_id",
    "epoch",
    "mask_seed",
)


@dataclasses.dataclass(frozen=True)
class MaskingSpec:
    """What is masked: at most `max_predictions_per_seq` tokens per row, ``masked_lm_prob``
    of its candidates, each [MASK] / random / kept with the given odds; the vocabulary's
    special ids and size say what is never a candidate and what a random token is."""

    max_predictions_per_seq: int
    vocab_size: int
    cls_id: int
    sep_id: int
    pad_id: int
    mask_id: int
    masked_lm_prob: float = 0.15
    mask_token_prob: float = 0.8
    random_token_prob: float = 0.1
    whole_word_masking: bool = False
    objective: str = "mlm"  # or "ltr": position i predicts token i + 1, nothing masked

    def __post_init__(self) -> None:
        if self.objective not in ("mlm", "ltr"):
            raise ValueError(f"objective {self.objective!r}: mlm or ltr")
        if self.mask_token_prob + self.random_token_prob > 1 + 1e-9:
            raise ValueError("mask_token_prob + random_token_prob must be at most 1")

    @classmethod
    def of(cls, special: SpecialIds, vocab_size: int, max_predictions_per_seq: int, **rule) -> MaskingSpec:
        """The spec for a vocabulary's special ids; `rule`: the probabilities, whole-word
        masking and the objective."""
        ids = dict(cls_id=special.cls, sep_id=special.sep, pad_id=special.pad, mask_id=special.mask)
        return cls(max_predictions_per_seq=max_predictions_per_seq, vocab_size=vocab_size, **ids, **rule)

    def num_to_predict(self, max_seq_length: int) -> np.ndarray:
        """k for every candidate count 0..S, with Python's rounding (as the original)."""
        p, m = self.max_predictions_per_seq, self.masked_lm_prob
        return np.array([min(p, max(1, round(n * m))) for n in range(max_seq_length + 1)], np.int32)


def row_keys(mask_seed: jax.Array, epoch: jax.Array, example_id: jax.Array) -> jax.Array:
    """One threefry key per row from (seed, epoch, example id)."""

    def key(s, e, i):
        return jax.random.fold_in(jax.random.fold_in(jax.random.key(s), e), i)

    return jax.vmap(key)(mask_seed, epoch, example_id)


def _choose(cand, start, score, k, whole_word: bool):
    """Positions chosen for prediction: words in `score` order while they fit in k."""
    s = cand.shape[0]
    pos = jnp.arange(s, dtype=jnp.int32)
    word_start = jnp.maximum(jax.lax.cummax(jnp.where(start, pos, -1)), 0)
    order = jnp.argsort(jnp.where(start, score, 2.0))  # the words first, in random order
    if not whole_word:
        rank = jnp.zeros(s, jnp.int32).at[order].set(pos)
        return cand & (rank < k), word_start
    word_len = jnp.zeros(s, jnp.int32).at[word_start].add(cand.astype(jnp.int32))

    def visit(count, x):
        length, is_word = x
        take = is_word & (count + length <= k)
        return count + jnp.where(take, length, 0), take

    _, take = jax.lax.scan(visit, jnp.int32(0), (word_len[order], start[order]))
    taken = jnp.zeros(s, bool).at[order].set(take)
    return cand & taken[word_start], word_start


def _mask_row(key, ids, mask, *, spec: MaskingSpec, k_table, is_continuation):
    s, p = ids.shape[0], spec.max_predictions_per_seq
    if spec.objective == "ltr":
        k = jnp.minimum(p, jnp.sum(mask) - 1)
        idx = jnp.arange(p, dtype=jnp.int32)
        w = idx < k
        labels = jnp.where(w, ids[jnp.minimum(idx + 1, s - 1)], 0)
        return ids, jnp.where(w, idx, 0), labels, w
    cand = (mask > 0) & (ids != spec.cls_id) & (ids != spec.sep_id) & (ids != spec.pad_id)
    start = cand
    if spec.whole_word_masking:
        after_cand = jnp.concatenate([jnp.zeros((1,), bool), cand[:-1]])
        start = cand & ~(is_continuation[ids] & after_cand)
    k_score, k_action, k_random = jax.random.split(key, 3)
    score = jax.random.uniform(k_score, (s,))
    chosen, word_start = _choose(cand, start, score, k_table[jnp.sum(cand)], spec.whole_word_masking)
    action = jax.random.uniform(k_action, (s,))[word_start]  # one decision per word
    random_ids = jax.random.randint(k_random, (s,), 0, spec.vocab_size, jnp.int32)
    masked = jnp.where(
        chosen & (action < spec.mask_token_prob),
        spec.mask_id,
        jnp.where(chosen & (action < spec.mask_token_prob + spec.random_token_prob), random_ids, ids),
    )
    first = jnp.argsort(~chosen, stable=True)  # chosen positions first, ascending
    if p > s:
        first = jnp.concatenate([first, jnp.zeros((p - s,), first.dtype)])
    idx = first[:p].astype(jnp.int32)
    w = jnp.arange(p) < jnp.sum(chosen)
    return masked, jnp.where(w, idx, 0), jnp.where(w, ids[idx], 0), w


def mask_batch(
    batch: dict[str, jax.Array], *, spec: MaskingSpec, is_continuation: np.ndarray | None = None
) -> dict[str, jax.Array]:
    """Unmasked rows (`RAW_KEYS`) → the original pre-training features, masks drawn here."""
    ids = batch["input_ids"].astype(jnp.int32)
    if spec.whole_word_masking and is_continuation is None:
        raise ValueError("whole-word masking needs the vocabulary's continuation table")
    table = jnp.asarray(is_continuation if is_continuation is not None else np.zeros(1, bool))
    k_table = jnp.asarray(spec.num_to_predict(ids.shape[1]))
    keys = row_keys(batch["mask_seed"], batch["epoch"], batch["example_id"])

    def row(key, r_ids, r_mask):
        return _mask_row(key, r_ids, r_mask, spec=spec, k_table=k_table, is_continuation=table)

    masked, positions, labels, weights = jax.vmap(row)(keys, ids, batch["input_mask"])
    return {
        "input_ids": masked.astype(jnp.int32),
        "input_mask": batch["input_mask"].astype(jnp.int32),
        "segment_ids": batch["segment_ids"].astype(jnp.int32),
        "masked_lm_positions": positions.astype(jnp.int32),
        "masked_lm_ids": labels.astype(jnp.int32),
        "masked_lm_weights": weights.astype(jnp.float32),
        "next_sentence_labels": batch["next_sentence_labels"].astype(jnp.int32),
    }


# --- the host reference ----------------------------------------------------------------


def mask_tokens(
    tokens: np.ndarray, rng: np.random.Generator, spec: MaskingSpec, is_continuation: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(masked tokens, positions, original ids): the masked-LM targets of one instance.

    [CLS], [SEP] and padding are never candidates. With whole-word masking a word's
    pieces (a piece and its following ``##`` pieces) are chosen, and replaced, together.
    """
    specials = {spec.cls_id, spec.sep_id, spec.pad_id}
    candidates = [i for i, t in enumerate(tokens.tolist()) if t not in specials]
    words: list[list[int]] = []
    for i in candidates:
        if (
            spec.whole_word_masking
            and words
            and is_continuation is not None
            and is_continuation[tokens[i]]
            and words[-1][-1] == i - 1
        ):
            words[-1].append(i)
        else:
            words.append([i])
    num_to_predict = min(spec.max_predictions_per_seq, max(1, round(len(candidates) * spec.masked_lm_prob)))
    order = rng.permutation(len(words))
    output = tokens.copy()
    chosen: list[int] = []
    for w in order:
        word = words[w]
        if len(chosen) + len(word) > num_to_predict:
            continue
        r = rng.random()  # one decision per word (per piece when not whole-word)
        for i in word:
            if r < spec.mask_token_prob:
                output[i] = spec.mask_id
            elif r < spec.mask_token_prob + spec.random_token_prob:
                output[i] = int(rng.integers(0, spec.vocab_size))
            chosen.append(i)
        if len(chosen) >= num_to_predict:
            break
    positions = np.array(sorted(chosen), np.int32)
    return output, positions, tokens[positions]


def to_features(
    instance: pretraining_examples.Instance,
    rng: np.random.Generator,
    max_seq_length: int,
    spec: MaskingSpec,
    is_continuation: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """One instance → the original feature dict (padded), with fresh masks from `rng`."""
    if spec.objective == "ltr":
        # Left-to-right LM: the hidden state at i (seeing tokens <= i) predicts token i + 1.
        k = min(spec.max_predictions_per_seq, len(instance.tokens) - 1)
        masked, positions = instance.tokens, np.arange(k, dtype=np.int32)
        labels = instance.tokens[1 : k + 1]
    else:
        masked, positions, labels = mask_tokens(instance.tokens, rng, spec, is_continuation)
    n, p = len(masked), spec.max_predictions_per_seq
    out = {
        "input_ids": np.full(max_seq_length, spec.pad_id, np.int32),
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
