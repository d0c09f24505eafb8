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
