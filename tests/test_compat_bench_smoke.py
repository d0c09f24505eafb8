"""A smoke run of the compatibility benchmark (benchmarks/compat.py): a few quick modules
of CPython's regression suite, plain and under the subprocess provider, give the same
results -- among them ``test_dataclasses``, which a future flag of pysb's own broke."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _has_test_package() -> bool:
    probe = [sys.executable, "-c", "import test.support, test.libregrtest"]
    return subprocess.run(probe, capture_output=True).returncode == 0


@pytest.mark.skipif(not _has_test_package(), reason="this Python has no `test` package")
def test_quick_modules_match_plain_python(tmp_path: Path) -> None:
    out = tmp_path / "compat.json"
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "compat.py"),
            "--providers",
            "subprocess",
            "--modules",
            "test_textwrap,test_dataclasses,test_copy",
            "--json",
            str(out),
            "--markdown",
            str(tmp_path / "compat.md"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(out.read_text())
    for module, row in data["results"].items():
        assert row["plain"]["result"] == "SUCCESS", (module, row)
        assert row["subprocess"]["result"] == "SUCCESS", (module, row)
        assert row["subprocess"]["run"] == row["plain"]["run"] > 0, (module, row)
    assert data["differences"] == []
    assert "| test_dataclasses |" in (tmp_path / "compat.md").read_text()
