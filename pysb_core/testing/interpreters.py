"""``pysb run`` on each interpreter the tests cover (3.11, 3.12, 3.13).

What differs between CPython versions inside the sandbox (frames, import machinery,
hooks printed in C or in Python) is pysb's to keep equal, so a compatibility fix is
checked on every version at hand: the ``pysb_python`` fixture is, for each of them, a
Python whose ``-m pysb_core`` is this checkout's pysb -- the interpreter running the
tests, and venvs of pyenv's 3.12 and 3.13 builds whose ``.pth`` adds the tests' own
site-packages (as tests/test_interpreters.py makes its venvs). A version missing here
is a skip. ``PYSB_TEST_PYENV_ROOT`` names another pyenv root.
"""

from __future__ import annotations

import glob
import os
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

#: The minor versions the compatibility tests run on.
VERSIONS = ("3.11", "3.12", "3.13")


def _pyenv_build(version: str) -> str | None:
    root = os.environ.get("PYSB_TEST_PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", "python3")))
    return found[-1] if found else None


def _make_venv(base: str, where: Path) -> str:
    venv = where / "venv"
    done = subprocess.run(
        [base, "-m", "venv", "--without-pip", str(venv)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (purelib,) = glob.glob(str(venv / "lib" / "python3.*" / "site-packages"))
    dev = [p for p in site.getsitepackages() if p.startswith(sys.prefix)]
    lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in dev)
    Path(purelib, "pysb_dev.pth").write_text(lines)
    return str(venv / "bin" / "python")


@pytest.fixture(scope="session")
def _pysb_venvs() -> Iterator[dict[str, str]]:
    """version -> the venv's python, made on first use below one directory of the home
    (the qemu guest's private /tmp would hide one below the host's /tmp)."""
    where = Path(tempfile.mkdtemp(prefix=".pysb-pythons-", dir=Path.home()))
    made: dict[str, str] = {"": str(where)}
    try:
        yield made
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture(params=VERSIONS)
def pysb_python(request: pytest.FixtureRequest, _pysb_venvs: dict[str, str]) -> str:
    """A Python of each version in ``VERSIONS`` that runs this pysb (``-m pysb_core``)."""
    version = request.param
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version:
        return sys.executable
    if version not in _pysb_venvs:
        base = _pyenv_build(version)
        if base is None:
            pytest.skip(f"no Python {version} build here (pyenv)")
        where = Path(_pysb_venvs[""], version)
        where.mkdir()
        _pysb_venvs[version] = _make_venv(base, where)
    return _pysb_venvs[version]
