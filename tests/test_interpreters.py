"""pysb runs from the virtual environments people actually have, on every OS provider.

Each kind has its own chain of symlinks from ``VENV/bin/python`` to the real binary, its
own ``pyvenv.cfg`` and a base prefix elsewhere on disk, and every provider has to expose
exactly that chain, the standard library and its extension modules:

- a venv of Debian's ``/usr/bin/python3`` (``python3 -m venv``; python3-venv);
- a venv of a pyenv build (``--enable-shared``: ``libpython`` beside it, found through
  the binary's RUNPATH);
- uv's venvs (``uv venv --python ...``) of both: ``bin/python`` links straight to the base
  interpreter, ``python3`` and ``python3.X`` link to ``python``.

pysb itself comes into each venv as a ``.pth`` line adding the dev venv's site-packages
(its editable installs and dependencies). The pyenv build is ``~/.pyenv/versions/3.12*``
of whoever runs the tests (CI's unprivileged pass gets a copy of root's:
scripts/test-unprivileged.sh), or ``PYSB_TEST_PYENV_PYTHON``.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pysb_core.testing import BASE_ENV, require_provider, trust_profile

PROVIDERS = ["landlock", "bwrap", "unshare", "firejail", "qemu"]
DEBIAN_PYTHON = "/usr/bin/python3"


def pyenv_python() -> str | None:
    named = os.environ.get("PYSB_TEST_PYENV_PYTHON")
    if named:
        return named
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3")))
    return found[-1] if found else None


def _uv() -> str | None:
    path = Path(sys.executable).with_name("uv")
    return str(path) if path.exists() else shutil.which("uv")


def _make(kind: str, where: Path) -> Path:
    """Create the venv ``kind`` under ``where``; return its directory."""
    venv = where / kind
    base = DEBIAN_PYTHON if kind.endswith("debian") else pyenv_python()
    if base is None or not os.access(base, os.X_OK):
        pytest.skip(f"{kind}: no such interpreter here ({base or 'no pyenv 3.12 build'})")
    if kind.startswith("uv"):
        uv = _uv()
        if uv is None:
            pytest.skip("uv is not installed (make dev installs it)")
        cmd = [uv, "venv", "-q", "--python", base, str(venv)]
    else:
        cmd = [base, "-m", "venv", "--without-pip", str(venv)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    (purelib,) = glob.glob(str(venv / "lib" / "python3.*" / "site-packages"))
    dev = [p for p in site.getsitepackages() if p.startswith(sys.prefix)]
    lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in dev)
    Path(purelib, "pysb_dev.pth").write_text(lines)
    return venv


KINDS = ["venv-debian", "venv-pyenv", "uv-debian", "uv-pyenv"]


@pytest.fixture(scope="module")
def home_tmp() -> Iterator[Path]:
    """In the home directory: the qemu guest's private /tmp would hide anything below the
    host's /tmp."""
    where = Path(tempfile.mkdtemp(prefix=".pysb-interp-", dir=Path.home()))
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture(scope="module")
def venvs() -> dict[str, Path]:
    """The venvs made so far (each kind on first use), shared by the module's tests."""
    return {}


PROGRAM = """
import sys, json, ssl, sqlite3, decimal
print(sys.prefix)
print(sys.prefix != sys.base_prefix, "%d.%d" % sys.version_info[:2])
print(sqlite3.connect(":memory:").execute("select 6*7").fetchone()[0])
"""


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("kind", KINDS)
def test_venv_kind_runs_under_provider(
    kind: str, provider: str, venvs: dict[str, Path], home_tmp: Path
) -> None:
    require_provider(provider)
    if kind not in venvs:
        venvs[kind] = _make(kind, home_tmp)
    venv = venvs[kind]
    project = home_tmp / f"project-{kind}-{provider}"
    project.mkdir()
    (project / "app.py").write_text(PROGRAM)
    (project / ".pysb.yaml").write_text("version: 1\nimports: [sys, json, ssl, sqlite3, decimal]\n")
    trust_profile(project / ".pysb.yaml")  # found, not named: used once trusted
    done = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pysb_core",
            "run",
            "--profile",
            ".pysb.yaml",
            "--provider",
            provider,
            "app.py",
        ],
        cwd=project,
        env=BASE_ENV,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == str(venv), done.stdout
    assert lines[1].startswith("True "), done.stdout
    assert lines[2] == "42"


