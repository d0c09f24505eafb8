"""The network guard patches sockets as the interpreter loads them, not at start.

A program that never touches the network does not pay for ``socket``; a program that does
must find every spelling guarded from its very first use: ``import _socket`` directly,
``importlib.import_module``, ``__import__``, a C module (``_ssl``) loading ``_socket``
itself and the program picking it from ``sys.modules``, a second instance of the C module.
Each spelling runs in a fresh interpreter (all guards, no network rule) against a real
loopback server that accepts connections: "connected" would be an escape.
"""

from __future__ import annotations

import socket
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from guarded import FAMILIES, probe

from pysb_core.testing import run_pysb, trust_profile

ALL = (*FAMILIES, "network")


@pytest.fixture
def port() -> Iterator[int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield s.getsockname()[1]
    s.close()


def connect_probe(first_use: str, port: int, python: str) -> dict[str, tuple[str, str]]:
    """Run ``first_use`` (which binds ``m`` to a socket module) as the program's first
    touch of the network, then try the module's socket and the raw C class."""
    body = (
        textwrap.dedent(first_use).strip()
        + "\n"
        + textwrap.dedent(f"""
    A = ('127.0.0.1', {port})
    def conn(connect):
        s = m.socket(m.AF_INET, m.SOCK_STREAM)
        try:
            s.settimeout(5)
            connect(s, A)
            return "connected"
        finally:
            s.close()
    t("method", lambda: conn(lambda s, a: s.connect(a)))
    t("raw class", lambda: conn(m.socket.__mro__[-2].connect))
    t("connect_ex", lambda: conn(lambda s, a: s.connect_ex(a)))
    """)
    )
    return probe(body, families=ALL, python=python)


SPELLINGS = {
    "import _socket": "import _socket as m",
    "import socket": "import socket as m",
    "import_module": "import importlib\nm = importlib.import_module('_socket')",
    "__import__": "m = __import__('socket')",
    "loaded by _ssl": "import _ssl, sys\nm = sys.modules['_socket']",
    "from import": "from _socket import socket, AF_INET, SOCK_STREAM\nimport sys\n"
    "m = sys.modules['_socket']",
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_first_use_of_sockets_is_guarded(spelling: str, port: int, python: str) -> None:
    found = connect_probe(SPELLINGS[spelling], port, python)
    for key in ("method", "raw class", "connect_ex"):
        assert found[key][0] == "NetworkDeniedError", (spelling, key, found[key])
        assert f"allow tcp 127.0.0.1 {port} out" in found[key][1]


def test_second_instance_of_the_c_module_is_guarded(port: int, python: str) -> None:
    """``del sys.modules['_socket']`` then a fresh instance (on 3.12+ with classes and
    functions of its own): refused, or patched like the first."""
    found = probe(
        f"""
        import importlib.util, sys
        import _socket
        spec = importlib.util.find_spec('_socket')
        del sys.modules['_socket']
        def second():
            m = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(m)
            s = m.socket(m.AF_INET, m.SOCK_STREAM)
            s.settimeout(5)
            try:
                s.connect(('127.0.0.1', {port}))
            finally:
                s.close()
            return "connected"
        t("second", second)
        """,
        families=ALL,
        python=python,
    )
    assert found["second"][0] in ("NetworkDeniedError", "ImportDeniedError"), found


def test_socket_classes_keep_their_shape(python: str) -> None:
    found = probe(
        """
        import _socket, socket
        raw = socket.socket.__mro__[-2]
        t("socket is a _socket.socket", lambda: isinstance(socket.socket(), _socket.socket))
        t("raw is a _socket.socket", lambda: isinstance(raw(), _socket.socket))
        t("raw is no socket.socket", lambda: isinstance(raw(), socket.socket))
        t("subclass", lambda: issubclass(socket.socket, _socket.socket))
        t("SocketType", lambda: socket.SocketType is _socket.socket)
        t("pair", lambda: [type(s).__name__ for s in socket.socketpair()])
        t("name", lambda: (_socket.socket.__module__, _socket.socket.__qualname__))
        """,
        families=ALL,
        python=python,
    )
    assert found["socket is a _socket.socket"] == ("ok", "True")
    assert found["raw is a _socket.socket"] == ("ok", "True")
    assert found["raw is no socket.socket"] == ("ok", "False")
    assert found["subclass"] == ("ok", "True")
    assert found["SocketType"] == ("ok", "True")
    assert found["pair"] == ("ok", "['socket', 'socket']")
    assert found["name"] == ("ok", "('_socket', 'socket')")


def test_the_guarded_socket_class_is_as_immutable_as_cpythons(python: str) -> None:
    """``_socket.socket`` is a C type: setting or deleting one of its attributes is a
    TypeError (CPython's test_socket.test_socket_type, 3.12+). The guarded class that
    stands for it refuses the same, in CPython's words; ``socket.socket`` and the program's
    own subclasses stay mutable."""
    found = probe(
        """
        import _socket, socket
        def assign():
            _socket.socket.foo = 1
        def delete():
            del _socket.socket.connect
        def subclass():
            class Mine(_socket.socket):
                pass
            Mine.foo = 1
            socket.socket.bar = 2
            del socket.socket.bar
            return Mine.foo
        t("assign", assign)
        t("delete", delete)
        t("subclass", subclass)
        t("kept", lambda: "foo" in vars(_socket.socket) or "connect" not in vars(_socket.socket))
        """,
        families=ALL,
        python=python,
    )
    message = "cannot set '{}' attribute of immutable type '_socket.socket'"
    assert found["assign"] == ("TypeError", message.format("foo")), found
    assert found["delete"] == ("TypeError", message.format("connect")), found
    assert found["subclass"] == ("ok", "1"), found
    assert found["kept"] == ("ok", "False"), found


def test_a_non_ascii_name_fails_on_the_rule(python: str) -> None:
    """No IDNA codec is loaded ahead: the refusal still comes from the rules, before any
    query, whichever door the name takes."""
    found = probe(
        """
        import socket
        name = 'b\\u00fccher.example'
        t("create", lambda: socket.create_connection((name, 80), timeout=1))
        t("getaddrinfo", lambda: socket.getaddrinfo(name, 80))
        t("gethostbyname", lambda: socket.gethostbyname(name))
        t("connect", lambda: socket.socket().connect((name, 80)))
        """,
        imports=("socket",),
        families=ALL,
        python=python,
    )
    for key in ("create", "getaddrinfo", "gethostbyname", "connect"):
        assert found[key][0] == "NameResolutionDeniedError", (key, found[key])
        assert "refused before any query" in found[key][1]


def test_a_program_without_network_does_not_load_it(tmp_path: Path) -> None:
    """Start-up cost: neither ``socket`` nor the IDNA codec is imported for ``pass``."""
    (tmp_path / ".pysb.yaml").write_text("imports: [json]\n")
    trust_profile(tmp_path / ".pysb.yaml")
    out = run_pysb("run", "-X", "importtime", "-c", "pass", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    loaded = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if "|" in line}
    assert "pysb_core.child.bootstrap" in loaded  # the child's imports are listed
    assert not loaded & {"socket", "encodings.idna", "selectors"}
