"""The cheap probe: ``firejail --version`` runs once per binary, not once per ``pysb run``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pysb_firejail.probe import probe_firejail


@pytest.fixture
def fake_firejail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    if os.getuid() != 0:
        pytest.skip("a non-root probe also wants the binary set-uid root")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("container", raising=False)
    calls = tmp_path / "calls"
    tool = tmp_path / "firejail"

    def make(version: str) -> Path:
        tool.write_text(f'#!/bin/sh\necho x >> {calls}\necho "firejail version {version}"\n')
        tool.chmod(0o755)
        probe_firejail.cache_clear()
        return tool

    yield make, lambda: len(calls.read_text().splitlines()) if calls.exists() else 0
    probe_firejail.cache_clear()


def test_version_is_asked_once_per_binary(fake_firejail) -> None:
    make, runs = fake_firejail
    tool = make("0.9.72")
    assert probe_firejail(str(tool)).available
    probe_firejail.cache_clear()  # a new pysb process
    status = probe_firejail(str(tool))
    assert status.available and status.version == "0.9.72"
    assert status.details["binary"] == str(tool)
    assert runs() == 1
    make("0.9.74")  # an upgrade changes size and mtime: asked again
    os.utime(tool, ns=(10**18, 10**18))
    assert probe_firejail(str(tool)).version == "0.9.74"
    assert runs() == 2


def test_too_old_is_refused_every_time(fake_firejail) -> None:
    make, runs = fake_firejail
    tool = make("0.9.70")
    for _ in range(2):
        probe_firejail.cache_clear()
        status = probe_firejail(str(tool))
        assert not status.available and "too old" in status.reason
    assert runs() == 2
