"""docs/architecture.md's map matches the folders (issue 29, acceptance).

The map is the first ``text`` block of the page: each stage names its package of
``pysb_core`` (``cli/``, ``profile/``...) and the modules in it (``loader.py``). A module or
package it names must exist where the map puts it, and every package of ``pysb_core`` must
appear in it, so a move that forgets the page fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "pysb_core"
PAGE = ROOT / "docs" / "architecture.md"

#: A room at the start of a map line (``cli/``, ``launch/``), or one named inside it.
ROOM = re.compile(r"(?<![\w.-])([a-z_]+)/")
MODULE = re.compile(r"(?<![\w/-])([a-z_]+)\.py\b")


def _map_block() -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("```text")
    return text[start : text.index("```", start + 7)]


def _rooms() -> set[str]:
    return {p.name for p in CORE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}


def test_every_room_of_pysb_core_is_on_the_map() -> None:
    named = set(ROOM.findall(_map_block()))
    missing = sorted(_rooms() - named - {"testing"})  # the plugin authors' pytest plugin
    assert not missing, f"packages of pysb_core missing from docs/architecture.md's map: {missing}"


def test_every_module_the_map_names_exists() -> None:
    known = {p.name for p in CORE.rglob("*.py")}
    known |= {p.name for p in ROOT.glob("plugins/*/src/**/*.py")}
    named = set(MODULE.findall(_map_block()))
    assert named, "the map names no module: the pattern no longer matches the page"
    missing = sorted(f"{name}.py" for name in named if f"{name}.py" not in known)
    assert not missing, f"docs/architecture.md's map names modules that do not exist: {missing}"


def test_every_room_the_map_names_exists() -> None:
    dirs = {p.name for p in CORE.rglob("*") if p.is_dir()}
    dirs |= {"plugins", "pysb-guards"}
    named = set(ROOM.findall(_map_block()))
    missing = sorted(n for n in named if n not in dirs)
    assert not missing, f"docs/architecture.md's map names folders that do not exist: {missing}"
