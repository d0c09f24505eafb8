"""The environment guard: enforced by construction, learned by watching ``os.environ``.

The pipeline starts the sandboxed interpreter with exactly ``Policy.env`` as its
environment: a variable the profile does not name is simply absent (``KeyError``), whatever
the program does. There is nothing to patch when enforcing.

In a learning run the child sees the host's environment, and this module records which
variables the program reads (``os.environ[...]``, ``.get``, ``in``, ``os.getenv``, and the
bytes forms) after the guards are armed, so that the learned profile forwards each one with
``env: NAME: ${NAME}``. Not counted: variables the program set or deleted itself, and a scan
that reads back what it just listed (``dict(os.environ)``, ``for k in os.environ:
os.environ[k]``), which says nothing about what the program needs.
"""

from __future__ import annotations

from pysb_core.guardkit import hookimpl

TYPE_CHECKING = False  # typing costs milliseconds inside the sandbox
if TYPE_CHECKING:
    from typing import Any

    from pysb_core.guardkit import Policy, Recorder

GUARD = "env"

_state: dict[str, Any] = {}


@hookimpl
def pysb_child_install(policy: Policy, recorder: Recorder) -> str:
    """In a learning run, start watching reads of the environment. The variables
    themselves are enforced by construction (the child gets only the whitelist), so the
    family is in force either way: it is returned."""
    if recorder.learning:
        install(recorder)
    return GUARD


@hookimpl
def pysb_child_arm(policy: Policy, recorder: Recorder) -> None:
    """Reads count from here on (the framework's own start-up reads do not)."""
    if _state:
        _state["armed"] = True


def install(recorder: Recorder) -> None:
    """Wrap ``os.environ`` / ``os.environb`` reads (their class, ``os._Environ``)."""
    import os

    if _state:
        return
    from pysb_guards import _seal
    from pysb_guards.env import engine

    recorder = _seal.private_recorder(recorder)  # no program-writable method under a wrapper
    _state.update(armed=False, own=set(), listed=set())
    cls = type(os.environ)
    for name, method in engine.wrappers(cls, recorder, _state, GUARD).items():
        setattr(cls, name, method)
