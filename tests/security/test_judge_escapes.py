"""No program code runs under a judge of the files, imports, api or env guards, and no frame
the program builds passes for one of the guards' own (judge_escapes.py). Real ``pysb run``
runs (subprocess provider); plugins/pysb-guards/tests/test_judge_seal.py runs the same
corpus on every interpreter."""

from __future__ import annotations

import pytest
from judge_escapes import PROFILE, attack_params, learning_params, program

from pysb_core.testing import Project


@pytest.mark.parametrize("label,code", attack_params())
def test_no_program_code_under_a_judge(project: Project, label: str, code: str) -> None:
    project.profile(PROFILE)
    project.file("out/.keep")
    r = project.run("run", "-c", program(label, code))
    assert "held" in r.stdout, r.stdout + r.stderr
    assert "ESCAPED" not in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("label,code", learning_params())
def test_no_program_code_under_a_recorder(project: Project, label: str, code: str) -> None:
    project.profile(PROFILE)
    project.file("out/.keep")
    r = project.run(
        "run", f"--learn={project.root / 'out' / 'learned.yaml'}", "-c", program(label, code)
    )
    assert "held" in r.stdout, r.stdout + r.stderr
    assert "ESCAPED" not in r.stdout, r.stdout + r.stderr
