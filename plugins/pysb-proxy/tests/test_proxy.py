"""The proxy itself, in this process, against loopback servers and real clients.

Clients: urllib (ProxyHandler), requests, and raw sockets for what no client sends
(a CONNECT whose TLS names another host, garbage, oversize heads). Every server is on
127.0.0.0/8; addresses a test must see refused (cloud metadata, private networks) come
from an injected resolver and are refused before any connection is made.
"""

from __future__ import annotations

import json
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import requests
from proxy_servers import EchoServer, LoopbackCA
from pysb_proxy.addresses import AddressRefused, checked_addresses
from pysb_proxy.rules import EgressRules, parse_rule
from pysb_proxy.server import REFUSAL_HEADER, EgressProxy, Secrets
from pysb_proxy.tls import Interceptor

SECRET = "Bearer s3cr3t-value-for-the-test"


def make_proxy(lines: list[str], **kwargs: object) -> tuple[EgressProxy, list[object]]:
    decided: list[object] = []
    rules = EgressRules([parse_rule(line, f"p.yaml:{i + 1}") for i, line in enumerate(lines)])
    proxy = EgressProxy(rules, report=decided.append, **kwargs)  # type: ignore[arg-type]
    proxy.acquire()
    return proxy, decided


def urllib_get(proxy: EgressProxy, url: str, *, cafile: str | None = None) -> tuple[int, str]:
    handlers: list[urllib.request.BaseHandler] = [
        urllib.request.ProxyHandler({"http": proxy_url(proxy), "https": proxy_url(proxy)})
    ]
    if cafile:
        handlers.append(
            urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=cafile))
        )
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        assert exc.msg == exc.headers.get(REFUSAL_HEADER.decode(), "")  # said on the status line
        return exc.code, exc.headers.get(REFUSAL_HEADER.decode(), "")


def proxy_url(proxy: EgressProxy) -> str:
    return f"http://127.0.0.1:{proxy.port}"


def test_plain_http_allowed_path_and_method(http_server: EchoServer) -> None:
    base = f"http://127.0.0.1:{http_server.port}"
    proxy, decided = make_proxy([f"allow {base}/v1/* GET"])
    try:
        status, body = urllib_get(proxy, f"{base}/v1/models?key=1")
        assert status == 200
        assert json.loads(body)["path"] == "/v1/models?key=1"
        status, text = urllib_get(proxy, f"{base}/v2/models")
        assert status == 403
        assert "no egress rule allows it" in text and f"allow {base}/v2/* GET" in text
        r = requests.post(f"{base}/v1/models", proxies={"http": proxy_url(proxy)}, timeout=10)
        assert r.status_code == 403  # POST was not allowed
        assert "POST" in r.headers[REFUSAL_HEADER.decode()]
    finally:
        proxy.close()
    assert [getattr(d, "kind", "") for d in decided] == ["deny", "deny"]
    assert len(http_server.requests) == 1  # refused requests never reached the server


def test_deny_beats_allow_and_names_the_line(http_server: EchoServer) -> None:
    base = f"http://127.0.0.1:{http_server.port}"
    proxy, _ = make_proxy([f"allow {base}/*", f"deny {base}/admin/*"])
    try:
        status, text = urllib_get(proxy, f"{base}/admin/users")
        assert status == 403 and "denied by p.yaml:2" in text
        assert urllib_get(proxy, f"{base}/public")[0] == 200
    finally:
        proxy.close()


