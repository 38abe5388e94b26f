"""Pre-training data: the paper's statistics, determinism across hosts and resumes, bad input."""

import numpy as np
import pytest

from bert_jax import input_pipeline, pretraining_data, tokenization
from bert_jax.tokenization import SpecialIds

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
    instances = pretraining_data.create_instances(docs, 64, 0.1, rng, SPECIAL)
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
    no_nsp = pretraining_data.create_instances(docs, 64, 0.1, rng, SPECIAL, nsp=False)
    assert all(i.tokens.tolist().count(SPECIAL.sep) == 1 and not i.segment_ids.any() for i in no_nsp)


@pytest.mark.parametrize("wwm", [False, True])
def test_masking_statistics(wwm) -> None:
    rng = np.random.default_rng(1)
    docs = random_docs(rng)
    instances = pretraining_data.create_instances(docs, 128, 0.1, rng, SPECIAL) * 3
    cont = np.zeros(VOCAB, bool)
    cont[500:] = True  # ids >= 500 continue a word ("##...")
    cfg = pretraining_data.MaskingConfig(max_predictions_per_seq=40, whole_word_masking=wwm)
    counts = {"mask": 0, "random": 0, "kept": 0}
    masked, candidates = 0, 0
    for inst in instances:
        f = pretraining_data.to_features(inst, rng, 128, cfg, SPECIAL, VOCAB, cont)
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
    cfg = pretraining_data.MaskingConfig(
        masked_lm_prob=0.5, max_predictions_per_seq=30, whole_word_masking=True
    )
    for _ in range(200):
        out, pos, _ = pretraining_data.mask_tokens(tokens, rng, cfg, SPECIAL, VOCAB, cont)
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
            assert len(decisions - {"keep"}) <= 1 or decisions == {"random", "keep"}


def test_ratios_are_configurable() -> None:
    rng = np.random.default_rng(3)
    docs = random_docs(rng, 20)
    instances = pretraining_data.create_instances(docs, 128, 0.0, rng, SPECIAL)
    cfg = pretraining_data.MaskingConfig(mask_token_prob=1.0, random_token_prob=0.0)
    for inst in instances[:200]:
        f = pretraining_data.to_features(inst, rng, 128, cfg, SPECIAL, VOCAB)
        n = int(f["masked_lm_weights"].sum())
        assert (f["input_ids"][f["masked_lm_positions"][:n]] == SPECIAL.mask).all()


# ------------------------------------------------------------------ the real pipeline


def _it(c, **kw):
    args = dict(global_batch_size=8, max_seq_length=64, max_predictions_per_seq=10, seed=7)
    args.update(kw)
    return input_pipeline.create_pretrain_iterator(c, **args)


def _take(it, n):
    return [next(it) for _ in range(n)]


@pytest.fixture(scope="module")
def wiki_config(tmp_path_factory):
    c = input_pipeline.default_config()
    c.cache_dir = str(tmp_path_factory.mktemp("cache"))
    return c


def test_hosts_assemble_the_same_global_batches_and_resume_on_another_count(wiki_config) -> None:
    one = _take(_it(wiki_config, process_index=0, process_count=1), 6)
    halves = [_take(_it(wiki_config, process_index=p, process_count=2), 6) for p in range(2)]
    for step in range(6):
        for k in one[step]:
            assert np.array_equal(np.concatenate([halves[0][step][k], halves[1][step][k]]), one[step][k])
    # Resume at step 4 with 4 processes: the same batches 4 and 5.
    quarters = [_take(_it(wiki_config, start_step=4, process_index=p, process_count=4), 2) for p in range(4)]
    for i, step in enumerate((4, 5)):
        for k in one[step]:
            assert np.array_equal(np.concatenate([q[i][k] for q in quarters]), one[step][k])
    # Different steps get different masks and examples.
    assert not np.array_equal(one[0]["input_ids"], one[1]["input_ids"])


def test_dynamic_masking_changes_masks_between_epochs_static_does_not(wiki_config) -> None:
    stream = input_pipeline._Stream(wiki_config, "train", 7, 64, 10)
    assert len(stream.epoch(0)) > 100
    c = wiki_config.copy_and_resolve_references()
    c.dynamic_masking = False
    c.dupe_factor = 2
    static = input_pipeline._Stream(c, "train", 7, 64, 10)
    a, b = static.features(0, 5), static.features(2, 5)  # epochs 0 and 2: the same version
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(stream.features(0, 5)["input_ids"], stream.features(1, 5)["input_ids"])


def test_eval_split_is_held_out_finite_and_fixed(wiki_config) -> None:
    first = list(_it(wiki_config, split="eval", process_index=0, process_count=1))
    again = list(_it(wiki_config, split="eval", seed=99, process_index=0, process_count=1))
    assert 1 <= len(first) == len(again)
    assert all(np.array_equal(x["input_ids"], y["input_ids"]) for x, y in zip(first, again, strict=True))


def test_bad_input_gives_clear_errors(tmp_path) -> None:
    c = input_pipeline.default_config()
    c.cache_dir = str(tmp_path / "cache")
    c.source = "text"
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    c.input_files = str(empty)
    with pytest.raises(ValueError, match=r"empty\.txt is empty"):
        next(_it(c, process_index=0, process_count=1))
    c.input_files = str(tmp_path / "missing*.txt")
    with pytest.raises(FileNotFoundError, match="no input files match"):
        next(_it(c, process_index=0, process_count=1))
    one_sentence_docs = tmp_path / "short.txt"
    one_sentence_docs.write_text("Only one sentence.\n\nAnother lonely one.\n")
    c.input_files = str(one_sentence_docs)
    with pytest.raises(ValueError, match="no usable documents"):
        next(_it(c, process_index=0, process_count=1))
    # Non-UTF-8 bytes and a very long line: replaced and kept, not a crash.
    messy = tmp_path / "messy.txt"
    lines = []
    for d in range(30):
        lines += [
            f"Document {d} sentence one \xff\xfe with bad bytes.".encode("latin-1"),
            ("word " * 3000).encode(),
            f"Final sentence {d}.".encode(),
            b"",
        ]
    messy.write_bytes(b"\n".join(lines))
    c.input_files = str(messy)
    c.eval_fraction = 0.1
    batch = next(_it(c, process_index=0, process_count=1))
    assert batch["input_ids"].shape == (8, 64) and batch["input_mask"].sum() > 0


def test_vocab_size_is_checked_against_the_model(wiki_config) -> None:
    assert input_pipeline.vocab_size_of(wiki_config) == 30522
    assert tokenization.load_tokenizer().vocab_size == 30522


def test_ltr_objective_predicts_the_next_token() -> None:
    rng = np.random.default_rng(4)
    docs = random_docs(rng, 20)
    instances = pretraining_data.create_instances(docs, 64, 0.0, rng, SPECIAL, nsp=False)
    cfg = pretraining_data.MaskingConfig(max_predictions_per_seq=64, objective="ltr")
    inst = instances[0]
    f = pretraining_data.to_features(inst, rng, 64, cfg, SPECIAL, VOCAB)
    n = len(inst.tokens)
    assert (f["input_ids"][:n] == inst.tokens).all()  # nothing masked
    assert (f["masked_lm_positions"][: n - 1] == np.arange(n - 1)).all()
    assert (f["masked_lm_ids"][: n - 1] == inst.tokens[1:]).all()
    assert f["masked_lm_weights"].sum() == n - 1
