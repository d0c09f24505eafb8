"""The egress proxy: one listening socket on the host's loopback, a thread per client.

Everything a client sends is the sandbox's, hence hostile: HTTP is parsed by h11 (not by
hand) with a bound on the size of a request head, the number of connections at once is
bounded, every read has a time-out, and a request that does not parse is answered 400 and
the connection closed. The proxy speaks HTTP/1.1 to both sides; what a tunnel carries
(HTTP/2 inside TLS, WebSocket frames after an upgrade) is relayed as bytes.

Three ways through:

- ``CONNECT host:port`` judged by host (:meth:`EgressRules.tunnel`): the TLS ClientHello's
  server name must be the CONNECT host (:mod:`pysb_proxy.sni`); then bytes are relayed,
  never decrypted;
- ``CONNECT`` to a host whose rules judge paths or methods, or which has a secret: the
  proxy terminates TLS with a certificate of the run's own CA (:mod:`pysb_proxy.tls`)
  and judges each request inside, as below;
- an absolute-form ``GET http://host/path``: judged per request, forwarded to the host.

Why one module: the three ways through (judged tunnel, terminated TLS, plain request) share one
client session, one refusal format and one forwarding path, and every one of them reads hostile
bytes under the same bounds; one module keeps those bounds in one place. The rules, the SNI
reader and the CA are already separate modules.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from typing import Any

import h11

from pysb_proxy.addresses import AddressRefused, Resolver, checked_addresses, resolve_host
from pysb_proxy.rules import (
    Decision,
    EgressRules,
    Request,
    RuleError,
    is_ip,
    normal_path,
    normalize_host,
)
from pysb_proxy.sni import NoServerName, read_server_name

#: A request or response head (request line and headers) is at most this many bytes.
MAX_HEAD = 64 * 1024
#: Connections served at once; more wait in the listen backlog.
MAX_CLIENTS = 128
#: Idle time on either side of a connection before the proxy closes it.
IDLE_TIMEOUT = 300.0
CONNECT_TIMEOUT = 15.0
#: Headers that belong to one hop (RFC 9110 §7.6.1) and never cross the proxy.
HOP_HEADERS = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"upgrade",
        # the proxy's own refusal headers: a server's copy never reaches the sandbox
        b"x-pysb-refusal",
        b"x-pysb-refusal-token",
    }
)
REFUSAL_HEADER = b"x-pysb-refusal"
#: Sent with every refusal; the sandbox's guard (pysb_proxy.child) turns a 403 into a
#: NetworkDeniedError only when it carries this process's token, so a server behind a
#: tunnel the proxy cannot read (HTTPS not intercepted) cannot forge a refusal.
REFUSAL_TOKEN_HEADER = b"x-pysb-refusal-token"
TOKEN = os.urandom(16).hex()
#: A refusal's text on the status line and in its header, at most.
MAX_REASON = 1024


class Decided:
    """What the proxy tells pysb about one decision (``kind``: deny or learn)."""

    __slots__ = ("kind", "reason", "request", "rule")

    def __init__(self, kind: str, request: Request, reason: str, rule: Any) -> None:
        self.kind = kind
        self.request = request
        self.reason = reason
        self.rule = rule


Report = Callable[[Decided], None]


class Secrets:
    """Headers the proxy adds for one host (the values never enter the sandbox)."""

    def __init__(self, entries: Iterable[tuple[str, int | None, str, str]] = ()) -> None:
        self._by_host: dict[str, list[tuple[int | None, bytes, bytes]]] = {}
        for host, port, header, value in entries:
            self._by_host.setdefault(host, []).append(
                (port, header.lower().encode("ascii"), value.encode("latin-1"))
            )

    def for_host(self, host: str, port: int) -> list[tuple[bytes, bytes]]:
        return [
            (header, value)
            for p, header, value in self._by_host.get(host, ())
            if p is None or p == port
        ]

    def has(self, host: str, port: int) -> bool:
        return bool(self.for_host(host, port))


class EgressProxy:
    """The proxy of one run; :attr:`port` is where the sandbox reaches it."""

    def __init__(
        self,
        rules: EgressRules,
        *,
        report: Report,
        learning: bool = False,
        secrets: Secrets | None = None,
        interceptor: Any = None,
        resolve: Resolver = resolve_host,
        upstream_context: ssl.SSLContext | None = None,
    ) -> None:
        self.rules = rules
        self.report = report
        self.learning = learning
        self.secrets = secrets or Secrets()
        self.interceptor = interceptor
        self.resolve = resolve
        self.upstream_context = upstream_context
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(MAX_CLIENTS)
        self.port: int = self.listener.getsockname()[1]
        self._slots = threading.BoundedSemaphore(MAX_CLIENTS)
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._users = 0

    # -- life cycle: served while at least one sandbox of the run is alive --

    def acquire(self) -> None:
        with self._lock:
            self._users += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._accept_loop, name="pysb-proxy", daemon=True
                )
                self._thread.start()

    def release(self) -> None:
        with self._lock:
            self._users = max(0, self._users - 1)

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self._slots.acquire()
            threading.Thread(
                target=self._serve, args=(client,), name="pysb-proxy-client", daemon=True
            ).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            _no_delay(client)
            client.settimeout(IDLE_TIMEOUT)
            _ClientSession(self, client).run()
        except Exception:  # one client's failure never reaches the host application
            pass
        finally:
            with contextlib.suppress(OSError):
                client.close()
            self._slots.release()

    # -- decisions --

    def judge(self, request: Request) -> Decision:
        if self.learning:
            self.report(Decided("learn", request, "learning run", None))
            return Decision(True, None, "learning run")
        decision = self.rules.decide(request)
        if not decision.allowed:
            self.report(Decided("deny", request, decision.reason, decision.rule))
        return decision

    def judge_tunnel(self, host: str, port: int) -> Decision | None:
        """A verdict on ``CONNECT host:port``, or None when the proxy must decrypt."""
        if self.secrets.has(host, port) or (self.learning and self.interceptor is not None):
            return None
        if self.learning:
            self.report(Decided("learn", Request("https", host, port, "/", "CONNECT"), "", None))
            return Decision(True, None, "learning run")
        decision = self.rules.tunnel(host, port)
        if decision is not None and not decision.allowed:
            request = Request("https", host, port, "/", "CONNECT")
            self.report(Decided("deny", request, decision.reason, decision.rule))
        return decision

    def addresses(self, host: str, port: int, decision: Decision) -> list[str]:
        named = self.learning or (decision.rule is not None and decision.rule.names_address)
        return checked_addresses(host, port, named=named, resolve=self.resolve)

    def refuse_address(self, request: Request, exc: AddressRefused) -> str:
        reason = f"{exc}"
        self.report(Decided("deny", request, reason, None))
        return reason


class _Stream:
    """A socket with h11 on top: the next event, reading as needed."""

    def __init__(self, sock: socket.socket, role: Any) -> None:
        self.sock = sock
        self.h11 = h11.Connection(role, max_incomplete_event_size=MAX_HEAD)

    def next_event(self) -> Any:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            try:
                data = self.sock.recv(65536)
            except (TimeoutError, OSError):
                data = b""
            self.h11.receive_data(data)

    def send(self, *events: Any) -> None:
        for event in events:
            data = self.h11.send(event)
            if data:
                self.sock.sendall(data)


def _refusal(status: int, text: str) -> list[Any]:
    """A response the sandbox can read: the reason as the status line's reason phrase
    (what clients put in their exception: ``HTTP Error 403: pysb: egress refused ...``,
    ``Tunnel connection failed: 403 pysb: egress refused ...``), a header and the body."""
    body = (text + "\n").encode("utf-8", "replace")
    line = "".join(c if " " <= c <= "~" else "?" for c in text)[:MAX_REASON].encode("ascii")
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        (REFUSAL_HEADER, line),
        (REFUSAL_TOKEN_HEADER, TOKEN.encode()),
    ]
    return [h11.Response(status_code=status, headers=headers, reason=line), h11.Data(data=body)]


def next_cycle(stream: _Stream) -> bool:
    """Ready ``stream`` for the client's next request (keep-alive), when both sides are
    done with this one; False when the connection must close instead."""
    conn = stream.h11
    if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
        conn.start_next_cycle()
        return True
    return False


def send_refusal(stream: _Stream, status: int, text: str) -> bool:
    """Answer the request ``stream`` waits on with a refusal; False: close it after."""
    with contextlib.suppress(h11.LocalProtocolError, OSError):
        stream.send(*_refusal(status, text), h11.EndOfMessage())
    return False


def refusal_text(request: Request, reason: str) -> str:
    return f"pysb: egress refused: {request.method} {request.url}: {reason}"


class _ClientSession:
    """One client connection: requests until the client or the proxy closes it."""

    def __init__(self, proxy: EgressProxy, client: socket.socket) -> None:
        self.proxy = proxy
        self.client = _Stream(client, h11.SERVER)

    def run(self) -> None:
        while True:
            try:
                event = self.client.next_event()
            except h11.RemoteProtocolError:
                self._answer(400, "pysb: egress: the request does not parse")
                return
            if not isinstance(event, h11.Request):
                return
            if event.method == b"CONNECT":
                self._connect(event)
                return
            if not self._forward_absolute(event):
                return
            if not next_cycle(self.client):
                return

    def _answer(self, status: int, text: str) -> None:
        send_refusal(self.client, status, text)

    # -- CONNECT --

    def _connect(self, event: Any) -> None:
        proxy = self.proxy
        try:
            host, port = _split_target(event.target)
        except RuleError as exc:
            self._answer(400, f"pysb: egress: CONNECT {event.target!r}: {exc}")
            return
        request = Request("https", host, port, "/", "CONNECT")
        decision = proxy.judge_tunnel(host, port)
        intercept = decision is None
        if intercept and proxy.interceptor is None:
            reason = (
                "its egress rules judge paths or methods, or it has a secret, which needs "
                "TLS interception (install cryptography)"
            )
            proxy.report(Decided("deny", request, reason, None))
            self._answer(403, refusal_text(request, reason))
            return
        if decision is not None and not decision.allowed:
            self._answer(403, refusal_text(request, decision.reason))
            return
        if intercept:
            self.client.send(
                h11.Response(status_code=200, headers=[], reason=b"Connection established")
            )
            tail = self.client.h11.trailing_data[0]
            proxy.interceptor.serve(proxy, self.client.sock, tail, host, port)
            return
        assert decision is not None
        try:
            addresses = proxy.addresses(host, port, decision)
        except AddressRefused as exc:
            self._answer(403, refusal_text(request, proxy.refuse_address(request, exc)))
            return
        upstream = _open(addresses, port)
        if upstream is None:
            self._answer(502, f"pysb: egress: {host}:{port} does not answer")
            return
        with upstream:
            self.client.send(
                h11.Response(status_code=200, headers=[], reason=b"Connection established")
            )
            tail = self.client.h11.trailing_data[0]
            try:
                name, hello = read_server_name(self.client.sock, tail)
            except NoServerName as exc:
                proxy.report(Decided("deny", request, str(exc), None))
                return
            if not _same_name(name, host):
                reason = f"the TLS server name {name!r} is not the CONNECT host {host!r}"
                proxy.report(Decided("deny", request, reason, None))
                return
            upstream.sendall(hello)
            relay(self.client.sock, upstream)

    # -- plain HTTP --

    def _forward_absolute(self, event: Any) -> bool:
        """Forward one absolute-form request; False when the connection must close."""
        target = event.target.decode("ascii", "replace")
        scheme, sep, rest = target.partition("://")
        # ws:// is HTTP's own Upgrade on the same origin (RFC 6455 §3): judged as http://
        # (aiohttp sends a WebSocket handshake to WS_PROXY in this form)
        if not sep or scheme.lower() not in ("http", "ws"):
            self._answer(400, f"pysb: egress: {target[:200]!r} is not an http:// URL")
            return False
        authority, slash, path = rest.partition("/")
        try:
            host, port = _split_authority(authority, 80)
            judged_path = normal_path("/" + path if slash else "/")
        except (RuleError, UnicodeDecodeError) as exc:
            self._answer(400, f"pysb: egress: {target[:200]!r}: {exc}")
            return False
        origin = ("/" + path if slash else "/").encode("ascii", "replace")
        return forward(self.proxy, self.client, event, "http", host, port, judged_path, origin)


def forward(
    proxy: EgressProxy,
    client: _Stream,
    event: Any,
    scheme: str,
    host: str,
    port: int,
    judged_path: str,
    origin: bytes,
    *,
    upstream_wrap: Callable[[socket.socket], socket.socket] | None = None,
) -> bool:
    """Judge one request, send it to ``host:port`` and its response back.

    Returns whether the client connection may carry another request.
    """
    method = event.method.decode("ascii", "replace").upper()
    request = Request(scheme, host, port, judged_path, method)

    decision = proxy.judge(request)
    if not decision.allowed:
        return send_refusal(client, 403, refusal_text(request, decision.reason))
    try:
        addresses = proxy.addresses(host, port, decision)
    except AddressRefused as exc:
        return send_refusal(client, 403, refusal_text(request, proxy.refuse_address(request, exc)))
    raw = _open(addresses, port)
    if raw is None:
        return send_refusal(client, 502, f"pysb: egress: {host}:{port} does not answer")
    try:
        sock = upstream_wrap(raw) if upstream_wrap else raw
    except (OSError, ssl.SSLError) as exc:
        raw.close()
        return send_refusal(client, 502, f"pysb: egress: TLS with {host}:{port} failed: {exc}")
    with sock:
        try:
            return _exchange(client, sock, event, scheme, host, port, origin, proxy.secrets)
        except (OSError, h11.ProtocolError) as exc:
            # The server went away or spoke no HTTP: a 502 while the client still
            # waits for its response head, else the client connection closes.
            if client.h11.our_state is h11.SEND_RESPONSE:
                return send_refusal(
                    client, 502, f"pysb: egress: {host}:{port}: {type(exc).__name__}"
                )
            return False


def _exchange(
    client: _Stream,
    sock: socket.socket,
    event: Any,
    scheme: str,
    host: str,
    port: int,
    origin: bytes,
    secrets: Secrets,
) -> bool:
    """Send the request to the server and its response to the client (both streamed)."""
    method = event.method

    sock.settimeout(IDLE_TIMEOUT)
    upstream = _Stream(sock, h11.CLIENT)
    headers = _request_headers(event.headers, host, port, scheme, secrets)
    upstream.send(h11.Request(method=method, target=origin, headers=headers))
    while True:  # the request body, streamed
        part = client.next_event()
        if isinstance(part, h11.Data):
            upstream.send(h11.Data(data=part.data))
        elif isinstance(part, h11.EndOfMessage):
            upstream.send(h11.EndOfMessage())
            break
        else:
            return False
    response = upstream.next_event()
    while isinstance(response, h11.InformationalResponse):
        client.send(
            h11.InformationalResponse(
                status_code=response.status_code,
                headers=_response_headers(response.headers),
                reason=response.reason,
            )
        )
        if response.status_code == 101:  # an upgrade (WebSocket): bytes from now on
            tail_up = upstream.h11.trailing_data[0]
            tail_client = client.h11.trailing_data[0]
            if tail_up:
                client.sock.sendall(tail_up)
            if tail_client:
                sock.sendall(tail_client)
            relay(client.sock, sock)
            return False
        response = upstream.next_event()
    if not isinstance(response, h11.Response):
        return send_refusal(client, 502, f"pysb: egress: {host}:{port} sent no HTTP response")
    client.send(
        h11.Response(
            status_code=response.status_code,
            headers=_response_headers(response.headers),
            reason=response.reason,
        )
    )
    while True:
        part = upstream.next_event()
        if isinstance(part, h11.Data):
            client.send(h11.Data(data=part.data))
        elif isinstance(part, h11.EndOfMessage):
            client.send(h11.EndOfMessage())
            return True
        else:
            with contextlib.suppress(h11.LocalProtocolError, OSError):
                client.send(h11.EndOfMessage())
            return False


def _request_headers(
    headers: Any, host: str, port: int, scheme: str, secrets: Secrets
) -> list[tuple[bytes, bytes]]:
    """The client's headers for the server: no hop-by-hop header, the Host of the URL,
    and the host's secrets in place of any header of the same name the sandbox sent."""
    added = secrets.for_host(host, port)
    replaced = {name for name, _ in added}
    upgrade = _upgrade_of(headers)
    out = [
        (name, value)
        for name, value in headers
        if name not in HOP_HEADERS and name != b"host" and name not in replaced
    ]
    default = 443 if scheme == "https" else 80
    authority = f"[{host}]" if ":" in host else host
    if port != default:
        authority += f":{port}"
    out.insert(0, (b"host", authority.encode("ascii")))
    if upgrade is not None:
        out += [(b"connection", b"upgrade"), (b"upgrade", upgrade)]
    out += added
    return out


