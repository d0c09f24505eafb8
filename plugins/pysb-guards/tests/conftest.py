"""Fixtures for the guard tests: the interpreters to test on, and a scratch project."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))

PYTHONS = [sys.executable] + [
    p
    for p in (
        os.path.expanduser("~/.pyenv/versions/3.12.1/bin/python3"),
        os.path.expanduser("~/.pyenv/versions/3.13.0/bin/python3"),
    )
    if os.path.exists(p)
]
if os.environ.get("PYSB_TEST_PYTHONS"):
    PYTHONS = [p for p in os.environ["PYSB_TEST_PYTHONS"].split(os.pathsep) if shutil.which(p)]


def _label(python: str) -> str:
    import subprocess

    out = subprocess.run(
        [python, "-c", "import sys;print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"py{out}"


@pytest.fixture(params=PYTHONS, ids=[_label(p) for p in PYTHONS])
def python(request: pytest.FixtureRequest) -> str:
    """Each interpreter available here (3.11, 3.12, 3.13: thread primitives differ)."""
    return request.param


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A small project: data/ (read-only), out/ (read-write), secrets to hide."""
    root = tmp_path / "proj"
    (root / "data").mkdir(parents=True)
    (root / "out").mkdir()
    (root / "data" / "x.txt").write_text("data")
    (root / ".env").write_text("SECRET=1")
    (root / "data" / "key.pem").write_text("pem")
    (root / "app.py").write_text("print('app')\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret")
    return root
