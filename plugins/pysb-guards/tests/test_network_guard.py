"""The network guard, installed in real child interpreters that talk to real loopback servers.

Each test starts ``python -c`` with a compiled Policy, a Recorder writing to a pipe, and the
guard's ``pysb_child_install``, then runs a snippet and reports what happened as JSON. Traffic
goes only to 127.0.0.0/8 and ::1; the "no query leaves" proof runs in a network namespace the
test creates, whose only nameserver is a socket the child itself listens on.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pysb_guards.network import hooks as network_hooks

from pysb_core.builtin import dns as builtin_dns
from pysb_core.check import CheckReport
from pysb_core.events import Event
from pysb_core.policy import Exposure, Policy
from pysb_core.policy.netrules import NetworkMatcher, parse_rule, pin_hosts
from pysb_core.profile.learning import LearnedProfile
from pysb_core.provider import Capability, Provider, ProviderStatus

ROOT = Path(__file__).resolve().parents[3]
GUARDS_SRC = ROOT / "plugins" / "pysb-guards" / "src"

PRELUDE = """
import json, os, socket, sys
from pysb_core.events import Recorder
from pysb_core.policy import Policy
from pysb_guards.network import guard as network
policy = Policy.from_json(open(sys.argv[1]).read())
recorder = Recorder(int(sys.argv[2]), learning=policy.learn)
results = {}

def attempt(name, fn, *args, **kwargs):
    try:
        value = fn(*args, **kwargs)
    except BaseException as e:
        results[name] = {
            "error": type(e).__name__, "message": str(e),
            "refused": isinstance(e, ConnectionRefusedError),
            "suggested": getattr(e, "suggested_rule", None),
        }
    else:
        results[name] = {"ok": value if isinstance(value, (int, str, list, tuple, type(None)))
                         else repr(value)}
    return results[name]

def connect(host, port, family=socket.AF_INET, kind=socket.SOCK_STREAM):
    with socket.socket(family, kind) as s:
        s.settimeout(5)
        s.connect((host, port))
        return "connected"
"""

INSTALL = "network.pysb_child_install(policy=policy, recorder=recorder)\n"
EPILOGUE = "\nprint(json.dumps(results, default=repr))\n"


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSB_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(GUARDS_SRC)])
    env.update(extra or {})
    return env


def run_child(
    tmp_path: Path,
    policy: Policy,
    code: str,
    *,
    setup: str = "",
    env: dict[str, str] | None = None,
    wrap: list[str] | None = None,
    install: bool = True,
    python: str = sys.executable,
) -> tuple[dict[str, Any], list[Event]]:
    """Run ``code`` in a fresh interpreter with the guard installed; return results, events."""
    policy_file = tmp_path / f"policy-{os.urandom(4).hex()}.json"
    policy_file.write_text(policy.to_json())
    hook = INSTALL if install else ""
    script = PRELUDE + textwrap.dedent(setup) + hook + textwrap.dedent(code) + EPILOGUE
    read_fd, write_fd = os.pipe()
    argv = [python, "-c", script, str(policy_file), str(write_fd)]
    try:
        proc = subprocess.run(
            [*(wrap or []), *argv],
            env=child_env(env),
            pass_fds=(write_fd,),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_fd)
    with os.fdopen(read_fd, "rb") as f:
        events = [Event.from_json(line) for line in f.read().splitlines() if line.strip()]
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), events


def rules(*lines: str) -> tuple:
    return tuple(parse_rule(x, f"test.yaml:{i}") for i, x in enumerate(lines, 1))


class Server:
    """TCP and UDP listeners on one loopback port; counts what reached them.

    Nothing is accepted while the child runs: completed connections wait in the listen
    backlog and are counted afterwards, so the count does not race with the child.
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.tcp = socket.socket(family, socket.SOCK_STREAM)
        self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.tcp.bind((host, 0))
        self.port = self.tcp.getsockname()[1]
        self.tcp.listen(64)
        self.tcp.setblocking(False)
        self.udp = socket.socket(family, socket.SOCK_DGRAM)
        self.udp.bind((host, self.port))
        self.udp.setblocking(False)
        self._accepted = 0
        self.datagrams: list[bytes] = []

    @property
    def accepted(self) -> int:
        while True:
            try:
                conn, _ = self.tcp.accept()
            except BlockingIOError:
                return self._accepted
            self._accepted += 1
            conn.close()

    def drain_udp(self) -> list[bytes]:
        while True:
            try:
                self.datagrams.append(self.udp.recv(4096))
            except BlockingIOError:
                return self.datagrams

    def close(self) -> None:
        self.tcp.close()
        self.udp.close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


# ---------------------------------------------------------------------------------------
# Connect / bind / sendto on addresses
# ---------------------------------------------------------------------------------------


def test_allowed_connect_reaches_the_server(tmp_path: Path, server: Server) -> None:
    P = server.port
    policy = Policy(network=rules(f"allow tcp 127.0.0.1 {P} out"))
    results, events = run_child(tmp_path, policy, f"attempt('c', connect, '127.0.0.1', {P})")
    assert results["c"] == {"ok": "connected"}
    assert server.accepted == 1
    assert events == []


