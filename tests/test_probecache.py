"""A provider probe's success is remembered across runs; failures and changes are not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pysb_core.launch.probecache import cached_probe
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


def test_success_is_kept_per_boot(binary: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reboot can change what a probe found (boot parameters, sysctls): probe again."""
    import pysb_core.launch.probecache as pc

    calls = []

    def probe() -> ProviderStatus:
        calls.append(1)
        return ProviderStatus.ok(version=None, abi=7, binary=str(binary), flag=True, none=None)

    first = cached_probe("tool", [str(binary)], probe)
    again = cached_probe("tool", [str(binary)], probe)
    assert again == first and again.details == {
        "abi": 7,
        "binary": str(binary),
        "flag": True,
        "none": None,
    }
    boot_id = binary.parent / "boot_id"
    boot_id.write_text("another-boot\n")
    monkeypatch.setattr(pc, "_BOOT_ID", str(boot_id))
    cached_probe("tool", [str(binary)], probe)
    assert len(calls) == 2


def test_a_damaged_cache_file_means_probing_again(binary: Path) -> None:
    calls = []

    def probe() -> ProviderStatus:
        calls.append(1)
        return ProviderStatus.ok(version="1.0")

    cached_probe("tool", [str(binary)], probe)
    (cache,) = (binary.parent / "cache" / "pysb" / "probes").iterdir()
    lines = cache.read_text().split("\n")
    lines[2] = "x nonsense"
    cache.write_text("\n".join(lines))
    assert cached_probe("tool", [str(binary)], probe).version == "1.0"
    assert len(calls) == 2


def test_which_finds_programs_like_shutil(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from pysb_core.launch.probecache import which

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "tool").write_text("#!/bin/sh\n")
    (bindir / "tool").chmod(0o755)
    (bindir / "data").write_text("not a program\n")
    (bindir / "dir").mkdir()
    monkeypatch.setenv("PATH", f"/nonexistent:{bindir}")
    for name in ("tool", "data", "dir", "sh", "pysb-no-such-tool", str(bindir / "tool")):
        assert which(name) == shutil.which(name), name
    monkeypatch.setenv("PATH", "/nonexistent")
    assert which("tool") is None
    assert which("tool", f":{bindir}") == str(bindir / "tool")
