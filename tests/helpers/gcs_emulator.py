"""A GCS API emulator on localhost for the tests: `gcp-storage-emulator`, answering as the
real service does where bert_jax's clients depend on it.

- gcp-storage-emulator answers media downloads without ``x-goog-generation`` and ignores
  ``ifGenerationNotMatch``; tensorstore's OCDBT driver reads an object's generation from
  that header ("Malformed StorageGeneration" without it) and revalidates cached manifests
  with that condition. Both are added here.
- It forgets a resumable upload's session once the upload is complete, and answers 404 to
  a client that sends the last chunk again because the first answer never reached it (a
  dropped connection; `bucket_front.py` drops some). GCS answers such a request with the
  object's metadata (200), and gcsfs's retries rely on it: so does this emulator.

    python tests/helpers/gcs_emulator.py PORT DATA_DIR BUCKET
"""

import contextlib
import sys
import time
from http import HTTPStatus

from gcp_storage_emulator import server
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers import objects

_download = objects.download
_upload_partial = objects.upload_partial
_completed: dict[str, dict] = {}  # finished resumable sessions: upload_id -> the object


def download(request, response, storage, *args, **kwargs):
    try:
        obj = storage.get_file_obj(request.params["bucket_name"], request.params["object_id"])
    except NotFound:
        return _download(request, response, storage, *args, **kwargs)
    generation = str(obj["generation"])
    response["x-goog-generation"] = generation
    response["x-goog-metageneration"] = str(obj.get("metageneration", "1"))
    if (request.query.get("ifGenerationNotMatch") or [None])[0] == generation:
        response.status = HTTPStatus.NOT_MODIFIED
        return None
    return _download(request, response, storage, *args, **kwargs)


def upload_partial(request, response, storage, *args, **kwargs):
    upload_id = (request.query.get("upload_id") or [""])[0]
    if upload_id in _completed:  # a finished session answers with its object, as GCS does
        response.json(_completed[upload_id])
        return None
    try:
        session = storage.get_resumable_file_obj(upload_id)
    except NotFound:
        session = None
    result = _upload_partial(request, response, storage, *args, **kwargs)
    if session is not None and upload_id not in storage.resumable:  # it completed just now
        with contextlib.suppress(NotFound):
            _completed[upload_id] = storage.get_file_obj(session["bucket"], session["name"])
    return result


def main(port: int, data_dir: str, bucket: str) -> None:
    # The module's own callers (`objects.get`, `objects.insert`) look them up here.
    objects.download, objects.upload_partial = download, upload_partial
    patched = {_download: download, _upload_partial: upload_partial}
    for _, handlers in server.HANDLERS:
        for method, fn in list(handlers.items()):
            handlers[method] = patched.get(fn, fn)
    srv = server.create_server("127.0.0.1", port, default_bucket=bucket, data_dir=data_dir)
    srv.start()
    print("READY", flush=True)
    while True:  # the server answers from its own thread; this only keeps the process up
        time.sleep(1)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
