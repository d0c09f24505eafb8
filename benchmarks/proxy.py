"""What pysb-proxy costs a request: ``python benchmarks/proxy.py [--quick] [--json PATH]``.

Side by side on the host's loopback, in one process (no sandbox: the proxy's own cost,
not a provider's): the latency of a small GET (p50 and p90 of fresh connections, as
clients without a pool make them) and the throughput of a 16 MiB download, each direct,
through the proxy for plain HTTP, through a tunnel (HTTPS judged by host), and through
interception (HTTPS with a path rule: the proxy ends TLS and opens its own). Loopback
only; every server stops at the end.
"""

from __future__ import annotations

import argparse
import http.server
import json
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins" / "pysb-proxy" / "tests"))

from proxy_servers import LoopbackCA  # noqa: E402
from pysb_proxy.rules import EgressRules, parse_rule  # noqa: E402
from pysb_proxy.server import EgressProxy  # noqa: E402
from pysb_proxy.tls import Interceptor  # noqa: E402

BIG = 16 << 20


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        size = BIG if self.path.startswith("/big") else 2
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        chunk = b"x" * 65536
        left = size
        while left:
            n = min(left, len(chunk))
            self.wfile.write(chunk[:n])
            left -= n

    def log_message(self, *args: object) -> None:
        pass


def _server(tls: ssl.SSLContext | None) -> tuple[http.server.ThreadingHTTPServer, int]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, httpd.server_address[1]


def _opener(proxy: int | None, cafile: str | None) -> urllib.request.OpenerDirector:
    handlers: list[urllib.request.BaseHandler] = []
    url = f"http://127.0.0.1:{proxy}" if proxy else None
    handlers.append(urllib.request.ProxyHandler({"http": url, "https": url} if url else {}))
    if cafile:
        handlers.append(
            urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=cafile))
        )
    return urllib.request.build_opener(*handlers)


def _measure(opener: urllib.request.OpenerDirector, base: str, n: int) -> dict[str, float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        with opener.open(f"{base}/small", timeout=30) as r:
            r.read()
        times.append(time.perf_counter() - t)
    t = time.perf_counter()
    with opener.open(f"{base}/big", timeout=60) as r:
        got = len(r.read())
    seconds = time.perf_counter() - t
    assert got == BIG
    times.sort()
    return {
        "p50_ms": statistics.median(times) * 1e3,
        "p90_ms": times[int(len(times) * 0.9)] * 1e3,
        "mib_per_s": BIG / (1 << 20) / seconds,
    }


def run(quick: bool) -> dict[str, dict[str, float]]:
    n = 30 if quick else 300
    with tempfile.TemporaryDirectory() as tmp:
        ca = LoopbackCA(Path(tmp) / "ca")
        plain, plain_port = _server(None)
        tls, tls_port = _server(ca.server_context())
        http_base = f"http://127.0.0.1:{plain_port}"
        https_base = f"https://localhost:{tls_port}"
        bundle = Path(tmp) / "bundle.pem"
        interceptor = Interceptor()
        interceptor.upstream = ssl.create_default_context(cafile=str(ca.ca_file))
        bundle.write_bytes(ca.ca_file.read_bytes() + interceptor.ca_pem())
        tunnel = EgressProxy(
            EgressRules(
                [parse_rule(f"allow {http_base}/*", "b"), parse_rule(f"allow {https_base}", "b")]
            ),
            report=lambda d: None,
        )
        intercepting = EgressProxy(
            EgressRules([parse_rule(f"allow {https_base}/*", "b")]),
            report=lambda d: None,
            interceptor=interceptor,
        )
        for proxy in (tunnel, intercepting):
            proxy.acquire()
        try:
            return {
                "http direct": _measure(_opener(None, None), http_base, n),
                "http via proxy": _measure(_opener(tunnel.port, None), http_base, n),
                "https direct": _measure(_opener(None, str(ca.ca_file)), https_base, n),
                "https tunnelled": _measure(_opener(tunnel.port, str(ca.ca_file)), https_base, n),
                "https intercepted": _measure(
                    _opener(intercepting.port, str(bundle)), https_base, n
                ),
            }
        finally:
            for proxy in (tunnel, intercepting):
                proxy.close()
            for httpd in (plain, tls):
                httpd.shutdown()
                httpd.server_close()


def markdown(results: dict[str, dict[str, float]]) -> str:
    lines = [
        "| path | p50 per request | p90 | 16 MiB download |",
        "|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['p50_ms']:.2f} ms | {r['p90_ms']:.2f} ms | {r['mib_per_s']:.0f} MiB/s |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few repetitions: a smoke run")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    socket.setdefaulttimeout(60)
    results = run(args.quick)
    print(markdown(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
