"""One client for ``gs://``, on every machine, and one retry policy for every layer.

**The client.** `etils.epath` (the path layer's, orbax's and JAX's compilation cache's)
reaches ``gs://`` through TensorFlow's own client (`tf.io.gfile`) whenever TensorFlow is
installed, as on a TPU VM, else through `gcsfs`. bert_jax sets ``EPATH_USE_TF=false``, so
it is `gcsfs` everywhere: on a TPU VM and in the tests, which point it at a GCS API
emulator (`storage.emulator`). TensorFlow's endpoint is fixed (``www.googleapis.com``):
it reaches an emulator only through an HTTPS interceptor with a CA of its own, so the
tests could not run what a VM runs; and through the same front to the emulator gcsfs
was as fast or faster, most on small objects (`bench/bucket_clients.py`,
docs/tpu_pods.md). gcsfs's experimental gRPC layer (zonal and hierarchical-namespace
buckets) is off, so its client is the JSON API's on a VM as in the tests. Orbax's arrays
go through tensorstore, whichever epath client is chosen.

**The retry policy**, ``BERT_JAX_BUCKET_RETRY`` (default
``within_s=300,first_s=1,max_s=30,request_s=60``): a request that fails transiently (no
connection, a dropped one, 408/429/5xx, no answer for ``request_s``) is retried after
``first_s``, doubling up to ``max_s``, while the next wait still ends within ``within_s``
of the first try. Applied to:

- gcsfs: its HTTP requests run in this loop in place of gcsfs's own (6 tries);
  ``request_s`` bounds connecting and each wait for data (aiohttp's timeouts);
- tensorstore (orbax's arrays): orbax's default context gets ``gcs_request_retries`` of
  the same backoff and as many retries as fit in ``within_s``; ``request_s`` becomes
  curl's connect and low-speed timeouts;
- bert_jax's own files: they go through gcsfs. What still fails after ``within_s`` is a
  `BucketUnreachableError` naming the path (exit 74: the run stops, its last committed
  checkpoint stays, and a restart resumes from it).

`configure` applies it once per process, before the first ``gs://`` access (the path
layer calls it); a library whose internals moved is left with its own retries, and a
warning line says so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import random
import sys
from collections.abc import Callable
from typing import Any

from bert_jax.storage import emulator

SETTING = "BERT_JAX_BUCKET_RETRY"
_GCSFS_EXPERIMENTAL = "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"
DEFAULTS = {"within_s": 300.0, "first_s": 1.0, "max_s": 30.0, "request_s": 60.0}


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    within_s: float
    first_s: float
    max_s: float
    request_s: float

    def waits(self) -> list[float]:
        """The waits between tries that fit in `within_s` (jitter aside)."""
        out, wait = [], self.first_s
        while sum(out) + wait <= self.within_s:
            out.append(wait)
            wait = min(2 * wait, self.max_s)
        return out


def policy() -> RetryPolicy:
    """``BERT_JAX_BUCKET_RETRY`` read; a malformed value is a one-line `ValueError` naming it."""
    text = os.environ.get(SETTING, "").strip()
    values = dict(DEFAULTS)
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = item.partition("=")
        try:
            if key.strip() not in values:
                raise KeyError(key)
            number = float(value)
            if not number > 0:
                raise ValueError(value)
        except (KeyError, ValueError):
            keys = ",".join(f"{k}={v:g}" for k, v in DEFAULTS.items())
            raise ValueError(
                f"{SETTING}={text!r}: {item!r} is not KEY=SECONDS>0 (keys and defaults: {keys})"
            ) from None
        values[key.strip()] = number
    return RetryPolicy(**values)


@functools.cache
def configure() -> RetryPolicy:
    """gcsfs as epath's ``gs://`` client, and the retry policy, for this process (and the
    processes it starts: environment variables). Idempotent."""
    retry = policy()
    emulator.apply_from_environment()
    os.environ["EPATH_USE_TF"] = "false"
    # gcsfs's experimental layer (a gRPC probe of each bucket's layout, then zonal and
    # hierarchical-namespace calls) off: the JSON API's client, which every bucket answers
    # and the emulator tests, on every machine. Read at gcsfs's import: see `_retry_gcsfs`.
    os.environ.setdefault(_GCSFS_EXPERIMENTAL, "false")
    try:  # epath decides once per process whether TensorFlow is its client: decide again
        from etils.epath import gpath

        gpath._is_tf_installed.cache_clear()
    except (ImportError, AttributeError):
        pass
    request = f"{retry.request_s:g}"
    for key, value in (
        ("TENSORSTORE_CURL_CONNECT_TIMEOUT_SECONDS", request),
        ("TENSORSTORE_CURL_LOW_SPEED_TIME_SECONDS", request),
        ("TENSORSTORE_CURL_LOW_SPEED_LIMIT_BYTES", "1"),
    ):
        os.environ.setdefault(key, value)
    _no_listings_cache()
    _retry_gcsfs(retry)
    _retry_tensorstore(retry)
    return retry


def _no_listings_cache() -> None:
    """gcsfs keeps each folder's listing per client, and epath's client and
    `storage.files`' are two: an object one wrote (or another host, or a run saving its
    checkpoint) was missing from the other's next listing, and its size refused as a
    missing file. Every listing asks the bucket (fsspec's config: every client made from
    now on, epath's too)."""
    import fsspec

    fsspec.config.conf.setdefault("gcs", {})["use_listings_cache"] = False


def _warn(what: str) -> None:
    print(f"warning: {what}: it keeps its own retries, not {SETTING}'s", file=sys.stderr, flush=True)


def _retry_gcsfs(retry: RetryPolicy) -> None:
    try:
        import aiohttp
        import fsspec
        from gcsfs import core
        from gcsfs import retry as gcsfs_retry
    except ImportError:  # epath names gcsfs at the first gs:// access
        return
    fsspec.config.set_conf_env(fsspec.config.conf)  # FSSPEC_GCS_* set after fsspec's import
    if os.environ[_GCSFS_EXPERIMENTAL].lower() not in ("true", "1"):  # gcsfs imported before
        for protocol in ("gs", "gcs"):
            fsspec.register_implementation(protocol, core.GCSFileSystem, clobber=True)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=retry.request_s, sock_read=retry.request_s)
    fsspec.config.conf.setdefault("gcs", {}).setdefault("requests_timeout", timeout)
    # The requests themselves retry in the policy's loop; gcsfs's concurrent download, which
    # is made of such requests, loses its own retries (else the bounds would multiply).
    wrapped = 0
    for name, retrying in (("_request", True), ("_get_file_request", True), ("_get_file_concurrent", False)):
        method = getattr(core.GCSFileSystem, name, None)
        inner = getattr(method, "__wrapped__", None)  # under gcsfs's own retry loop
        if method is None or inner is None or not asyncio.iscoroutinefunction(inner):
            continue
        setattr(
            core.GCSFileSystem, name, _retrying(inner, retry, gcsfs_retry.is_retriable) if retrying else inner
        )
        wrapped += retrying
    if not wrapped:
        _warn(f"gcsfs {getattr(core, '__version__', '')}: no request method found to retry")