def test_no_rule_is_refused_with_the_rule_to_add(tmp_path: Path, server: Server) -> None:
    P = server.port
    code = f"""
    attempt('c', connect, '127.0.0.1', {P})
    attempt('ex', lambda: socket.socket().connect_ex(('127.0.0.1', {P})))
    """
    results, events = run_child(tmp_path, Policy(), code)
    for key in ("c", "ex"):
        assert results[key]["error"] == "NetworkDeniedError"
        assert results[key]["refused"] is True
        assert f"allow tcp 127.0.0.1 {P} out" in results[key]["message"]
        assert results[key]["suggested"] == f"allow tcp 127.0.0.1 {P} out"
    assert server.accepted == 0
    assert events and all(e.guard == "network" and e.action == "deny" for e in events)
    assert events[0].suggested_rule == f"allow tcp 127.0.0.1 {P} out"


def test_refusal_traceback_ends_at_the_callers_line(tmp_path: Path) -> None:
    code = """
    import traceback
    for name, call in [
        ("connect", lambda: socket.socket().connect(("127.0.0.1", 9))),
        ("bind", lambda: socket.socket().bind(("127.0.0.1", 0))),
        ("getaddrinfo", lambda: socket.getaddrinfo("uncovered.pysb.test", 443)),
        ("sendto", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(
            b"x", ("127.0.0.1", 9))),
    ]:
        try:
            call()
        except ConnectionRefusedError as e:
            results[name] = traceback.format_exception(e)
    """
    results, _ = run_child(tmp_path, Policy(), code)
    assert set(results) == {"connect", "bind", "getaddrinfo", "sendto"}
    for name, lines in results.items():
        text = "".join(lines)
        assert "During handling" not in text, text
        # No frame of pysb: the face's entry is spliced out as the traceback is read
        # (issue 17); the door and the judge never show.
        assert "<pysb guard" not in text, text
        assert "pysb_guards" not in text and "pysb-door" not in text, text
        # a name no rule covers does not resolve: also socket.gaierror (issue 17)
        kind = "NameResolutionDeniedError" if name == "getaddrinfo" else "NetworkDeniedError"
        assert lines[-1].startswith(f"pysb_core.errors.{kind}: "), name


def test_deny_listed_after_allow_still_denies(tmp_path: Path, server: Server) -> None:
    P = server.port
    policy = Policy(network=rules(f"allow tcp 127.0.0.1 {P} out", "deny tcp 127.0.0.0/8 * out"))
    results, _ = run_child(tmp_path, policy, f"attempt('c', connect, '127.0.0.1', {P})")
    assert results["c"]["error"] == "NetworkDeniedError"
    assert "deny tcp 127.0.0.0/8 * out" in results["c"]["message"]
    assert "test.yaml:2" in results["c"]["message"]
    assert server.accepted == 0


def test_ipv4_mapped_ipv6_is_judged_by_ipv4_rules(tmp_path: Path, server: Server) -> None:
    P = server.port
    code = f"attempt('m', connect, '::ffff:127.0.0.1', {P}, socket.AF_INET6)"
    allowed, _ = run_child(tmp_path, Policy(network=rules(f"allow tcp 127.0.0.1 {P} out")), code)
    assert allowed["m"] == {"ok": "connected"}
    policy = Policy(network=rules("allow tcp ::/0 * out", "deny tcp 127.0.0.1 * out"))
    denied, _ = run_child(tmp_path, policy, code)
    assert denied["m"]["error"] == "NetworkDeniedError"
    assert "allow tcp ::/0" not in denied["m"]["message"]
    assert server.accepted == 1


def test_numeric_spellings_are_judged_as_the_address(tmp_path: Path, server: Server) -> None:
    P = server.port
    policy = Policy(network=rules("allow tcp * * out", "deny tcp 127.0.0.1 * out"))
    code = f"""
    for spelling in ('127.1', '2130706433', '0x7f000001', '0177.0.0.1'):
        attempt(spelling, connect, spelling, {P})
    """
    results, _ = run_child(tmp_path, policy, code)
    assert set(results) == {"127.1", "2130706433", "0x7f000001", "0177.0.0.1"}
    for value in results.values():
        assert value["error"] == "NetworkDeniedError"
    assert server.accepted == 0


def test_bind_and_listen_need_an_in_rule(tmp_path: Path) -> None:
    code = """
    def bind(host, port):
        with socket.socket() as s:
            s.bind((host, port))
            return s.getsockname()[0]
    def listen_unbound():
        with socket.socket() as s:
            s.listen()
            return "listening"
    def serve(host, port):
        with socket.socket() as s:
            s.bind((host, port))
            s.listen()
            return "serving"
    attempt('bind', bind, '127.0.0.1', 0)
    attempt('bind_any', bind, '', 0)
    attempt('listen', listen_unbound)
    attempt('serve', serve, '127.0.0.1', 0)
    """
    none, _ = run_child(tmp_path, Policy(), code)
    assert {none[k].get("error") for k in ("bind", "bind_any", "listen")} == {"NetworkDeniedError"}
    assert "allow tcp 127.0.0.1 0 in" in none["bind"]["message"]
    assert "allow tcp 0.0.0.0 0 in" in none["bind_any"]["message"]
    out_only, _ = run_child(tmp_path, Policy(network=rules("allow tcp * * out")), code)
    assert out_only["bind"]["error"] == "NetworkDeniedError"
    loop_in, _ = run_child(tmp_path, Policy(network=rules("allow tcp 127.0.0.1 0 in")), code)
    assert loop_in["bind"] == {"ok": "127.0.0.1"}
    assert loop_in["serve"] == {"ok": "serving"}  # listen() after an allowed bind
    assert loop_in["listen"]["error"] == "NetworkDeniedError"  # the wildcard is not loopback
    wild, _ = run_child(tmp_path, Policy(network=rules("allow tcp 0.0.0.0 0 in")), code)
    assert wild["bind_any"] == {"ok": "0.0.0.0"}
    assert wild["listen"] == {"ok": "listening"}


