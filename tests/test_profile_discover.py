"""Profile discovery (SPEC §3): next to SCRIPT, in MODULE's package, else ./.pysb.yaml."""

from __future__ import annotations

import sys
from pathlib import Path

from pysb_core.profile import discover_profile


def make(tmp_path: Path) -> Path:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.py").write_text("print('hi')\n")
    pkg = tmp_path / "pkg" / "sub"
    pkg.mkdir(parents=True)
    # importing these would leave a trace: discovery must not run them
    marker = tmp_path / "imported"
    for init in (tmp_path / "pkg" / "__init__.py", pkg / "__init__.py"):
        init.write_text(f"open({str(marker)!r}, 'w').close()\n")
    (pkg / "tool.py").write_text("x = 1\n")
    (tmp_path / "single.py").write_text("y = 1\n")
    return marker


def test_script_profile_next_to_script(tmp_path: Path) -> None:
    make(tmp_path)
    (tmp_path / "app" / ".pysb.yaml").write_text("version: 1\n")
    (tmp_path / ".pysb.yaml").write_text("version: 1\n")
    found = discover_profile("app/main.py", None, str(tmp_path))
    assert found == str(tmp_path / "app" / ".pysb.yaml")


def test_script_without_profile_falls_back_to_cwd(tmp_path: Path) -> None:
    make(tmp_path)
    assert discover_profile("app/main.py", None, str(tmp_path)) is None
    (tmp_path / ".pysb.yaml").write_text("version: 1\n")
    assert discover_profile("app/main.py", None, str(tmp_path)) == str(tmp_path / ".pysb.yaml")


def test_module_profile_in_its_package_without_importing(tmp_path: Path) -> None:
    marker = make(tmp_path)
    (tmp_path / "pkg" / "sub" / ".pysb.yaml").write_text("version: 1\n")
    (tmp_path / ".pysb.yaml").write_text("version: 1\n")
    found = discover_profile(None, "pkg.sub.tool", str(tmp_path))
    assert found == str(tmp_path / "pkg" / "sub" / ".pysb.yaml")
    assert discover_profile(None, "pkg.sub", str(tmp_path)) == found  # a package: its own dir
    assert not marker.exists()
    assert "pkg" not in sys.modules


def test_module_in_cwd_and_unknown_module(tmp_path: Path) -> None:
    make(tmp_path)
    (tmp_path / ".pysb.yaml").write_text("version: 1\n")
    assert discover_profile(None, "single", str(tmp_path)) == str(tmp_path / ".pysb.yaml")
    assert discover_profile(None, "no_such_mod_xyz", str(tmp_path)) == str(tmp_path / ".pysb.yaml")
    assert discover_profile(None, "json.tool", str(tmp_path)) == str(tmp_path / ".pysb.yaml")


def test_no_program(tmp_path: Path) -> None:
    assert discover_profile(None, None, str(tmp_path)) is None
    assert discover_profile("-", None, str(tmp_path)) is None
    (tmp_path / ".pysb.yaml").mkdir()  # a directory is not a profile
    assert discover_profile(None, None, str(tmp_path)) is None
