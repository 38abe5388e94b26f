"""The one `gs://` client and its retry policy (`bert_jax.storage.gcs`), without a bucket:
the setting's parsing, the retry loop on a stand-in request, which errors count as the
bucket not answering, and what `configure` sets up in a fresh process (TensorFlow
installed, as on a TPU VM)."""

import asyncio
import json
import os
import subprocess
import sys

import pytest
from gcsfs.retry import HttpError

from bert_jax.storage import files, gcs
from tests.conftest import ROOT


def test_the_policy_is_one_setting_with_defaults(monkeypatch) -> None:
    monkeypatch.delenv(gcs.SETTING, raising=False)
    assert gcs.policy() == gcs.RetryPolicy(within_s=300, first_s=1, max_s=30, request_s=60)
    monkeypatch.setenv(gcs.SETTING, "within_s=10, first_s=1,max_s=4")
    retry = gcs.policy()
    assert (retry.within_s, retry.max_s, retry.request_s) == (10, 4, 60)
    assert retry.waits() == [1, 2, 4]  # the next wait (4) would end past 10 s


@pytest.mark.parametrize("value", ["within_s=ten", "tries=3", "first_s=0", "within_s"])
def test_a_malformed_setting_is_one_line_naming_it(monkeypatch, value) -> None:
    monkeypatch.setenv(gcs.SETTING, value)
    with pytest.raises(
        ValueError, match=rf"^{gcs.SETTING}=.*is not KEY=SECONDS>0 \(keys and defaults: "
    ) as e:
        gcs.policy()
    assert "\n" not in str(e.value)


def _stand_in(outcomes: list[BaseException | None]):
    """A request that raises each of `outcomes` in turn (None: answers)."""
    calls = []

    async def request(*args, **kwargs):
        calls.append(args)
        outcome = outcomes[min(len(calls), len(outcomes)) - 1]
        if outcome is not None:
            raise outcome
        return "answered"

    return request, calls


def _run(request, retry: gcs.RetryPolicy):
    from gcsfs.retry import is_retriable

    return asyncio.run(gcs._retrying(request, retry, is_retriable)("GET", "b/o"))


def test_transient_failures_are_retried_until_an_answer() -> None:
    retry = gcs.RetryPolicy(within_s=1, first_s=0.01, max_s=0.04, request_s=1)
    failures = [
        HttpError({"code": 503, "message": "x"}),
        HttpError({"code": 429, "message": "x"}),
        ConnectionError(),
    ]
    request, calls = _stand_in([*failures, None])
    assert _run(request, retry) == "answered" and len(calls) == 4


def test_a_refusal_is_not_retried_and_retries_end_at_the_bound() -> None:
    retry = gcs.RetryPolicy(within_s=0.1, first_s=0.02, max_s=0.04, request_s=1)
    request, calls = _stand_in([FileNotFoundError("b/o")])
    with pytest.raises(FileNotFoundError):
        _run(request, retry)
    assert len(calls) == 1
    request, calls = _stand_in([HttpError({"code": 503, "message": "down"})])
    with pytest.raises(HttpError):
        _run(request, retry)
    assert len(calls) == 1 + len(retry.waits()) == 4  # waits 0.02, 0.04, 0.04 fit in 0.1 s


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (TimeoutError(), True),
        (ConnectionRefusedError(), True),
        (HttpError({"code": 503, "message": "x"}), True),
        (HttpError({"code": 404, "message": "x"}), False),
        (FileNotFoundError("gs://b/o"), False),
        (PermissionError("Forbidden"), False),
        (ValueError("Error writing: UNAVAILABLE: HTTP response code: 503"), True),
        (ValueError("config.learning_rate=-1"), False),
        (  # tensorstore, when its own retries of a dropped connection ran out (an OCDBT write)
            ValueError(
                'ABORTED: Error writing "opt_state.count/0" in OCDBT database at gs://b/c/: Error reading '
                "Byte range [1, 2) of gs://b/c/d/e: All 5 retry attempts failed: CURL error Server returned "
                "nothing (no headers, no data): Empty reply from server [curl_code='52']"
            ),
            True,
        ),
    ],
)
def test_which_errors_say_the_bucket_did_not_answer(error, transient) -> None:
    assert gcs.transient(error) is transient


