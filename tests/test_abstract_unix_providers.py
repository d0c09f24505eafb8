"""Abstract Unix sockets under every provider (issue 28: test_socket's
``TestLinuxAbstractNamespace``): one profile rule decides them everywhere.

Only a rule over every address, port and protocol allows them (docs/network.md). With
``allow any * * any`` a program binds, autobinds and connects to its own abstract names
under each provider, and under subprocess and landlock (whose scope is then dropped for
them) it reaches a listener of the host's, as that rule grants; without the rule the
refusal is a ``NetworkDeniedError`` naming the line to add, and nothing reaches the host.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator

import pytest

from pysb_core.testing import EVERY_PROVIDER, Project, require_provider

PROVIDERS = EVERY_PROVIDER

PROGRAM = r"""
import json, socket, sys
out = {}
def t(name, fn):
    try:
        out[name] = fn()
    except Exception as e:
        out[name] = [type(e).__name__, str(e)]
def own():
    s = socket.socket(socket.AF_UNIX)
    s.bind("\0" + sys.argv[1] + "-own")
    s.listen()
    c = socket.socket(socket.AF_UNIX)
    c.connect("\0" + sys.argv[1] + "-own")
    a, _ = s.accept()
    c.sendall(b"ping")
    return a.recv(4).decode()
def autobind():
    s = socket.socket(socket.AF_UNIX)
    s.bind("")
    return s.getsockname()[:1].hex()
def host():
    c = socket.socket(socket.AF_UNIX)
    c.connect("\0" + sys.argv[1])
    return "reached"
t("own", own)
t("autobind", autobind)
t("host", host)
print(json.dumps(out))
"""

OPEN = (
    "version: 1\nimports: [json, socket, sys]\nnetwork:\n  - allow any * * any\n"
    "providers:\n  landlock: {unix-sockets: true}\n"
)
CLOSED = (
    "version: 1\nimports: [json, socket, sys]\nnetwork:\n  - allow tcp 127.0.0.1 9 out\n"
    "providers:\n  landlock: {unix-sockets: true}\n"
)


@pytest.fixture
def listener() -> Iterator[tuple[str, socket.socket]]:
    name = f"pysb-abstract-{os.getpid()}-{os.urandom(4).hex()}"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind("\0" + name)
    sock.listen(4)
    sock.setblocking(False)
    try:
        yield name, sock
    finally:
        sock.close()


def _reached(sock: socket.socket) -> bool:
    try:
        sock.accept()[0].close()
        return True
    except BlockingIOError:
        return False


def _run(project: Project, provider: str, profile: str, name: str) -> dict | None:
    """The program's findings, or None where the run is refused before it starts: set-uid
    firejail enforces network allow rules for root only (docs/providers.md)."""
    project.profile(profile)
    project.file("prog.py", PROGRAM)
    r = project.run("run", "--provider", provider, "prog.py", name)
    if provider == "firejail" and os.geteuid() != 0:
        assert r.returncode == 125 and "needs root with firejail" in r.stderr, r.stderr
        return None
    assert r.returncode == 0, r.stderr
    result: dict = json.loads(r.stdout.splitlines()[-1])
    return result


def _findings(
    project: Project, provider: str, profile: str, listener: tuple[str, socket.socket]
) -> tuple[dict | None, socket.socket]:
    """The program's findings under ``provider`` (None: refused before the start, and
    then nothing reached the host's listener either) and that listener."""
    if provider != "subprocess":
        require_provider(provider)
    name, sock = listener
    out = _run(project, provider, profile, name)
    if out is None:
        assert not _reached(sock)
    return out, sock


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_rule_over_everything_allows_them(
    project: Project, provider: str, listener: tuple[str, socket.socket]
) -> None:
    out, sock = _findings(project, provider, OPEN, listener)
    if out is None:
        return
    assert out["own"] == "ping", out
    assert out["autobind"] == "00", out  # an abstract name the kernel chose
    if provider in ("subprocess", "landlock"):
        # No network namespace: the host's abstract names are the sandbox's, as granted.
        assert out["host"] == "reached", out
        assert _reached(sock)
    else:
        # Their own network namespace (or a VM): the host's name does not exist there.
        assert out["host"][0] in ("ConnectionRefusedError", "FileNotFoundError"), out
        assert not _reached(sock)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_without_it_they_are_refused_in_words(
    project: Project, provider: str, listener: tuple[str, socket.socket]
) -> None:
    out, sock = _findings(project, provider, CLOSED, listener)
    if out is None:
        return
    for case, direction in (("own", "in"), ("autobind", "in"), ("host", "out")):
        kind, message = out[case]
        assert kind == "NetworkDeniedError", (case, out[case])
        assert f"- allow any * * {direction}" in message, (case, message)
    assert not _reached(sock)
