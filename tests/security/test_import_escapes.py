"""The import guard judges imports that library code makes *for the program*: a library
function handed ``__import__`` or a module name (threads, executors, pickle, pkgutil...)
imports nothing the profile does not list. Real ``pysb run`` runs (subprocess provider);
plugins/pysb-guards/tests/test_imports.py runs the same corpus on every interpreter."""

from __future__ import annotations

import pytest
from import_escapes import ALLOWED, ATTACKS, IMPORTS, program

from pysb_core.testing import Project

PROFILE = (
    f"version: 1\nimports: [{', '.join(IMPORTS)}]\nfiles:\n  expose-ro: [.]\napi:\n  allow: ['*']\n"
)


@pytest.mark.parametrize("label,code", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_library_code_does_not_import_for_the_program(
    project: Project, label: str, code: str
) -> None:
    project.profile(PROFILE)
    r = project.run("run", "-c", program(code))
    assert "held" in r.stdout, r.stdout + r.stderr
    assert "ESCAPED" not in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("label,code", ALLOWED, ids=[a[0] for a in ALLOWED])
def test_library_code_still_imports_for_itself(project: Project, label: str, code: str) -> None:
    project.profile(PROFILE)
    r = project.run("run", "-c", code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "ok", r.stdout + r.stderr