def test_a_bucket_that_does_not_answer_is_one_line_naming_the_path(monkeypatch) -> None:
    monkeypatch.setattr(gcs, "configure", lambda: gcs.RetryPolicy(300, 1, 30, 60))
    with (
        pytest.raises(files.BucketUnreachableError) as e,
        files.on_bucket("gs://b/run/metrics.jsonl", "writing"),
    ):
        raise ConnectionResetError(104, "Connection reset by peer")
    assert str(e.value).startswith("gs://b/run/metrics.jsonl cannot be reached (writing; retried for 300 s, ")
    with pytest.raises(FileNotFoundError), files.on_bucket("gs://b/run/x", "reading"):
        raise FileNotFoundError("gs://b/run/x")  # a no stays what it is


CONFIGURED = """
import json, os
from etils import epath
from bert_jax.storage import gcs
assert epath.Path("gs://b/x")._backend.__class__.__name__ == "_TfBackend"  # epath's own choice
gcs.configure()
from gcsfs import core
from orbax.checkpoint._src.serialization import tensorstore_utils as ts_utils
import fsspec
print(json.dumps({
    "backend": epath.Path("gs://b/x")._backend.__class__.__name__,
    "use_tf": os.environ["EPATH_USE_TF"],
    "wrapped": core.GCSFileSystem._request.__code__.co_name,
    "tensorstore": ts_utils._DEFAULT_OCDBT_TS_CONTEXT["gcs_request_retries"],
    "low_speed_s": os.environ["TENSORSTORE_CURL_LOW_SPEED_TIME_SECONDS"],
    "sock_read": fsspec.config.conf["gcs"]["requests_timeout"].sock_read,
}))
"""


def test_configure_makes_gcsfs_the_client_with_the_policy_on_a_machine_with_tensorflow() -> None:
    # What `configure` sets in a process (this one, if a test here reached a bucket) left out.
    configured = ("EPATH_USE_TF", "TENSORSTORE_", "GCSFS_", "FSSPEC_GCS_", "STORAGE_EMULATOR_HOST")
    env = {k: v for k, v in os.environ.items() if not k.startswith(configured)}
    env.update({gcs.SETTING: "within_s=60,first_s=2,max_s=8,request_s=20", "PYTHONPATH": str(ROOT)})
    out = subprocess.run(
        [sys.executable, "-c", CONFIGURED], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {
        "backend": "_FileSystemSpecBackend",
        "use_tf": "false",
        "wrapped": "call",  # bert_jax's retry loop, not gcsfs's own
        "tensorstore": {"max_retries": 8, "initial_delay": "2s", "max_delay": "8s"},  # 2+4+8*6 <= 60
        "low_speed_s": "20",
        "sock_read": 20.0,
    }


def test_objects_written_since_a_listing_are_seen(tmp_path) -> None:
    """Listings are not cached: an object written after a folder was listed (by this
    process through another client, or by another process: a run saving a checkpoint)
    is in the next listing, and its size is read, not refused as missing."""
    import fsspec

    from tests.helpers import prepared_data

    with prepared_data.bucket(tmp_path) as gs:
        files.write_bytes_remote(f"{gs}/run/a", b"1")
        assert set(files.tree(f"{gs}/run")) == {"a"}
        other, _ = fsspec.core.url_to_fs(gs, skip_instance_cache=True)  # another process's client
        other.pipe_file(f"{gs.removeprefix('gs://')}/run/b", b"22")
        assert set(files.tree(f"{gs}/run")) == {"a", "b"}
        assert files.size_and_time(f"{gs}/run/b")[0] == 2
        files.write_bytes_remote(f"{gs}/run/c", b"333")  # epath's own client
        assert files.size_and_time(f"{gs}/run/c")[0] == 3 and set(files.tree(f"{gs}/run")) == {"a", "b", "c"}
