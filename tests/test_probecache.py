"""A provider probe's success is remembered across runs; failures and changes are not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pysb_core.probecache import cached_probe
from pysb_core.provider import ProviderStatus


@pytest.fixture
def binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\n")
    return tool


def test_success_is_reused_until_the_binary_changes(binary: Path) -> None:
    calls = []

    def probe() -> ProviderStatus:
        calls.append(1)
        return ProviderStatus.ok(version="1.0", binary=str(binary))

    first = cached_probe("tool", [str(binary)], probe)
    again = cached_probe("tool", [str(binary)], probe)
    assert first.available and again.available and again.version == "1.0"
    assert again.details == {"binary": str(binary)}
    assert len(calls) == 1
    binary.write_text("#!/bin/sh\n# upgraded\n")
    os.utime(binary, ns=(1, 1))
    cached_probe("tool", [str(binary)], probe)
    assert len(calls) == 2


def test_failure_is_never_cached(binary: Path) -> None:
    calls = []

    def probe() -> ProviderStatus:
        calls.append(1)
        return ProviderStatus.missing("no namespaces", fix="sysctl ...")

    assert not cached_probe("tool", [str(binary)], probe).available
    assert not cached_probe("tool", [str(binary)], probe).available
    assert len(calls) == 2
