"""The built-in resolver behind DNS pinning: hosts file first, then dnspython.

DNS is exercised against a real UDP nameserver this test runs on 127.0.0.1 (a random port),
so no query ever leaves the machine.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import dns.message
import dns.rcode
import dns.resolver
import dns.rrset
import pluggy
import pytest

from pysb_core import hookspecs
from pysb_core._startup.markers import hookimpl
from pysb_core.builtin import dns as builtin_dns
from pysb_core.policy.netrules import parse_rule, pin_hosts

ROOT = Path(__file__).resolve().parents[1]


class FakeNameserver:
    """A tiny authoritative server on 127.0.0.1: answers from ``records``, else NXDOMAIN."""

    def __init__(self, records: dict[tuple[str, str], list[str]], port: int = 0) -> None:
        self.records = records
        self.queries: list[tuple[str, str]] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", port))
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                data, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            if data == b"STOP":
                return
            query = dns.message.from_wire(data)
            question = query.question[0]
            name = question.name.to_text(omit_final_dot=True)
            rdtype = dns.rdatatype.to_text(question.rdtype)
            self.queries.append((name, rdtype))
            reply = dns.message.make_response(query)
            found = self.records.get((name, rdtype))
            if found:
                reply.answer.append(
                    dns.rrset.from_text_list(question.name, 60, "IN", rdtype, found)
                )
            elif not any(n == name for n, _ in self.records):
                reply.set_rcode(dns.rcode.NXDOMAIN)
            self.sock.sendto(reply.to_wire(), peer)

    def resolver(self) -> dns.resolver.Resolver:
        r = dns.resolver.Resolver(configure=False)
        r.nameservers = ["127.0.0.1"]
        r.port = self.port
        return r

    def close(self) -> None:
        # Wake the server thread so that the port is really released when close() returns.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as waker:
            waker.sendto(b"STOP", ("127.0.0.1", self.port))
        self._thread.join(10)
        self.sock.close()


@pytest.fixture(autouse=True)
def loopback_resolv_conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test here may reach the machine's real nameserver: the default resolver reads this
    file, whose nameserver is loopback (nothing listens on port 53 unless a test does)."""
    path = tmp_path / "resolv.conf"
    path.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    monkeypatch.setenv("PYSB_RESOLV_CONF", str(path))
    return path


@pytest.fixture
def nameserver() -> Iterator[FakeNameserver]:
    server = FakeNameserver(
        {("svc.test", "A"): ["127.0.0.9", "127.0.0.10"], ("svc.test", "AAAA"): ["::1"],
         ("v4only.test", "A"): ["127.0.0.11"]}
    )  # fmt: skip
    yield server
    server.close()


@pytest.fixture
def hosts_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "hosts"
    path.write_text(
        "# test hosts file\n"
        "127.0.0.21   pinned.test  alias.test   # trailing comment\n"
        "::1          pinned.test\n"
        "127.0.0.22   Mixed.Case.TEST\n"
        "not-an-ip    broken.test\n"
        "127.0.0.21   pinned.test\n"
    )
    monkeypatch.setenv("PYSB_HOSTS_FILE", str(path))
    return path


def test_read_hosts_file(hosts_file: Path) -> None:
    table = builtin_dns.read_hosts_file()
    assert table["pinned.test"] == ["127.0.0.21", "::1"]
    assert table["alias.test"] == ["127.0.0.21"]
    assert table["mixed.case.test"] == ["127.0.0.22"]
    assert "broken.test" not in table


def test_missing_hosts_file_reads_empty(tmp_path: Path) -> None:
    assert builtin_dns.read_hosts_file(str(tmp_path / "nope")) == {}


def test_hosts_file_first_no_query(hosts_file: Path, nameserver: FakeNameserver) -> None:
    result = builtin_dns.resolve(
        ["pinned.test", "Mixed.Case.Test."], resolver=nameserver.resolver()
    )
    assert result == {"pinned.test": ["127.0.0.21", "::1"], "mixed.case.test": ["127.0.0.22"]}
    assert nameserver.queries == []


