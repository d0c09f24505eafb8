"""The program's own modules: what CPython resolves from ``sys.path[0]`` for a directory or
a zip file run as a script, and a ``-m`` package with its subpackages. Each program runs
under the guards (with no `imports` at all) and under plain ``python``: same output."""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path

import guarded
import pytest

MAIN = (
    "import sys\n"
    "import util\n"
    "from sub import m\n"
    "from sub.deeper import leaf\n"
    "print('main', __name__, util.X, m.Y, leaf.Z, sys.path[0] == {path0!r})\n"
    "try:\n"
    "    import {name}\n"
    "except ImportError as e:\n"
    "    print('no', type(e).__name__ in ('ModuleNotFoundError', 'ImportDeniedError'))\n"
    "else:\n"
    "    print('yes')\n"
    "try:\n"
    "    import csv\n"
    "except ImportError:\n"
    "    print('csv refused')\n"
)


def _tree(root: Path) -> dict[str, str]:
    return {
        "util.py": "X = 1\n",
        "sub/__init__.py": "",
        "sub/m.py": "from . import deeper\nY = 2\n",
        "sub/deeper/__init__.py": "",
        "sub/deeper/leaf.py": "from util import X\nZ = X + 2\n",
    }


def _plain(python: str, args: list[str], cwd: Path) -> str:
    out = subprocess.run([python, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _guarded(python: str, cwd: Path, **kw) -> str:
    res = guarded.run(
        "", imports=None, cwd=cwd, exposures=[guarded.expose(cwd)], python=python, **kw
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


@pytest.mark.parametrize("spelling", ["app", "app/", "ABS"])
def test_directory_with_main_imports_its_siblings(
    tmp_path: Path, python: str, spelling: str
) -> None:
    app = tmp_path / "app"
    arg = str(app) if spelling == "ABS" else spelling
    path0 = os.path.join(str(tmp_path), arg)  # as CPython: joined, not normalised
    for rel, text in _tree(app).items():
        (app / rel).parent.mkdir(parents=True, exist_ok=True)
        (app / rel).write_text(text)
    (app / "__init__.py").write_text("")
    (app / "__main__.py").write_text(MAIN.format(path0=path0, name="app"))
    plain = _plain(python, [arg], tmp_path).replace("csv refused\n", "")
    sandboxed = _guarded(python, tmp_path, script=arg)
    assert plain.startswith("main __main__ 1 2 3 True\nno True\n"), plain
    assert sandboxed == plain + "csv refused\n"


def test_zip_application_imports_its_members(tmp_path: Path, python: str) -> None:
    zpath = tmp_path / "app.pyz"
    with zipfile.ZipFile(zpath, "w") as z:
        for rel, text in _tree(tmp_path).items():
            z.writestr(rel, text)
        z.writestr("__main__.py", MAIN.format(path0=str(zpath), name="app"))
    plain = _plain(python, ["app.pyz"], tmp_path).replace("csv refused\n", "")
    sandboxed = _guarded(python, tmp_path, script="app.pyz")
    assert plain.startswith("main __main__ 1 2 3 True\nno True\n"), plain
    assert sandboxed == plain + "csv refused\n"


def test_module_package_with_subpackages(tmp_path: Path, python: str) -> None:
    pkg = tmp_path / "pkg"
    files = {
        "__init__.py": "",
        "__main__.py": (
            "from pkg import util\nfrom pkg.sub import m\nfrom .sub.deeper import leaf\n"
            "import pkg.sub.deeper.leaf as again\n"
            "print('main', __name__, util.X, m.Y, leaf.Z, again is leaf)\n"
        ),
        "util.py": "X = 1\n",
        "sub/__init__.py": "",
        "sub/m.py": "from . import deeper\nY = 2\n",
        "sub/deeper/__init__.py": "",
        "sub/deeper/leaf.py": "from pkg.util import X\nZ = X + 2\n",
    }
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    plain = _plain(python, ["-m", "pkg"], tmp_path)
    assert plain == "main __main__ 1 2 3 True\n"
    assert _guarded(python, tmp_path, module="pkg") == plain
    assert _guarded(python, tmp_path, module="pkg.sub.m") == _plain(
        python, ["-m", "pkg.sub.m"], tmp_path
    )


def test_a_directory_does_not_make_library_names_the_programs(tmp_path: Path, python: str) -> None:
    """A sibling named like a standard module or pysb's own is not taken for the program's:
    CPython would not load it from there either when the real one is loaded."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "csv.py").write_text("print('local csv')\n")
    (app / "pysb_guards").mkdir()
    (app / "pysb_guards" / "__init__.py").write_text("")
    (app / "__main__.py").write_text(
        "for name in ('csv', 'pysb_guards'):\n"
        "    try:\n        __import__(name)\n"
        "    except ImportError as e:\n        print('refused', name, type(e).__name__)\n"
        "    else:\n        print('imported', name)\n"
    )
    out = _guarded(python, tmp_path, script="app")
    assert "refused csv ImportDeniedError" in out
    assert "refused pysb_guards ImportDeniedError" in out