def test_udp_sendto_and_sendmsg(tmp_path: Path, server: Server) -> None:
    P = server.port
    policy = Policy(network=rules(f"allow udp 127.0.0.1 {P} out"))
    code = f"""
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    attempt('to_ok', u.sendto, b'allowed', ('127.0.0.1', {P}))
    attempt('to_flags_ok', u.sendto, b'allowed2', 0, ('127.0.0.1', {P}))
    attempt('msg_ok', u.sendmsg, [b'allowed3'], [], 0, ('127.0.0.1', {P}))
    attempt('to_other', u.sendto, b'denied', ('127.0.0.2', {P}))
    attempt('msg_other', u.sendmsg, [b'denied'], [], 0, ('127.0.0.2', {P}))
    attempt('tcp_rule_missing', connect, '127.0.0.1', {P})
    """
    results, _ = run_child(tmp_path, policy, code)
    assert results["to_ok"] == {"ok": 7}
    assert results["to_flags_ok"] == {"ok": 8}
    assert results["msg_ok"] == {"ok": 8}
    assert results["to_other"]["error"] == "NetworkDeniedError"
    assert "allow udp 127.0.0.2" in results["to_other"]["message"]
    assert results["msg_other"]["error"] == "NetworkDeniedError"
    assert results["tcp_rule_missing"]["error"] == "NetworkDeniedError"
    assert sorted(server.drain_udp()) == [b"allowed", b"allowed2", b"allowed3"]


def test_c_level_socket_class_is_guarded(tmp_path: Path, server: Server) -> None:
    P = server.port
    code = f"""
    import _socket
    raw = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    attempt('raw', raw.connect, ('127.0.0.1', {P}))
    attempt('type', lambda: (type(raw).__name__, type(raw).__module__))
    attempt('isinstance', lambda: isinstance(socket.socket(), _socket.socket))
    a, b = _socket.socketpair()
    attempt('pair', lambda: type(a).connect is type(raw).connect)
    attempt('socktype', lambda: socket.SocketType is _socket.socket)
    attempt('socktype_raw', socket.SocketType().connect, ('127.0.0.1', {P}))
    """
    results, _ = run_child(tmp_path, Policy(), code)
    assert results["raw"]["error"] == "NetworkDeniedError"
    assert results["type"] == {"ok": ["socket", "_socket"]}
    assert results["isinstance"] == {"ok": True}
    assert results["pair"] == {"ok": True}
    assert results["socktype"] == {"ok": True}
    assert results["socktype_raw"]["error"] == "NetworkDeniedError"
    assert server.accepted == 0


def test_audit_backstop_catches_the_raw_c_paths(tmp_path: Path, server: Server) -> None:
    P = server.port
    code = f"""
    raw_class = socket.socket.__mro__[-2]
    s = socket.socket()
    attempt('mro_connect', raw_class.connect, s, ('127.0.0.2', {P}))
    attempt('mro_connect_ex', raw_class.connect_ex, s, ('127.0.0.2', {P}))
    attempt('mro_bind', raw_class.bind, socket.socket(), ('127.0.0.1', 0))
    attempt('mro_name', raw_class.connect, socket.socket(), ('localhost', {P}))
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    attempt('mro_sendto', raw_class.sendto, u, b'x', ('127.0.0.2', {P}))
    attempt('mro_sendmsg', raw_class.sendmsg, u, [b'x'], [], 0, ('127.0.0.2', {P}))
    attempt('mro_abstract', raw_class.bind, socket.socket(socket.AF_UNIX), '\\0pysb-test')
    attempt('mro_allowed', raw_class.connect, socket.socket(), ('127.0.0.1', {P}))
    """
    policy = Policy(network=rules(f"allow tcp 127.0.0.1 {P} out"))
    results, _ = run_child(tmp_path, policy, code)
    for key in (
        "mro_connect",
        "mro_connect_ex",
        "mro_bind",
        "mro_name",
        "mro_sendto",
        "mro_sendmsg",
        "mro_abstract",
    ):
        assert results[key]["error"] == "NetworkDeniedError", (key, results[key])
    assert "abstract" in results["mro_abstract"]["message"]
    assert "raw socket method" in results["mro_name"]["message"]
    assert results["mro_allowed"] == {"ok": None}
    assert server.drain_udp() == []
    assert server.accepted == 1


