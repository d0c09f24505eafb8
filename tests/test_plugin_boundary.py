"""The built-in plugins use only the supported plugin API: the names of ``pysb_core``, of
``pysb_core.providerkit`` and of ``pysb_core.guardkit`` -- what a third party has. A
built-in that needs something else adds it to a kit (versioned, documented) first.

An AST scan of every module of plugins/*/src: ``import`` and ``from ... import``
statements (type-only ones included), ``importlib.import_module`` / ``__import__`` of a
constant name, and attributes read on the ``pysb_core`` package itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pysb_core
from pysb_core import guardkit, providerkit

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(ROOT.glob("plugins/*/src/**/*.py"))

#: module -> the names a plugin may take from it
PUBLIC: dict[str, set[str]] = {
    "pysb_core": {*pysb_core.__all__, "__file__", "__version__"},
    "pysb_core.providerkit": set(providerkit.__all__),
    "pysb_core.guardkit": set(guardkit.__all__),
}
IMPORTERS = {"import_module", "__import__", "find_spec"}
#: Known gaps, each with its reason: (distribution, "module.name") a plugin still takes from
#: pysb-core's internals until a kit offers it. None today; a gap added here must be used.
KNOWN_GAPS: set[tuple[str, str]] = set()


def _distribution(path: Path) -> str:
    parts = path.resolve().parts
    return parts[parts.index("plugins") + 1] if "plugins" in parts else ""


def test_every_known_gap_is_still_used() -> None:
    """A gap closed (the plugin switched to a kit name) leaves the list."""
    used = set()
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                used.update((_distribution(path), f"{node.module}.{a.name}") for a in node.names)
    assert used >= KNOWN_GAPS, KNOWN_GAPS - used


def violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    out: list[str] = []

    def bad(node: ast.AST, what: str) -> None:
        out.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("pysb_core") and alias.name not in PUBLIC:
                    bad(node, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pysb_core"):
            allowed = PUBLIC.get(node.module or "")
            for alias in node.names:
                gap = (_distribution(path), f"{node.module}.{alias.name}")
                if (allowed is None or alias.name not in allowed) and gap not in KNOWN_GAPS:
                    bad(node, f"from {node.module} import {alias.name}")
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if (
                name in IMPORTERS
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
                and first.value.startswith("pysb_core")
                and first.value not in PUBLIC
            ):
                bad(node, f"{name}({first.value!r})")
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "pysb_core"
            and node.attr not in PUBLIC["pysb_core"]
        ):
            bad(node, f"pysb_core.{node.attr}")
    return out


def test_there_are_plugin_sources_to_check() -> None:
    assert len(SOURCES) > 40
    assert {p.parts[len(ROOT.parts) + 1] for p in SOURCES} >= {
        "pysb-bwrap", "pysb-firejail", "pysb-guards", "pysb-landlock", "pysb-qemu",
        "pysb-unshare", "pysb-ray",
    }  # fmt: skip


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT / "plugins")))
def test_a_built_in_plugin_imports_only_the_plugin_api(path: Path) -> None:
    found = violations(path)
    assert not found, "not part of the plugin API (add it to a kit first):\n" + "\n".join(found)


def test_the_scan_catches_each_way_of_reaching_an_internal(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import pysb_core.linux.seccomp\n"
        "from pysb_core._startup.records import record\n"
        "from pysb_core.linux import cfuncs\n"
        "from pysb_core.providerkit import nosuch\n"
        "import importlib\nimportlib.import_module('pysb_core.net.netns')\n"
        "import pysb_core\npysb_core.launch\n"
        "from pysb_core.providerkit import Provider\nfrom pysb_core import hookimpl\n"
        "pysb_core.__file__\n"
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        found = violations(sample)
    finally:
        ROOT = saved
    assert [f.split(": ", 1)[1] for f in found] == [
        "import pysb_core.linux.seccomp",
        "from pysb_core._startup.records import record",
        "from pysb_core.linux import cfuncs",
        "from pysb_core.providerkit import nosuch",
        "import_module('pysb_core.net.netns')",
        "pysb_core.launch",
    ]


def _first_party_entry_points(group: str) -> list[tuple[str, str]]:
    from importlib.metadata import entry_points

    return sorted(
        (ep.name, ep.value)
        for ep in entry_points(group=group)
        if ep.dist is not None and (ep.dist.metadata["Name"] or "").startswith("pysb-")
    )


@pytest.mark.parametrize("name,value", _first_party_entry_points("pysb.providers"))
def test_every_built_in_provider_states_the_current_kit(name: str, value: str) -> None:
    """A built-in provider ships with this pysb and may use every name of its kit: it
    states the kit's current version, as the guide asks a third party to (a built-in
    that stated nothing would be read as kit 1.0 while using newer names)."""
    import importlib
    import sys

    from pysb_core import kitversion

    module_name, _, attr = value.partition(":")
    cls = getattr(importlib.import_module(module_name), attr)
    declared = getattr(sys.modules[cls.__module__], providerkit.DECLARATION, None)
    assert kitversion.parse(declared) == providerkit.KIT_VERSION, (name, declared)


@pytest.mark.parametrize("name,value", _first_party_entry_points("pysb.guards"))
def test_every_built_in_guard_states_the_current_kit(name: str, value: str) -> None:
    """The same for the guard families (``PYSB_GUARDKIT`` in the entry point's module)."""
    import importlib

    from pysb_core import kitversion

    module = importlib.import_module(value.partition(":")[0])
    declared = getattr(module, guardkit.DECLARATION, None)
    assert kitversion.parse(declared) == guardkit.KIT_VERSION, (name, declared)
