"""Every ``gs://`` access of a run pointed at a GCS API emulator, with one variable.

``BERT_JAX_GCS_EMULATOR=http://127.0.0.1:PORT`` (e.g. the PyPI package
`gcp-storage-emulator`) sets, for this process and the processes it starts, what each
layer beneath bert_jax needs to reach it:

- `gcsfs`, epath's ``gs://`` client on every machine (`storage.gcs`: workdir files,
  orbax's folders): ``STORAGE_EMULATOR_HOST``, with anonymous credentials
  (``FSSPEC_GCS_TOKEN=anon``) and without its bucket-layout probe over gRPC
  (``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``, which an emulator does not answer).
- tensorstore (orbax's array files): ``TENSORSTORE_GCS_HTTP_URL``, and a fixed token
  (``GOOGLE_AUTH_TOKEN_FOR_TESTING``) instead of a search for credentials.
- Google's auth library: ``NO_GCE_CHECK=true`` (no metadata-server probe).

Applied at the start of `bert-jax` and by `gcs.configure` (before those libraries read
them); variables the user set already are kept. The emulator itself
(`gcp-storage-emulator`) is in the test extra.
"""

from __future__ import annotations

import os

VARIABLE = "BERT_JAX_GCS_EMULATOR"


def environment(url: str) -> dict[str, str]:
    """The variables that point every layer at the emulator at `url`."""
    url = url.rstrip("/")
    return {
        "STORAGE_EMULATOR_HOST": url,
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        "FSSPEC_GCS_TOKEN": "anon",
        "TENSORSTORE_GCS_HTTP_URL": url,
        "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",  # tensorstore: no credential search
        "NO_GCE_CHECK": "true",
    }


def apply_from_environment() -> None:
    url = os.environ.get(VARIABLE)
    if url:
        for key, value in environment(url).items():
            os.environ.setdefault(key, value)
