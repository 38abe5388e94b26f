"""Pre-training examples: the paper's statistics on thousands of instances, masking rules."""

import numpy as np
import pytest

from bert_jax.data import masking, pretraining_examples
from bert_jax.data.tokenization import SpecialIds

SPECIAL = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)
VOCAB = 1000


def random_docs(rng, n_docs=600):
    return [
        [rng.integers(10, VOCAB, rng.integers(5, 20)).tolist() for _ in range(rng.integers(5, 40))]
        for _ in range(n_docs)
    ]


def test_instances_follow_the_paper() -> None:
    rng = np.random.default_rng(0)
    docs = random_docs(rng)
    instances = pretraining_examples.create_instances(docs, 64, 0.1, rng, SPECIAL)
    assert len(instances) > 1000
    random_next = np.mean([i.is_random_next for i in instances])
    # IsNext / NotNext balance: 50/50, plus (as in the original script) chunks of a single
    # sentence, which can only be NotNext; they are a few percent of instances.
    assert 0.48 < random_next < 0.6
    for inst in instances:
        t = inst.tokens.tolist()
        assert len(t) <= 64 and t[0] == SPECIAL.cls and t[-1] == SPECIAL.sep and t.count(SPECIAL.sep) == 2
        first_sep = t.index(SPECIAL.sep)
        assert inst.segment_ids.tolist() == [0] * (first_sep + 1) + [1] * (len(t) - first_sep - 1)
    lengths = np.array([len(i.tokens) for i in instances])
    assert np.mean(lengths >= 60) > 0.6  # most fill max_seq_length - 3 ...
    assert np.mean(lengths < 40) > 0.03  # ... and short_seq_prob makes some short ones
    no_nsp = pretraining_examples.create_instances(docs, 64, 0.1, rng, SPECIAL, nsp=False)
    assert all(i.tokens.tolist().count(SPECIAL.sep) == 1 and not i.segment_ids.any() for i in no_nsp)


@pytest.mark.parametrize("wwm", [False, True])
def test_masking_statistics(wwm) -> None:
    rng = np.random.default_rng(1)
    docs = random_docs(rng)
    instances = pretraining_examples.create_instances(docs, 128, 0.1, rng, SPECIAL) * 3
    cont = np.zeros(VOCAB, bool)
    cont[500:] = True  # ids >= 500 continue a word ("##...")
    cfg = masking.MaskingSpec.of(SPECIAL, VOCAB, 40, whole_word_masking=wwm)
    counts = {"mask": 0, "random": 0, "kept": 0}
    masked, candidates = 0, 0
    for inst in instances:
        f = masking.to_features(inst, rng, 128, cfg, cont)
        n = int(f["masked_lm_weights"].sum())
        pos = f["masked_lm_positions"][:n]
        specials = np.isin(inst.tokens, [SPECIAL.cls, SPECIAL.sep])
        assert not specials[pos].any()  # [CLS]/[SEP] never masked
        assert (pos < len(inst.tokens)).all()  # padding never masked
        assert (f["masked_lm_ids"][:n] == inst.tokens[pos]).all()
        got = f["input_ids"][pos]
        counts["mask"] += int((got == SPECIAL.mask).sum())
        counts["kept"] += int((got == inst.tokens[pos]).sum())
        counts["random"] += int(((got != SPECIAL.mask) & (got != inst.tokens[pos])).sum())
        masked += n
        candidates += int((~specials).sum())
    assert masked / candidates == pytest.approx(0.15, abs=0.01)
    assert counts["mask"] / masked == pytest.approx(0.8, abs=0.02)
    # A "random" replacement can draw the original token (1 in 1000): within tolerance.
    assert counts["random"] / masked == pytest.approx(0.1, abs=0.015)
    assert counts["kept"] / masked == pytest.approx(0.1, abs=0.015)


def test_whole_word_masking_masks_all_pieces_of_a_word_alike() -> None:
    rng = np.random.default_rng(2)
    cont = np.zeros(VOCAB, bool)
    cont[500:] = True
    tokens = np.array([2] + [10, 600, 601, 11, 602, 12, 13, 603, 604, 605] * 4 + [3], np.int32)
    cfg = masking.MaskingSpec.of(SPECIAL, VOCAB, 30, masked_lm_prob=0.5, whole_word_masking=True)
    for _ in range(200):
        out, pos, _ = masking.mask_tokens(tokens, rng, cfg, cont)
        chosen = set(pos.tolist())
        for p in chosen:  # the word containing p: its head and all continuation pieces
            start = p
            while cont[tokens[start]]:
                start -= 1
            end = p + 1
            while end < len(tokens) and cont[tokens[end]]:
                end += 1
            word = range(start, end)
            assert all(q in chosen for q in word)
            decisions = {
                ("mask" if out[q] == SPECIAL.mask else "keep" if out[q] == tokens[q] else "random")
                for q in word
            }
            # One decision for the whole word: all [MASK], or all random/kept (a random
            # draw can hit the original id, so "random" and "keep" may mix).
            assert decisions == {"mask"} or "mask" not in decisions


def test_ratios_are_configurable() -> None:
    rng = np.random.default_rng(3)
    docs = random_docs(rng, 20)
    instances = pretraining_examples.create_instances(docs, 128, 0.0, rng, SPECIAL)
    cfg = masking.MaskingSpec.of(SPECIAL, VOCAB, 20, mask_token_prob=1.0, random_token_prob=0.0)
    for inst in instances[:200]:
        f = masking.to_features(inst, rng, 128, cfg)
        n = int(f["masked_lm_weights"].sum())
        assert (f["input_ids"][f["masked_lm_positions"][:n]] == SPECIAL.mask).all()


def test_ltr_objective_predicts_the_next_token() -> None:
    rng = np.random.default_rng(4)
    docs = random_docs(rng, 20)
    instances = pretraining_examples.create_instances(docs, 64, 0.0, rng, SPECIAL, nsp=False)
    cfg = masking.MaskingSpec.of(SPECIAL, VOCAB, 64, objective="ltr")
    inst = instances[0]
    f = masking.to_features(inst, rng, 64, cfg)
    n = len(inst.tokens)
    assert (f["input_ids"][:n] == inst.tokens).all()  # nothing masked
    assert (f["masked_lm_positions"][: n - 1] == np.arange(n - 1)).all()
    assert (f["masked_lm_ids"][: n - 1] == inst.tokens[1:]).all()
    assert f["masked_lm_weights"].sum() == n - 1