def test_dns_for_names_the_hosts_file_lacks(hosts_file: Path, nameserver: FakeNameserver) -> None:
    result = builtin_dns.resolve(
        ["svc.test", "v4only.test", "nxdomain.test", "pinned.test"], resolver=nameserver.resolver()
    )
    assert result["svc.test"] == ["127.0.0.9", "127.0.0.10", "::1"]
    assert result["v4only.test"] == ["127.0.0.11"]
    assert result["nxdomain.test"] == []
    assert result["pinned.test"] == ["127.0.0.21", "::1"]
    asked = {name for name, _ in nameserver.queries}
    assert asked == {"svc.test", "v4only.test", "nxdomain.test"}


def test_localhost_fallback(tmp_path: Path, nameserver: FakeNameserver) -> None:
    empty = tmp_path / "hosts"
    empty.write_text("")
    result = builtin_dns.resolve(
        ["localhost"], hosts_file=str(empty), resolver=nameserver.resolver()
    )
    assert result == {"localhost": ["127.0.0.1", "::1"]}
    assert nameserver.queries == []


def test_unresolvable_allow_dropped_deny_fatal(
    hosts_file: Path, nameserver: FakeNameserver
) -> None:
    rules = [
        parse_rule("allow tcp svc.test 443 out", "p.yaml:1"),
        parse_rule("allow tcp nxdomain.test 443 out", "p.yaml:2"),
        parse_rule("deny tcp nxdomain2.test * out", "p.yaml:3"),
        parse_rule("deny tcp pinned.test * out", "p.yaml:4"),
    ]
    resolved = builtin_dns.resolve(
        sorted({r.network for r in rules}), resolver=nameserver.resolver()
    )
    pins, warnings, errors = pin_hosts(rules, resolved)
    assert pins == {"svc.test": ("127.0.0.9", "127.0.0.10", "::1"),
                    "pinned.test": ("127.0.0.21", "::1")}  # fmt: skip
    assert [w.split(":")[1] for w in warnings] == ["2"]
    assert [e.split(":")[1] for e in errors] == ["3"]


def test_hook_is_trylast_firstresult(hosts_file: Path) -> None:
    pm = pluggy.PluginManager("pysb")
    pm.add_hookspecs(hookspecs)
    pm.register(builtin_dns)
    assert pm.hook.pysb_dns_resolve(hostnames=["pinned.test"]) == {
        "pinned.test": ["127.0.0.21", "::1"]
    }

    class Override:
        @hookimpl
        def pysb_dns_resolve(self, hostnames):
            return {h: ["127.0.0.99"] for h in hostnames}

    pm.register(Override())
    assert pm.hook.pysb_dns_resolve(hostnames=["pinned.test"]) == {"pinned.test": ["127.0.0.99"]}


def test_dnspython_imported_only_when_needed(hosts_file: Path) -> None:
    code = (
        "import sys\n"
        "from pysb_core.builtin import dns as d\n"
        "d.resolve(['pinned.test'])\n"
        "print('dns' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_default_resolver_reads_pysb_resolv_conf(hosts_file: Path) -> None:
    # The system-configured path of the resolver, pointed at a nameserver on 127.0.0.1:53.
    try:
        server = FakeNameserver({("conf.test", "A"): ["127.0.0.33"]}, port=53)
    except OSError as exc:
        pytest.skip(f"cannot listen on 127.0.0.1:53 here: {exc}")
    try:
        result = builtin_dns.resolve(["conf.test"])
    finally:
        server.close()
    assert result == {"conf.test": ["127.0.0.33"]}
    assert ("conf.test", "A") in server.queries


def test_unreachable_nameserver_means_unresolved(
    hosts_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(builtin_dns, "DNS_LIFETIME", 1.0)
    try:  # make sure nothing answers on 127.0.0.1:53 during this test
        guard = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        guard.bind(("127.0.0.1", 53))
        guard.close()
    except OSError:
        pytest.skip("something listens on 127.0.0.1:53 here")
    assert builtin_dns.resolve(["nobody.test", "pinned.test"]) == {
        "nobody.test": [],
        "pinned.test": ["127.0.0.21", "::1"],
    }
