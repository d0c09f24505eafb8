"""No import circle between any two modules, in pysb_core or a plugin (issue 29 item 2).

import-linter's ``acyclic_siblings`` contract (pyproject.toml) finds circles between the
children of each package, but not one between a package's ``__init__`` and a module below
it (``policy`` <-> ``policy.netrules`` was such a circle): the parent is nobody's sibling.
This test closes that gap on the module graph import-linter builds (grimp, the same
roots, ``TYPE_CHECKING`` imports left out as in the contracts).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def circles(roots: list[str]) -> list[list[str]]:
    """The import circles (strongly connected sets of two or more modules) under ``roots``."""
    graph = grimp.build_graph(*roots, exclude_type_checking_imports=True, cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(edges):  # Tarjan's algorithm, iterative (no recursion limit)
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
            for j in range(i, len(edges[node])):
                succ = edges[node][j]
                if succ not in index:
                    work.append((node, j + 1))
                    work.append((succ, 0))
                    break
                if succ in stack:
                    low[node] = min(low[node], index[succ])
            else:
                if low[node] == index[node]:
                    part = stack[stack.index(node) :]
                    del stack[stack.index(node) :]
                    if len(part) > 1:
                        found.append(sorted(part))
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
    return found


def test_no_module_is_in_an_import_circle() -> None:
    roots = CONFIG["root_packages"]
    assert "pysb_core" in roots and "pysb_guards" in roots
    assert circles(roots) == []


#: Packages to check the check on: files (relative to the package) and the circles expected.
CASES = {
    # a package and its module: what acyclic_siblings does not see
    "package and module": (
        {
            "__init__.py": "",
            "sub/__init__.py": "from . import b\n",
            "sub/b.py": "from .. import sub\n",
        },
        [["{p}.sub", "{p}.sub.b"]],
    ),
    "three modules": (
        {
            "__init__.py": "",
            "a.py": "from . import b\n",
            "b.py": "from . import c\n",
            "c.py": "from . import a\n",
        },
        [["{p}.a", "{p}.b", "{p}.c"]],
    ),
    # a chain, and the way back only for the type checker: no circle
    "chain": (
        {
            "__init__.py": "",
            "a.py": "from . import b\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n",
        },
        [],
    ),
}


@pytest.mark.parametrize(("files", "expected"), CASES.values(), ids=CASES.keys())
def test_the_check_finds_a_circle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str], expected: list
) -> None:
    name = f"cyc_{abs(hash(tmp_path.name)) % 10**8}"
    for rel, text in files.items():
        path = tmp_path / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert circles([name]) == [[m.format(p=name) for m in part] for part in expected]
