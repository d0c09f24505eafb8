"""The default provider (``auto``) is an OS sandbox: a run that names no provider is confined.

Issue 27: the default was ``subprocess`` (no OS boundary). A learned profile of a program
that starts ``/bin/ls`` allows ``subprocess.run`` and exposes ``/usr/bin``; under that
default a child ``cat`` read a never-exposed secret and a child ``python3`` connected to a
port no rule allows. Here the same program runs with no ``--provider``: the children are
confined by the kernel, whichever provider ``auto`` chose on this machine (bwrap first), as
root and, in CI's second pass (scripts/test-unprivileged.sh), as a normal user. The same
run under ``--provider subprocess`` shows the test can fail: there the children get through.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from pysb_core.launch.autoprovider import ORDER
from pysb_core.testing import LoopbackServer, Project, note_provider

#: What a learned profile of a program that runs /bin/cat and a child python looks like.
PROFILE = """\
version: 1
imports: [subprocess, sys]
api:
  allow: [process-exec]
files:
  expose-ro: [., /usr/bin]
"""

#: The program: a child ``cat`` of the secret, then a child python connecting to ``port``.
PROGRAM = """\
import subprocess, sys
secret, port = sys.argv[1], sys.argv[2]
cat = subprocess.run(["/bin/cat", secret], capture_output=True, text=True)
print("cat:", cat.returncode, cat.stdout.strip())
connect = (
    "import socket, sys\\n"
    "try:\\n"
    "    socket.create_connection(('127.0.0.1', int(sys.argv[1])), 3).recv(3)\\n"
    "    print('connected')\\n"
    "except OSError as exc:\\n"
    "    print('refused', type(exc).__name__)\\n"
)
child = subprocess.run([sys.executable, "-c", connect, port], capture_output=True, text=True)
print("python:", child.stdout.strip() or child.stderr.strip()[-200:])
"""


@pytest.fixture
def secret_project(project: Project, tmp_path: Path) -> tuple[Project, Path]:
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("s3cr3t-27\n")
    project.profile(PROFILE)
    project.file("app.py", PROGRAM)
    return project, secret


def _auto_provider(project: Project) -> str:
    """The provider ``auto`` chooses here for the project's profile (``pysb check``)."""
    r = project.run("check", "--json")
    data = json.loads(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    assert data["provider"] in ORDER and data["auto"]["order"] == list(ORDER), data
    note_provider(data["provider"])
    return str(data["provider"])


def test_a_run_that_names_no_provider_confines_its_children(
    secret_project: tuple[Project, Path],
) -> None:
    project, secret = secret_project
    chosen = _auto_provider(project)
    server = LoopbackServer()
    try:
        r = project.run("run", "--verbose", "app.py", str(secret), str(server.port))
        assert server.accepted == 0, r.stdout
    finally:
        server.close()
    assert r.returncode == 0, r.stderr
    assert f"provider '{chosen}' chosen by 'auto'" in r.stderr
    assert "s3cr3t-27" not in r.stdout + r.stderr
    lines = dict(line.split(": ", 1) for line in r.stdout.splitlines())
    assert not lines["cat"].startswith("0"), r.stdout  # cat failed: no such file here
    assert lines["python"].startswith("refused"), r.stdout


def test_the_same_run_under_subprocess_is_not_confined(
    secret_project: tuple[Project, Path],
) -> None:
    """What the default was: the Python guards do not follow a child program."""
    project, secret = secret_project
    server = LoopbackServer()
    try:
        r = project.run("run", "--provider", "subprocess", "app.py", str(secret), str(server.port))
    finally:
        server.close()
    assert r.returncode == 0, r.stderr
    assert "cat: 0 s3cr3t-27" in r.stdout
    assert "python: connected" in r.stdout


def test_check_names_the_choice_and_what_it_skipped(project: Project) -> None:
    project.profile("version: 1\nfiles:\n  expose-ro: [.]\n")
    r = project.run("check")
    assert r.returncode == 0, r.stderr
    provider_line = next(line for line in r.stdout.splitlines() if line.startswith("provider:"))
    assert provider_line.endswith("(chosen by auto)")
    assert "chosen by 'auto' (the first of bwrap, unshare, landlock, firejail" in r.stdout


def test_a_named_provider_is_never_swapped(project: Project, tmp_path: Path) -> None:
    """`--provider X` that cannot run here is refused, not replaced by what auto would pick."""
    project.profile("version: 1\n")
    empty_path = tmp_path / "empty-bin"
    empty_path.mkdir()
    env = {"PATH": str(empty_path)}  # no bwrap binary on PATH
    r = project.run("run", "--provider", "bwrap", "-c", "print('ran')", env=env)
    assert r.returncode == 125 and "ran" not in r.stdout, r.stderr
    assert "bwrap" in r.stderr


def test_auto_skips_what_cannot_run_here_and_says_why(project: Project, tmp_path: Path) -> None:
    """With no bwrap binary on PATH, auto goes down its order and says why it skipped
    bwrap; with none left the run is refused, never run under subprocess."""
    project.profile("version: 1\nfiles:\n  expose-ro: [.]\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(sys.executable, bin_dir / "python3")
    env = {"PATH": str(bin_dir)}
    r = project.run("run", "--verbose", "-c", "print('ran')", env=env)
    assert "bwrap: cannot run here: bubblewrap (bwrap) is not installed" in r.stderr
    if r.returncode == 0:  # the next one in the order (unshare looks in /usr/bin too)
        chosen = r.stderr.split("provider '", 1)[1].split("'", 1)[0]
        assert chosen in ORDER[1:] and f"'{chosen}' chosen by 'auto'" in r.stderr
        assert r.stdout == "ran\n"
    else:
        assert r.returncode == 125 and "ran" not in r.stdout, r.stderr
        assert "no OS sandbox can run this profile here" in r.stderr
        assert "--provider subprocess" in r.stderr and "fix:" in r.stderr


def test_an_unset_provider_variable_is_refused_at_its_line(project: Project) -> None:
    """`provider: ${UNSET}` used to run under subprocess, silently."""
    project.profile("version: 1\nprovider: ${PYSB_TEST_UNSET_PROVIDER}\n")
    r = project.run("run", "-c", "print('ran')")
    assert r.returncode == 125 and "ran" not in r.stdout
    assert ".pysb.yaml:2: provider: ${PYSB_TEST_UNSET_PROVIDER} is unset" in r.stderr
    assert "Traceback" not in r.stderr


def test_an_empty_pysb_provider_means_unset(project: Project) -> None:
    """`PYSB_PROVIDER= pysb run` is what a shell user writes to unset it: auto, not an error."""
    project.profile("version: 1\n")
    r = project.run("run", "--verbose", "-c", "pass", env={"PYSB_PROVIDER": ""})
    assert r.returncode == 0, r.stderr
    assert "chosen by 'auto'" in r.stderr


def test_learning_still_uses_subprocess_and_says_so(project: Project) -> None:
    r = project.run("run", "--learn", "-c", "pass")
    assert r.returncode == 0, r.stderr
    assert "WITHOUT a sandbox (provider 'subprocess' instead of the default 'auto'" in r.stderr