def _retrying(inner: Callable[..., Any], retry: RetryPolicy, retriable: Callable[[BaseException], bool]):
    @functools.wraps(inner)
    async def call(*args: Any, **kwargs: Any) -> Any:
        waits = iter(retry.waits())
        while True:
            try:
                return await inner(*args, **kwargs)
            except Exception as e:
                wait = next(waits, None) if transient(e, retriable) else None
                if wait is None:
                    raise
            await asyncio.sleep(wait * random.uniform(0.5, 1.0))

    return call


def transient(error: BaseException, retriable: Callable[[BaseException], bool] | None = None) -> bool:
    """Whether `error` says the bucket did not answer (rather than no, or not found): no
    connection, a dropped or timed-out one, 408/429/5xx; tensorstore's UNAVAILABLE or
    DEADLINE_EXCEEDED, or any of its errors after its retries of such a request ran out
    ("All 5 retry attempts failed: CURL error ...", seen as ABORTED from an OCDBT write)."""
    if isinstance(error, (FileNotFoundError, FileExistsError, PermissionError)):
        return False
    if isinstance(error, (TimeoutError, asyncio.TimeoutError, ConnectionError)):
        return True
    if retriable is None and "gcsfs.retry" in sys.modules:
        retriable = sys.modules["gcsfs.retry"].is_retriable
    if retriable is not None and retriable(error):
        return True
    text = str(error)
    marks = (
        "UNAVAILABLE",
        "DEADLINE_EXCEEDED",
        "HTTP response code: 503",
        "HTTP response code: 429",
        "retry attempts failed",
    )
    return any(m in text for m in marks) or type(error).__name__ in (
        "ClientConnectorError",
        "ServerDisconnectedError",
    )


def _retry_tensorstore(retry: RetryPolicy) -> None:
    try:
        from orbax.checkpoint._src.serialization import tensorstore_utils as ts_utils
    except ImportError:
        return
    waits = retry.waits()
    setting = {
        "max_retries": max(len(waits), 1),
        "initial_delay": f"{retry.first_s:g}s",
        "max_delay": f"{retry.max_s:g}s",
    }
    contexts = [getattr(ts_utils, n, None) for n in ("_BASE_TS_CONTEXT", "_DEFAULT_OCDBT_TS_CONTEXT")]
    if not all(isinstance(c, dict) for c in contexts):
        _warn("orbax's tensorstore context (its layout changed)")
        return
    for context in contexts:
        context.setdefault("gcs_request_retries", setting)
