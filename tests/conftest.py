"""Fixtures shared by the test files of tests/ (and tests/security)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pysb_core.testing import offline_venv

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def core_and_bwrap_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment with pysb-core and pysb-bwrap only (no Python layer), built
    offline from the wheelhouse as a user's ``pip install`` would. Built once per run:
    tests/test_packaging.py and tests/security/test_no_python_layer.py each built their own
    (10-30 s each); the tests only run its ``pysb`` and ``python``, never install into it."""
    env_dir = tmp_path_factory.mktemp("core-bwrap") / "venv"
    return offline_venv(env_dir, str(ROOT), str(ROOT / "plugins" / "pysb-bwrap"))