def test_audit_backstop_catches_kept_resolvers(tmp_path: Path, private_netns: list[str]) -> None:
    setup = """
    import _socket
    kept_getaddrinfo = _socket.getaddrinfo      # originals kept before the guard
    kept_gethostbyname = _socket.gethostbyname
    kept_gethostbyaddr = _socket.gethostbyaddr
    """
    code = """
    attempt('kept_gai', kept_getaddrinfo, 'uncovered.pysb.test', 443)
    attempt('kept_byname', kept_gethostbyname, 'uncovered.pysb.test')
    attempt('kept_byaddr', kept_gethostbyaddr, '127.0.0.2')
    attempt('kept_numeric', lambda: kept_getaddrinfo('127.0.0.1', 80)[0][4])
    """
    policy = Policy(network=rules("allow tcp 127.0.0.1 8000 out"))
    results, _ = run_child(tmp_path, policy, code, setup=setup, wrap=private_netns)
    for key in ("kept_gai", "kept_byname"):
        assert results[key]["error"] == "NameResolutionDeniedError", (key, results[key])
    assert results["kept_byaddr"]["error"] == "NetworkDeniedError", results["kept_byaddr"]
    assert results["kept_numeric"] == {"ok": ["127.0.0.1", 80]}


def test_raw_and_other_families_are_refused(tmp_path: Path) -> None:
    code = """
    attempt('raw', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
            .sendto(b'x', ('127.0.0.1', 0)))
    attempt('netlink', lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW).bind((0, 0)))
    """
    results, _ = run_child(tmp_path, Policy(network=rules("allow any * * any")), code)
    for key in ("raw", "netlink"):
        # Refused by the guard, or already by the kernel for lack of privilege: never sent.
        assert results[key]["error"] in ("NetworkDeniedError", "PermissionError"), results[key]
    if results["netlink"]["error"] == "NetworkDeniedError":
        assert "address family" in results["netlink"]["message"]


def test_asyncio_and_urllib_are_covered(tmp_path: Path, server: Server) -> None:
    P = server.port
    code = f"""
    import asyncio, urllib.request, urllib.error
    from pysb_core.errors import sandbox_denials
    async def main():
        await asyncio.open_connection('127.0.0.1', {P})
    attempt('asyncio', asyncio.run, main())
    try:
        urllib.request.urlopen('http://127.0.0.1:{P}/', timeout=5)
    except Exception as e:
        results['urllib'] = sandbox_denials(e)
    """
    results, _ = run_child(tmp_path, Policy(), code)
    assert results["asyncio"]["error"] == "NetworkDeniedError"
    assert results["urllib"] and results["urllib"][0].startswith("NetworkDeniedError:")
    assert server.accepted == 0


# ---------------------------------------------------------------------------------------
# Names: pinning, refusal before any query
# ---------------------------------------------------------------------------------------


@pytest.fixture
def hosts_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "hosts"
    path.write_text("127.0.0.1 svc.pysb.test\n127.0.0.1 both.pysb.test\n::1 both.pysb.test\n")
    monkeypatch.setenv("PYSB_HOSTS_FILE", str(path))
    resolv = tmp_path / "resolv.conf"  # a name missing from the file never reaches real DNS
    resolv.write_text("nameserver 127.0.0.1\n")
    monkeypatch.setenv("PYSB_RESOLV_CONF", str(resolv))
    return path


def pinned_policy(*lines: str) -> Policy:
    parsed = rules(*lines)
    names = sorted({r.network for r in parsed if r.is_host})
    pins, _warnings, errors = pin_hosts(parsed, builtin_dns.resolve(names))
    assert not errors
    return Policy(network=parsed, pins=pins)


def test_pinned_name_answers_exactly_the_pin(tmp_path: Path, server: Server, hosts_file) -> None:
    P = server.port
    policy = pinned_policy(f"allow tcp svc.pysb.test {P} out")
    assert policy.pins == {"svc.pysb.test": ("127.0.0.1",)}
    code = f"""
    attempt('gai', lambda: [(int(f), int(t), p, c, a) for f, t, p, c, a in
                            socket.getaddrinfo('svc.pysb.test', {P}, type=socket.SOCK_STREAM)])
    attempt('gai_any', lambda: sorted({{a for *_, a in socket.getaddrinfo('SVC.pysb.test.', {P})}}))
    attempt('gai6', socket.getaddrinfo, 'svc.pysb.test', {P}, socket.AF_INET6)
    attempt('byname', socket.gethostbyname, 'svc.pysb.test')
    attempt('byname_ex', socket.gethostbyname_ex, 'svc.pysb.test')
    attempt('create', lambda: socket.create_connection(('svc.pysb.test', {P}), timeout=5).close())
    attempt('connect_name', connect, 'svc.pysb.test', {P})
    attempt('other_port', socket.getaddrinfo, 'svc.pysb.test', {P + 1})
    attempt('reverse', socket.gethostbyaddr, '127.0.0.1')
    """
    results, _ = run_child(tmp_path, policy, code)
    assert results["gai"] == {"ok": [[socket.AF_INET, socket.SOCK_STREAM, 6, "", ["127.0.0.1", P]]]}
    assert results["gai_any"] == {"ok": [["127.0.0.1", P]]}
    assert results["gai6"]["error"] == "gaierror"
    assert results["byname"] == {"ok": "127.0.0.1"}
    assert results["byname_ex"] == {"ok": ["svc.pysb.test", [], ["127.0.0.1"]]}
    assert results["create"] == {"ok": None}
    assert results["connect_name"] == {"ok": "connected"}
    assert results["other_port"]["error"] == "NetworkDeniedError"
    assert f"allow tcp svc.pysb.test {P + 1} out" in results["other_port"]["message"]
    assert results["reverse"] == {"ok": ["svc.pysb.test", [], ["127.0.0.1"]]}
    assert server.accepted == 2


