"""An exposure redirected between runs (issue 22, item 1), under real providers.

The profile exposes the project read-only, ``./rw`` read-write, and ``./rw/data/inputs``
read-only. Run 1 makes a symbolic link ``rw/x/y/z/L -> ../../..`` (it resolves inside
``rw``: allowed), moves it to ``rw/stage/inputs`` (where the same text now points above
the project) and swaps ``rw/stage`` in for ``rw/data``. Every step is a write inside the
read-write exposure, which both layers allow.

Run 2, with the same profile, used to resolve ``./rw/data/inputs`` canonically -- through
the planted link, to the directory above the project -- and expose *that* to both layers
on every provider: the secret next to the project was read. Now the run is refused (exit
125) before anything starts, naming the profile line, the link and the read-write
exposure that holds it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pysb_core.testing import BASE_ENV, pysb_command, require_provider

PROVIDERS = ["subprocess", "landlock", "bwrap", "unshare", "firejail"]
SECRET = "TOP-SECRET-REDIRECTED-EXPOSURE"

PROFILE = """\
version: 1
imports: [os]
files:
  expose-ro: [., ./rw/data/inputs]
  expose-rw: [./rw]
"""

#: Run 1: a link that resolves inside, moved to where it points outside.
REDIRECT = """\
import os
os.makedirs("rw/x/y/z")
os.symlink("../../..", "rw/x/y/z/L")
os.mkdir("rw/stage")
os.rename("rw/x/y/z/L", "rw/stage/inputs")
os.rename("rw/data", "rw/old")
os.rename("rw/stage", "rw/data")
print("redirected")
"""

#: Run 2: read through the exposure.
SHOW = """\
try:
    print(open("rw/data/inputs/secret.txt").read())
except OSError as e:
    print("refused", type(e).__name__)
"""


def _pysb(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*pysb_command(), *args],
        cwd=cwd,
        env=BASE_ENV,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_exposure_redirected_by_one_run_is_refused_by_the_next(
    tmp_path: Path, provider: str
) -> None:
    if provider != "subprocess":
        require_provider(provider)
    (tmp_path / "secret.txt").write_text(SECRET)  # beside the project, never exposed
    project = tmp_path / "project"
    (project / "rw" / "data" / "inputs").mkdir(parents=True)
    (project / ".pysb.yaml").write_text(PROFILE)
    (project / "redirect.py").write_text(REDIRECT)
    (project / "show.py").write_text(SHOW)
    run = ("run", "--profile", ".pysb.yaml", "--provider", provider)

    first = _pysb(*run, "redirect.py", cwd=project)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "redirected\n"
    assert (project / "rw" / "data" / "inputs").is_symlink()

    second = _pysb(*run, "show.py", cwd=project)
    assert SECRET not in second.stdout + second.stderr
    assert second.returncode == 125, second.stdout + second.stderr
    assert (
        ".pysb.yaml:4: files.expose-ro: './rw/data/inputs' is reached through the symbolic link"
        in second.stderr
    )
    assert f"{project / 'rw' / 'data' / 'inputs'} -> ../../.." in second.stderr
    assert f"read-write exposure {project / 'rw'} (.pysb.yaml:5)" in second.stderr


RW_PROFILE = """\
version: 1
imports: [os]
files:
  expose-ro: [.]
  expose-rw: [./rw, ./rw/data/inputs]
"""

#: Run 2 of the read-write variant: write through the exposure, above the project.
WRITE = """\
try:
    open("rw/data/inputs/planted.txt", "w").write("written from the sandbox")
    print("wrote")
except OSError as e:
    print("refused", type(e).__name__)
"""


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_read_write_exposure_redirected_by_one_run_is_refused_by_the_next(
    tmp_path: Path, provider: str
) -> None:
    """The same move on an ``expose-rw`` entry would give write access anywhere."""
    if provider != "subprocess":
        require_provider(provider)
    project = tmp_path / "project"
    (project / "rw" / "data" / "inputs").mkdir(parents=True)
    (project / ".pysb.yaml").write_text(RW_PROFILE)
    (project / "redirect.py").write_text(REDIRECT)
    (project / "write.py").write_text(WRITE)
    run = ("run", "--profile", ".pysb.yaml", "--provider", provider)

    first = _pysb(*run, "redirect.py", cwd=project)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "redirected\n"

    second = _pysb(*run, "write.py", cwd=project)
    assert not (tmp_path / "planted.txt").exists()  # beside the project: never writable
    assert second.returncode == 125, second.stdout + second.stderr
    assert "files.expose-rw: './rw/data/inputs' is reached through the symbolic link" in (
        second.stderr
    )
