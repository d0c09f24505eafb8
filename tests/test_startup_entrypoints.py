"""pysb's own entry-point reader agrees with importlib.metadata (which ``pysb run`` avoids)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from pysb_core._startup import entrypoints
from pysb_core._startup.entrypoints import EntryPoint, _parse


@pytest.mark.parametrize("group", ["pysb.providers", "pysb.guards", "console_scripts"])
def test_same_entry_points_as_importlib_metadata(group: str) -> None:
    theirs = {(ep.name, ep.value) for ep in importlib.metadata.entry_points(group=group)}
    ours = {(ep.name, ep.value) for ep in entrypoints.entry_points(group)}
    assert ours == theirs
    assert [ep.name for ep in entrypoints.entry_points(group)] == sorted(n for n, _ in ours)


def test_an_entry_point_is_a_named_tuple_that_loads() -> None:
    ep = EntryPoint("x", "pysb_core._startup.markers:hookimpl", "g", "pysb-core", "0.1.0")
    assert tuple(ep) == ("x", "pysb_core._startup.markers:hookimpl", "g", "pysb-core", "0.1.0")
    assert (ep.name, ep.value, ep.group, ep.dist_name, ep.dist_version) == tuple(ep)
    assert ep == EntryPoint(*ep) and hash(ep) == hash(EntryPoint(*ep))
    assert ep.module == "pysb_core._startup.markers"
    from pysb_core._startup.markers import hookimpl

    assert ep.load() is hookimpl
    assert "dist_name='pysb-core'" in repr(ep)


def test_parse_reads_groups_comments_and_odd_files(tmp_path: Path) -> None:
    f = tmp_path / "entry_points.txt"
    f.write_bytes(
        b"# comment\r\n[pysb.providers]\r\n nsjail = pysb_nsjail:Nsjail \r\n; x\n[a]\nb=c\n"
    )
    assert _parse(str(f), ("pysb-nsjail", "1.0")) == [
        EntryPoint("nsjail", "pysb_nsjail:Nsjail", "pysb.providers", "pysb-nsjail", "1.0"),
        EntryPoint("b", "c", "a", "pysb-nsjail", "1.0"),
    ]
    assert _parse(str(tmp_path / "missing.txt"), ("d", "1")) == []
    assert _parse(str(tmp_path), ("d", "1")) == []  # a directory: nothing readable


def _dist(site: Path, stem: str, name: str, version: str, eps: str, kind: str = "dist") -> None:
    info = site / (f"{stem}-{version}.dist-info" if kind == "dist" else f"{stem}.egg-info")
    info.mkdir(parents=True)
    meta = "METADATA" if kind == "dist" else "PKG-INFO"
    (info / meta).write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nbody\n")
    (info / "entry_points.txt").write_text(eps)


def test_same_semantics_as_importlib_metadata_on_odd_distributions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Extras, names that normalize alike, a distribution shadowed by an earlier path entry,
    an egg-info: ``pysb run``'s reader and stevedore's (importlib.metadata) give the same
    entry points, from the same distributions, that load the same objects."""
    first, second = tmp_path / "first", tmp_path / "second"
    group = "pysb.test-semantics"
    _dist(first, "pysb_extra", "pysb-extra", "1.0", f"[{group}]\nx = json:dumps [speed, c]\n")
    _dist(first, "foo_bar", "Foo.Bar", "2.0", f"[{group}]\nfb=json.decoder:JSONDecoder\n")
    _dist(second, "Foo.Bar", "Foo.Bar", "0.1", f"[{group}]\nshadowed = json:loads\n")
    _dist(second, "pysb_egg", "pysb-egg", "3.0", f"[{group}]\negg = json\n", kind="egg")
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))
    entrypoints.all_entry_points.cache_clear()
    try:
        ours = entrypoints.entry_points(group)
    finally:
        entrypoints.all_entry_points.cache_clear()
    theirs = importlib.metadata.entry_points(group=group)

    def shape(ep, dist_name, dist_version):
        return (ep.name, ep.value, ep.module, ep.attr, list(ep.extras), dist_name, dist_version)

    mine = sorted(shape(ep, ep.dist_name, ep.dist_version) for ep in ours)
    assert mine == sorted(shape(ep, ep.dist.name, ep.dist.version) for ep in theirs)
    assert {ep.name for ep in ours} == {"x", "fb", "egg"}  # the shadowed Foo.Bar is not seen
    by_name = {ep.name: ep for ep in theirs}
    for ep in ours:
        assert ep.load() is by_name[ep.name].load()


def test_a_family_scan_reads_only_the_distributions_that_name_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Start-up cost: ``entry_points("pysb.x")`` parses and reads the metadata of only the
    distributions whose ``entry_points.txt`` mentions ``pysb`` (a development venv has
    ~110 distributions, a handful of pysb's); the answer is importlib.metadata's."""
    site = tmp_path / "site"
    group = "pysb.test-family"
    _dist(site, "pysb_one", "pysb-one", "1.0", f"[{group}]\none = json:dumps\n")
    _dist(site, "pysb_two", "pysb-two", "2.0", f"[{group}]\ntwo = json:loads\n[other]\nz=json\n")
    _dist(site, "other", "other", "3.0", "[console_scripts]\nother = json:main\n")
    _dist(site, "tool", "tool", "4.0", "[tool.plugins]\nt = json\n")
    monkeypatch.syspath_prepend(str(site))
    read: list[str] = []
    real = entrypoints._dist_of

    def recording(info_dir: str, *watch: list) -> tuple[str, str]:
        read.append(Path(info_dir).name)
        return real(info_dir, *watch)

    monkeypatch.setattr(entrypoints, "_dist_of", recording)
    entrypoints.all_entry_points.cache_clear()
    try:
        ours = entrypoints.entry_points(group)
    finally:
        entrypoints.all_entry_points.cache_clear()
    assert "other-3.0.dist-info" not in read and "tool-4.0.dist-info" not in read
    assert {"pysb_one-1.0.dist-info", "pysb_two-2.0.dist-info"} <= set(read)
    theirs = importlib.metadata.entry_points(group=group)
    assert sorted((ep.name, ep.value, ep.dist_name, ep.dist_version) for ep in ours) == sorted(
        (ep.name, ep.value, ep.dist.name, ep.dist.version) for ep in theirs
    )
    assert [ep.name for ep in ours] == ["one", "two"]
