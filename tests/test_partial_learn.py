"""Partial mode learning: ``sandboxes(learn=PATH)`` writes the profile when it stops."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pysb_core import sandboxes
from pysb_core.testing.partial import write_module

FUNCTIONS = """
from pysb_core import sandbox

@sandbox
def compute(x):
    import json
    return json.loads(json.dumps([x, x]))
"""


@pytest.mark.parametrize("bytecode", [False, True], ids=["source", "bytecode"])
def test_learning_writes_the_profile_when_the_sandbox_stops(
    tmp_path: Path, capsys, monkeypatch, bytecode: bool
):
    """Whether the worker imports the functions' module from its source or from a
    ``__pycache__`` the host wrote (PYTHONDONTWRITEBYTECODE decides), the profile learned
    lets the next run import it."""
    monkeypatch.chdir(tmp_path)  # learned ./ paths are relative to the working directory
    mod = write_module(tmp_path, FUNCTIONS)
    if bytecode:
        import py_compile

        py_compile.compile(mod.__file__, doraise=True)
    else:
        shutil.rmtree(tmp_path / "__pycache__", ignore_errors=True)
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


def test_sigterm_stops_the_worker_writes_learned_rules_and_dies_by_the_signal(tmp_path: Path):
    import signal
    import subprocess
    import sys

    from pysb_core.testing.partial import descendants, wait_for_file

    write_module(tmp_path, FUNCTIONS, prefix="sigmod")
    mod_name = next(p.stem for p in tmp_path.glob("sigmod_*.py"))
    learned, ready = tmp_path / "learned.yaml", tmp_path / "ready"
    (tmp_path / "app.py").write_text(
        f"import sys, time\nsys.path.insert(0, {str(tmp_path)!r})\n"
        f"import {mod_name} as m\nfrom pysb_core import sandboxes\n"
        f"with sandboxes(learn={str(learned)!r}, cwd={str(tmp_path)!r}) as s:\n"
        "    m.compute(1)\n"
        f"    open({str(ready)!r}, 'w').write(str(s.pid))\n"
        "    time.sleep(60)\n"
    )
    log = (tmp_path / "stderr.txt").open("w")
    app = subprocess.Popen([sys.executable, str(tmp_path / "app.py")], stderr=log)
    try:
        worker = int(wait_for_file(ready, timeout=60))
        assert worker in descendants(app.pid)
        app.send_signal(signal.SIGTERM)  # our own child, by its PID
        app.wait(timeout=60)
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
        log.close()
    assert app.returncode == -signal.SIGTERM, (tmp_path / "stderr.txt").read_text()
    assert learned.exists()
    assert not Path(f"/proc/{worker}").exists()
