"""Task data for the fine-tuning tests, built from real text shipped offline (BBC News),
and a tiny random BERT checkpoint to fine-tune."""

from __future__ import annotations

import glob
import os
import random
import re
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax import convert
from bert_jax.data import bbc_news
from bert_jax.model.config import BertConfig
from bert_jax.model.encoder import BertModel
from bert_jax.tasks import bbc, scorers

TINY = BertConfig(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=128,
)


# A one-epoch BBC News run of the tiny BERT (`config.set_keys` changes): two steps of 8
# rows, 8 dev rows.
TINY_BBC_RUN = {
    "max_train_examples": 16, "max_eval_examples": 8, "max_seq_length": 32, "global_batch_size": 8,
    "num_epochs": 1, "learning_rate": 2e-3, "log_every_steps": 1, "pack_examples": False,
    "length_buckets": (),
}  # fmt: skip


def tiny_params(seed: int = 0) -> dict:
    """A random `TINY` encoder's params, ``{"bert": ...}``, drawn by `seed`."""
    ids = jnp.zeros((1, 8), jnp.int32)
    return {"bert": nn.meta.unbox(BertModel(TINY).init(jax.random.key(seed), ids, ids, ids))["params"]}


def write_tiny_checkpoint(path: Path) -> str:
    """A random 2-layer BERT (bert-base-uncased vocabulary) as a Hugging Face folder."""
    convert.save_checkpoint(str(path), tiny_params(), TINY, "hf")
    return str(path)


def bbc_articles(n: int) -> list[tuple[str, list[str]]]:
    files = sorted(glob.glob(os.path.join(bbc_news.default_dir(), "*", "*.txt")))[::53][:n]
    out = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            title, _, body = f.read().strip().partition("\n")
        paragraphs = [p.strip() for p in body.split("\n\n") if len(p.split()) > 15]
        out.append((title.strip(), paragraphs[:3]))
    return out


def build_squad(version_2: bool, n_articles: int = 6, seed: int = 0) -> dict:
    """Questions about real paragraphs: 'what follows <3 words>?' answered by the next
    1-4 words (trailing punctuation dropped); a second reference answer is the first word.
    v2.0 adds an unanswerable question per paragraph with a plausible answer."""
    rng = random.Random(seed)
    data = []
    for k, (title, paragraphs) in enumerate(bbc_articles(n_articles)):
        entries = []
        for j, context in enumerate(paragraphs):
            words = [(m.start(), m.group()) for m in re.finditer(r"\S+", context)]
            qas = []
            for q in range(3):
                i = rng.randrange(3, len(words) - 1)
                span = words[i : i + rng.randint(1, 4)]
                start = span[0][0]
                text = context[start : span[-1][0] + len(span[-1][1])].rstrip(".,;:'\"")
                if not scorers.normalize_answer(text):  # e.g. "The" or "-": no words to score
                    continue
                prefix = " ".join(w for _, w in words[i - 3 : i])
                answers = [{"text": text, "answer_start": start}]
                answers.append({"text": span[0][1], "answer_start": start})
                qas.append(
                    {
                        "id": f"q{k}-{j}-{q}",
                        "question": f'What follows "{prefix}" in "{title}"?',
                        "answers": answers,
                    }
                )
            if version_2:
                qas.append(
                    {
                        "id": f"q{k}-{j}-none",
                        "question": f"Who wrote the headline of the story before {title}?",
                        "answers": [],
                        "is_impossible": True,
                        "plausible_answers": [{"text": words[1][1], "answer_start": words[1][0]}],
                    }
                )
            entries.append({"context": context, "qas": qas})
        data.append({"title": title, "paragraphs": entries})
    return {"version": "2.0" if version_2 else "1.1", "data": data}


def bbc_sentences(n: int, seed: int) -> list[str]:
    """Real sentences (BBC News business articles)."""
    rng = random.Random(seed)
    text = " ".join(e.text_b for e in bbc.read("", "dev")[:40])
    sentences = [s for s in re.split(r"(?<=\.)\s+", text) if 6 <= len(s.split()) <= 25]
    return rng.sample(sentences, n)


def tagged_sentences(
    n: int, seed: int, names: list[tuple[str, str]], rng: random.Random
) -> list[list[tuple[str, str]]]:
    """`n` real sentences (lower-cased words, tagged ``O``), each with one of `names`
    ((phrase, type)) inserted at a random place, tagged IOB2."""
    out = []
    for sentence in bbc_sentences(n, seed=seed):
        words = [(w, "O") for w in sentence.lower().split()]
        phrase, kind = rng.choice(names)
        at = rng.randrange(len(words))
        words[at:at] = [(w, ("B-" if i == 0 else "I-") + kind) for i, w in enumerate(phrase.split())]
        out.append(words)
    return out


def write_sst2(root: Path) -> Path:
    """SST-2-layout files: real sentences after a sentiment word; label = that word."""
    folder = root / "SST-2"
    folder.mkdir(parents=True)
    sentences = bbc_sentences(210, seed=1)

    def rows(chunk, offset):
        return [
            (("great : " if (i + offset) % 2 else "awful : ") + s, (i + offset) % 2)
            for i, s in enumerate(chunk)
        ]

    train, dev, test = rows(sentences[:170], 0), rows(sentences[170:200], 1), rows(sentences[200:], 0)
    (folder / "train.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in train))
    (folder / "dev.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in dev))
    (folder / "test.tsv").write_text(
        "index\tsentence\n" + "".join(f"{i}\t{s}\n" for i, (s, _) in enumerate(test))
    )
    return root