def _upgrade_of(headers: Any) -> bytes | None:
    """The Upgrade a client asked for (WebSocket), carried across on purpose."""
    names = dict(headers)
    connection = names.get(b"connection", b"").lower()
    if b"upgrade" in [token.strip() for token in connection.split(b",")]:
        return names.get(b"upgrade")
    return None


def _response_headers(headers: Any) -> list[tuple[bytes, bytes]]:
    upgrade = _upgrade_of(headers)
    out = [(name, value) for name, value in headers if name not in HOP_HEADERS]
    if upgrade is not None:
        out += [(b"connection", b"upgrade"), (b"upgrade", upgrade)]
    return out


def _open(addresses: list[str], port: int) -> socket.socket | None:
    """A connection to the first of the checked ``addresses`` that answers."""
    for address in addresses:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(CONNECT_TIMEOUT)
        try:
            sock.connect((address, port))
        except OSError:
            sock.close()
            continue
        sock.settimeout(IDLE_TIMEOUT)
        _no_delay(sock)
        return sock
    return None


def _no_delay(sock: socket.socket) -> None:
    """Relay small writes at once: with Nagle's algorithm a proxy's write-write-read
    (a CONNECT's answer, then a TLS record) waits for the peer's delayed ACK, ~40 ms."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _split_target(target: bytes) -> tuple[str, int]:
    text = target.decode("ascii", "replace")
    return _split_authority(text, None)


def _split_authority(authority: str, default: int | None) -> tuple[str, int]:
    if "@" in authority:
        raise RuleError("credentials in the URL")
    if authority.startswith("["):
        end = authority.find("]")
        host, rest = authority[: end + 1], authority[end + 1 :]
        port_text = rest[1:] if rest.startswith(":") else ("" if not rest else "x")
    else:
        host, sep, port_text = authority.rpartition(":")
        if not sep:
            host, port_text = authority, ""
    if not port_text:
        if default is None:
            raise RuleError("CONNECT needs host:port")
        return normalize_host(host), default
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise RuleError(f"port {port_text!r} is not 1-65535")
    return normalize_host(host), int(port_text)


def _same_name(name: str | None, host: str) -> bool:
    if name is None:  # no server name: only a client connecting to an address sends none
        return is_ip(host)
    try:
        return normalize_host(name) == host
    except RuleError:
        return False


def relay(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until both sides are done (a thread per direction)."""

    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    other = threading.Thread(target=pump, args=(b, a), daemon=True, name="pysb-proxy-relay")
    other.start()
    pump(a, b)
    other.join(IDLE_TIMEOUT)
