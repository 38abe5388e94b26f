"""How a run computes the model, apart from what the model is (levanter's `jmp.Policy` idea).

`BertConfig` says what the model is (shapes, architecture switches) and is what a
checkpoint's ``bert_config.json`` holds. `Numerics` says how one run computes it: the
compute and parameter dtypes, whether the layers are scanned, rematerialisation, the
weight-gradient matmul form, the dropout mask generator and the attention kernel. It is
chosen per run and per platform (`for_platform`) and never saved with the model (but for
the layer loop a pre-training workdir's checkpoints keep: `pretraining.model_file`), so a
checkpoint pre-trained on CPU in float32 and fine-tuned on a TPU in bfloat16 gets the TPU's
choices, and `features` computes in float32 unless asked.

Every module of `bert_jax.model` takes one as its ``numerics`` field; the default is
float32, unrolled, with nothing rematerialised (inference and conversion).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from bert_jax.setting_fields import setting

DTYPES = ("float32", "bfloat16", "float16")
REMAT_POLICIES = ("none", "full", "dots", "dots_no_batch", "selective")
WEIGHT_GRAD_MATMULS = ("auto", "transposed_copy", "transposed_copy_wide", "direct")
DROPOUT_RNGS = ("hash", "hash16", "threefry")
# The generators the attention kernels draw in place (`kernel_tiles.keep`).
KERNEL_DROPOUT_RNGS = ("hash", "hash16")
# The attention kernels `model.attention` implements (listed here, where settings are
# checked, so that reading a config does not import the Pallas kernels).
ATTENTION_KERNELS = ("auto", "xla", "splash", "cudnn", "triton", "mosaic")
NORM_KERNELS = ("xla", "triton")
BIAS_GRADS = ("auto", "matvec", "sum")
LAYER_LOOPS = ("auto", "scan", "unroll")
# The keys older `bert_config.json` files carried for these choices: read and ignored.
LEGACY_MODEL_KEYS = ("dtype", "remat_policy", "weight_grad_matmul", "dropout_rng", "scan_layers")
# Under "transposed_copy_wide", layers narrower than this keep the direct weight gradient.
_MIN_COPY_WIDTH = 512


@dataclasses.dataclass(frozen=True)
class Numerics:
    """One run's numerics (hashable: a static part of the jitted step)."""

    # Matmul and activation dtype; softmax and LayerNorm statistics stay float32.
    compute_dtype: str = setting("float32", choices=DTYPES)
    # Dtype parameters are stored (and updated) in.
    param_dtype: str = setting("float32", choices=DTYPES)
    # How the encoder's layers run (`model.layer_scan`): "scan" compiles one layer body for
    # all of them (parameters stacked [L, ...]): a deep model compiles in a fraction of
    # the time, which a pod pays at every start; "unroll" compiles each layer: the step
    # moves 41-52% fewer bytes (a scanned layer copies each activation it keeps into a
    # stack), and on a GPU, BERT-Base's paper step ran 1.41x (seq 512) and 1.46x (seq 128)
    # faster unrolled on an H200 (2026-11-28), at 4x the first compile (about 80 s). "auto"
    # is decided by `for_platform`: scan on TPU (not yet timed unrolled there), unroll
    # elsewhere. A resumed run keeps the loop its checkpoints were saved with
    # (`pretraining.model_file`). Checkpoints exported as models are per-layer either way.
    layer_loop: str = setting("auto", choices=LAYER_LOOPS)
    # Rematerialisation of each encoder layer in the backward pass: "none" keeps whatever
    # autodiff keeps; "selective" keeps the matmul and LayerNorm inputs in the compute
    # dtype and recomputes the attention scores, softmax, LayerNorm statistics and dropout
    # masks (`layer_scan.SELECTIVE_SAVED`; about 2% more FLOPs, 0.4x the temporaries of
    # BERT-Base at 512); "dots" and "dots_no_batch" keep the matmul outputs (all, or those
    # without a batch dimension: not attention's); "full" keeps the layer's input only.
    remat_policy: str = setting("none", choices=REMAT_POLICIES)
    # How weight-gradient matmuls (x^T g) are computed: "transposed_copy" writes x^T once
    # and multiplies it row-major; "transposed_copy_wide" does so only in layers whose in
    # and out widths are both >= 512 (below that the copy costs more than it saves: 12%
    # slower on the L2 H128 demo step); "direct" lets XLA read x along its columns; "auto"
    # is decided by `for_platform`: transposed_copy_wide on CPU, direct elsewhere. Why:
    # XLA:CPU sends row-major products to YNNPACK (AVX-512 where the CPU has it) but a dot
    # whose left operand is contracted along its rows to Eigen, compiled for AVX only: on
    # AVX-512 hosts that is half the speed for a third of the training FLOPs. TPUs and GPUs
    # read transposed operands natively: no copy there.
    weight_grad_matmul: str = setting("auto", choices=WEIGHT_GRAD_MATMULS)
    # How a dense layer's bias gradient (the column sum of the output gradient) is
    # computed: "matvec", a product with a vector of ones (XLA:CPU's column reduction is
    # ~10x slower), or "sum", a reduction XLA:GPU fuses into the pass that makes the
    # gradient (GELU's backward for the intermediate layer) instead of reading it again;
    # compiled for an H100, BERT-Base's paper step moves 4.5% fewer bytes (86.2 -> 82.3 GB).
    # "auto" is decided by `for_platform`: sum on GPU, matvec elsewhere (the TPU program
    # unchanged).
    bias_grad: str = setting("auto", choices=BIAS_GRADS)
    # Dropout masks: "hash" (a counter-based integer hash of each element's index, seeded
    # per layer and step from the dropout key; ~7x cheaper than threefry on CPU), "hash16"
    # (16 bits an element: one hash of index // 2 for two neighbours, which an attention
    # kernel computes once for both; the rate rounded to a multiple of 2**-16) or
    # "threefry" (jax.random.bernoulli). All are Bernoulli(1 - rate) per element.
    dropout_rng: str = setting("hash", choices=DROPOUT_RNGS)
    # Attention implementation (`bert_jax.model.attention`): "auto" is Pallas splash on TPU,
    # cuDNN on GPU (the Triton kernel under attention dropout) and XLA on CPU, each falling
    # back to XLA (one warning line) where the kernel cannot take the mask, the head size
    # or attention dropout. "triton" (GPUs) and "mosaic" (TPUs) apply attention dropout
    # inside the kernel with the "hash" masks.
    attention_kernel: str = setting("auto", choices=ATTENTION_KERNELS)
    # The residual blocks' ends, LN(x + dropout(f(x) + b)) (BERT's layers; pre-LN layers: the
    # stream x + dropout(f(x) + b) and its LayerNorm): "xla", or "triton", one Triton kernel
    # for the bias, hidden dropout ("hash" masks, the XLA path's), residual add and LayerNorm
    # and one for their gradients, the dense bias's included (`model.triton_norm`; NVIDIA
    # GPUs; other platforms keep XLA's).
    norm_kernel: str = setting("xla", choices=NORM_KERNELS)

    def __post_init__(self) -> None:
        for name, allowed in (
            ("compute_dtype", DTYPES),
            ("param_dtype", DTYPES),
            ("remat_policy", REMAT_POLICIES),
            ("weight_grad_matmul", WEIGHT_GRAD_MATMULS),
            ("bias_grad", BIAS_GRADS),
            ("dropout_rng", DROPOUT_RNGS),
            ("attention_kernel", ATTENTION_KERNELS),
            ("norm_kernel", NORM_KERNELS),
            ("layer_loop", LAYER_LOOPS),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}={getattr(self, name)!r} not in {allowed}")

    @property
    def dtype(self) -> jnp.dtype:
        """The compute dtype as a NumPy dtype."""
        return jnp.dtype(self.compute_dtype)

    @property
    def params(self) -> jnp.dtype:
        """The parameter dtype as a NumPy dtype."""
        return jnp.dtype(self.param_dtype)

    @property
    def scanned(self) -> bool:
        """Whether the layers are scanned ("auto" not decided for a platform: unrolled, as
        every model built for inference or conversion runs)."""
        return self.layer_loop == "scan"

    def for_platform(self, platform: str) -> Numerics:
        """These numerics with ``weight_grad_matmul``, ``bias_grad`` and ``layer_loop``
        "auto" decided for `platform` ("cpu", "tpu", "gpu"): a program lowered ahead of time
        for a TPU (`plan`) from a CPU process gets the TPU choices."""
        changes = {}
        if self.weight_grad_matmul == "auto":
            changes["weight_grad_matmul"] = "transposed_copy_wide" if platform == "cpu" else "direct"
        if self.bias_grad == "auto":
            changes["bias_grad"] = "sum" if platform == "gpu" else "matvec"
        if self.layer_loop == "auto":
            changes["layer_loop"] = "scan" if platform == "tpu" else "unroll"
        return dataclasses.replace(self, **changes) if changes else self

    def weight_grad(self, fan_in: int, fan_out: int, copy: str = "copy_x") -> str:
        """How `ops.dense` computes the weight gradient of a ``[fan_in, fan_out]`` kernel:
        `copy` (which operand a layer transposes: "copy_g" where its input is an elementwise
        result XLA would recompute inside the copy) where transposed copies are asked for,
        else "direct" ("auto" not decided for a platform reads as "direct": a model built
        for inference computes no weight gradients)."""
        choice = self.weight_grad_matmul
        if choice == "transposed_copy_wide":
            choice = "transposed_copy" if min(fan_in, fan_out) >= _MIN_COPY_WIDTH else "direct"
        return copy if choice == "transposed_copy" else "direct"

    @property
    def bias_grad_form(self) -> str:
        """How `ops.dense` computes a bias gradient ("auto" not decided for a platform
        reads as "matvec")."""
        return "sum" if self.bias_grad == "sum" else "matvec"

    def replace(self, **changes: object) -> Numerics:
        return dataclasses.replace(self, **changes)


DEFAULT = Numerics()
