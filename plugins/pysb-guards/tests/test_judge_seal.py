"""No program code runs under a judge of the files, imports, api or env guards, and no frame
the program builds passes for one of the guards' own, on every interpreter: the corpus of
tests/security/judge_escapes.py in a real child interpreter with the guards installed."""

from __future__ import annotations

import sys
from pathlib import Path

import guarded
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "security"))
import judge_escapes


@pytest.mark.parametrize("label,code", judge_escapes.attack_params())
def test_no_program_code_under_a_judge(label: str, code: str, python: str, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    res = guarded.run(
        judge_escapes.program(label, code),
        imports=judge_escapes.IMPORTS,
        exposures=(guarded.expose(tmp_path), guarded.expose(tmp_path / "out", rw=True)),
        ignore=judge_escapes.IGNORE,
        api=tuple(("allow", a) for a in judge_escapes.API_ALLOW),
        cwd=tmp_path,
        python=python,
    )
    assert "held" in res.stdout, res.stdout + res.stderr
    assert "ESCAPED" not in res.stdout, res.stdout + res.stderr


@pytest.mark.parametrize("label,code", judge_escapes.learning_params())
def test_no_program_code_under_a_recorder(
    label: str, code: str, python: str, tmp_path: Path
) -> None:
    (tmp_path / "out").mkdir()
    res = guarded.run(
        judge_escapes.program(label, code),
        imports=judge_escapes.IMPORTS,
        exposures=(guarded.expose(tmp_path), guarded.expose(tmp_path / "out", rw=True)),
        cwd=tmp_path,
        learn=True,
        python=python,
    )
    assert "held" in res.stdout, res.stdout + res.stderr
    assert "ESCAPED" not in res.stdout, res.stdout + res.stderr
