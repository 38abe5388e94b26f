"""A GCS API emulator on localhost for the tests: `gcp-storage-emulator`, with the object
generation headers tensorstore (orbax's storage) reads.

gcp-storage-emulator answers media downloads without ``x-goog-generation`` and ignores
``ifGenerationNotMatch``; tensorstore's OCDBT driver reads an object's generation from
that header ("Malformed StorageGeneration" without it) and revalidates cached manifests
with that condition. Both are added here, as the real service answers.

    python tests/helpers/gcs_emulator.py PORT DATA_DIR BUCKET
"""

import sys
import time
from http import HTTPStatus

from gcp_storage_emulator import server
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers import objects

_download = objects.download


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


def main(port: int, data_dir: str, bucket: str) -> None:
    objects.download = download  # `objects.get` (alt=media) looks it up here
    for _, handlers in server.HANDLERS:
        for method, fn in list(handlers.items()):
            if fn is _download:
                handlers[method] = download
    srv = server.create_server("127.0.0.1", port, default_bucket=bucket, data_dir=data_dir)
    srv.start()
    print("READY", flush=True)
    while True:  # the server answers from its own thread; this only keeps the process up
        time.sleep(1)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
