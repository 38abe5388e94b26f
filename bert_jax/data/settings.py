"""A pre-training run's data settings, resolved once from its config (`DataSettings.from_config`).

The config files and flags stay what users write (``configs/defaults.py: data()``); at the
entry point the ``data`` block becomes this frozen record, and the data layer (`sources`,
`run_vocabulary`, `prepared_cache`, `corpus_inputs`) reads its typed fields, never the
`ConfigDict` (as fine-tuning's `FinetuneSettings` / `TaskData` and the engine's
`TrainingSettings` do).

Each field has the type its readers always cast it to, so the cache keys built from these
fields (prepared folders, learned vocabularies) are the ones built from the raw block.
"""

from __future__ import annotations

import dataclasses

import ml_collections

_CASTS = {"str": str, "int": int, "float": float, "bool": bool}


@dataclasses.dataclass(frozen=True)
class DataSettings:
    """Every key of the ``data`` block (defaults: ``configs/defaults.py: data()``)."""

    # wiki_excerpt | bbc_news | text | tfds | prepared | tfrecord | synthetic; built-in
    # corpora may be joined with commas ("wiki_excerpt,bbc_news").
    source: str = "wiki_excerpt"
    input_files: str = ""  # text: glob(s); prepared: folder(s); tfrecord: glob(s)
    eval_files: str = ""  # held-out data for source=prepared / tfrecord
    tfds_name: str = ""  # source=tfds
    tfds_num_shards: int = 64
    vocab_file: str = ""  # "" = bert-base-uncased
    learned_vocab_size: int = 0  # >0: a WordPiece vocabulary learned on the corpus
    do_lower_case: bool = True
    tokenizer: str = "wordpiece"  # or "sentencepiece"
    masked_lm_prob: float = 0.15
    mask_token_prob: float = 0.8
    random_token_prob: float = 0.1
    whole_word_masking: bool = False
    objective: str = "mlm"  # or "ltr"
    dynamic_masking: bool = True
    dupe_factor: int = 10
    short_seq_prob: float = 0.1
    nsp: bool = True
    full_sentences: bool = False
    eval_fraction: float = 0.05
    cache_dir: str = ""  # "" = ~/.cache/bert_jax

    @classmethod
    def from_config(cls, data: ml_collections.ConfigDict) -> DataSettings:
        """The typed record of a run config's ``data`` block (every key read, each cast to
        its field's type); a key the block lacks is named in one line."""
        values = {}
        for field in dataclasses.fields(cls):
            if field.name not in data:
                raise ValueError(f"config.data.{field.name} is missing (see configs/defaults.py: data())")
            values[field.name] = _CASTS[str(field.type)](data[field.name])
        return cls(**values)
