"""The run path's remembered entry points (pysb_core.launch.entrycache): the scan's
answer, and never a stale one -- any change to a file the scan read scans again."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from pysb_core._startup import entrypoints
from pysb_core.launch import entrycache

GROUP = "pysb.test-cache"


def _dist(site: Path, stem: str, version: str, eps: str | None) -> Path:
    info = site / f"{stem}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {stem}\nVersion: {version}\n\n")
    if eps is not None:
        (info / "entry_points.txt").write_text(eps)
    return info


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site directory of its own first on sys.path, a state directory of its own, and
    no settling wait (the files were all just written)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(entrycache, "SETTLE_NS", 0)
    site = tmp_path / "site"
    _dist(site, "pysb_one", "1.0", f"[{GROUP}]\none = json:dumps\n")
    _dist(site, "plain", "2.0", None)
    monkeypatch.syspath_prepend(str(site))
    entrycache.installed.cache_clear()
    yield site
    entrycache.installed.cache_clear()


def _names(monkeypatch: pytest.MonkeyPatch) -> tuple[set[str], bool]:
    """The group's names as a new run sees them, and whether it had to scan."""
    scanned = []
    real = entrycache.scan

    def counting(*args: object) -> tuple[entrypoints.EntryPoint, ...]:
        scanned.append(True)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(entrycache, "scan", counting)
    entrycache.installed.cache_clear()
    names = {ep.name for ep in entrycache.entry_points(GROUP)}
    assert names == {ep.name for ep in entrypoints.scan("pysb") if ep.group == GROUP}
    return names, bool(scanned)


def _tick() -> None:
    time.sleep(0.05)  # past a tick of the file system's clock


def test_the_second_run_reads_the_remembered_scan(site: Path, monkeypatch) -> None:
    assert _names(monkeypatch) == ({"one"}, True)
    assert _names(monkeypatch) == ({"one"}, False)
    found = entrycache.entry_points(GROUP)
    assert found == entrypoints.of_group(entrypoints.scan("pysb"), GROUP)
    assert all(type(ep) is entrypoints.EntryPoint for ep in found)
    assert (found[0].dist_name, found[0].dist_version) == ("pysb_one", "1.0")


def test_an_installed_or_removed_distribution_scans_again(site: Path, monkeypatch) -> None:
    _names(monkeypatch)
    _tick()
    two = _dist(site, "pysb_two", "1.0", f"[{GROUP}]\ntwo = json:loads\n")
    assert _names(monkeypatch) == ({"one", "two"}, True)
    _tick()
    for f in two.iterdir():
        f.unlink()
    two.rmdir()
    assert _names(monkeypatch) == ({"one"}, True)


def test_an_entry_points_file_added_to_a_distribution_scans_again(site: Path, monkeypatch):
    _names(monkeypatch)
    _tick()
    (site / "plain-2.0.dist-info" / "entry_points.txt").write_text(f"[{GROUP}]\nlate = json\n")
    assert _names(monkeypatch) == ({"one", "late"}, True)


def test_an_edit_in_place_with_the_same_size_and_times_scans_again(site: Path, monkeypatch):
    """Only ``ctime`` tells this edit: same size, ``mtime`` put back."""
    _names(monkeypatch)
    eps = site / "pysb_one-1.0.dist-info" / "entry_points.txt"
    before = eps.stat()
    _tick()
    with open(eps, "r+") as f:
        f.write(f"[{GROUP}]\nOne")  # "one" -> "One": same length
    os.utime(eps, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert eps.stat().st_size == before.st_size
    assert _names(monkeypatch) == ({"One"}, True)


def test_a_new_version_in_the_metadata_scans_again(site: Path, monkeypatch) -> None:
    _names(monkeypatch)
    _tick()
    meta = site / "pysb_one-1.0.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 1.0", "Version: 1.1"))
    entrycache.installed.cache_clear()
    assert entrycache.entry_points(GROUP)[0].dist_version == "1.1"


def test_a_scan_of_files_that_just_changed_is_not_stored(site: Path, monkeypatch) -> None:
    monkeypatch.setattr(entrycache, "SETTLE_NS", 60 * 10**9)  # everything here is recent
    assert _names(monkeypatch) == ({"one"}, True)
    assert _names(monkeypatch) == ({"one"}, True)
    assert not (Path(os.environ["XDG_CACHE_HOME"]) / "pysb" / "entrypoints").exists()


def _entry() -> Path:
    (entry,) = (Path(os.environ["XDG_CACHE_HOME"]) / "pysb" / "entrypoints").iterdir()
    return entry


@pytest.mark.parametrize("damage", ["writable", "corrupt", "another-format"])
def test_an_entry_not_ours_alone_or_broken_is_not_used(site: Path, monkeypatch, damage) -> None:
    _names(monkeypatch)
    assert _names(monkeypatch) == ({"one"}, False)
    entry = _entry()
    if damage == "writable":  # another user could have written it
        entry.chmod(0o666)
    elif damage == "corrupt":
        entry.write_bytes(entry.read_bytes()[:40])
    else:
        monkeypatch.setattr(entrycache, "FORMAT", entrycache.FORMAT + 1)
    assert _names(monkeypatch) == ({"one"}, True)


def test_no_state_directory_scans(site: Path, monkeypatch) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.delenv("HOME")
    assert _names(monkeypatch) == ({"one"}, True)
    assert _names(monkeypatch) == ({"one"}, True)
