"""The environment guard's parent-side hooks: ``pysb check`` and learned variables.

This module is the ``env`` entry point of the ``pysb.guards`` group, imported by every
``pysb run`` on the host. The environment is enforced by construction (the child starts
with exactly ``Policy.env``); watching reads in a learning run is done by
:mod:`pysb_guards.env.guard`, which only the sandboxed interpreter imports (``PYSB_CHILD_MODULE``).
"""

from __future__ import annotations

from pysb_core.guardkit import hookimpl

TYPE_CHECKING = False  # typing costs milliseconds at every start
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from pysb_core.guardkit import CheckReport, Event, Policy, Provider

GUARD = "env"
#: The module the sandboxed interpreter imports to install this family's guard.
PYSB_CHILD_MODULE = "pysb_guards.env.guard"
#: The guard kit this family is written against (:mod:`pysb_core.kitversion`).
PYSB_GUARDKIT = "1.2"


@hookimpl
def pysb_check(policy: Policy, provider: Provider | None, report: CheckReport) -> None:
    """The environment is built by the launcher: every provider that starts a fresh process
    enforces it (``os``); the Python layer has nothing to add."""
    from pysb_core.guardkit import Capability

    enforced = provider is None or Capability.ENV in set(provider.enforced())
    layers = ["os"] if enforced else []
    for name in sorted(policy.env):
        source = policy.env_sources.get(name, "<profile>")
        report.add(f"env: {name}", source, layers, family=GUARD)


@hookimpl
def pysb_learned(records: Sequence[Event], profile: Any) -> None:
    """``env: NAME: ${NAME}`` for each variable the program read that was set."""
    from pysb_guards.learned_fields import env_name_problem

    environ = getattr(profile, "environ", None)
    drop = getattr(profile, "drop", None)
    for r in records:
        if r.guard == GUARD and r.action == "learn" and drop is not None:
            problem = env_name_problem(r.target)
            if problem is not None:
                drop(GUARD, r.target, problem)
    for name in learned_env(records, environ):
        profile.add("env", None, (name, "${" + name + "}"))


#: Set by pysb for every sandbox (the private temporary directory, :mod:`pysb_core.launch.tmpdir`):
#: never a rule.
NEVER_LEARNED = frozenset({"TMPDIR"})


def learned_env(records: Sequence[Event], environ: Any = None) -> list[str]:
    """The variables to forward: read by the program, and set in the environment the
    learning run gave it (``environ``, the host's). A lookup of an unset variable
    (``SSLKEYLOGFILE``, ``PYTHONBREAKPOINT``...) forwards nothing: the next run would
    hand the program whatever the host happens to hold then."""
    from pysb_guards.learned_fields import env_name_problem

    names = {r.target for r in records if r.guard == GUARD and r.action == "learn"}
    return sorted(
        n
        for n in names
        if env_name_problem(n) is None
        and n not in NEVER_LEARNED
        and (environ is None or n in environ)
    )