def test_name_allowed_only_if_every_address_is(tmp_path: Path, server: Server, hosts_file) -> None:
    P = server.port
    policy = pinned_policy(f"allow tcp both.pysb.test {P} out", "deny tcp ::1 * out")
    assert policy.pins == {"both.pysb.test": ("127.0.0.1", "::1")}
    code = f"""
    attempt('create', lambda: socket.create_connection(('both.pysb.test', {P}), timeout=5))
    attempt('connect', connect, 'both.pysb.test', {P})
    attempt('direct_ip', connect, '127.0.0.1', {P})
    """
    results, _ = run_child(tmp_path, policy, code)
    assert results["create"]["error"] == "NetworkDeniedError"
    assert "deny tcp ::1 * out" in results["create"]["message"]
    assert results["connect"]["error"] == "NetworkDeniedError"
    assert results["direct_ip"] == {"ok": "connected"}  # the allowed address, judged alone
    assert server.accepted == 1


def test_uncovered_name_is_refused_without_a_wider_rule(
    tmp_path: Path, private_netns: list[str]
) -> None:
    # In a private namespace, so that a regression could not send a query anywhere real.
    policy = Policy(network=rules("allow tcp 127.0.0.1 8000 out", "allow udp 127.0.0.1/32 53 out"))
    code = """
    attempt('gai', socket.getaddrinfo, 'uncovered.pysb.test', 443)
    attempt('byname', socket.gethostbyname, 'uncovered.pysb.test')
    attempt('byname_ex', socket.gethostbyname_ex, 'uncovered.pysb.test')
    attempt('connect', connect, 'uncovered.pysb.test', 443)
    import _socket
    attempt('raw_gai', _socket.getaddrinfo, 'uncovered.pysb.test', 443)
    attempt('udp_gai', socket.getaddrinfo, 'uncovered.pysb.test', 53, type=socket.SOCK_DGRAM)
    attempt('bind_name', lambda: socket.socket().bind(('uncovered.pysb.test', 8080)))
    attempt('numeric', lambda: socket.getaddrinfo('127.0.0.1', 80)[0][4])
    attempt('reverse', socket.gethostbyaddr, '127.0.0.2')
    attempt('nameinfo', socket.getnameinfo, ('127.0.0.2', 80), 0)
    """
    results, events = run_child(tmp_path, policy, code, wrap=private_netns)
    for key in ("gai", "byname", "byname_ex", "connect", "raw_gai"):
        assert results[key]["error"] == "NameResolutionDeniedError", key
    assert results["reverse"]["error"] == "NetworkDeniedError"
    assert "before any query" in results["gai"]["message"]
    assert "allow tcp uncovered.pysb.test 443 out" in results["gai"]["message"]
    assert results["numeric"] == {"ok": ["127.0.0.1", 80]}
    assert results["nameinfo"]["ok"][0] == "127.0.0.2"  # numeric answer, no reverse query
    assert results["udp_gai"]["suggested"] == "allow udp uncovered.pysb.test 53 out"
    assert results["bind_name"]["suggested"] == "allow tcp uncovered.pysb.test 8080 in"
    assert any(e.target == "uncovered.pysb.test" for e in events)


NAMESERVER_SETUP = """
import _socket, threading
raw_sendto = _socket.socket.sendto  # the test's own server and marker (rules allow them)
dns_server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
dns_server.bind(('127.0.0.1', 53))
queries = []
def serve():
    while True:
        data, peer = dns_server.recvfrom(4096)
        if data == b'MARK':
            queries.append('MARK')
            continue
        queries.append(data)
        reply = bytearray(data)
        reply[2] |= 0x80
        reply[3] = (reply[3] & 0xF0) | 3  # NXDOMAIN
        raw_sendto(dns_server, bytes(reply), peer)
server_thread = threading.Thread(target=serve, daemon=True)
server_thread.start()
marker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
"""

NAMESERVER_PROBE = """
attempt('gai', socket.getaddrinfo, 'uncovered.pysb.test', 443)
raw_sendto(marker, b'MARK', ('127.0.0.1', 53))
import time
for _ in range(3000):  # a safety bound only: the marker arrives at once on loopback
    if 'MARK' in queries:
        break
    time.sleep(0.01)
results['queries'] = queries.index('MARK')
"""


@pytest.fixture
def private_netns(tmp_path: Path) -> list[str]:
    """A command prefix running the child in a new network and mount namespace whose only
    nameserver is 127.0.0.1 (inside that namespace): no route leaves it."""
    if not shutil.which("unshare") or not shutil.which("ip"):
        pytest.skip("needs unshare and ip to create a private network namespace")
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\noptions attempts:1 timeout:2\n")
    # Not root: a user namespace makes us root inside (unprivileged user namespaces allowed).
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    prefix = [
        "unshare", *user, "--net", "--mount", "--", "sh", "-c",
        f'ip link set lo up && mount --bind "{resolv}" /etc/resolv.conf && exec "$@"', "sh",
    ]  # fmt: skip
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot create a private network namespace: {probe.stderr.strip()}")
    return prefix