def test_the_loaded_libpython_is_exposed_wherever_it_lives() -> None:
    """A relocated build loads libpython from beside it, not from the LIBDIR it was
    configured with (a copied pyenv build, python-build-standalone under uv): pysb exposes
    the file the kernel mapped."""
    from pysb_core.launch.pyenv import mapped_libpython, python_paths

    mapped = mapped_libpython()
    if not mapped:  # Debian's python3 has libpython linked into its binary
        pytest.skip("this interpreter maps no libpython (linked into the binary)")
    assert all(os.path.basename(p).startswith("libpython") for p in mapped)
    files, _ = python_paths()
    assert {os.path.realpath(p) for p in mapped} <= set(files)


@pytest.mark.parametrize(
    "python",
    [sys.executable, *(p for p in ("/usr/bin/python3",) if os.path.exists(p))],
    ids=["this-venv", "system"],
)
def test_the_installation_is_exposed_without_sysconfig(python: str, tmp_path: Path) -> None:
    """Start-up cost: the standard library, ``lib-dynload`` and the site-packages come from
    the interpreter (``sys._stdlib_dir``, ``site.getsitepackages()``, the mapped libpython)
    without importing ``sysconfig``; every directory sysconfig names that exists is still
    covered, and so is the file the interpreter loaded its libpython from."""
    root = Path(__file__).resolve().parent.parent
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(root)!r})\n"
        "from pysb_core.launch.pyenv import mapped_libpython, python_paths\n"
        "files, dirs = python_paths()\n"
        "loaded = 'sysconfig' in sys.modules\n"
        "import sysconfig\n"
        "p = sysconfig.get_paths()\n"
        "want = [p['stdlib'], p['purelib'], p['platlib']]\n"
        "if sys.prefix == sys.base_prefix:  # in a venv: the venv's lib/pythonX.Y, no stdlib\n"
        "    want += [p['platstdlib'], p['platstdlib'] + '/lib-dynload']\n"
        "print(json.dumps([loaded, files, dirs, want, mapped_libpython()]))\n"
    )
    out = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, timeout=60, check=True, cwd=tmp_path
    )
    loaded, files, dirs, want, mapped = json.loads(out.stdout)
    assert not loaded
    from pysb_core.linux.paths import is_within

    for path in want:
        if os.path.isdir(path) and os.listdir(path):
            real = os.path.realpath(path)
            assert any(is_within(real, d) for d in dirs), (path, dirs)
    assert {os.path.realpath(p) for p in mapped} <= set(files)


def test_canonical_is_realpath_of_what_exists(tmp_path: Path) -> None:
    """The kernel's name of a path (``open(O_PATH)``) is ``os.path.realpath``'s, through
    links, relative names, ``..`` and links to links; a missing path or a file asked for
    as a directory is None."""
    import os

    from pysb_core.launch.pyenv import canonical

    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "real" / "f").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "rel").symlink_to("link/sub")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    cases = ["link", "rel", "link/../real/f", "link/f", "real/sub/..", "."]
    saved = os.getcwd()
    os.chdir(tmp_path)
    try:
        for name in cases:
            assert canonical(name) == os.path.realpath(name), name
        assert canonical("rel", directory=True) == os.path.realpath("rel")
        assert canonical("link/f", directory=True) is None
        assert canonical("dangling") is None and canonical("nowhere") is None
        assert canonical("") is None
    finally:
        os.chdir(saved)
