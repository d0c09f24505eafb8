"""pysb-proxy's tests: their loopback servers (imported from this directory) and a test CA."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from proxy_servers import EchoServer, LoopbackCA


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