# The test's own nameserver and marker talk over UDP on 127.0.0.1: allowed, and too narrow to
# let unpinned names resolve.
OWN_TRAFFIC = ("allow udp 127.0.0.1 * out",)


def test_refused_name_sends_no_query(tmp_path: Path, private_netns: list[str]) -> None:
    policy = Policy(network=rules("allow tcp 127.0.0.1 443 out", *OWN_TRAFFIC))
    assert not NetworkMatcher(policy.network).resolves_any_name
    results, _ = run_child(
        tmp_path, policy, NAMESERVER_PROBE, setup=NAMESERVER_SETUP, wrap=private_netns
    )
    assert results["gai"]["error"] == "NameResolutionDeniedError"
    assert results["queries"] == 0


def test_wider_rule_lets_unpinned_names_query(tmp_path: Path, private_netns: list[str]) -> None:
    # The control for the test above: the same probe does see queries when a rule allows a
    # wider network, so a zero there means the guard stopped them.
    policy = Policy(network=rules("allow tcp * 443 out", *OWN_TRAFFIC))
    results, _ = run_child(
        tmp_path, policy, NAMESERVER_PROBE, setup=NAMESERVER_SETUP, wrap=private_netns
    )
    assert results["gai"]["error"] == "gaierror"
    assert results["queries"] >= 1


# ---------------------------------------------------------------------------------------
# Unix sockets
# ---------------------------------------------------------------------------------------


def test_unix_sockets_need_a_writable_exposure(tmp_path: Path) -> None:
    rw = tmp_path / "rw"
    ro = tmp_path / "ro"
    rw.mkdir()
    ro.mkdir()
    policy = Policy(
        exposures=(
            Exposure(str(rw), str(rw), writable=True),
            Exposure(str(ro), str(ro), writable=False),
        )
    )
    code = f"""
    def bind(path):
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)
        return "bound"
    attempt('rw', bind, {str(rw / "ok.sock")!r})
    attempt('rw_bytes', bind, {bytes(rw / "ok2.sock")!r})
    attempt('ro', bind, {str(ro / "no.sock")!r})
    attempt('escape', bind, {str(rw / ".." / "ro" / "no2.sock")!r})
    attempt('abstract', bind, '\\0pysb-test')
    attempt('autobind', bind, '')
    attempt('connect_ro', lambda: socket.socket(socket.AF_UNIX).connect({str(ro / "x")!r}))
    """
    results, _ = run_child(tmp_path, policy, code)
    assert results["rw"] == {"ok": "bound"}
    assert results["rw_bytes"] == {"ok": "bound"}
    for key in ("ro", "escape", "abstract", "autobind", "connect_ro"):
        assert results[key]["error"] == "NetworkDeniedError", key
    assert f"expose-rw: {ro}" in results["ro"]["message"]
    assert "abstract" in results["abstract"]["message"]
    assert not (ro / "no.sock").exists()


# ---------------------------------------------------------------------------------------
# Learning, pysb_check, the resolver-only mode
# ---------------------------------------------------------------------------------------


def test_learning_records_by_name_and_renders_rules(tmp_path: Path, server: Server) -> None:
    P = server.port
    sockets = tmp_path / "sockets"
    sockets.mkdir()
    code = f"""
    attempt('name', lambda: socket.create_connection(('localhost', {P}), timeout=5).close())
    attempt('ip', connect, '127.0.0.1', {P})
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    attempt('udp', u.sendto, b'x', ('127.0.0.1', {P}))
    attempt('udp_again', u.sendto, b'y', ('127.0.0.1', {P}))
    def serve():
        with socket.socket() as s:
            s.bind(('127.0.0.1', 0))
            s.listen()
    attempt('bind', serve)
    attempt('unix', lambda: socket.socket(socket.AF_UNIX).bind({str(sockets / "app.sock")!r}))
    """
    results, events = run_child(tmp_path, Policy(learn=True), code)
    assert all("ok" in v for v in results.values()), results
    assert events and all(e.action == "learn" for e in events)
    lines = network_hooks.learned_rules(events)
    assert f"allow tcp localhost {P} out" in lines
    assert f"allow udp localhost {P} out" in lines  # 127.0.0.1 was met as "localhost"
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_bytes().split()
    # a bind to port 0: the ephemeral range, never port 0 (docs/learning.md)
    assert f"allow tcp localhost {int(low)}-{int(high)} in" in lines
    assert not any(" 0 in" in line for line in lines)
    assert len([e for e in events if e.data.get("proto") == "udp"]) == 1  # deduplicated

    profile = LearnedProfile(cwd=str(tmp_path), environ={})
    network_hooks.pysb_learned(records=events, profile=profile)
    added = [(r.section, r.key, r.value) for r in profile]
    assert ("network", None, f"allow tcp localhost {P} out") in added
    assert ("files", "expose-rw", "./sockets") in added
    # Every learned line is a valid rule, and it allows what was recorded.
    learned = NetworkMatcher([parse_rule(x) for x in lines], {"localhost": ("127.0.0.1",)})
    assert learned.check_host("tcp", "localhost", P, "out")[0]
    assert learned.check("udp", "127.0.0.1", P, "out")[0]


