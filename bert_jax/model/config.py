"""Model hyper-parameters and the named presets of the paper (Devlin et al., 2019, §3).

`BertConfig` is a frozen dataclass so that a model's shape is hashable and can be a static
argument of `jax.jit`; the run configuration (`configs/*.py`, ml-collections) carries it
as a plain `ConfigDict` under `config.model` and turns it into a `BertConfig` with
`BertConfig.from_dict`, which rejects unknown keys by name.

It describes the model alone, which is what a checkpoint's ``bert_config.json`` holds; how a
run computes it (dtypes, remat, the dense form, dropout masks) is its `numerics.Numerics`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from bert_jax.model.numerics import LEGACY_MODEL_KEYS
from bert_jax.setting_fields import FRACTION, NON_NEGATIVE_INT, setting

ACTIVATIONS = ("gelu", "gelu_tanh", "relu")
# The fields that fix parameter shapes: two configs that agree on these share checkpoints.
SHAPE_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
)
# Fields that change the parameter tree or the function beyond the shape keys: the modern
# small-compute switches (off by default: the paper's BERT). A checkpoint's config must
# agree on them too; a config file written before they existed means the defaults.
ARCHITECTURE_KEYS = (
    "pre_layer_norm",
    "gated_ffn",
    "position_embedding_type",
    "rotary_base",
    "use_bias",
    "first_layer_attention_norm",
    "norm_bias",
    "global_attn_every_n_layers",
    "local_attention",
    "local_rotary_base",
    "layer_types",
    "tie_word_embeddings",
    "classifier_pooling",
)
# Keys that mean nothing unless some layers are local (`global_attn_every_n_layers` > 1).
_LOCAL_KEYS = ("local_attention", "local_rotary_base")
# The kinds of layer of an explicit attention pattern (`BertConfig.layer_types`; the names
# `transformers` 5 writes in a ModernBERT config).
LAYER_TYPES = ("full_attention", "sliding_attention")
POSITION_EMBEDDINGS = ("absolute", "rotary", "sinusoidal", "alibi")
# "bert": the paper's pooler (dense + tanh at [CLS]); "cls" / "mean": ModernBERT's head
# (the [CLS] vector or the mean of the real tokens → dense → activation → LayerNorm).
CLASSIFIER_POOLINGS = ("bert", "cls", "mean")


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Shape and architecture of a BERT encoder.

    Field names follow the original `bert_config.json` (and Hugging Face's `BertConfig`)
    so that released configs load as they are.
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    # "gelu" is the exact erf form (Hugging Face's default); "gelu_tanh" is the original
    # TF1 release's approximation.
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = setting(0.1, FRACTION)
    attention_probs_dropout_prob: float = setting(0.1, FRACTION)
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    # Left-to-right (causal) attention: the paper's "LTR & No NSP" ablation (Table 5).
    causal_attention: bool = False
    # The word-embedding rows and the MLM output bias are padded to a multiple of this, so
    # that tensor parallelism can split the vocabulary (30522 divides by 2 only; 128, as in
    # MaxText and levanter, suits every tensor size up to 128). Padded ids are never
    # inputs and their MLM logits are masked to the float32 minimum: no loss, gradient or
    # prediction changes. Conversion adds the padding on load and removes it on export;
    # 1 (no padding) is what a config without this key (an older checkpoint) means.
    vocab_pad_multiple: int = setting(1, NON_NEGATIVE_INT)
    # -- Recipe switches (the paper's BERT when all are at their defaults) --------------
    # Pre-LayerNorm layers, x + f(LN(x)), with a final LayerNorm after the last layer
    # (Xiong et al., 2020; Cramming, Geiping & Goldstein, 2022): stable at higher learning
    # rates with a short warm-up. The paper's (and Hugging Face's) layers are post-LN.
    pre_layer_norm: bool = False
    # Gated feed-forward: act(x W_gate) * (x W) → W_out (Shazeer, 2020; GeGLU with gelu),
    # as in Cramming, MosaicBERT and ModernBERT. Adds an ``intermediate_gate`` kernel.
    gated_ffn: bool = False
    # "absolute": the paper's learned position table; "rotary": rotary position
    # embeddings on queries and keys (Su et al., 2021; ModernBERT), no position table;
    # "sinusoidal": the fixed sinusoids of Vaswani et al. (2017) times one learned scalar
    # (initialised to 1/sqrt(H)), added to the embeddings (Cramming's "scaled sinusoidal",
    # after Hua et al., 2022); "alibi": no position embedding, a per-head penalty
    # -m_n |i - j| on the attention scores (Press et al., 2022; bidirectional as in
    # MosaicBERT), slopes m_n of Press et al.
    position_embedding_type: str = "absolute"
    rotary_base: float = 10_000.0
    # False: no biases in the encoder's dense layers and the MLM transform (Cramming;
    # ModernBERT); LayerNorms, the MLM output bias and task heads keep theirs.
    use_bias: bool = True
    # -- The ModernBERT family (Warner et al., 2024; `transformers`' modeling_modernbert.py),
    # all off by default. With pre_layer_norm, False leaves layer 0 without an attention
    # LayerNorm: its attention reads the embedding LayerNorm's output (ModernBERT's
    # ``attn_norm = Identity`` in layer 0).
    first_layer_attention_norm: bool = True
    # False: LayerNorms with a scale only (ModernBERT's ``norm_bias=False``).
    norm_bias: bool = True
    # type_vocab_size (above) = 0: no segment embedding at all (ModernBERT has none).
    # Every n-th layer (layer 0 included) attends globally, the others within a sliding
    # window of `local_attention` tokens (query i sees key j when |i - j| <= window // 2)
    # with rotary base `local_rotary_base` (`rotary_base` is the global layers'). 1: every
    # layer global (the paper's).
    global_attn_every_n_layers: int = 1
    local_attention: int = 128
    local_rotary_base: float = 10_000.0
    # An explicit pattern instead of every n-th layer: one of `LAYER_TYPES` per layer
    # ("sliding_attention": within the window above, with the local rotary base), as
    # `transformers` 5 writes ``layer_types``. None: the every-n-th rule.
    layer_types: tuple[str, ...] | None = None
    # False: the MLM decoder has its own [V, H] matrix instead of the word embeddings.
    tie_word_embeddings: bool = True
    # The sentence-level representation (`CLASSIFIER_POOLINGS`): "bert" the paper's tanh
    # pooler at [CLS]; "cls"/"mean" ModernBERT's classification head before its classifier.
    classifier_pooling: str = "bert"

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not divisible by "
                f"num_attention_heads={self.num_attention_heads}"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act={self.hidden_act!r} not in {ACTIVATIONS}")
        if not isinstance(self.vocab_size, int) or self.vocab_size < 1:
            raise ValueError(
                f"vocab_size={self.vocab_size!r} must be an integer >= 1 (a run config's 0, the "
                "tokenizer's size, is resolved by `bert_jax.pretraining.model_vocab`)"
            )
        if not isinstance(self.vocab_pad_multiple, int) or self.vocab_pad_multiple < 1:
            raise ValueError(f"vocab_pad_multiple={self.vocab_pad_multiple!r} must be an integer >= 1")
        if self.position_embedding_type not in POSITION_EMBEDDINGS:
            raise ValueError(
                f"position_embedding_type={self.position_embedding_type!r} not in {POSITION_EMBEDDINGS}"
            )
        if self.position_embedding_type == "rotary" and self.head_dim % 2:
            raise ValueError(f"rotary position embeddings need an even head size, not {self.head_dim}")
        if self.position_embedding_type == "sinusoidal" and self.hidden_size % 2:
            raise ValueError(f"sinusoidal positions need an even hidden size, not {self.hidden_size}")
        self._check_family()

    def _check_family(self) -> None:
        """The ModernBERT-family switches' own ranges (one line each, naming the key)."""
        if not isinstance(self.type_vocab_size, int) or self.type_vocab_size < 0:
            raise ValueError(f"type_vocab_size={self.type_vocab_size!r} must be an integer >= 0")
        n = self.global_attn_every_n_layers
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"global_attn_every_n_layers={n!r} must be an integer >= 1")
        if not isinstance(self.local_attention, int) or self.local_attention < 1:
            raise ValueError(f"local_attention={self.local_attention!r} must be a positive number of tokens")
        self._check_layer_types()
        if self.classifier_pooling not in CLASSIFIER_POOLINGS:
            raise ValueError(f"classifier_pooling={self.classifier_pooling!r} not in {CLASSIFIER_POOLINGS}")
        if not self.first_layer_attention_norm and not self.pre_layer_norm:
            raise ValueError(
                "first_layer_attention_norm=False needs pre_layer_norm=True (a post-LN layer's "
                "attention LayerNorm normalises its output)"
            )

    def _check_layer_types(self) -> None:
        """An explicit pattern: a tuple (a JSON list is taken) of one `LAYER_TYPES` per layer."""
        if self.layer_types is None:
            return
        if not isinstance(self.layer_types, list | tuple) or isinstance(self.layer_types, str):
            raise ValueError(
                f"layer_types={self.layer_types!r} must be a list of {LAYER_TYPES}, one per layer"
            )
        object.__setattr__(self, "layer_types", tuple(self.layer_types))  # hashable: a static jit argument
        wrong = sorted({t for t in self.layer_types if t not in LAYER_TYPES}, key=str)
        if wrong or len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(
                f"layer_types has {len(self.layer_types)} entries {wrong or ''}: it needs one of "
                f"{LAYER_TYPES} for each of the {self.num_hidden_layers} layers"
            )

    @property
    def rotary(self) -> bool:
        return self.position_embedding_type == "rotary"

    @property
    def alibi(self) -> bool:
        return self.position_embedding_type == "alibi"

    def switches_on(self) -> list[str]:
        """The recipe switches set away from the paper's BERT, as ``key=value`` (the local
        window's keys only where some layers are local), then ``type_vocab_size=0``."""
        default = BertConfig()
        keys = [k for k in ARCHITECTURE_KEYS if self.has_local_layers or k not in _LOCAL_KEYS]
        on = [f"{k}={getattr(self, k)}" for k in keys if getattr(self, k) != getattr(default, k)]
        return on + (["type_vocab_size=0"] if self.type_vocab_size == 0 else [])

    @property
    def has_local_layers(self) -> bool:
        if self.layer_types is not None:
            return "sliding_attention" in self.layer_types
        return self.global_attn_every_n_layers > 1 and self.num_hidden_layers > 1

    def layer_window(self, index: int) -> int | None:
        """The attention window of layer `index` (None: global), as ModernBERT: layers
        0, n, 2n, ... global, the others local; or as `layer_types` says."""
        if self.layer_types is not None:
            return self.local_attention if self.layer_types[index] == "sliding_attention" else None
        return None if index % self.global_attn_every_n_layers == 0 else self.local_attention

    def layer_rotary_base(self, index: int) -> float:
        return self.rotary_base if self.layer_window(index) is None else self.local_rotary_base

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def padded_vocab_size(self) -> int:
        """Rows of the word-embedding table (and MLM logits): `vocab_size` rounded up to a
        multiple of `vocab_pad_multiple`."""
        m = self.vocab_pad_multiple
        return -(-self.vocab_size // m) * m

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> BertConfig:
        """Builds a config, failing with the offending key's name on unknown keys.

        Keys that Hugging Face / TF configs carry but that do not change the
        architecture (``model_type``, ``architectures``, ...) are ignored, as are the run
        numerics older bert_jax files saved with the model (``dtype``, ``remat_policy``, ...).
        """
        values = dict(values)
        known = {f.name for f in dataclasses.fields(cls)}
        ignorable = {
            "model_type",
            "architectures",
            "transformers_version",
            "pad_token_id",
            "use_cache",
            "classifier_dropout",
            "torch_dtype",
            "gradient_checkpointing",
            "directionality",
            "pooler_fc_size",
            "pooler_num_attention_heads",
            "pooler_num_fc_layers",
            "pooler_size_per_head",
            "pooler_type",
            "_name_or_path",
            "is_decoder",
            "add_cross_attention",
            *LEGACY_MODEL_KEYS,
        }
        unknown = sorted(set(values) - known - ignorable)
        if unknown:
            raise ValueError(f"Unknown BertConfig key(s): {', '.join(unknown)}")
        kwargs = {k: v for k, v in values.items() if k in known}
        if kwargs.get("hidden_act") == "gelu_new":
            kwargs["hidden_act"] = "gelu_tanh"
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> BertConfig:
        return dataclasses.replace(self, **changes)


def _preset(layers: int, hidden: int, heads: int, **kw: Any) -> BertConfig:
    return BertConfig(
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        **kw,
    )


# ModernBERT's architecture as `BertConfig` switches (Warner et al., 2024, Table 4;
# `transformers.ModernBertConfig`'s defaults): pre-LN without layer 0's attention norm,
# bias-free GeGLU and LayerNorms (eps 1e-5), rotary positions (global base 160,000, local
# 10,000), every third layer global and the others within ±64 tokens, no segment
# embedding, the MLM decoder tied to the embeddings, its classification head at [CLS].
MODERNBERT = dict(
    vocab_size=50_368,
    hidden_act="gelu",
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    max_position_embeddings=8192,
    type_vocab_size=0,
    layer_norm_eps=1e-5,
    pre_layer_norm=True,
    gated_ffn=True,
    position_embedding_type="rotary",
    rotary_base=160_000.0,
    use_bias=False,
    first_layer_attention_norm=False,
    norm_bias=False,
    global_attn_every_n_layers=3,
    local_attention=128,
    local_rotary_base=10_000.0,
    classifier_pooling="cls",
)

# BERT-Base and BERT-Large are the paper's; mini/small are the Turc et al. (2019) compact
# models; tiny is for tests and the CPU demo; modernbert-base/-large are ModernBERT's
# released shapes (GeGLU widths 1152 and 2624 per half).
MODEL_PRESETS: dict[str, BertConfig] = {
    "tiny": _preset(2, 128, 2),
    "mini": _preset(4, 256, 4),
    "small": _preset(4, 512, 8),
    "medium": _preset(8, 512, 8),
    "base": _preset(12, 768, 12),
    "large": _preset(24, 1024, 16),
    "modernbert-base": BertConfig(
        num_hidden_layers=22, hidden_size=768, num_attention_heads=12, intermediate_size=1152, **MODERNBERT
    ),
    "modernbert-large": BertConfig(
        num_hidden_layers=28, hidden_size=1024, num_attention_heads=16, intermediate_size=2624, **MODERNBERT
    ),
}


def model_config_dict(preset: str, **overrides: Any) -> dict[str, Any]:
    """The `config.model` block of a run config for one preset (a config file makes it a
    `ConfigDict` block)."""
    if preset not in MODEL_PRESETS:
        raise ValueError(f"Unknown model preset {preset!r}; choose from {sorted(MODEL_PRESETS)}")
    values = MODEL_PRESETS[preset].to_dict()
    # New models pad the vocabulary so that any tensor-parallel size up to 128 splits it.
    values["vocab_pad_multiple"] = 128
    unknown = sorted(set(overrides) - set(values))
    if unknown:
        raise ValueError(f"Unknown BertConfig key(s): {', '.join(unknown)}")
    values.update(overrides)
    return values
