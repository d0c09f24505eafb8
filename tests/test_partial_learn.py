"""Partial mode learning: ``sandboxes(learn=PATH)`` writes the profile when it stops."""

from __future__ import annotations

from pathlib import Path

from pysb_core import sandboxes
from pysb_core.remote.testkit import write_module

FUNCTIONS = """
from pysb_core import sandbox

@sandbox
def compute(x):
    import json
    return json.loads(json.dumps([x, x]))
"""


def test_learning_writes_the_profile_when_the_sandbox_stops(tmp_path: Path, capsys):
    mod = write_module(tmp_path, FUNCTIONS)
    learned = tmp_path / "learned.yaml"
    with sandboxes(learn=str(learned), cwd=str(tmp_path)):
        assert mod.compute(3) == [3, 3]
        assert not learned.exists()  # written at the end, not before
    text = learned.read_text()
    assert "version: 1" in text
    assert "learned.yaml" in capsys.readouterr().err  # says what it wrote
    # the written profile is then enforced (no longer a learning run) and the call works
    with sandboxes(profile=str(learned), cwd=str(tmp_path), provider="subprocess"):
        assert mod.compute(4) == [4, 4]
