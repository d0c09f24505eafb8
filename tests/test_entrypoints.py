"""pysb's own entry-point reader agrees with importlib.metadata (which ``pysb run`` avoids)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from pysb_core import entrypoints
from pysb_core.entrypoints import EntryPoint, _parse


@pytest.mark.parametrize("group", ["pysb.providers", "pysb.guards", "console_scripts"])
def test_same_entry_points_as_importlib_metadata(group: str) -> None:
    theirs = {(ep.name, ep.value) for ep in importlib.metadata.entry_points(group=group)}
    ours = {(ep.name, ep.value) for ep in entrypoints.entry_points(group)}
    assert ours == theirs
    assert [ep.name for ep in entrypoints.entry_points(group)] == sorted(n for n, _ in ours)


def test_an_entry_point_is_a_named_tuple_that_loads() -> None:
    ep = EntryPoint("x", "pysb_core.markers:hookimpl", "g", "pysb-core", "0.1.0")
    assert tuple(ep) == ("x", "pysb_core.markers:hookimpl", "g", "pysb-core", "0.1.0")
    assert (ep.name, ep.value, ep.group, ep.dist_name, ep.dist_version) == tuple(ep)
    assert ep == EntryPoint(*ep) and hash(ep) == hash(EntryPoint(*ep))
    assert ep.module == "pysb_core.markers"
    from pysb_core.markers import hookimpl

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
