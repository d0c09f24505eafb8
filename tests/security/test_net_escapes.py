"""The network guard's functions lead nowhere: closures, globals, frames in tracebacks and
the classes of its state give the program no way to change a decision (net_escapes.py).
Real ``pysb run`` runs (subprocess provider); plugins/pysb-guards/tests/test_network_seal.py
runs the same corpus on every interpreter."""

from __future__ import annotations

import pytest
from net_escapes import CONTROLS, IMPORTS, NETWORK, attack_params, program

from pysb_core.testing import Project

PROFILE = (
    f"version: 1\nimports: [{', '.join(IMPORTS)}]\nfiles:\n  expose-ro: [.]\n"
    f"network: [{', '.join(repr(r) for r in NETWORK)}]\napi:\n  allow: [dynamic-code]\n"
)


@pytest.mark.parametrize("label,code", attack_params())
def test_network_guard_state_is_out_of_reach(project: Project, label: str, code: str) -> None:
    project.profile(PROFILE)
    r = project.run("run", "-c", program(code))
    assert "held" in r.stdout, r.stdout + r.stderr
    assert "ESCAPED" not in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("label,code", CONTROLS, ids=[c[0] for c in CONTROLS])
def test_introspection_of_network_guard_functions_is_refused(
    project: Project, label: str, code: str
) -> None:
    project.profile(PROFILE)
    r = project.run("run", "-c", program(code))
    assert "held" in r.stdout, r.stdout + r.stderr
    assert "ESCAPED" not in r.stdout, r.stdout + r.stderr
