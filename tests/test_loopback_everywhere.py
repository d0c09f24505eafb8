"""``allow tcp 127.0.0.1 P out`` and ``in`` mean the same on every provider (SPEC §4).

``out``: the program reaches the host's own service on 127.0.0.1:P, and not the host's
service on another port. ``in``: a server the program binds on 127.0.0.1:P is reached
from the host's 127.0.0.1:P. Real programs under real providers, traffic on the host's
loopback only. firejail used to refuse such profiles (a bridged namespace cannot reach
the host's loopback); as a normal user it still does, with pysb's reason and fix, because
only root can configure the namespace firejail (set-uid root) runs in.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pysb_core.testing import (
    BASE_ENV,
    LoopbackServer,
    Project,
    pysb_command,
    require_provider,
    trust_profile,
)

PROVIDERS = ["landlock", "bwrap", "unshare", "firejail", "qemu"]

CLIENT = """
import socket, sys
for port in map(int, sys.argv[1:]):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            print(port, c.recv(16).decode().strip())
    except OSError as exc:
        print(port, "refused", type(exc).__name__)
"""

SERVER = """
import socket, sys
host = sys.argv[2]
s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
s.bind((host, int(sys.argv[1])))
s.listen(1)
print("listening", flush=True)
s.settimeout(30)
c, _ = s.accept()
c.sendall(b"from-inside\\n")
c.recv(16)  # the client closes first: no TIME_WAIT left on port P for the next run
c.close()
"""


@pytest.fixture
def project() -> Iterator[Project]:
    """In the home directory: the qemu guest's private /tmp hides a project below the
    host's /tmp (a qemu limit of its own, not what these tests are about)."""
    root = Path(tempfile.mkdtemp(prefix=".pysb-loopback-", dir=Path.home()))
    try:
        yield Project(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _firejail_refuses_a_normal_user(provider: str) -> bool:
    return provider == "firejail" and os.getuid() != 0


def _profile(project: Project, rule: str) -> None:
    project.profile(f"version: 1\nimports: [socket, sys]\nnetwork:\n  - '{rule}'\n")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_out_reaches_the_hosts_loopback_port_and_no_other(project: Project, provider: str) -> None:
    require_provider(provider)
    allowed, other = LoopbackServer(), LoopbackServer()
    try:
        _profile(project, f"allow tcp 127.0.0.1 {allowed.port} out")
        project.file("client.py", CLIENT)
        res = project.run(
            "run", "--provider", provider, "client.py", str(allowed.port), str(other.port)
        )
        if _firejail_refuses_a_normal_user(provider):
            assert res.returncode == 125, res.stderr
            assert "pysb: error:" in res.stderr and "bwrap or unshare" in res.stderr, res.stderr
            return
        assert res.returncode == 0, res.stderr
        lines = res.stdout.splitlines()
        assert lines[0] == f"{allowed.port} ok", res.stdout
        assert lines[1].startswith(f"{other.port} refused"), res.stdout
        assert other.accepted == 0
    finally:
        allowed.close()
        other.close()


#: Where the server binds: the loopback, and the wildcard addresses a server on every
#: interface binds (``bind(("", P))`` is judged, and learned, as ``0.0.0.0``): an ``in``
#: rule on the wildcard means every local address, the host's loopback forward included.
#: qemu boots a guest per test (TCG): one wildcard case there.
BINDS = [
    *(pytest.param(p, "127.0.0.1", id=f"{p}-loopback") for p in PROVIDERS),
    *(pytest.param(p, "0.0.0.0", id=f"{p}-wildcard4") for p in PROVIDERS),
    *(pytest.param(p, "::", id=f"{p}-wildcard6") for p in PROVIDERS if p != "qemu"),
]


@pytest.mark.parametrize(("provider", "bind"), BINDS)
def test_in_lets_the_host_reach_a_server_inside(project: Project, provider: str, bind: str) -> None:
    require_provider(provider)
    port = _free_port()
    _profile(project, f"allow tcp {bind} {port} in")
    project.file("server.py", SERVER)
    _serve_and_reach(project, ["--provider", provider, "server.py", str(port), bind], provider)


@pytest.mark.parametrize("provider", [p for p in PROVIDERS if p != "qemu"])
def test_a_learned_wildcard_server_is_reached_unchanged_under_every_provider(
    project: Project, provider: str
) -> None:
    """``bind(("", P))`` is learned as ``allow tcp 0.0.0.0 P in``; that profile, unchanged,
    lets the host reach the server on every provider (the forward of an ``in`` rule on
    127.0.0.1 applies to the wildcard too). qemu runs the same rule in the test above."""
    require_provider(provider)
    port = _free_port()
    project.file("server.py", SERVER)
    _serve_and_reach(project, ["--learn", "server.py", str(port), ""], "subprocess")
    learned = (project.root / ".pysb.yaml").read_text()
    assert f"allow tcp 0.0.0.0 {port} in" in learned, learned
    trust_profile(project.root / ".pysb.yaml")
    _serve_and_reach(project, ["--provider", provider, "server.py", str(port), ""], provider)


def _serve_and_reach(project: Project, args: list[str], provider: str) -> None:
    """``pysb run ARGS`` starts SERVER; the host connects to 127.0.0.1:P and gets its
    greeting, and the run ends with 0."""
    port = int(args[-2])
    proc = subprocess.Popen(
        [*pysb_command(), "run", *args],
        cwd=project.root,
        env=BASE_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if _firejail_refuses_a_normal_user(provider):
            assert proc.wait(timeout=60) == 125
            assert "bwrap or unshare" in (proc.stderr.read() if proc.stderr else "")
            return
        assert line.strip() == "listening", proc.stderr.read() if proc.stderr else ""
        data = b""
        deadline = time.monotonic() + 20
        while not data and time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                    data = c.recv(64)
            except OSError:
                time.sleep(0.1)  # the forward may still be settling
        assert data == b"from-inside\n"
        assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()  # our own child, by PID
            proc.wait()


OWN_SERVERS = """
import socket, threading
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
server.settimeout(20)  # a connection sent elsewhere fails the run, never hangs it

def answer():
    conn, _ = server.accept()
    conn.sendall(conn.recv(16).upper())
    conn.close()

t = threading.Thread(target=answer)
t.start()
with socket.create_connection(server.getsockname(), timeout=10) as c:
    c.sendall(b"tcp")
    print(c.recv(16).decode())
t.join()
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind(("127.0.0.1", 0))
udp.settimeout(10)
udp.sendto(b"udp", udp.getsockname())
print(udp.recv(16).decode().upper())
"""


@pytest.mark.parametrize("provider", ["subprocess", *PROVIDERS])
def test_a_wide_loopback_rule_still_reaches_the_programs_own_servers(
    project: Project, provider: str
) -> None:
    """``allow tcp,udp 127.0.0.1 * any`` (what an allow-everything profile says): the
    program's own servers on port 0 are reached as under plain Python. It used to send every
    loopback port to the host's loopback under bwrap, unshare and qemu (a TCP connect was
    refused, a datagram was lost: CPython's test_logging hung on it)."""
    if provider != "subprocess":
        require_provider(provider)
    project.profile(
        "version: 1\nimports: [socket, threading]\napi:\n  allow: [threads]\n"
        "network:\n  - allow tcp,udp 127.0.0.1 * any\n"
    )
    project.file("own.py", OWN_SERVERS)
    res = project.run("run", "--provider", provider, "own.py", timeout=240)
    if _firejail_refuses_a_normal_user(provider):
        assert res.returncode == 125, res.stderr
        return
    assert res.returncode == 0, f"{provider}: {res.stderr}"
    assert res.stdout.split() == ["TCP", "UDP"], res.stdout


def test_every_compiler_keeps_the_ephemeral_range_inside_under_a_wide_loopback_rule() -> None:
    """An ``in`` rule covering the ephemeral range -- every port included -- lets the program
    serve there, so loopback traffic to that range stays in the sandbox; the other ports of
    a wide ``out`` rule still reach the host's loopback (nft and iptables back ends, the
    namespace and the qemu guest targets)."""
    from pysb_qemu.netfilter import GUEST_NETWORK

    from pysb_core.net.netfilter import compile_iptables, compile_nft
    from pysb_core.net.netfilter.target import SLIRP4NETNS
    from pysb_core.policy.netrules import parse_rule

    rules = (parse_rule("allow tcp,udp 127.0.0.1 * any", source="p.yaml:3"),)
    for target in (SLIRP4NETNS, GUEST_NETWORK):
        compiled = compile_nft(rules, {}, target)
        dnat = [ln.strip() for ln in compiled.ruleset.splitlines() if "dnat ip to 10.0.2.2" in ln]
        assert len(dnat) == 2, compiled.ruleset  # tcp and udp: the host's other ports
        assert all("dport != 32768-60999" in ln for ln in dnat), compiled.ruleset
        v4, _ = compile_iptables(rules, {}, target)
        dnat4 = [ln for ln in v4.splitlines() if "DNAT --to-destination 10.0.2.2" in ln]
        assert len(dnat4) == 2 and all("! --dport 32768:60999" in ln for ln in dnat4), v4
    named = compile_nft([parse_rule("allow tcp 127.0.0.1 * out")], {})
    assert "dnat ip to" in named.ruleset and "!=" not in named.ruleset  # no in rule: as before


HTTP_CLIENT = """
import sys
import requests
import urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/"
print(requests.get(url, timeout=10).text.strip())
print(urllib.request.urlopen(url, timeout=10).read().decode().strip())
"""


@pytest.fixture
def ephemeral_http_server() -> Iterator[int]:
    """An HTTP server on the host's 127.0.0.1, on a port the kernel picked (port 0: the
    host's ephemeral range), answering ``hello``."""
    import http.server
    import threading

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"hello\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.mark.parametrize("provider", ["bwrap", "unshare", "firejail", "qemu"])
def test_a_learned_http_client_reaches_a_host_server_on_an_ephemeral_port(
    project: Project, provider: str, ephemeral_http_server: int
) -> None:
    """Issue 27: requests/urllib3 probe IPv6 by binding ``::1`` port 0, so learning writes
    ``allow tcp ::1 32768-60999 in`` beside ``allow tcp 127.0.0.1 P out``; with that ``in``
    rule the host-loopback forward left out the ephemeral range, where P was, and the
    learned profile, run unchanged, got ECONNREFUSED under bwrap, unshare and firejail. An
    ``out`` rule to a host port reaches it whatever the ``in`` rules say."""
    require_provider(provider)
    port = ephemeral_http_server
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    assert low <= port <= high  # the case: a host service on an ephemeral port
    project.file("client.py", HTTP_CLIENT)
    learn = project.run("run", "--learn", "client.py", str(port), timeout=120)
    assert learn.returncode == 0, learn.stderr
    assert learn.stdout.split() == ["hello", "hello"], learn.stdout
    learned = (project.root / ".pysb.yaml").read_text()
    assert f"allow tcp 127.0.0.1 {port} out" in learned, learned
    trust_profile(project.root / ".pysb.yaml")
    res = project.run("run", "--provider", provider, "client.py", str(port), timeout=240)
    if _firejail_refuses_a_normal_user(provider):
        assert res.returncode == 125, res.stderr
        return
    assert res.returncode == 0, f"{provider}: {res.stderr}\n{learned}"
    assert res.stdout.split() == ["hello", "hello"], res.stdout


IN_AND_OUT = """
import socket, sys, threading
port = int(sys.argv[1])
# No server yet: the connect is refused at once (through the host's forward it used to be
# accepted by the user-mode helper and then closed).
try:
    socket.create_connection(("127.0.0.1", port), timeout=5).close()
    print("connected to nothing")
except ConnectionRefusedError:
    print("refused")
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", port))
server.listen()
server.settimeout(20)

def answer():
    conn, addr = server.accept()
    conn.sendall(addr[0].encode())
    conn.close()

t = threading.Thread(target=answer)
t.start()
with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
    print("peer", c.recv(64).decode())
t.join()
"""


@pytest.mark.parametrize("provider", ["bwrap", "unshare", "firejail"])
def test_a_port_forwarded_in_and_allowed_out_is_the_sandboxs_own_server(
    project: Project, provider: str
) -> None:
    """With ``in`` and ``out`` on the same loopback port, the program's connect to its own
    server stays on the sandbox's loopback: the peer it sees is 127.0.0.1 itself, not
    the user-mode helper's masqueraded address, and with no server the connect is refused."""
    require_provider(provider)
    port = _free_port()
    project.profile(
        "version: 1\nimports: [socket, sys, threading]\napi: {allow: [threads]}\nnetwork:\n"
        f"  - allow tcp 127.0.0.1 {port} in\n  - allow tcp 127.0.0.1 {port} out\n"
    )
    project.file("prog.py", IN_AND_OUT)
    res = project.run("run", "--provider", provider, "prog.py", str(port))
    if _firejail_refuses_a_normal_user(provider):
        assert res.returncode == 125, res.stderr
        return
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["refused", "peer 127.0.0.1"], res.stdout
