"""The layers and boundaries of the code hold: import-linter's contracts (pyproject.toml's
``[tool.importlinter]``; ``make lint`` runs the same check).

No import circles anywhere (pysb_core and every plugin, at every package level); plugins
import only the plugin API; no core module imports a plugin; no plugin imports another.
"""

from __future__ import annotations

import pkgutil
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import pysb_core

ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
#: What a plugin may import of pysb_core (the names of the package itself and the kits).
PLUGIN_API = {"pysb_core", "pysb_core.providerkit", "pysb_core.guardkit"}


def _lint_imports() -> list[str]:
    script = Path(sys.executable).with_name("lint-imports")
    if script.exists():
        return [str(script)]
    if shutil.which("lint-imports") is None:
        pytest.fail("import-linter is not installed: run `make dev` (it is a dev dependency)")
    return ["lint-imports"]


def _contract(name_start: str) -> dict[str, object]:
    found = [c for c in CONFIG["contracts"] if c["name"].startswith(name_start)]
    assert len(found) == 1, name_start
    return found[0]


def test_the_import_contracts_are_kept() -> None:
    r = subprocess.run(
        [*_lint_imports(), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"Contracts: {len(CONFIG['contracts'])} kept, 0 broken." in r.stdout, r.stdout


def test_every_plugin_is_a_root_package_of_the_contracts() -> None:
    """A plugin added under plugins/ is analysed too (circles, its boundary)."""
    plugins = {p.name for p in ROOT.glob("plugins/*/src/*") if (p / "__init__.py").exists()}
    assert plugins <= set(CONFIG["root_packages"]), plugins - set(CONFIG["root_packages"])
    for start in ("No import circles", "No plugin imports another"):
        contract = _contract(start)
        assert plugins <= set(contract.get("ancestors", contract.get("modules", []))), start


def test_the_plugin_boundary_forbids_every_module_but_the_plugin_api() -> None:
    """A module added to pysb_core is internal: the forbidden list names it (the contract
    cannot say "everything but the kits" by itself)."""
    contract = _contract("Plugins import only the plugin API")
    internal = {
        f"pysb_core.{m.name}" for m in pkgutil.iter_modules(pysb_core.__path__)
    } - PLUGIN_API
    assert set(contract["forbidden_modules"]) == internal, (
        set(contract["forbidden_modules"]) ^ internal
    )
