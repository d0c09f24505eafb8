"""The supported plugin API type-checks under ``mypy --strict`` (the files are listed in
pyproject.toml's ``[tool.mypy]``; ``make lint`` runs the same check).

Plugin authors' type checkers read these modules (every distribution ships ``py.typed``):
an ``Any`` or a missing annotation here is one in every plugin.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _mypy() -> list[str]:
    script = Path(sys.executable).with_name("mypy")
    if script.exists():
        return [str(script)]
    if shutil.which("mypy") is None:
        pytest.fail("mypy is not installed: run `make dev` (it is a dev dependency)")
    return ["mypy"]


def test_the_plugin_api_is_clean_under_mypy_strict(tmp_path: Path) -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["strict"] is True
    files = config["files"]
    for kit in ("pysb_core/providerkit.py", "pysb_core/guardkit.py", "pysb_core/hookspecs.py"):
        assert kit in files
    r = subprocess.run(
        [*_mypy(), "--cache-dir", str(tmp_path / "cache")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"no issues found in {len(files)} source files" in r.stdout, r.stdout


def test_the_kits_re_export_what_they_say_to_type_checkers() -> None:
    """Each kit's ``__all__`` is also what a type checker sees (the ``TYPE_CHECKING``
    imports): a lazy name missing there would be ``Any`` for plugin authors."""
    import ast

    for kit in ("providerkit", "guardkit"):
        tree = ast.parse((ROOT / "pysb_core" / f"{kit}.py").read_text())
        seen: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                for stmt in ast.walk(node):
                    if isinstance(stmt, ast.ImportFrom):
                        seen.update(a.asname or a.name for a in stmt.names)
        module = __import__(f"pysb_core.{kit}", fromlist=["_"])
        assert seen == set(module._EXPORTS), (kit, seen ^ set(module._EXPORTS))
