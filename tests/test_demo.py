"""``make demo`` shows the explicit flow: refused without a profile, learn, then enforce."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pysb_core.profile import trust

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo" / "run_demo.py"


def test_demo_refuses_learns_then_enforces(tmp_path: Path) -> None:
    """... and leaves no record of its deleted project in the user's trust store."""
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    r = subprocess.run(
        [sys.executable, str(DEMO)], capture_output=True, text=True, timeout=300, env=env
    )
    if "no OS provider is available" in r.stderr:
        pytest.skip(r.stderr.strip())
    assert r.returncode == 0, r.stdout + r.stderr
    steps = r.stdout.split("\n== ")
    assert len(steps) == 4, r.stdout
    assert "[exit 125]" in steps[0] and "pysb run --learn" in steps[0]
    assert "WITHOUT a sandbox" in steps[1] and "[exit 0]" in steps[1]
    assert "FileDeniedError" in steps[2] and "expose-ro" in steps[2]
    assert "chosen by 'auto'" in steps[2]  # the default is an OS sandbox, and says which
    assert "TOP SECRET" not in r.stdout
    assert trust.records(env) == []
