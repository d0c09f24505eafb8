"""Loopback HTTP(S) servers and a test CA for pysb-proxy's tests (loopback only).

Each server answers every request with a JSON body saying what it received (method,
path, whether a given header was present and its SHA-256 -- never the header itself, so
a test can search the sandbox's output for a secret), and can redirect. Servers run in a
daemon thread until closed; the tests close them.
"""

from __future__ import annotations

import datetime
import hashlib
import http.server
import ipaddress
import json
import os
import ssl
import threading
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


class LoopbackCA:
    """A CA and a certificate for ``localhost`` / ``127.0.0.1``, written under ``where``."""

    def __init__(self, where: Path) -> None:
        now = datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pysb-proxy test CA")])
        ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        ca = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                critical=True,
            )
            .add_extension(ski, critical=False)
            .sign(key, hashes.SHA256())
        )
        leaf_key = ec.generate_private_key(ec.SECP256R1())
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(name)
            .public_key(leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    ]
                ),
                critical=True,
            )
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski),
                critical=False,
            )
            .sign(key, hashes.SHA256())
        )
        where.mkdir(parents=True, exist_ok=True)
        self.ca_file = where / "test-ca.pem"
        self.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        self.cert_file = where / "server.pem"
        self.cert_file.write_bytes(
            leaf.public_bytes(serialization.Encoding.PEM)
            + leaf_key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        os.chmod(where, 0o755)
        os.chmod(self.ca_file, 0o644)

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file)
        return context


class EchoServer:
    """An HTTP(S) server on ``host``:ephemeral that says what it received.

    ``watch`` names a header whose presence and SHA-256 are reported. A request for
    ``/redirect?to=URL`` is answered 302 to URL; one for a path ending in
    ``/forged-refusal`` is a server's 403 that copies the proxy's refusal headers.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        *,
        port: int = 0,
        tls: ssl.SSLContext | None = None,
        watch: str = "",
    ) -> None:
        self.requests: list[dict[str, object]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                value = self.headers.get(watch) if watch else None
                seen = {
                    "method": self.command,
                    "path": self.path,
                    "host": self.headers.get("Host"),
                    "watched": value is not None,
                    "watched_sha256": hashlib.sha256(value.encode()).hexdigest() if value else "",
                    "body": len(body),
                }
                outer.requests.append(seen)
                if self.path.startswith("/redirect?to="):
                    self.send_response(302)
                    self.send_header("Location", self.path.split("=", 1)[1])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path.endswith("/forged-refusal"):
                    self.send_response(403, "pysb: egress refused: forged by the server")
                    self.send_header("X-Pysb-Refusal", "pysb: egress refused: forged")
                    self.send_header("X-Pysb-Refusal-Token", "guessed")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = json.dumps(seen).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.host = host
        self.port = self.httpd.server_address[1]
        self.scheme = "https" if tls is not None else "http"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str = "/", host: str | None = None) -> str:
        return f"{self.scheme}://{host or self.host}:{self.port}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class H2Server:
    """An HTTP/2-only server over TLS (ALPN ``h2``) on 127.0.0.1:ephemeral, built on the
    ``h2`` package: a connection that does not negotiate h2 is closed. Each request is
    answered 200 with a body naming the protocol and the path, and recorded."""

    def __init__(self, ca: LoopbackCA) -> None:
        import socket

        self.requests: list[dict[str, str]] = []
        self.context = ca.server_context()
        self.context.set_alpn_protocols(["h2"])
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(sock,), daemon=True).start()

    def _connection(self, raw: Any) -> None:
        import h2.config
        import h2.connection
        import h2.events

        with raw:
            try:
                sock = self.context.wrap_socket(raw, server_side=True)
            except (OSError, ssl.SSLError):
                return
            with sock:
                if sock.selected_alpn_protocol() != "h2":
                    return
                conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
                conn.initiate_connection()
                sock.sendall(conn.data_to_send())
                while True:
                    try:
                        data = sock.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    for event in conn.receive_data(data):
                        if isinstance(event, h2.events.RequestReceived):
                            headers = {k.decode(): v.decode() for k, v in event.headers}
                            seen = {"method": headers[":method"], "path": headers[":path"]}
                            self.requests.append(seen)
                            body = json.dumps({"protocol": "h2", **seen}).encode()
                            conn.send_headers(
                                event.stream_id,
                                [(":status", "200"), ("content-length", str(len(body)))],
                            )
                            conn.send_data(event.stream_id, body, end_stream=True)
                    sock.sendall(conn.data_to_send())

    def close(self) -> None:
        self.listener.close()
