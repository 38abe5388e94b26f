"""TFDS's mock data, as data that is prepared: `tfds.testing.mock_data` serves examples
without any files, and the code under test checks that a dataset is prepared (building
it, or refusing where it cannot be downloaded) before it reads it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest import mock


@contextlib.contextmanager
def prepared_mock_data(**kwargs: Any) -> Iterator[None]:
    """`tfds.testing.mock_data(**kwargs)` (policy USE_CODE), every builder prepared."""
    import tensorflow_datasets as tfds

    prepared = mock.patch.object(tfds.core.DatasetBuilder, "is_prepared", return_value=True)
    with prepared, tfds.testing.mock_data(policy=tfds.testing.MockPolicy.USE_CODE, **kwargs):
        yield
