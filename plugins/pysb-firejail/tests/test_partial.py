"""Partial mode under firejail: ``@sandbox`` functions run in a worker inside firejail.

With the Python layer off, only firejail can refuse, so these show the worker's view of
files, environment and network is the profile's, while calls, output and exceptions
cross as under any provider.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pysb_core import sandboxes
from pysb_core.testing import LoopbackServer, require_provider
from pysb_core.testing.partial import write_module

FUNCTIONS = """
import os, socket, subprocess
from pysb_core import sandbox

@sandbox
def read(path):
    with open(path) as f:
        return f.read()

@sandbox
def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return True

@sandbox
def environment():
    return dict(os.environ), subprocess.run(["/usr/bin/env"], capture_output=True,
                                            text=True).stdout

@sandbox
def connect(port):
    s = socket.socket()
    s.settimeout(5)
    return s.connect_ex(("127.0.0.1", port))

@sandbox
def fail():
    raise KeyError("inside")
"""


@pytest.fixture
def box(tmp_path: Path):
    require_provider("firejail")
    project = tmp_path / "project"
    (project / "out").mkdir(parents=True)
    mod = write_module(project, FUNCTIONS)
    profile = project / ".pysb.yaml"
    profile.write_text(
        "version: 1\n"
        "provider: firejail\n"
        f"files: {{expose-ro: [{project}], expose-rw: [{project / 'out'}]}}\n"
        "env: {GREETING: hi}\n"
    )
    kwargs = {
        "profile": str(profile),
        "cwd": str(project),
        "python_guards": False,
        "environ": {"PATH": "/usr/bin:/bin", "HOST_SECRET": "leak"},
        "start_timeout": 120.0,
    }
    return mod, project, kwargs


def test_worker_sees_only_the_profiles_files_and_environment(box, tmp_path: Path) -> None:
    mod, project, kwargs = box
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    (project / "data.txt").write_text("data")
    with sandboxes(**kwargs):
        assert mod.read(str(project / "data.txt")) == "data"
        with pytest.raises(FileNotFoundError):
            mod.read(str(secret))
        assert mod.write(str(project / "out" / "x.txt"), "written")
        with pytest.raises(OSError):
            mod.write(str(project / "y.txt"), "no")
        env, native = mod.environment()
        with pytest.raises(KeyError, match="inside"):
            mod.fail()
    assert (project / "out" / "x.txt").read_text() == "written"
    assert not (project / "y.txt").exists()
    # TMPDIR: the private temporary directory every sandbox gets (pysb_core.launch.tmpdir).
    assert env.pop("TMPDIR") == "/tmp"
    assert env == {"GREETING": "hi"}
    assert [ln for ln in native.splitlines() if not ln.startswith("TMPDIR=")] == ["GREETING=hi"]


def test_worker_has_no_network(box) -> None:
    mod, _, kwargs = box
    server = LoopbackServer()
    try:
        with sandboxes(**kwargs):
            assert mod.connect(server.port) != 0
        assert server.accepted == 0
    finally:
        server.close()
