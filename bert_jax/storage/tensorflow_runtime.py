"""TensorFlow, imported once per process: quietly, and with no accelerator of its own.

bert_jax uses TensorFlow for tensorflow-text's WordPiece, TFRecords (local ones read by
tf.data; a bucket's through the path layer) and TFDS; JAX owns the accelerators, so
TensorFlow is shown none (`tf.config.set_visible_devices([], ...)`). Importing TensorFlow
2.21 prints a dozen C++ lines of its own (oneDNN notices, CUDA probing, "failed call to
cuInit"), logged before its logging starts, so ``TF_CPP_MIN_LOG_LEVEL`` no longer silences
them: the import, and the hiding of its devices, run with stderr pointed at /dev/null (Python errors still
raise). ``BERT_JAX_DEBUG=1``, or ``TF_CPP_MIN_LOG_LEVEL=0``, keeps the lines. Importing is
deferred to first use: TensorFlow 2.21 costs 5-8 s of CPU and ~0.5 GB per process, and
~3 s more when Keras 3, which it imports, finds scikit-learn and matplotlib installed (its
optional extras, hidden from it during the import: `_without_keras_extras`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
from collections.abc import Iterator
from types import ModuleType


def _quiet() -> bool:
    return not os.environ.get("BERT_JAX_DEBUG") and os.environ.get("TF_CPP_MIN_LOG_LEVEL") != "0"


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """The process's stderr (file descriptor 2, where TensorFlow's C++ logs go) pointed at
    /dev/null for the block, unless asked not to (see the module docstring)."""
    if not _quiet():
        yield
        return
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def _import(name: str) -> ModuleType:
    with quiet_stderr():
        return importlib.import_module(name)


# Imported by Keras 3 when TensorFlow is (for its scikit-learn wrappers and image plots,
# each behind an ImportError guard) and never used by bert_jax through Keras: ~3 s of
# TensorFlow's ~10 s import.
_KERAS_EXTRAS = ("sklearn", "matplotlib")


@contextlib.contextmanager
def _without_keras_extras() -> Iterator[None]:
    """`_KERAS_EXTRAS` not importable for the block, unless already imported: Keras takes
    them as absent. Importable again after it (bert_jax's figures import matplotlib)."""
    hidden = [name for name in _KERAS_EXTRAS if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # `import name` raises ImportError
    try:
        yield
    finally:
        for name in hidden:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


@functools.cache
def tensorflow() -> ModuleType:
    """`tensorflow`, with no GPU or TPU of its own."""
    with _without_keras_extras():
        tf = _import("tensorflow")
    # Hiding the devices initialises TensorFlow's platforms, which logs CUDA's probing
    # ("failed call to cuInit") at ERROR level on a machine without a GPU: quiet too.
    with quiet_stderr():
        for kind in ("GPU", "TPU"):
            try:
                tf.config.set_visible_devices([], kind)
            except (RuntimeError, ValueError):  # already initialised, or no such device type
                pass
    return tf


@functools.cache
def tensorflow_text() -> ModuleType:
    tensorflow()
    return _import("tensorflow_text")


@functools.cache
def tensorflow_datasets() -> ModuleType:
    tensorflow()
    return _import("tensorflow_datasets")
