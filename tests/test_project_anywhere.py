"""A project runs the same wherever it lives on disk, for root and for a normal user.

Each OS provider runs a real program from a project made under several roots: the home
directory, ``/var/tmp`` (firejail used to mount its own tmpfs there and lose the
project), ``/srv``, ``/opt``, a directory whose name holds a space, and ``/var/log``
(firejail's skeleton tmpfs). The program reads a file of the project, writes into an
``expose-rw`` subdirectory (the write must reach the host), is refused a write into the
read-only part, and reports its working directory. A root the user running the tests
cannot write to (``/srv`` for a normal user) is not a case of this run: the unprivileged
CI pass runs the roots it owns (its home directory and ``/var/tmp``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pysb_core.testing import Project, profile_lines, require_provider

PROVIDERS = ("landlock", "bwrap", "unshare", "firejail")
ROOTS = ("~", "/var/tmp", "/srv", "/opt", "/var/tmp/a dir with spaces", "/var/log")


def _usable_roots() -> list[str]:
    """The roots this user can make a project in (creating the one with spaces)."""
    out = []
    for root in ROOTS:
        path = os.path.expanduser(root)
        parent = path if os.path.isdir(path) else os.path.dirname(path)
        if os.path.isdir(parent) and os.access(parent, os.W_OK | os.X_OK):
            out.append(root)
    return out


@pytest.fixture
def project_at(request: pytest.FixtureRequest) -> Iterator[Project]:
    root = os.path.expanduser(request.param)
    os.makedirs(root, exist_ok=True)
    made = Path(tempfile.mkdtemp(prefix="pysb-anywhere-", dir=root))
    try:
        yield Project(made)
    finally:
        shutil.rmtree(made, ignore_errors=True)
        if request.param.endswith("spaces"):
            try:
                os.rmdir(root)
            except OSError:
                pass  # another run's project is still there


PROGRAM = """\
import os
print(open("data/in.txt").read().strip())
with open("out/written.txt", "w") as f:
    f.write("from inside")
try:
    open("data/not-here.txt", "w")
except OSError as exc:
    print("refused", exc.errno)
print(os.getcwd())
"""


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("project_at", _usable_roots(), indirect=True)
def test_project_runs_from_anywhere(project_at: Project, provider: str) -> None:
    require_provider(provider)
    project = project_at
    project.file("data/in.txt", "read me")
    (project.root / "out").mkdir()
    project.file("app.py", PROGRAM)
    project.profile(
        profile_lines(
            "version: 1",
            "files: {expose-ro: [.], expose-rw: [./out]}",
            "imports: [os]",
        )
    )
    res = project.run("run", "--provider", provider, "app.py")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "read me", res.stdout
    assert lines[1].startswith("refused"), res.stdout
    assert lines[2] == str(project.root), res.stdout
    assert (project.root / "out" / "written.txt").read_text() == "from inside"
    assert not (project.root / "data" / "not-here.txt").exists()


OWN_NAMES_PROGRAM = """\
import os, socket, sys
for attempt in (
    lambda: open("/etc/hostname"),
    lambda: socket.create_connection(("127.0.0.1", 9)),
    lambda: os.system("true"),
):
    try:
        attempt()
    except Exception as exc:
        print(type(exc).__module__, type(exc).__name__)
import json, email.message  # imports judged after the program's sys.path[0] is set
print("done")
"""


@pytest.mark.parametrize("provider", ("subprocess", "landlock", "bwrap"))
@pytest.mark.parametrize("how", ("-c", "script", "-m"))
def test_a_project_holding_packages_named_like_pysbs_own(
    project: Project, provider: str, how: str, pysb_python: str
) -> None:
    """The working directory is the program's sys.path[0] (``-c``, ``-m``; the script's
    directory for a script), and a project such as the pysb checkout itself holds packages
    named like pysb's: pysb's own imports in the sandbox come from pysb's roots, never
    from there (before, every guarded run failed at set-up, ModuleNotFoundError)."""
    if provider != "subprocess":
        require_provider(provider)
    for package in ("pysb_core", "pysb_core/child", "pysb_guards", "pysb_landlock"):
        project.file(f"{package}/__init__.py", "raise SystemExit('the project package ran')\n")
    project.file("app.py", OWN_NAMES_PROGRAM)
    project.profile(
        profile_lines(
            "version: 1",
            "files: {expose-ro: [.]}",
            'imports: ["*"]',
            "network: [allow tcp 127.0.0.1 80 out]",
        )
    )
    program = {"-c": ["-c", OWN_NAMES_PROGRAM], "script": ["app.py"], "-m": ["-m", "app"]}[how]
    res = project.run("run", "--provider", provider, *program, python=pysb_python)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "pysb_core.errors FileDeniedError",
        "pysb_core.errors NetworkDeniedError",
        "pysb_core.errors ApiDeniedError",
        "done",
    ], res.stdout + res.stderr
