"""pysb-proxy's tests: their loopback servers (imported from this directory) and a test CA."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def _load_servers() -> object:
    """Load proxy_servers.py as ``proxy_servers`` without adding this directory to
    ``sys.path``: pysb exposes the test process's ``sys.path`` entries to the sandbox
    (its import roots), and qemu's microvm has room for only so many shares."""
    path = Path(__file__).with_name("proxy_servers.py")
    spec = importlib.util.spec_from_file_location("proxy_servers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["proxy_servers"] = module
    spec.loader.exec_module(module)
    return module


_servers = _load_servers()
EchoServer = _servers.EchoServer  # type: ignore[attr-defined]
LoopbackCA = _servers.LoopbackCA  # type: ignore[attr-defined]
H2Server = _servers.H2Server  # type: ignore[attr-defined]


@pytest.fixture
def ca(tmp_path: Path) -> LoopbackCA:
    return LoopbackCA(tmp_path / "ca")


@pytest.fixture
def http_server() -> Iterator[EchoServer]:
    """An HTTP echo server on 127.0.0.1 that reports whether Authorization was sent."""
    server = EchoServer(watch="Authorization")
    yield server
    server.close()


@pytest.fixture
def https_server(ca: LoopbackCA) -> Iterator[EchoServer]:
    server = EchoServer(tls=ca.server_context(), watch="Authorization")
    yield server
    server.close()
