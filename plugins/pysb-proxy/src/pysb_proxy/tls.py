"""TLS interception for hosts whose rules judge paths or methods, or that have secrets.

Why a CA per run, made in memory: a request's path and method travel inside TLS, and a
secret can only be added to a request the proxy can write. The proxy ends the sandbox's
TLS with a certificate for the CONNECT host signed by a CA that exists only for this run
(its key never leaves the proxy's memory, nothing is written but its certificate), and
opens its own verified TLS connection to the real host. Only the sandbox trusts that CA:
its ``SSL_CERT_FILE`` (read by OpenSSL, hence ``urllib``, ``aiohttp``, ``curl``),
``REQUESTS_CA_BUNDLE`` and ``CURL_CA_BUNDLE`` name a bundle of the host's CAs plus the
run's, so tunnelled hosts still verify against the real CAs. ``cryptography`` makes the
keys and certificates; OpenSSL (``ssl``) speaks TLS.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import socket
import ssl
import tempfile
import threading
from typing import Any

import h11

from pysb_proxy.rules import Request, RuleError, is_ip, normal_path
from pysb_proxy.server import Decided, _Stream, forward, next_cycle, send_refusal

HANDSHAKE_TIMEOUT = 15.0


def interception_available() -> bool:
    try:
        import cryptography  # noqa: F401
    except ImportError:
        return False
    return True


class Interceptor:
    """The run's CA and the leaf certificates it signs, one per host, made on demand."""

    def __init__(self) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._x509, self._hashes, self._ec, self._ser = x509, hashes, ec, serialization
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pysb-proxy run CA")])
        public = self._key.public_key()
        self.ca = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._lock = threading.Lock()
        self.upstream = ssl.create_default_context()

    def ca_pem(self) -> bytes:
        return self.ca.public_bytes(self._ser.Encoding.PEM)

    def context_for(self, host: str) -> ssl.SSLContext:
        with self._lock:
            context = self._contexts.get(host)
            if context is None:
                context = self._contexts[host] = self._leaf_context(host)
            return context

    def _leaf_context(self, host: str) -> ssl.SSLContext:
        import ipaddress

        x509, ser = self._x509, self._ser
        key = self._ec.generate_private_key(self._ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        alt: Any = x509.IPAddress(ipaddress.ip_address(host)) if is_ip(host) else x509.DNSName(host)
        ca_ski = self.ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(self.ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([alt]), critical=True)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                critical=False,
            )
            .sign(self._key, self._hashes.SHA256())
        )
        pem = cert.public_bytes(ser.Encoding.PEM) + key.private_bytes(
            ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption()
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.set_alpn_protocols(["http/1.1"])
        context.sni_callback = _record_server_name
        # The key goes to OpenSSL through a memory file: it never touches a disk.
        fd = os.memfd_create("pysb-proxy-leaf", os.MFD_CLOEXEC)
        try:
            os.write(fd, pem)
            context.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return context

    # -- what the sandbox trusts --

    def child_trust(self, plan: Any) -> dict[str, str]:
        """Write the bundle the sandbox trusts, expose it read-only, name it in variables."""
        from pysb_core.guardkit import Exposure

        directory = tempfile.mkdtemp(prefix="pysb-proxy-ca-")
        os.chmod(directory, 0o755)
        bundle = os.path.join(directory, "ca-bundle.pem")
        with open(bundle, "wb") as f:
            f.write(_host_bundle() + b"\n" + self.ca_pem())
        os.chmod(bundle, 0o444)
        plan.add_exposure(Exposure(directory, directory, False, "<pysb-proxy>", True))
        plan.add_cleanup(lambda: shutil.rmtree(directory, ignore_errors=True))
        return {name: bundle for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")}

    # -- one intercepted tunnel --

    def serve(self, proxy: Any, sock: socket.socket, tail: bytes, host: str, port: int) -> None:
        if tail:  # TLS bytes before the proxy's answer: not a client that waited for it
            return
        context = self.context_for(host)
        sock.settimeout(HANDSHAKE_TIMEOUT)
        try:
            tls = context.wrap_socket(sock, server_side=True)
        except (OSError, ssl.SSLError):
            return
        try:
            if not _sni_is(tls, host):
                name = getattr(tls, "pysb_server_name", None)
                reason = f"the TLS server name {name!r} is not the CONNECT host {host!r}"
                request = Request("https", host, port, "/", "CONNECT")
                proxy.report(Decided("deny", request, reason, None))
                return
            stream = _Stream(tls, h11.SERVER)

            def wrap(raw: socket.socket) -> socket.socket:
                return self.upstream.wrap_socket(raw, server_hostname=host)

            while True:
                try:
                    event = stream.next_event()
                except h11.RemoteProtocolError:
                    return
                if not isinstance(event, h11.Request):
                    return
                target = event.target.decode("ascii", "replace")
                try:
                    judged = normal_path(target)
                except (RuleError, UnicodeDecodeError):
                    send_refusal(stream, 400, f"pysb: egress: {target[:200]!r} is refused")
                    return
                origin = target.encode("ascii", "replace")
                if not forward(
                    proxy, stream, event, "https", host, port, judged, origin, upstream_wrap=wrap
                ):
                    return
                if not next_cycle(stream):
                    return
        finally:
            with contextlib.suppress(OSError):
                tls.close()


def _record_server_name(sock: Any, name: str | None, context: ssl.SSLContext) -> None:
    """Keep the server name of the ClientHello on the socket (a server-side socket has no
    attribute for it)."""
    sock.pysb_server_name = name


def _sni_is(tls: ssl.SSLSocket, host: str) -> bool:
    """The name the client asked for is the CONNECT host (none only for an address)."""
    name = getattr(tls, "pysb_server_name", None)
    if name is None:
        return is_ip(host)
    return name.lower().rstrip(".") == host


def _host_bundle() -> bytes:
    """The CAs the host trusts (what OpenSSL's default paths, or certifi, hold)."""
    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, paths.openssl_cafile):
        if candidate and os.path.isfile(candidate):
            with open(candidate, "rb") as f:
                return f.read()
    try:
        import certifi

        with open(certifi.where(), "rb") as f:
            return f.read()
    except (ImportError, OSError):
        return b""
