"""The network guard's functions lead nowhere, on every interpreter: the corpus of
tests/security/net_escapes.py (closures, globals, frames in tracebacks, the classes of the
guard's state) in a real child interpreter with the guards installed."""

from __future__ import annotations

import sys
from pathlib import Path

import guarded
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "security"))
import net_escapes


def _run(code: str, python: str) -> guarded.Result:
    return guarded.run(
        net_escapes.program(code),
        imports=net_escapes.IMPORTS,
        api=(("allow", "dynamic-code"),),
        network=net_escapes.NETWORK,
        python=python,
    )


@pytest.mark.parametrize("label,code", net_escapes.attack_params())
def test_network_guard_state_is_out_of_reach(label: str, code: str, python: str) -> None:
    res = _run(code, python)
    assert "held" in res.stdout, res.stdout + res.stderr
    assert "ESCAPED" not in res.stdout, res.stdout + res.stderr


@pytest.mark.parametrize(
    "label,code", net_escapes.CONTROLS, ids=[c[0] for c in net_escapes.CONTROLS]
)
def test_introspection_of_network_guard_functions_is_refused(
    label: str, code: str, python: str
) -> None:
    res = _run(code, python)
    assert "held" in res.stdout, res.stdout + res.stderr
    assert "ESCAPED" not in res.stdout, res.stdout + res.stderr