def test_cached_decisions_stay_exact(tmp_path: Path, server: Server) -> None:
    P = server.port
    code = f"""
    for i in range(3):
        attempt(f'ok{{i}}', connect, '127.0.0.1', {P})
    attempt('other_port', connect, '127.0.0.1', {P + 1})
    attempt('bytes_host', connect, b'127.0.0.2', {P})
    attempt('after', connect, '127.0.0.1', {P})
    """
    results, _ = run_child(tmp_path, Policy(network=rules(f"allow tcp 127.0.0.1 {P} out")), code)
    assert [results[f"ok{i}"] for i in range(3)] == [{"ok": "connected"}] * 3
    assert results["other_port"]["error"] == "NetworkDeniedError"
    assert results["bytes_host"]["error"] == "NetworkDeniedError"
    assert results["after"] == {"ok": "connected"}
    assert server.accepted == 4


def test_cached_decisions_cannot_be_poisoned(tmp_path: Path, server: Server) -> None:
    """An address whose parts claim to equal an allowed one (a ``str`` or ``int`` subclass
    with a lying ``__eq__`` and ``__hash__``) must not pass the raw C method on the strength
    of the cached decision: the C call uses the real value, not the claim."""
    P = server.port
    code = f"""
    class Host(str):
        def __hash__(self):
            return hash('127.0.0.1')
        def __eq__(self, other):
            return True
    class Port(int):
        def __hash__(self):
            return hash({P})
        def __eq__(self, other):
            return True
    raw_class = socket.socket.__mro__[-2]
    attempt('ok', connect, '127.0.0.1', {P})
    attempt('host', raw_class.connect, socket.socket(), (Host('127.0.0.2'), {P}))
    attempt('port', raw_class.connect, socket.socket(), ('127.0.0.1', Port({P + 1})))
    attempt('face_host', connect, Host('127.0.0.2'), {P})
    attempt('face_port', connect, '127.0.0.1', Port({P + 1}))
    attempt('after', connect, '127.0.0.1', {P})
    """
    results, _ = run_child(tmp_path, Policy(network=rules(f"allow tcp 127.0.0.1 {P} out")), code)
    assert results["ok"] == {"ok": "connected"}
    assert results["host"]["error"] == "NetworkDeniedError", results["host"]
    assert results["port"]["error"] == "NetworkDeniedError", results["port"]
    # The faces hand C the checked address: a lying part can only reach the allowed one.
    for key in ("face_host", "face_port"):
        assert results[key] == {"ok": "connected"} or results[key]["error"] == (
            "NetworkDeniedError"
        ), results[key]
    assert results["after"] == {"ok": "connected"}


class FakeProvider(Provider):
    name = "fake"

    def __init__(self, caps: set[Capability]) -> None:
        super().__init__()
        self._caps = frozenset(caps)

    def probe(self) -> ProviderStatus:
        return ProviderStatus.ok()

    def enforced(self) -> frozenset[Capability]:
        return self._caps

    def prepare(self, plan):  # pragma: no cover - never launched
        raise NotImplementedError


CHECKED_RULES = (
    "allow tcp 127.0.0.1 80 out",
    "allow tcp * 443 out",
    "allow udp 127.0.0.1 53 out",
    "deny any * 25 any",
)


@pytest.mark.parametrize(
    ("caps", "expected"),
    [
        (set(), [["python"], ["python"], ["python"], ["python"]]),
        ({Capability.TCP_HOST}, [["python", "os"], ["python", "os"], ["python"], ["python"]]),
        ({Capability.TCP_PORT}, [["python"], ["python", "os"], ["python"], ["python"]]),
        ({Capability.TCP_HOST, Capability.UDP_PORT},
         [["python", "os"], ["python", "os"], ["python"], ["python", "os"]]),
        ({Capability.TCP_HOST, Capability.UDP_HOST},
         [["python", "os"], ["python", "os"], ["python", "os"], ["python", "os"]]),
    ],
)  # fmt: skip
def test_check_merges_with_the_os_layer_report(
    caps: set[Capability], expected: list[list[str]]
) -> None:
    from pysb_core.builtin import oslayer

    policy = Policy(network=rules(*CHECKED_RULES), pins={"svc.test": ("127.0.0.7",)})
    report = CheckReport(provider="fake", python_families=frozenset({"network"}))
    network_hooks.pysb_check(policy=policy, provider=FakeProvider(caps), report=report)
    oslayer.pysb_check(policy=policy, provider=FakeProvider(caps), report=report)
    # (the OS layer also reports the deny-by-default of imports and api: not network's)
    network = [r for r in report.rules if not r.rule.startswith(("imports: ", "api: "))]
    assert [r.rule for r in network] == [f"network: {x}" for x in CHECKED_RULES]
    assert [list(r.layers) for r in network] == expected
    assert [r.source for r in network] == [f"test.yaml:{i}" for i in range(1, 5)]
    assert all(r.family == "network" for r in network)
    assert "network: svc.test pinned to 127.0.0.7" in report.notes


