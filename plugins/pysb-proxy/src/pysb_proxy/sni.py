"""The server name a TLS client asks for, read by OpenSSL, not by hand.

Why: a tunnelled ``CONNECT api.example.com:443`` must carry TLS for that name, not for
another host behind the same address (domain fronting). The proxy feeds the client's
first bytes to a server-side :class:`ssl.SSLObject` whose ``sni_callback`` records the
name OpenSSL parsed and then aborts the handshake; the bytes themselves are forwarded
untouched, so the client's TLS session is with the real server.
"""

from __future__ import annotations

import socket
import ssl
import time

#: A ClientHello is a few hundred bytes (post-quantum key shares: a few KiB).
MAX_HELLO = 64 * 1024
HELLO_TIMEOUT = 10.0


class NoServerName(Exception):
    """The client's first bytes are not a TLS ClientHello with a server name."""


def read_server_name(sock: socket.socket, already: bytes) -> tuple[str | None, bytes]:
    """Read the ClientHello from ``sock`` (after ``already``); return (name, bytes read).

    The name is None when the client sent none (a client connecting to an address).
    Raises :class:`NoServerName` when the bytes are not TLS, or exceed the bounds.
    """
    seen: dict[str, str | None] = {}
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)

    def callback(obj: ssl.SSLObject, name: str | None, ctx: ssl.SSLContext) -> int:
        seen["name"] = name
        return ssl.ALERT_DESCRIPTION_HANDSHAKE_FAILURE

    context.sni_callback = callback
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = context.wrap_bio(incoming, outgoing, server_side=True)
    data = bytearray(already)
    incoming.write(already)
    deadline = time.monotonic() + HELLO_TIMEOUT
    while True:
        try:
            obj.do_handshake()
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLError:
            if "name" in seen:  # called with None when the hello names no server
                return seen["name"], bytes(data)
            raise NoServerName("the tunnel's first bytes are not a TLS ClientHello") from None
        else:  # a handshake cannot complete without a certificate
            raise NoServerName("unexpected TLS handshake completion")
        if "name" in seen:
            return seen["name"], bytes(data)
        remaining = deadline - time.monotonic()
        if remaining <= 0 or len(data) >= MAX_HELLO:
            raise NoServerName("no complete TLS ClientHello within the bounds")
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(16384)
        except (TimeoutError, OSError):
            raise NoServerName("no complete TLS ClientHello within the bounds") from None
        if not chunk:
            raise NoServerName("the client closed the tunnel before its ClientHello")
        data += chunk
        incoming.write(chunk)
