"""Abstract Unix sockets: judged by the rules over every address, port and protocol alone.

An abstract name (``"\\0name"``, or the one the kernel picks for ``bind("")``) has no path
for an exposure and no host or port for a rule, and under the ``subprocess`` provider
nothing scopes it: the host's D-Bus, X11 or ssh-agent listen on such names. So only a rule
that grants every address (``allow any * * out`` / ``in``) allows them, and a ``deny`` over
everything refuses them (docs/network.md). Each case runs the real guard in a fresh
interpreter; the host side of a connection is a listener this test binds itself.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from pysb_guards.network import hooks as network_hooks
from test_network_guard import rules, run_child

from pysb_core.policy import Policy
from pysb_core.policy.netmatch import abstract_decision

PROBE = """
name = sys.argv[-1]
def bind(address, kind=socket.SOCK_STREAM):
    s = socket.socket(socket.AF_UNIX, kind)
    s.bind(address)
    return "bound"
def connect(address):
    s = socket.socket(socket.AF_UNIX)
    s.connect(address)
    s.sendall(b"x")
    return "connected"
def sendto(address):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.sendto(b"x", address)
    return "sent"
attempt('bind', bind, '\\0' + name + '-own')
attempt('bind_bytes', bind, b'\\0' + name.encode() + b'-own2')
attempt('autobind', bind, '')
attempt('connect', connect, '\\0' + name)
attempt('connect_bytes', connect, bytearray(b'\\0' + name.encode()))
attempt('sendto', sendto, '\\0' + name + '-dgram')
"""

IN_CALLS = ("bind", "bind_bytes", "autobind")
OUT_CALLS = ("connect", "connect_bytes", "sendto")


class Listeners:
    """A stream and a datagram socket on abstract names of this test's own."""

    def __init__(self) -> None:
        self.name = f"pysb-abstract-{os.getpid()}-{os.urandom(4).hex()}"
        self.stream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.stream.bind("\0" + self.name)
        self.stream.listen(8)
        self.stream.setblocking(False)
        self.dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.dgram.bind("\0" + self.name + "-dgram")
        self.dgram.setblocking(False)

    def reached(self) -> bool:
        """Whether a connection or a datagram from the child arrived."""
        got = False
        for sock, take in (
            (self.stream, lambda s: s.accept()[0].close()),
            (self.dgram, lambda s: s.recv(8)),
        ):
            try:
                take(sock)
                got = True
            except BlockingIOError:
                pass
        return got

    def close(self) -> None:
        self.stream.close()
        self.dgram.close()


@pytest.fixture
def host_listeners() -> Iterator[Listeners]:
    listeners = Listeners()
    try:
        yield listeners
    finally:
        listeners.close()


def _run(tmp_path: Path, lines: tuple[str, ...], name: str) -> dict:
    code = PROBE.replace("sys.argv[-1]", repr(name), 1)
    results, _ = run_child(tmp_path, Policy(network=rules(*lines)), code)
    return results


# (rules, inbound allowed, outbound allowed)
CASES = [
    ((), False, False),
    (("allow tcp 127.0.0.1 * any", "allow udp * * any"), False, False),
    (("allow tcp * * any",), False, False),  # tcp only: not every protocol
    (("allow any * 1-65535 any",), False, False),  # not every port
    (("allow any 0.0.0.0/0 * any",), False, False),  # IPv4 only: not every address
    (("allow any * * out",), False, True),
    (("allow any * * in",), True, False),
    (("allow tcp,udp * * any",), True, True),  # the same set as `any`
    (("allow any * * any",), True, True),
    (("allow any * * any", "deny tcp * 25 out"), True, True),  # names one port only
    (("allow any * * any", "deny any 10.0.0.0/8 * out"), True, True),  # names addresses
    (("allow any * * any", "deny any * * out"), True, False),
    (("deny any * * in", "allow any * * any"), False, True),  # line order never matters
]


@pytest.mark.parametrize(("lines", "inbound", "outbound"), CASES)
def test_abstract_sockets_follow_the_rules_over_everything(
    tmp_path: Path,
    host_listeners: Listeners,
    lines: tuple[str, ...],
    inbound: bool,
    outbound: bool,
) -> None:
    results = _run(tmp_path, lines, host_listeners.name)
    for calls, allowed, direction in ((IN_CALLS, inbound, "in"), (OUT_CALLS, outbound, "out")):
        for call in calls:
            got = results[call]
            if allowed:
                assert "ok" in got, (lines, call, got)
                continue
            assert got["error"] == "NetworkDeniedError", (lines, call, got)
            assert "abstract Unix socket" in got["message"], got
            if any(line.startswith("deny any * *") for line in lines):
                assert "refused by network rule 'deny any * *" in got["message"], got
            else:
                assert f"- allow any * * {direction}" in got["message"], got
    assert host_listeners.reached() is outbound  # a refusal sends nothing
    assert abstract_decision(rules(*lines), "in")[0] is inbound
    assert abstract_decision(rules(*lines), "out")[0] is outbound


def test_learning_writes_no_rule_for_them(tmp_path: Path, host_listeners: Listeners) -> None:
    """The one rule that allows them grants every address: a learning run lets them through
    and never writes it (SPEC: a learned rule never grants more than the accesses recorded).
    """
    code = PROBE.replace("sys.argv[-1]", repr(host_listeners.name), 1)
    results, events = run_child(tmp_path, Policy(learn=True), code)
    assert all("ok" in results[c] for c in IN_CALLS + OUT_CALLS), results
    assert host_listeners.reached()
    assert network_hooks.learned_rules(events) == []