@pytest.mark.parametrize(
    "path",
    [
        "/v1/../admin/x",
        "/v1/%2e%2e/admin/x",
        "/v1/%2E./admin",
        "/v1/..%2fadmin",
        "/v1/./x",
        "/v1//x",
    ],
)
def test_paths_not_in_normal_form_are_refused(http_server: EchoServer, path: str) -> None:
    base = f"http://127.0.0.1:{http_server.port}"
    proxy, _ = make_proxy([f"allow {base}/v1/*"])
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
            s.sendall(f"GET {base}{path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            answer = s.recv(65536)
        assert answer.startswith(b"HTTP/1.1 400") or answer.startswith(b"HTTP/1.1 403")
    finally:
        proxy.close()
    assert http_server.requests == []


def test_https_tunnel_is_not_decrypted_and_checks_the_server_name(
    https_server: EchoServer, ca: LoopbackCA
) -> None:
    proxy, decided = make_proxy([f"allow https://localhost:{https_server.port}"])
    try:
        status, body = urllib_get(
            proxy, f"https://localhost:{https_server.port}/any", cafile=str(ca.ca_file)
        )
        assert status == 200 and json.loads(body)["path"] == "/any"
        # The same CONNECT, but TLS for another name (domain fronting): closed.
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
            s.sendall(f"CONNECT localhost:{https_server.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
            context = ssl.create_default_context(cafile=str(ca.ca_file))
            context.check_hostname = False
            with pytest.raises((ssl.SSLError, OSError)):
                context.wrap_socket(s, server_hostname="other.example.com").recv(10)
    finally:
        proxy.close()
    assert any("is not the CONNECT host" in getattr(d, "reason", "") for d in decided)
    assert len(https_server.requests) == 1


def test_a_refused_tunnel_says_why_in_the_clients_own_exception(https_server: EchoServer) -> None:
    proxy, _ = make_proxy(["allow https://api.example.com"])
    try:
        with pytest.raises(requests.exceptions.ProxyError) as raised:
            requests.get(
                f"https://localhost:{https_server.port}/x",
                proxies={"https": proxy_url(proxy)},
                timeout=10,
            )
    finally:
        proxy.close()
    assert "pysb: egress refused: CONNECT https://localhost:" in str(raised.value)
    assert "no egress rule allows it; add to the profile" in str(raised.value)


def test_connect_to_a_host_no_rule_names_is_refused(https_server: EchoServer) -> None:
    proxy, _ = make_proxy(["allow https://api.example.com"])
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
            s.sendall(f"CONNECT localhost:{https_server.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            answer = s.recv(4096)
        assert answer.startswith(b"HTTP/1.1 403")
        assert b"no egress rule allows it" in answer
    finally:
        proxy.close()


@pytest.mark.parametrize(
    "address", ["127.0.0.1", "169.254.169.254", "10.1.2.3", "192.168.1.1", "::1", "fe80::1"]
)
def test_a_name_resolving_to_a_special_address_is_refused_before_connecting(
    address: str,
) -> None:
    """SSRF: the rule allows a *name*; that it resolves to loopback, a private network or
    the metadata service refuses it. Nothing is contacted: the check comes first."""
    contacted: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        contacted.append(host)
        return [address]

    with pytest.raises(AddressRefused, match="only a rule naming that address"):
        checked_addresses("api.example.com", 443, named=False, resolve=resolve)
    proxy, _ = make_proxy(["allow http://api.example.com/*"], resolve=resolve)
    try:
        status, text = urllib_get(proxy, "http://api.example.com/x")
        assert status == 403 and "address" in text
    finally:
        proxy.close()
    assert contacted == ["api.example.com", "api.example.com"]


def test_one_special_address_among_public_ones_refuses_the_name() -> None:
    def resolve(host: str, port: int) -> list[str]:
        return ["93.184.215.14", "127.0.0.1"]  # documentation only: never contacted

    with pytest.raises(AddressRefused):
        checked_addresses("api.example.com", 80, named=False, resolve=resolve)


def test_the_name_is_resolved_again_at_every_connection() -> None:
    """A name whose address changes mid-run is followed (pinning is the kernel filter's
    job, not the proxy's): the second request goes to the second address."""
    first = EchoServer("127.0.0.1")
    second = EchoServer("127.0.0.2", port=first.port)
    answers = iter([["127.0.0.1"], ["127.0.0.2"]])

    def resolve(host: str, port: int) -> list[str]:
        return next(answers)

    proxy, _ = make_proxy([f"allow http://localhost:{first.port}/*"], resolve=resolve)
    try:
        assert urllib_get(proxy, f"http://localhost:{first.port}/one")[0] == 200
        assert urllib_get(proxy, f"http://localhost:{first.port}/two")[0] == 200
    finally:
        proxy.close()
        first.close()
        second.close()
    assert [r["path"] for r in first.requests] == ["/one"]
    assert [r["path"] for r in second.requests] == ["/two"]


def test_interception_judges_paths_inside_tls_and_adds_the_secret(
    https_server: EchoServer, ca: LoopbackCA, tmp_path: Path
) -> None:
    import hashlib

    origin = f"https://localhost:{https_server.port}"
    interceptor = Interceptor()
    interceptor.upstream = ssl.create_default_context(cafile=str(ca.ca_file))
    run_ca = tmp_path / "run-ca.pem"
    run_ca.write_bytes(interceptor.ca_pem())
    proxy, _ = make_proxy(
        [f"allow {origin}/v1/* GET,POST", f"deny {origin}/v1/admin/*"],
        interceptor=interceptor,
        secrets=Secrets([("localhost", None, "Authorization", SECRET)]),
    )
    # Per request: the machine's REQUESTS_CA_BUNDLE would beat a Session's verify.
    options = {"proxies": {"https": proxy_url(proxy)}, "verify": str(run_ca), "timeout": 10}
    try:
        # The sandbox's own Authorization header is replaced, never forwarded.
        r = requests.get(f"{origin}/v1/models", headers={"Authorization": "mine"}, **options)
        assert r.status_code == 200
        seen = r.json()
        assert (
            seen["watched"]
            and seen["watched_sha256"] == hashlib.sha256(SECRET.encode()).hexdigest()
        )
        assert SECRET not in r.text
        r = requests.get(f"{origin}/v1/admin/keys", **options)
        assert r.status_code == 403 and "denied by p.yaml:2" in r.headers[REFUSAL_HEADER.decode()]
        assert requests.delete(f"{origin}/v1/models", **options).status_code == 403
        assert requests.get(f"{origin}/v2/x", **options).status_code == 403
    finally:
        proxy.close()
    assert [r["path"] for r in https_server.requests] == ["/v1/models"]


def test_a_secret_never_follows_a_redirect_to_another_host(
    https_server: EchoServer, ca: LoopbackCA, tmp_path: Path
) -> None:
    other = EchoServer("127.0.0.1", tls=ca.server_context(), watch="Authorization")
    interceptor = Interceptor()
    interceptor.upstream = ssl.create_default_context(cafile=str(ca.ca_file))
    # What the sandbox trusts: the real CAs (here the test's) and the run's.
    run_ca = tmp_path / "bundle.pem"
    run_ca.write_bytes(ca.ca_file.read_bytes() + interceptor.ca_pem())
    target = f"https://127.0.0.1:{other.port}/landed"
    proxy, _ = make_proxy(
        [f"allow https://localhost:{https_server.port}/*", f"allow https://127.0.0.1:{other.port}"],
        interceptor=interceptor,
        secrets=Secrets([("localhost", None, "Authorization", SECRET)]),
    )
    try:
        r = requests.get(
            f"https://localhost:{https_server.port}/redirect?to={target}",
            proxies={"https": proxy_url(proxy)},
            verify=str(run_ca),
            timeout=10,
        )
        assert r.status_code == 200
    finally:
        proxy.close()
        other.close()
    assert https_server.requests[0]["watched"] is True
    assert other.requests and other.requests[0]["watched"] is False  # no secret there


def test_hostile_bytes_get_a_400_and_bounded_heads(http_server: EchoServer) -> None:
    proxy, _ = make_proxy([f"allow http://127.0.0.1:{http_server.port}/*"])
    try:
        for payload in [b"\x00\x01garbage\r\n\r\n", b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 20000]:
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
                try:
                    s.sendall(payload + b"\r\n")
                except OSError:
                    pass
                answer = s.recv(4096)
            assert answer.startswith(b"HTTP/1.1 400") or answer == b""
    finally:
        proxy.close()
    assert http_server.requests == []


def test_learning_records_what_passed(http_server: EchoServer) -> None:
    from pysb_proxy.learn import learned_rules

    from pysb_core.events import Event

    base = f"http://127.0.0.1:{http_server.port}"
    proxy, decided = make_proxy([], learning=True)
    try:
        for path in ("/v1/a", "/v1/b/c"):
            assert urllib_get(proxy, f"{base}{path}?token=x")[0] == 200
    finally:
        proxy.close()
    events = [
        Event(
            layer="os",
            guard="egress",
            action="learn",
            target=d.request.url,  # type: ignore[attr-defined]
            data={
                "scheme": d.request.scheme,  # type: ignore[attr-defined]
                "host": d.request.host,  # type: ignore[attr-defined]
                "port": d.request.port,  # type: ignore[attr-defined]
                "path": d.request.path,  # type: ignore[attr-defined]
                "method": d.request.method,  # type: ignore[attr-defined]
            },
        )
        for d in decided
    ]
    assert all("token" not in e.target for e in events)  # no query string recorded
    assert learned_rules(events) == [f"allow {base}/v1/* GET"]


def test_keep_alive_and_streamed_bodies_both_ways(http_server: EchoServer) -> None:
    """Two requests on one client connection; a 4 MiB upload arrives whole."""
    import http.client

    base = f"http://127.0.0.1:{http_server.port}"
    proxy, _ = make_proxy([f"allow {base}/*"])
    try:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=20)
        conn.request("GET", f"{base}/one")
        first = conn.getresponse()
        assert first.status == 200 and json.loads(first.read())["path"] == "/one"
        conn.request("POST", f"{base}/two", body=b"x" * (4 << 20))
        second = conn.getresponse()
        assert second.status == 200
        seen = json.loads(second.read())
        assert seen["path"] == "/two" and seen["body"] == 4 << 20
        conn.close()
    finally:
        proxy.close()
    assert [r["path"] for r in http_server.requests] == ["/one", "/two"]


@pytest.mark.parametrize("scheme", ["http", "ws"])
def test_a_websocket_upgrade_is_relayed(scheme: str) -> None:
    """``Upgrade: websocket`` crosses the proxy and bytes flow both ways after the 101; a
    ``ws://`` absolute-form target (aiohttp's, through WS_PROXY) is judged as ``http://``."""
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(4096)
            assert b"upgrade: websocket" in head.lower()
            conn.sendall(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\n\r\n"
            )
            conn.sendall(conn.recv(4096)[::-1])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    proxy, _ = make_proxy([f"allow http://127.0.0.1:{port}/ws"])
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
            s.sendall(
                f"GET {scheme}://127.0.0.1:{port}/ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n".encode()
            )
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += s.recv(4096)
            assert answer.startswith(b"HTTP/1.1 101")
            s.sendall(b"frame-bytes")
            assert s.recv(4096) == b"setyb-emarf"
    finally:
        proxy.close()
        server.close()
    thread.join(5)