def test_check_without_python_guards_needs_the_os_layer() -> None:
    policy = Policy(network=rules(*CHECKED_RULES))
    report = CheckReport(provider="fake", python_guards=False)
    network_hooks.pysb_check(policy=policy, provider=None, report=report)
    assert all(r.layers == () for r in report.rules)
    assert len(report.unenforced()) == len(CHECKED_RULES)


def test_resolver_only_mode_pins_but_does_not_judge(
    tmp_path: Path, server: Server, hosts_file
) -> None:
    P = server.port
    policy = pinned_policy(f"allow tcp svc.pysb.test {P} out")
    code = f"""
    network.install(policy, recorder, enforce=False)
    attempt('gai', lambda: [a for *_, a in socket.getaddrinfo('svc.pysb.test', {P}, 0, 1)])
    attempt('connect', connect, '127.0.0.1', {P})
    """

    off = policy.replace(python_guards=False)
    # INSTALL in the prelude honours python_guards=False the same way.
    results, _ = run_child(tmp_path, off, code)
    assert results["gai"] == {"ok": [["127.0.0.1", P]]}
    assert results["connect"] == {"ok": "connected"}


def test_without_python_guards_pins_still_answer(
    tmp_path: Path, server: Server, hosts_file, private_netns: list[str]
) -> None:
    # In a private namespace: were the pins not installed, the lookup would go to a
    # nameserver that does not exist there, never to a real one.

    from pysb_core.plan import LaunchPlan

    P = server.port
    policy = pinned_policy(f"allow tcp svc.pysb.test {P} out").replace(python_guards=False)
    plan = LaunchPlan(policy=policy, python=sys.executable, argv=[], env={}, cwd=str(tmp_path))
    network_hooks.pysb_contribute(policy=policy, plan=plan)
    assert len(plan.child_setups) == 1
    setup = plan.child_setups[0]
    assert json.loads(json.dumps(setup.args)) == {"pins": {"svc.pysb.test": ["127.0.0.1"]}}
    # What the bootstrap does with it: import the module, call the function with the args.
    code = f"""
    import importlib
    fn = getattr(importlib.import_module({setup.module!r}), {setup.function!r})
    fn(**{setup.args!r})
    attempt('gai', lambda: [a for *_, a in socket.getaddrinfo('svc.pysb.test', {P}, 0, 1)])
    attempt('connect', connect, '127.0.0.1', {P})
    attempt('numeric', lambda: socket.getaddrinfo('127.0.0.1', 80, 0, 1)[0][4])
    """
    results, events = run_child(tmp_path, policy, code, install=False, wrap=private_netns)
    assert results["gai"] == {"ok": [["127.0.0.1", P]]}
    # Nothing is judged (the OS layer's job): the kernel answers, nobody listens in there.
    assert results["connect"]["error"] == "ConnectionRefusedError"
    assert results["numeric"] == {"ok": ["127.0.0.1", 80]}
    assert events == []
    with_guards = policy.replace(python_guards=True)
    plan2 = LaunchPlan(policy=with_guards, python=sys.executable, argv=[], env={}, cwd="/")
    network_hooks.pysb_contribute(policy=with_guards, plan=plan2)
    assert plan2.child_setups == []


def other_interpreters() -> list[str]:
    """CPython 3.12 and 3.13 when installed (pyenv or PATH): the guard leans on C-level details
    (member descriptors, audit events) that each version must keep."""
    found = []
    for version in ("3.12", "3.13"):
        pattern = os.path.expanduser(f"~/.pyenv/versions/{version}*/bin/python3")
        candidates = [*sorted(glob.glob(pattern)), shutil.which(f"python{version}")]
        for c in candidates:
            if c and subprocess.run([c, "-c", "pass"], capture_output=True).returncode == 0:
                found.append(c)
                break
    return found


@pytest.mark.parametrize("python", other_interpreters() or [None])
def test_other_python_versions(tmp_path: Path, server: Server, python: str | None) -> None:
    if python is None:
        pytest.skip("no CPython 3.12 or 3.13 installed here")
    P = server.port
    code = f"""
    import _socket, sys
    results['version'] = list(sys.version_info[:2])
    attempt('allowed', connect, '127.0.0.1', {P})
    attempt('denied', connect, '127.0.0.2', {P})
    attempt('mro', socket.socket.__mro__[-2].connect, socket.socket(), ('127.0.0.2', {P}))
    attempt('pinned', lambda: socket.getaddrinfo('pinned.test', 443, type=socket.SOCK_STREAM)[0][4])
    attempt('isinstance', lambda: isinstance(socket.socket(), _socket.socket))
    """
    policy = Policy(
        network=rules(f"allow tcp 127.0.0.1 {P} out", "allow tcp pinned.test 443 out"),
        pins={"pinned.test": ("127.0.0.9",)},
    )
    results, _ = run_child(tmp_path, policy, code, python=python)
    assert results["version"][:2] in ([3, 12], [3, 13])
    assert results["allowed"] == {"ok": "connected"}
    for key in ("denied", "mro"):
        assert results[key]["error"] == "NetworkDeniedError", key
    assert results["pinned"] == {"ok": ["127.0.0.9", 443]}
    assert results["isinstance"] == {"ok": True}
