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


LOADER_ATTACK = f"""
def classes():
    out, todo = set(), [object]
    while todo:
        for s in type.__subclasses__(todo.pop()):
            if s not in out:
                out.add(s); todo.append(s)
    return out
replaced = 0
for cls in classes():
    if (cls.__module__ or "").startswith("pysb_guards") and "exec_module" in vars(cls):
        cls.exec_module = lambda self, m: None
        replaced += 1
import socket
s = socket.socket()
try:
    s.connect(("127.0.0.1", {net_escapes.DENIED}))
except Exception as e:
    print("kernel" if type(e) is ConnectionRefusedError else "guard", type(e).__name__)
print("replaced", replaced)
"""


def test_socket_is_patched_whatever_the_program_did_to_loader_classes(python: str) -> None:
    """The import guard's loader runs the socket patches. It is no instance of a class of
    pysb's (a class the program could change through the class graph before `import
    socket`, leaving the module unpatched): the connect is refused by the guard."""
    res = guarded.run(
        LOADER_ATTACK,
        imports=net_escapes.IMPORTS,
        api=(("allow", "dynamic-code"),),
        network=net_escapes.NETWORK,
        python=python,
    )
    assert "guard NetworkDeniedError" in res.stdout, res.stdout + res.stderr
    assert "replaced 0" in res.stdout, res.stdout  # nothing of pysb's had exec_module
