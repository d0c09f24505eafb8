"""An outside review's Python-layer escapes (issue 22), on every interpreter: the attacks of
tests/security/review_escapes.py in a real child interpreter with the guards installed
(tests/security/test_review_escapes.py runs them under ``pysb run`` and the providers)."""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

import guarded
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "security"))
import review_escapes


@pytest.mark.parametrize("label", list(review_escapes.CASES))
def test_review_escape_held(label: str, python: str, tmp_path: Path) -> None:
    case = review_escapes.CASES[label]
    token = secrets.token_hex(8)
    outside, project = tmp_path / "outside", tmp_path / "project"
    for d in (outside, project / "pub" / "sub", project / "rw"):
        d.mkdir(parents=True)
    (outside / "secret.txt").write_text(f"TOP-SECRET-{token}\n")
    (project / "secret.txt").write_text(f"PROJECT-SECRET-{token}\n")
    readable = project if case.project_ro else project / "pub"
    res = guarded.run(
        review_escapes.program(case.code, str(outside / "secret.txt"), str(outside), str(project)),
        imports=case.imports,
        exposures=(guarded.expose(readable), guarded.expose(project / "rw", rw=True)),
        api=tuple(("allow", a) for a in case.api),
        cwd=project,
        python=python,
    )
    out = res.stdout + res.stderr
    assert "held" in res.stdout, out
    assert "ESCAPED" not in out, out
    assert token not in out, out
    if case.refused is not None:
        assert review_escapes.refusals(res.stdout) == case.refused, out
    for line in case.controls:
        assert line in res.stdout, out


def test_site_packages_extension_modules_still_load(tmp_path: Path) -> None:
    """The control of the extension-module judgment: a compiled module of an installed
    package (below site-packages, under its own dotted name) imports as before."""
    try:
        from yaml import _yaml  # noqa: F401 - only its presence matters
    except ImportError:
        pytest.skip("PyYAML without its C extension here")
    res = guarded.run(
        "from yaml import _yaml\nprint('loaded', _yaml.__name__)",
        imports=("yaml",),
        cwd=tmp_path,
    )
    assert res.stdout.strip() == "loaded yaml._yaml", res.stdout + res.stderr


@pytest.mark.parametrize("module", ["sqlite3", "ssl"])
def test_imports_made_by_an_extension_initialising_are_its_own(
    module: str, python: str, tmp_path: Path
) -> None:
    """``_sqlite3`` imports ``functools``, ``_ssl`` imports ``_socket`` from their C
    initialisation: listing the module the program imports is enough (it was refused)."""
    res = guarded.run(
        f"import {module}\nprint('imported')", imports=(module,), cwd=tmp_path, python=python
    )
    assert res.stdout.strip() == "imported", res.stdout + res.stderr


def _dynload_extension(python: str) -> tuple[str, Path]:
    """A module of the interpreter that is a file of its ``lib-dynload`` (which ones are
    built in differs: Debian's python3 builds ``_bisect`` in, a pyenv build does not)."""
    import subprocess

    dynload = subprocess.run(
        [python, "-c", "import os;print(os.path.join(os.path.dirname(os.__file__),'lib-dynload'))"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    files = {p.name.partition(".")[0]: p for p in Path(dynload).iterdir()}
    name = next(n for n in ("_bisect", "_queue", "_json", "_csv") if n in files)
    return name, files[name]


def test_interpreter_module_names_load_only_from_the_interpreters_files(
    python: str, tmp_path: Path
) -> None:
    """A file below a site-packages directory (one the profile might expose read-write)
    named like a module of the interpreter (``_bisect``) is not loaded under that name."""
    import shutil

    name, original = _dynload_extension(python)
    site = tmp_path / "env" / "site-packages"
    site.mkdir(parents=True)
    shutil.copy(original, site / original.name)
    code = (
        "import _imp\nfrom importlib.machinery import ModuleSpec\n"
        f"spec = ModuleSpec({name!r}, None, origin={str(site / original.name)!r})\n"
        "try:\n    _imp.create_dynamic(spec)\n    print('ESCAPED loaded')\n"
        "except ImportError as e:\n    print('refused', e)\n"
    )
    res = guarded.run(
        code,
        imports=("_imp", "importlib", name),
        exposures=(guarded.expose(tmp_path),),
        env={"PYTHONPATH": str(site)},
        cwd=tmp_path,
        python=python,
    )
    assert "refused" in res.stdout and "module of the interpreter" in res.stdout, (
        res.stdout + res.stderr
    )


def test_extension_modules_of_unexposed_library_directories_are_refused(
    python: str, tmp_path: Path
) -> None:
    """``dlopen`` opens the file itself (no audit event): a site-packages directory on
    ``sys.path`` that no exposure covers gives no extension module."""
    import shutil

    name, original = _dynload_extension(python)
    site = tmp_path / "hidden" / "site-packages"
    (site / "pkg").mkdir(parents=True)
    shutil.copy(original, site / "pkg" / original.name)
    (tmp_path / "work").mkdir()
    code = (
        "import _imp\nfrom importlib.machinery import ModuleSpec\n"
        f"spec = ModuleSpec('pkg.{name}', None, origin={str(site / 'pkg' / original.name)!r})\n"
        "try:\n    _imp.create_dynamic(spec)\n    print('ESCAPED loaded')\n"
        "except ImportError as e:\n    print('refused', e)\n"
    )
    res = guarded.run(
        code,
        imports=("_imp", "importlib", "pkg"),
        exposures=(guarded.expose(tmp_path / "work"),),
        env={"PYTHONPATH": str(site)},
        cwd=tmp_path / "work",
        python=python,
    )
    assert "refused" in res.stdout and "not exposed" in res.stdout, res.stdout + res.stderr
