"""A front between a run and the GCS emulator: it forwards every request, and on a chosen
share of them answers 503 or 429, drops the connection (before forwarding the request, or
after, so that the client never hears of a write that happened) or delays it. It can be
taken down (every request dropped, as an unreachable bucket) and up again.

With ``--tls_dir`` it also answers HTTPS ``CONNECT`` for Google's hosts with a certificate
of its own CA (written to ``DIR/ca.pem``): TensorFlow's GCS client, whose endpoint is
fixed (``https://www.googleapis.com``), then reaches the emulator through
``https_proxy=http://127.0.0.1:PORT`` and ``CURL_CA_BUNDLE=DIR/ca.pem``
(`bench/bucket_clients.py`).

    python tests/helpers/bucket_front.py PORT UPSTREAM [--fail 0.05] [--delay_share 0.02]
        [--max_delay_s 10] [--seed 0] [--tls_dir DIR]

It prints READY once it listens. ``GET /__front__/down``, ``/__front__/up`` and
``/__front__/stats`` (the counts of what it did, JSON) control it.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import http.client
import json
import random
import socket
import ssl
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade", "content-length"}
GOOGLE_HOSTS = ("www.googleapis.com", "storage.googleapis.com", "oauth2.googleapis.com")


class Front(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, upstream: str, args: argparse.Namespace) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.upstream = urllib.parse.urlsplit(upstream)
        self.fail, self.delay_share, self.max_delay_s = args.fail, args.delay_share, args.max_delay_s
        self.rng, self.lock = random.Random(args.seed), threading.Lock()
        self.down = False
        self.counts: collections.Counter = collections.Counter()
        self.tls = tls_context(Path(args.tls_dir)) if args.tls_dir else None

    def draw(self) -> tuple[str, float]:
        """This request's fate: ("forward", 0), ("delay", seconds), ("503"|"429"|"drop"|
        "drop_reply", 0), or ("down", 0)."""
        with self.lock:
            self.counts["requests"] += 1
            if self.down:
                fate = ("down", 0.0)
            else:
                r = self.rng.random()
                if r < self.fail:
                    fate = (self.rng.choice(["503", "429", "drop", "drop_reply"]), 0.0)
                elif r < self.fail + self.delay_share:
                    fate = ("delay", self.rng.uniform(0.0, self.max_delay_s))
                else:
                    fate = ("forward", 0.0)
            self.counts[fate[0]] += 1
            return fate


class _Writer:
    """Unbuffered writes to a socket (a TLS one too): an interim ``100 Continue`` goes out
    at once, as the client waits for it before sending a body."""

    closed = False

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def write(self, data: bytes) -> int:
        self.sock.sendall(data)
        return len(data)

    def flush(self) -> None:
        """Nothing to flush: `write` sends at once."""

    def close(self) -> None:
        self.closed = True


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Front
    origin = ""  # "https://HOST" once a CONNECT made this connection TLS

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args) -> None:
        """Quiet: the tests read the front's counts, not a request log."""

    def do_CONNECT(self) -> None:
        host = self.path.split(":")[0]
        if self.server.tls is None or host not in GOOGLE_HOSTS:
            self.send_error(403, "CONNECT only to Google's hosts, with --tls_dir")
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self.wfile.flush()
        self.connection = self.server.tls.wrap_socket(self.connection, server_side=True)
        self.rfile = self.connection.makefile("rb")
        self.wfile = _Writer(self.connection)
        self.origin = f"https://{host}"
        self.close_connection = False

    def _control(self) -> None:
        what = self.path.removeprefix("/__front__/")
        if what in ("down", "up"):
            with self.server.lock:
                self.server.down = what == "down"
        with self.server.lock:
            body = json.dumps({"down": self.server.down, **self.server.counts}).encode()
        self._answer(200, body, [("Content-Type", "application/json")])

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            trailer = self.rfile.readline()
            while trailer.strip():  # trailers, up to the blank line
                trailer = self.rfile.readline()
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _answer(self, status: int, body: bytes, headers: list[tuple[str, str]] = ()) -> None:
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _drop(self) -> None:
        self.close_connection = True
        self.wfile.flush()
        with contextlib.suppress(OSError):
            self.connection.shutdown(2)

    def _relay(self) -> None:
        path = self.path
        if "://" in path:  # absolute form (a plain HTTP proxy request)
            parts = urllib.parse.urlsplit(path)
            path = parts.path + (f"?{parts.query}" if parts.query else "")
        if path.startswith("/__front__/"):
            self._control()
            return
        body = self._body()
        fate, delay = self.server.draw()
        if fate in ("down", "drop"):
            self._drop()
            return
        if fate in ("503", "429"):
            error = {"error": {"code": int(fate), "message": "injected by the front"}}
            self._answer(int(fate), json.dumps(error).encode(), [("Content-Type", "application/json")])
            return
        time.sleep(delay)
        status, reason, headers, data = self._forward(path, body)
        if fate == "drop_reply":  # the request took effect; the client never hears
            self._drop()
            return
        self.send_response(status, reason)
        for k, v in headers:
            if k.lower() in HOP:
                continue
            if k.lower() == "location":
                v = self._outside(v)
            self.send_header(k, v)
        length = next((v for k, v in headers if k.lower() == "content-length"), None)
        self.send_header("Content-Length", length if self.command == "HEAD" and length else str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _forward(self, path: str, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        up = self.server.upstream
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=300)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP and k.lower() != "host"}
            headers["Host"] = up.netloc
            conn.request(
                self.command,
                path,
                body=body if body or self.command in ("POST", "PUT") else None,
                headers=headers,
            )
            resp = conn.getresponse()
            return resp.status, resp.reason, resp.getheaders(), resp.read()
        finally:
            conn.close()

    def _outside(self, url: str) -> str:
        """A URL the upstream gave (a resumable upload's session), as the client reaches it."""
        parts = urllib.parse.urlsplit(url)
        if parts.netloc != self.server.upstream.netloc:
            return url
        origin = self.origin or f"http://127.0.0.1:{self.server.server_address[1]}"
        return origin + parts.path + (f"?{parts.query}" if parts.query else "")

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _relay


def tls_context(folder: Path) -> ssl.SSLContext:
    """A server context with a certificate for Google's hosts, signed by a CA made here
    (``folder/ca.pem``, for the client's CA bundle)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)

    def cert(subject: str, key, issuer: str, signer, ca: bool) -> x509.Certificate:
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in GOOGLE_HOSTS]), False)
        return b.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = cert("bert_jax test CA", ca_key, "bert_jax test CA", ca_key, True)
    leaf = cert(GOOGLE_HOSTS[0], key, "bert_jax test CA", ca_key, False)
    pem = serialization.Encoding.PEM
    (folder / "ca.pem").write_bytes(ca.public_bytes(pem))
    (folder / "leaf.pem").write_bytes(leaf.public_bytes(pem) + ca.public_bytes(pem))
    (folder / "leaf.key").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "leaf.pem", folder / "leaf.key")
    return context


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("port", type=int)
    p.add_argument("upstream", help="the emulator's URL, http://127.0.0.1:PORT")
    p.add_argument("--fail", type=float, default=0.0, help="share of requests failed (503, 429, dropped)")
    p.add_argument("--delay_share", type=float, default=0.0, help="share of requests delayed")
    p.add_argument("--max_delay_s", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tls_dir", default="", help="answer CONNECT for Google's hosts (TensorFlow's client)")
    args = p.parse_args()
    server = Front(args.port, args.upstream, args)
    print("READY", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
