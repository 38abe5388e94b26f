"""Device-side masking (`masking.mask_batch`): the original's rule and statistics, the
same as the host-side reference (`masking.mask_tokens`), one function of each row."""

import jax
import numpy as np
import pytest

from bert_jax.data import masking, pretraining_examples, records
from bert_jax.data.tokenization import SpecialIds

SPECIAL = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)
VOCAB = 1000
CONT = np.arange(VOCAB) >= 500  # ids >= 500 continue a word ("##...")


def _instances(n_docs=300, seq=128, seed=1, nsp=True):
    rng = np.random.default_rng(seed)
    docs = [
        [rng.integers(10, VOCAB, rng.integers(5, 20)).tolist() for _ in range(rng.integers(5, 40))]
        for _ in range(n_docs)
    ]
    return pretraining_examples.create_instances(docs, seq, 0.1, rng, SPECIAL, nsp=nsp)


def _rows(instances, seq=128, epoch=0, seed=5):
    rows = records.decode(records.encode(instances, seq, SPECIAL.pad, np.uint16), seq)
    n = len(instances)
    rows.update(
        example_id=np.arange(n, dtype=np.int32),
        epoch=np.full(n, epoch, np.int32),
        mask_seed=np.full(n, seed, np.int32),
    )
    return rows


def _spec(**kw):
    args = dict(max_predictions_per_seq=40, vocab_size=VOCAB, cls_id=2, sep_id=3, pad_id=0, mask_id=4)
    args.update(kw)
    return masking.MaskingSpec(**args)


def _mask(rows, spec):
    fn = jax.jit(masking.mask_batch, static_argnames="spec")
    return {k: np.asarray(v) for k, v in fn(rows, spec=spec, is_continuation=CONT).items()}


def _stats(tokens_list, features_list):
    counts = {"mask": 0, "random": 0, "kept": 0}
    masked = candidates = 0
    per_row = []
    for tokens, f in zip(tokens_list, features_list, strict=True):
        n = int(f["masked_lm_weights"].sum())
        pos = f["masked_lm_positions"][:n]
        specials = np.isin(tokens, [SPECIAL.cls, SPECIAL.sep])
        assert not specials[pos].any() and (pos < len(tokens)).all()  # no [CLS]/[SEP]/padding
        assert (np.diff(pos) > 0).all()  # sorted, distinct
        assert (f["masked_lm_ids"][:n] == tokens[pos]).all()
        got = f["input_ids"][pos]
        counts["mask"] += int((got == SPECIAL.mask).sum())
        counts["kept"] += int((got == tokens[pos]).sum())
        counts["random"] += int(((got != SPECIAL.mask) & (got != tokens[pos])).sum())
        masked += n
        candidates += int((~specials).sum())
        per_row.append(n)
    return masked / candidates, {k: v / masked for k, v in counts.items()}, np.array(per_row)


@pytest.mark.parametrize("wwm", [False, True])
def test_device_masking_matches_the_reference_statistics(wwm) -> None:
    instances = _instances() * 2
    spec = _spec(whole_word_masking=wwm)
    out = _mask(_rows(instances), spec)
    ours = _stats(
        [i.tokens for i in instances],
        [{k: v[j] for k, v in out.items()} for j in range(len(instances))],
    )
    rng = np.random.default_rng(7)
    reference = _stats(
        [i.tokens for i in instances],
        [masking.to_features(i, rng, 128, spec, CONT) for i in instances],  # the host reference
    )
    assert ours[0] == pytest.approx(0.15, abs=0.01)
    assert ours[0] == pytest.approx(reference[0], abs=0.004)
    for k, share in (("mask", 0.8), ("random", 0.1), ("kept", 0.1)):
        assert ours[1][k] == pytest.approx(share, abs=0.015), k
        assert ours[1][k] == pytest.approx(reference[1][k], abs=0.02), k
    if not wwm:  # one piece per word: the count is exactly the original's k for every row
        assert np.array_equal(ours[2], reference[2])
    else:  # whole words that do not fit are skipped, as the original: the same mean count
        assert ours[2].mean() == pytest.approx(reference[2].mean(), rel=0.02)
        assert (ours[2] <= reference[2].max()).all()


def test_whole_word_masking_masks_all_pieces_of_a_word_alike() -> None:
    tokens = np.array([2] + [10, 600, 601, 11, 602, 12, 13, 603, 604, 605] * 4 + [3], np.int32)
    inst = pretraining_examples.Instance(tokens, len(tokens), False)
    spec = _spec(masked_lm_prob=0.5, max_predictions_per_seq=30, whole_word_masking=True)
    out = _mask(_rows([inst] * 200, seq=64), spec)
    words = mixed = 0
    for j in range(200):
        n = int(out["masked_lm_weights"][j].sum())
        chosen = set(out["masked_lm_positions"][j][:n].tolist())
        assert n > 0
        for p in chosen:
            start = p
            while CONT[tokens[start]]:
                start -= 1
            end = p + 1
            while end < len(tokens) and CONT[tokens[end]]:
                end += 1
            assert all(q in chosen for q in range(start, end))
            got = out["input_ids"][j][start:end]
            # One decision per word: all [MASK], or none (random and kept may mix, and a
            # random draw hits the [MASK] id once in a thousand pieces).
            words += 1
            mixed += bool((got == SPECIAL.mask).any() and not (got == SPECIAL.mask).all())
    assert words > 1000 and mixed / words < 0.005


def test_masks_are_a_function_of_seed_epoch_and_example_only() -> None:
    instances = _instances(40)
    rows = _rows(instances)
    spec = _spec()
    a = _mask(rows, spec)
    order = np.random.default_rng(0).permutation(len(instances))
    b = _mask({k: v[order] for k, v in rows.items()}, spec)  # other rows beside each row
    assert all(np.array_equal(a[k][order], b[k]) for k in a)
    c = _mask(dict(rows, epoch=rows["epoch"] + 1), spec)
    d = _mask(dict(rows, mask_seed=rows["mask_seed"] + 1), spec)
    assert not np.array_equal(a["masked_lm_positions"], c["masked_lm_positions"])
    assert not np.array_equal(a["masked_lm_positions"], d["masked_lm_positions"])


def test_ratios_are_configurable_and_ltr_predicts_the_next_token() -> None:
    instances = _instances(20)
    out = _mask(_rows(instances), _spec(mask_token_prob=1.0, random_token_prob=0.0))
    w = out["masked_lm_weights"] > 0
    got = np.take_along_axis(out["input_ids"], out["masked_lm_positions"], 1)
    assert w.sum() > 100 and (got[w] == SPECIAL.mask).all()
    single = _instances(20, seq=64, nsp=False)
    out = _mask(_rows(single, seq=64), _spec(max_predictions_per_seq=64, objective="ltr"))
    t = single[0].tokens
    n = len(t)
    assert (out["input_ids"][0][:n] == t).all()  # nothing masked
    assert (out["masked_lm_positions"][0][: n - 1] == np.arange(n - 1)).all()
    assert (out["masked_lm_ids"][0][: n - 1] == t[1:]).all()
    assert out["masked_lm_weights"][0].sum() == n - 1
